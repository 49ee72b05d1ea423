"""Building blocks of the in-process engine tests: an ``Engine`` (ledger, loop and schedule
service on one test database), waiting on database conditions with a deadline, spec helpers.
The fixtures that build engines (``fake``, ``make_engine``, ``engine``) are in conftest.py."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
from sqlalchemy import Engine as SyncEngine
from sqlalchemy import event, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from agentcron.core.ledger.sql import SqlRunStore
from agentcron.core.runs import RunService
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.specs import ScheduleCreate
from agentcron.core.states import TERMINAL
from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Delivery, Run, Schedule
from agentcron.testing.kit import until
from agentcron.web.engine.loop import SchedulerLoop

T = TypeVar("T")

TICK = 0.2
LEASE = 2.0
# For tests of a long attempt that assert why it stopped. Under the short lease a renewal late
# by under a second on a loaded machine lets the fence stop the attempt first
# ("lease_unconfirmed"), as it must; this lease leaves the renewals seconds of slack.
ROOMY_LEASE = 8.0
OWNER = "engine-a"


# -- helpers ------------------------------------------------------------------------------


async def wait_for(
    predicate: Callable[[], Awaitable[T | None]], within: float = 10.0, what: str = "condition"
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``within`` seconds
    (the library's test kit's ``until``, in this module's argument order)."""
    value: T = await until(predicate, what, within, step=0.05)
    return value


async def wait_true(
    check: Callable[[], T | None], within: float = 10.0, what: str = "condition", step: float = 0.05
) -> T:
    """``wait_for`` of a plain (not awaited) check."""
    value: T = await until(lambda: asyncio.sleep(0, check()), what, within, step=step)
    return value


async def fetch_run(db: Database, run_id: uuid.UUID) -> Run:
    async with db.session(write=False) as session:
        run = await session.get(Run, run_id)
    assert run is not None
    return run


async def fetch_schedule(db: Database, schedule_id: uuid.UUID) -> Schedule:
    async with db.session(write=False) as session:
        schedule = await session.get(Schedule, schedule_id)
    assert schedule is not None
    return schedule


async def set_row(
    db: Database, model: type[Run] | type[Schedule], row_id: uuid.UUID, **values: Any
) -> None:
    """Change one run or schedule behind the services' backs (another replica, a user)."""
    async with db.session() as session:
        await session.execute(update(model).where(model.id == row_id).values(**values))


async def runs_of(db: Database, schedule_id: uuid.UUID) -> list[Run]:
    """Runs of a schedule, oldest first (scheduled ones by due time)."""
    async with db.session(write=False) as session:
        query = select(Run).where(Run.schedule_id == schedule_id)
        runs = list((await session.execute(query)).scalars())
    return sorted(runs, key=lambda r: (r.due_at or r.created_at, r.created_at))


async def deliveries_of(db: Database, run_id: uuid.UUID) -> list[Delivery]:
    async with db.session(write=False) as session:
        query = select(Delivery).where(Delivery.run_id == run_id).order_by(Delivery.index)
        return list((await session.execute(query)).scalars())


async def wait_status(db: Database, run_id: uuid.UUID, *statuses: str, within: float = 10) -> Run:
    async def check() -> Run | None:
        run = await fetch_run(db, run_id)
        return run if run.status in statuses else None

    return await wait_for(check, within, f"run in {statuses}")


def every_second(**overrides: Any) -> dict[str, Any]:
    """An interval trigger whose first due time is 0.1 s from now, then every second."""
    start = datetime.now(UTC) + timedelta(seconds=0.1)
    return {"every_seconds": 1, "start_at": start.isoformat(), **overrides}


HOURLY = {"every_seconds": 3600}  # never due during a test: runs come from run_now


def spec(
    runner: dict[str, Any], trigger: dict[str, Any] | None = None, **fields: Any
) -> ScheduleCreate:
    return ScheduleCreate(
        name=fields.pop("name", "engine test"),
        prompt=fields.pop("prompt", "do the thing"),
        trigger=trigger if trigger is not None else every_second(),
        runner=runner,
        **fields,
    )


