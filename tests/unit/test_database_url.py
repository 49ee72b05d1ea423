"""AGENTCRON_DATABASE_URL spellings without a driver mean the project's async drivers."""

from __future__ import annotations

import pytest

from agentcron.core.config import Settings, normalize_database_url


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@db:5432/app", "postgresql+asyncpg://u:p@db:5432/app"),
        ("postgres://u@db/app?ssl=require", "postgresql+asyncpg://u@db/app?ssl=require"),
        ("POSTGRES://u@db/app", "postgresql+asyncpg://u@db/app"),
        ("sqlite:///./var/agentcron.db", "sqlite+aiosqlite:///./var/agentcron.db"),
        ("sqlite:////abs/a.db", "sqlite+aiosqlite:////abs/a.db"),
        # an explicit driver is the user's choice, and the password is kept byte for byte
        ("postgresql+asyncpg://u:p%40ss@db/app", "postgresql+asyncpg://u:p%40ss@db/app"),
        ("postgresql://u:p%40ss@db/app", "postgresql+asyncpg://u:p%40ss@db/app"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("mysql://u@db/app", "mysql://u@db/app"),
        ("not a url", "not a url"),
    ],
)
def test_normalize_database_url(given: str, expected: str) -> None:
    assert normalize_database_url(given) == expected


def test_settings_normalize_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTCRON_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
    assert Settings().database_url == "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
