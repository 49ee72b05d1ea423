"""The typed ORM models: schedules, runs, tasks, deliveries, API keys and stored secrets.

The schema changes only through Alembic migrations (``migrations/``); a test proves the
migrations and these models agree.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import (
    Boolean,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, configure_mappers, mapped_column
from sqlalchemy.orm.attributes import manager_of_class

from agentcron.core.storage.types import JSONType, UTCDateTime

# Stable constraint names, so migrations can name what they alter on every database.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base carrying the naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSONType}


class Schedule(Base):
    """A timetable plus what to run on it.

    ``next_run`` is the next due time in UTC, or ``None`` when nothing is due (a fired one-shot,
    a paused or deleted schedule). Deleting a schedule only marks it (``deleted_at``) so the run
    history of a deleted schedule stays readable by run id.
    """

    __tablename__ = "schedules"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    owner: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(200))
    # The host's own key for this schedule, unique per owner among live schedules.
    key: Mapped[str | None] = mapped_column(String(200))
    prompt: Mapped[str] = mapped_column(Text)
    trigger: Mapped[dict[str, Any]] = mapped_column(JSONType)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    mode: Mapped[str] = mapped_column(String(16))
    overlap: Mapped[str] = mapped_column(String(16))
    catchup: Mapped[str] = mapped_column(String(16))
    catchup_window_seconds: Mapped[int] = mapped_column(Integer)
    misfire_grace_seconds: Mapped[int] = mapped_column(Integer)
    timeout_seconds: Mapped[int] = mapped_column(Integer)
    max_attempts: Mapped[int] = mapped_column(Integer)
    runner: Mapped[dict[str, Any]] = mapped_column(JSONType)
    notify: Mapped[list[dict[str, Any]]] = mapped_column(JSONType)
    next_run: Mapped[datetime | None] = mapped_column(UTCDateTime(), index=True)
    task_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    paused_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    paused_note: Mapped[str | None] = mapped_column(Text)
    last_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_status: Mapped[str | None] = mapped_column(String(16))
    last_error: Mapped[str | None] = mapped_column(Text)
    last_run_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0)
    # Days a finished run is kept; NULL: the service's AGENTCRON_RETENTION_DAYS.
    retention_days: Mapped[int | None] = mapped_column(Integer)
    # The circuit breaker: pause after this many failed runs in a row (NULL: never).
    pause_after_failures: Mapped[int | None] = mapped_column(Integer)
    # At most this many due times get a run (NULL: no bound); scheduled_runs counts them.
    max_runs: Mapped[int | None] = mapped_column(Integer)
    scheduled_runs: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Runs start up to this many seconds after their due time, the same for every replica.
    jitter_seconds: Mapped[int | None] = mapped_column(Integer)
    # What success means beyond the agent ending well (core.expectations); NULL: nothing more.
    expect: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # What create or update found worth saying, not errors: [{"code", "message"}].
    warnings: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        Index("ix_schedules_owner_created", "owner", "created_at", "id"),
        Index(
            "ux_schedules_owner_key",
            "owner",
            "key",
            unique=True,
            postgresql_where=text("key IS NOT NULL AND deleted_at IS NULL"),
            sqlite_where=text("key IS NOT NULL AND deleted_at IS NULL"),
        ),
    )


class Run(Base):
    """One execution of a schedule: a due time, a manual run or a replay.

    UNIQUE(schedule_id, due_at) is what makes "one run per due time" true across replicas;
    manual and replay runs have ``due_at`` NULL, which the constraint lets repeat. ``payload``
    is the snapshot (prompt, runner, notify, limits) taken when the run was created, so a replay
    re-runs exactly what ran. A claimed or running run holds a lease (``lease_owner``,
    ``lease_expires_at``) that its holder renews; anyone may take over an expired one.

    ``deliver_until`` is the lease on a finished run's deliveries (its outbox): set, with the
    outcome, only when a notify channel applies to the status; renewed by the process
    delivering; cleared when every channel is delivered or failed for good. Once it has passed,
    any replica may take the deliveries over (the holder died or was stopped). ``deliverer``
    names the engine holding that lease, so a dead engine's deliveries are taken over as soon
    as its liveness lock is gone, without waiting for the lease.
    """

    __tablename__ = "runs"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    schedule_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("schedules.id", ondelete="CASCADE")
    )
    trigger: Mapped[str] = mapped_column(String(16))
    due_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # SET NULL: a replay outlives the pruning of the run it replayed (it has its own payload).
    replay_of: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("runs.id", ondelete="SET NULL")
    )
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(64))
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    task_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, index=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    available_at: Mapped[datetime] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The stages between those: when an engine first took the run (the claim, or the first
    # take of a queued run), and when its last attempt's agent returned (before its record).
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    output_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    error: Mapped[str | None] = mapped_column(Text)
    output: Mapped[str | None] = mapped_column(Text)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    deliver_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    deliverer: Mapped[str | None] = mapped_column(String(200))
    # A skipped row accounting for due times that did not run (core.timeline): how many it
    # stands for (NULL on a summary row: more than it counted) and the last of them.
    covers: Mapped[int | None] = mapped_column(Integer)
    # Provenance: what started the run (schedule, catchup, manual, replay) and, for a run a
    # person asked for, the owner of the API key they used.
    origin: Mapped[str | None] = mapped_column(String(16))
    # The daylight-saving rule that decided this due time, when one did (core.triggers).
    dst_rule: Mapped[str | None] = mapped_column(String(16))
    started_by: Mapped[str | None] = mapped_column(String(200))
    covers_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # What the runner returned besides its output (a handler's JSON object: the session it
    # opened, say), as given; NULL when it returned none (``RunOutcome.result``).
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType)

    __table_args__ = (
        UniqueConstraint("schedule_id", "due_at"),
        Index("ix_runs_schedule_created", "schedule_id", "created_at", "id"),
        Index("ix_runs_created_at", "created_at", "id"),  # the pruner walks oldest first
        # On PostgreSQL these hold only the rows their queries look for (migration 0011): a
        # finished run leaves the first, and most runs never enter the other two.
        Index(
            "ix_runs_status_available",
            "status",
            "available_at",
            postgresql_where=text("status IN ('pending', 'running')"),
        ),
        Index(
            "ix_runs_deliver_until",
            "deliver_until",
            postgresql_where=text("deliver_until IS NOT NULL"),
        ),
        Index("ix_runs_replay_of", "replay_of", postgresql_where=text("replay_of IS NOT NULL")),
    )


class Task(Base):
    """Where an agent's runs live: a working directory and, for chat runners, a conversation.

    ``lock_run_id`` is the task's run lock: the run currently admitted on this task, if any.
    """

    __tablename__ = "tasks"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    schedule_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("schedules.id", ondelete="SET NULL"), index=True
    )
    owner: Mapped[str] = mapped_column(String(200))
    workdir: Mapped[str] = mapped_column(Text)
    conversation: Mapped[list[dict[str, Any]]] = mapped_column(JSONType)
    lock_run_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Delivery(Base):
    """One notify channel's delivery of one finished run; ``index`` is the channel's position."""

    __tablename__ = "deliveries"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    run_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("runs.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    channel: Mapped[str] = mapped_column(String(32))
    target: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (UniqueConstraint("run_id", "index"),)


class ApiKey(Base):
    """An API key: who calls (``owner``) and whether it sees every owner's objects (``admin``).

    Only ``key_hash`` (SHA-256 of the whole token) is stored, never the token; ``prefix`` is the
    public, random middle part of ``ac_<prefix>_<secret>``, unique, so a presented token finds
    its row with one indexed lookup and people can tell keys apart in ``agentcron keys list``.
    A revoked key keeps its row (``revoked_at``) so the list shows what was revoked and when.
    """

    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    owner: Mapped[str] = mapped_column(String(200))
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    prefix: Mapped[str] = mapped_column(String(32))
    key_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (UniqueConstraint("prefix"), Index("ix_api_keys_owner", "owner"))


class Secret(Base):
    """A tenant's stored secret: write-only through the API, referenced by name from runner and
    notify configurations (``{"secret": NAME}``), resolved by the engine at run time.

    ``ciphertext`` is a Fernet token (``core.secrets.keyring.Keyring``) of the value bound to
    ``owner`` and ``name``: the plaintext is never stored, and a row copied to another owner or
    name does not decrypt.
    """

    __tablename__ = "secrets"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    owner: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(100))
    ciphertext: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())

    # One secret per (owner, name); its index also serves every lookup, which is by both.
    __table_args__ = (UniqueConstraint("owner", "name"),)


# The tables of the models, for the statements written on tables rather than on models
# (``core.storage.sql``: the batched writes of the run ledger).
RUNS: Table = Run.__table__  # type: ignore[assignment]  # declarative tables are Tables
SCHEDULES: Table = Schedule.__table__  # type: ignore[assignment]
TASKS: Table = Task.__table__  # type: ignore[assignment]

M = TypeVar("M", bound=Base)


def built(model: type[M], values: Mapping[str, Any]) -> M:
    """A transient ``model`` holding ``values``, made as the ORM's loader makes the objects it
    reads: the instance state and the attribute dict at once. The declarative constructor
    fires an attribute event per column (about 40 us for a run); a claim builds hundreds of
    runs from rows it has just written. Reads and later assignments behave as on ``model(**)``.
    """
    manager = manager_of_class(model)
    if not manager.mapper.configured:  # attribute access needs it; checking again costs 3 us
        configure_mappers()
    instance: M = manager.new_instance()
    instance.__dict__.update(values)
    return instance
