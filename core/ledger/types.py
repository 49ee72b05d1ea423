"""What the run ledger's verbs take and give back."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from agentcron.core.storage.models import Run

OUTPUT_EXCERPT_CHARS = 64 * 1024
ERROR_CHARS = 8 * 1024


def output_excerpt(text: str | None) -> str | None:
    """What a run keeps of an agent's output: its tail, where the outcome usually is."""
    return text[-OUTPUT_EXCERPT_CHARS:] if text else text


def error_excerpt(text: str | None) -> str | None:
    """What a run (and its schedule's ``last_error``) keeps of an error: its tail."""
    return text[-ERROR_CHARS:] if text else text


@dataclass
class Claim:
    """The result of one ``claim_due_jobs``: runs now leased to the caller."""

    runs: list[Run]
    full: bool  # the batch limit was reached: claim again at once
    recovered: int = 0  # runs taken over from an expired lease
    # Runs whose task was created with the claim and whose schedule lets them start without
    # looking at its other runs (overlap ``allow``, isolated): run id -> task working directory.
    # They may be admitted in batches (``admit_batch``); every other run goes one by one.
    prepared: dict[uuid.UUID, str] = field(default_factory=dict)
    # Runs the claim admitted (``running``, attempt 1, their task made): run id -> working
    # directory. They start at once, with no admission of their own.
    started: dict[uuid.UUID, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """A plain outcome of one attempt, for ``record_batch``: the run (which the record
    updates to what it wrote), its status (succeeded, failed or timed_out) and what it said."""

    run: Run
    status: str
    output: str | None = None
    error: str | None = None


class TaskRef(Protocol):
    """What an attempt needs of its task: a ``Task`` row, or a ``PreparedTask``."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def workdir(self) -> str: ...
    @property
    def conversation(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class PreparedTask:
    """The fresh task a prepared run got with its claim (``Claim.prepared``), known without
    reading it back (and cheaper than an ORM object, made thousands of times in a burst)."""

    id: uuid.UUID
    workdir: str
    conversation: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class StartDecision:
    """What ``start_attempt`` decided for a run this instance leases."""

    action: str  # "run" | "wait" | "done" | "lost"
    run: Run | None = None
    task: TaskRef | None = None
    schedule_enabled: bool = True


@dataclass(frozen=True)
class Wakeup:
    """What ``Ledger.next_wakeup`` found: the earliest instant a claim could find work, and
    the earliest delivery lease to run out (None: nothing of that kind). With liveness
    (PostgreSQL): whether other owners hold active runs (``watching``: look again soon), and
    which of them hold no liveness lock (``lockless``: perhaps dead, ``core.storage.liveness``)."""

    work: datetime | None
    deliveries: datetime | None
    leased: bool = False  # some active run is leased (by anyone): a predecessor may have some
    watching: bool = False
    lockless: frozenset[str] = frozenset()

    @property
    def at(self) -> datetime | None:
        """The earliest of the two: when the loop has something to look at."""
        times = [value for value in (self.work, self.deliveries) if value is not None]
        return min(times) if times else None
