"""The statements that record a batch of attempt outcomes (``core.ledger.records``).

On PostgreSQL a batch is one statement, ``RECORD_RESULTS``: the runs and their schedules'
``last_*`` fields in one round trip, built from the same transitions as the one-by-one path.
SQLite has neither data-modifying CTEs nor arrays; it sends the three statements below
(``LOCK_RUNNING``, ``FINISH_RUN``, ``SCHEDULE_RESULT``), which are also PostgreSQL's path for
the rare batch part of whose runs are no longer ours.

Rows are locked in id order, runs first, then schedules: two engines recording at once, or a
record beside a lease renewal, cannot deadlock.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    Boolean,
    Integer,
    Select,
    String,
    Text,
    Uuid,
    any_,
    bindparam,
    case,
    func,
    literal,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import TypeEngine

from agentcron.core.states import RunStatus
from agentcron.core.storage.arrays import unnested
from agentcron.core.storage.models import Schedule
from agentcron.core.storage.queries import RUNS, SCHEDULES
from agentcron.core.storage.types import UTCDateTime
from agentcron.core.transitions import delivering, finished

# A batch's outcomes, one element per run; what each of its schedules follows, one per schedule.
OUTCOME_COLUMNS: dict[str, TypeEngine[Any]] = {
    "id": Uuid(),
    "status": String(),
    "output": Text(),
    "error": Text(),
    "deliver_until": UTCDateTime(),
    "deliverer": String(),
}
RESULT_COLUMNS: dict[str, TypeEngine[Any]] = {
    "id": Uuid(),
    "status": String(),
    "error": Text(),
    "run_id": Uuid(),
    "reset": Boolean(),
    "failures": Integer(),
}


def _streak(reset: Any, failures: Any) -> Any:
    """The schedule's failure streak after a batch: ``reset`` (a run of the batch succeeded)
    restarts it at ``failures`` (the failures after that success); otherwise they add to it."""
    return case((reset, failures), else_=SCHEDULES.c.consecutive_failures + failures)


# -- SQLite, and PostgreSQL's partial batches: one statement per step ----------------------

# Of the given runs, those this instance still runs, row-locked until their outcome is written.
LOCK_RUNNING = (
    select(RUNS.c.id)
    .where(
        RUNS.c.id.in_(bindparam("b_ids", expanding=True)),
        RUNS.c.lease_owner == bindparam("b_owner"),
        RUNS.c.status == RunStatus.RUNNING.value,
    )
    .order_by(RUNS.c.id)
    .with_for_update()
)

# Executemany statements: one parameter set per run or schedule.
FINISH_RUN = (
    update(RUNS)
    .where(RUNS.c.id == bindparam("b_id"))
    .values(
        **finished(bindparam("b_status"), bindparam("b_now", type_=UTCDateTime())),
        output=bindparam("b_output"),
        error=bindparam("b_error"),
        # NULL unless a notify channel applies to the status (``delivery_lease``).
        **delivering(
            bindparam("b_deliver_until", type_=UTCDateTime()),
            bindparam("b_deliverer", type_=String()),
        ),
    )
)
SCHEDULE_RESULT = (
    update(SCHEDULES)
    .where(SCHEDULES.c.id == bindparam("b_id"))
    .values(
        last_run_at=bindparam("b_now", type_=UTCDateTime()),
        last_status=bindparam("b_status"),
        last_error=bindparam("b_error"),
        last_run_id=bindparam("b_run_id", type_=Uuid()),
        consecutive_failures=_streak(
            bindparam("b_reset", type_=Boolean), bindparam("b_failures", type_=Integer)
        ),
    )
)


def tripped_breakers(schedule_ids: Sequence[uuid.UUID]) -> Select[Any, Any, Any]:
    """Of these schedules, the enabled ones whose failure streak reached
    ``pause_after_failures``: (id, streak, limit), in id order."""
    return (
        select(Schedule.id, Schedule.consecutive_failures, Schedule.pause_after_failures)
        .where(
            Schedule.id.in_(schedule_ids),
            Schedule.enabled.is_(True),
            Schedule.pause_after_failures.is_not(None),
            Schedule.consecutive_failures >= Schedule.pause_after_failures,
        )
        .order_by(Schedule.id)
    )


# -- PostgreSQL: the whole batch in one statement -----------------------------------------


def _record_results() -> Any:
    """``RECORD_RESULTS``; parameters: the arrays of ``OUTCOME_COLUMNS`` (``r_*``, one element
    per run) and of ``RESULT_COLUMNS`` (``s_*``, one per schedule, from
    ``records.schedule_results``), ``b_now`` and ``b_owner``.

    Returns one row per run written (``kind`` 'run': its id) and one per schedule whose
    ``last_*`` fields it wrote (``kind`` 'schedule': id, streak, limit, enabled). The schedules'
    fields are written only if every run of the batch was still ours: otherwise some were
    computed over runs that were not recorded, and the caller writes them again from the runs
    that were (rare: a lease lost while its outcome was on its way).

    Both conditions on the schedules are uncorrelated subqueries, so PostgreSQL evaluates each
    once, before the first schedule row is written. Written as a semi-join on the lock's CTE
    and a count per schedule, they were nested loops over the CTEs (a CTE's row estimate is
    tiny), quadratic in the batch: 20 of the statement's 35 ms for a batch of 384.
    """
    now = bindparam("b_now", type_=UTCDateTime())
    outcomes = unnested(OUTCOME_COLUMNS, "r", "outcome")
    # MATERIALIZED: the rows are locked by this SELECT, in its order, before any is written.
    locked = (
        select(RUNS.c.id)
        .where(
            RUNS.c.id == any_(bindparam("r_id", type_=ARRAY(Uuid()))),
            RUNS.c.lease_owner == bindparam("b_owner"),
            RUNS.c.status == RunStatus.RUNNING.value,
        )
        .order_by(RUNS.c.id)
        .with_for_update()
        .cte("locked")
        .prefix_with("MATERIALIZED")
    )
    ended = (
        update(RUNS)
        .where(RUNS.c.id == outcomes.c.id, RUNS.c.id.in_(select(locked.c.id)))
        .values(
            **finished(outcomes.c.status, now),
            output=outcomes.c.output,
            error=outcomes.c.error,
            **delivering(outcomes.c.deliver_until, outcomes.c.deliverer),
        )
        .returning(RUNS.c.id, RUNS.c.schedule_id)
        .cte("ended")
    )
    results = unnested(RESULT_COLUMNS, "s", "result")
    schedules_locked = (
        select(SCHEDULES.c.id)
        .where(SCHEDULES.c.id == any_(bindparam("s_id", type_=ARRAY(Uuid()))))
        .order_by(SCHEDULES.c.id)
        .with_for_update()
        .cte("schedules_locked")
        .prefix_with("MATERIALIZED")
    )
    every_schedule_locked = select(func.count()).select_from(schedules_locked).scalar_subquery()
    every_run_ended = select(func.count()).select_from(ended).scalar_subquery()
    batch = func.cardinality(bindparam("r_id", type_=ARRAY(Uuid())))
    followed = (
        update(SCHEDULES)
        .where(
            SCHEDULES.c.id == results.c.id,
            every_schedule_locked >= 0,  # reads (locks) every row of the CTE first
            every_run_ended == batch,
        )
        .values(
            last_run_at=now,
            last_status=results.c.status,
            last_error=results.c.error,
            last_run_id=results.c.run_id,
            consecutive_failures=_streak(results.c.reset, results.c.failures),
        )
        .returning(
            SCHEDULES.c.id,
            SCHEDULES.c.consecutive_failures,
            SCHEDULES.c.pause_after_failures,
            SCHEDULES.c.enabled,
        )
        .cte("followed")
    )
    runs_written = select(
        literal("run").label("kind"),
        ended.c.id,
        literal(None, Integer()).label("streak"),
        literal(None, Integer()).label("limit"),
        literal(None, Boolean()).label("enabled"),
    )
    schedules_written = select(
        literal("schedule"),
        followed.c.id,
        followed.c.consecutive_failures,
        followed.c.pause_after_failures,
        followed.c.enabled,
    )
    return runs_written.union_all(schedules_written)


RECORD_RESULTS = _record_results()
