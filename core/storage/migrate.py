"""Apply Alembic migrations from code (``agentcron migrate``, ``make run``, tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

# migrations/ sits beside the core package in the source tree (installed editable by `make`).
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str) -> Config:
    """An Alembic config that targets ``url`` regardless of the environment."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision``. Blocking: call it off the event loop."""
    command.upgrade(alembic_config(url), revision)