@contextmanager
def statements(*engines: AsyncEngine | type[SyncEngine]) -> Iterator[list[str]]:
    """Every statement sent through ``engines`` while the block runs (``sqlalchemy.Engine``:
    through every engine of this process, also those made inside the block)."""
    sent: list[str] = []

    def record(_c: Any, _cur: Any, statement: str, _p: Any, _ctx: Any, _many: bool) -> None:
        sent.append(statement)

    targets = [getattr(engine, "sync_engine", engine) for engine in engines]
    for target in targets:
        event.listen(target, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        for target in targets:
            event.remove(target, "before_cursor_execute", record)


def process_alive(pid: int) -> bool:
    """Alive and not a zombie (a dead child waiting to be reaped by PID 1 is not running)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_dead(pid: int, within: float) -> datetime:
    """The moment ``pid`` was seen gone (checked every 20 ms)."""
    gone = lambda: None if process_alive(pid) else datetime.now(UTC)  # noqa: E731
    return await wait_true(gone, within, f"process {pid} gone", 0.02)


@dataclass
class Engine:
    db: Database
    ledger: SqlRunStore
    loop: SchedulerLoop
    schedules: ScheduleService
    data_dir: Path
    runs: RunService

    async def create(self, spec: ScheduleCreate) -> Schedule:
        return await self.schedules.create(spec, "local")

    def workdir(self, schedule: Schedule) -> Path:
        """The schedule's task directory: ``tasks/<owner>/<schedule id>``."""
        return self.data_dir / "tasks" / schedule.owner / str(schedule.id)

    async def run_now(self, schedule_id: uuid.UUID) -> Run:
        return await self.runs.run_now(schedule_id, None)


MakeEngine = Callable[..., Engine]


# -- the API, as a client sees it ---------------------------------------------------------

API = "/api/v1"


async def run_now(http: httpx.AsyncClient, schedule_id: object) -> dict[str, Any]:
    """Run the schedule now through the API: the queued run (as JSON)."""
    response = await http.post(f"{API}/schedules/{schedule_id}/run")
    assert response.status_code == 202, response.text
    run: dict[str, Any] = response.json()
    return run


async def finished(
    http: httpx.AsyncClient, run_id: object, *, within: float = 20, delivered: bool = False
) -> Any:
    """The run (as JSON) once it ended (and, with ``delivered``, once a delivery to each of its
    schedule's channels did: the channels are delivered at once, each row made as it starts)."""

    async def ended() -> Any:
        run = (await http.get(f"{API}/runs/{run_id}")).json()
        done = run["status"] in TERMINAL
        if delivered and done:
            schedule = (await http.get(f"{API}/schedules/{run['schedule_id']}")).json()
            done = len(run["deliveries"]) == len(schedule["notify"])
            done = done and all(d["status"] != "pending" for d in run["deliveries"])
        return run if done else None

    return await until(ended, f"run {run_id} finished", within, step=0.05)


async def run_to_end(http: httpx.AsyncClient, schedule_id: object, delivered: bool = False) -> Any:
    """Run the schedule now through the API and return the ended run (as JSON)."""
    queued = await run_now(http, schedule_id)
    return await finished(http, queued["id"], delivered=delivered)


# The error types docs/api.md documents, and words of a driver no message may carry.
ERROR_TYPES = {"InvalidSchedule", "ValidationError", "NotFound", "Conflict", "Unauthorized"}
ERROR_TYPES |= {"SchedulerUnavailable", "ScheduleCapacityExceeded"}
DRIVER_WORDS = ("sqlalchemy", "asyncpg", "sqlite3", "aiosqlite", "psycopg", "traceback", "select ")


def assert_error(
    response: httpx.Response,
    status: int | tuple[int, ...],
    type_: str | None = None,
    *,
    field: str | None = None,
) -> dict[str, Any]:
    """The documented error body ``{"error": {"type", "message", "field"}}``: a documented type
    (``type_`` where given), a message with no driver's words, the ``field`` where given."""
    statuses = (status,) if isinstance(status, int) else status
    assert response.status_code in statuses, (response.request.url, response.text[:500])
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message", "field"}, body
    error = body["error"]
    assert error["type"] in ERROR_TYPES and error["type"] == (type_ or error["type"]), error
    assert isinstance(error["message"], str) and error["message"], error
    assert not any(word in error["message"].lower() for word in DRIVER_WORDS), error
    assert field is None or error["field"] == field, error
    return body
