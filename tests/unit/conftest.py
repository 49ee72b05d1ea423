"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest

from agentcron.core import triggers


@pytest.fixture
def fire_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[datetime]]:
    """Counts ``triggers.next_fire`` calls made by the code under test; fails past 10,000 of them
    instead of hanging, so code that enumerates due times fails fast."""
    calls: list[datetime] = []
    real = triggers.next_fire

    def counting(trigger: triggers.Trigger, after: datetime) -> datetime | None:
        calls.append(after)
        if len(calls) > 10_000:
            raise AssertionError("due times are enumerated one by one")
        return real(trigger, after)

    monkeypatch.setattr(triggers, "next_fire", counting)
    yield calls
