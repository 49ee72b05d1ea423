"""agentcron as a library: an ``Engine`` in a host's process, its handler, its router.

The host's side is written as a host would write it: its own FastAPI app and auth dependency,
the engine started in its lifespan, the router mounted under its own prefix, the work done by
a callable it hands over. On SQLite and PostgreSQL, with the real loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Header, HTTPException
from sqlalchemy import select

import agentcron
from agentcron.core.runners.handler import HandlerContext
from agentcron.core.specs import ScheduleCreate
from agentcron.core.storage.models import Run

OWNER = "host-tenant"
HOST = "http://host"
LIBRARY_MD = (Path(__file__).resolve().parents[2] / "docs" / "library.md").read_text()


def engine_for(db_url: str, tmp_path: Path, handler: Any, **extra: Any) -> agentcron.Engine:
    fast = {"scheduler_tick_seconds": 0.2, "log_format": "console"}
    # The host lets its users' schedules run through its handler.
    where = {"database_url": db_url, "data_dir": tmp_path / "data", "tenant_runners": "handler"}
    return agentcron.Engine(handler=handler, **where, **fast, **extra)


async def finished(engine: agentcron.Engine, schedule_id: uuid.UUID, count: int = 1) -> list[Any]:
    deadline = time.monotonic() + 15
    while True:
        page = await engine.runs.list_runs(schedule_id, None, limit=50)
        runs = [run for run, _ in page.items]
        if len(runs) >= count and all(run.status not in ("pending", "running") for run in runs):
            return runs
        assert time.monotonic() < deadline, [(run.status, run.error) for run in runs]
        await asyncio.sleep(0.1)


def handler_schedule(**fields: Any) -> ScheduleCreate:
    """A schedule of the engine's handler, hourly unless ``fields`` say otherwise."""
    spec = {"name": "n", "prompt": "p", "trigger": {"every_seconds": 3600}}
    return ScheduleCreate.model_validate(spec | {"runner": {"type": "handler"}} | fields)


async def run_once(engine: agentcron.Engine, **fields: Any) -> Any:
    """The run of a new handler schedule (``fields`` set), run now, once it has ended."""
    made = await engine.schedules.create(handler_schedule(**fields), OWNER)
    await engine.runs.run_now(made.id, OWNER)
    (run,) = await finished(engine, made.id)
    return run


async def test_the_handlers_workdir_exists_is_writable_and_keeps_files_between_runs(
    db_url: str, tmp_path: Path
) -> None:
    found: list[list[str]] = []

    def handler(ctx: HandlerContext) -> str:
        workdir = Path(ctx.workdir)
        found.append(sorted(path.name for path in workdir.iterdir()))
        (workdir / f"attempt-{len(found)}.txt").write_text(ctx.prompt)
        return str(workdir)

    # A data directory nobody made: the engine creates it, as it does for a command agent.
    engine = engine_for(db_url, tmp_path, handler)
    assert not (tmp_path / "data").exists()
    async with engine:
        spec = handler_schedule(prompt="note", mode="persistent")
        made = await engine.schedules.create(spec, OWNER)
        workdir = (tmp_path / "data" / "tasks" / OWNER / str(made.id)).resolve()
        assert workdir.is_dir()  # made with the schedule, before any run
        workdir.rmdir()  # gone again (another replica's disk): the first run makes it
        for count in (1, 2):
            await engine.runs.run_now(made.id, OWNER)
            runs = await finished(engine, made.id, count=count)
    assert [run.status for run in runs] == ["succeeded", "succeeded"], [r.error for r in runs]
    assert found == [[], ["attempt-1.txt"]]  # the second run sees what the first one kept
    assert {Path(run.output or "") for run in runs} == {workdir}
    assert (workdir / "attempt-2.txt").read_text() == "note"


async def test_a_handler_schedule_run_by_an_engine_without_a_handler_is_paused_with_why(
    db_url: str, tmp_path: Path
) -> None:
    engine = engine_for(db_url, tmp_path, None)
    async with engine:
        run = await run_once(engine)
        schedule = await engine.schedules.get(run.schedule_id, OWNER)
    assert run.status == "failed" and "without one" in (run.error or "")
    assert not schedule.enabled


def owner_from_header(x_user: str | None = Header(default=None)) -> str:
    """The host's own auth: it decides who the caller is."""
    if x_user is None:
        raise HTTPException(status_code=401, detail="who are you?")
    return x_user


async def test_what_a_handler_returns_is_kept_on_the_run_or_fails_it_saying_why(
    db_url: str, tmp_path: Path
) -> None:
    """A mapping returned (or a ``RunOutcome``'s ``result``) is the run's ``result``, read back
    by the library and over HTTP; a string is the ``output`` as it always was. A result that
    is not a small JSON object fails the run, not retried (the handler's work is done), its
    error saying what to fix (every kind of result refused, and what it says:
    tests/unit/test_run_outcome.py)."""
    returned: dict[str, Any] = {
        "mapping": {"session_id": "s-81", "turns": 2, "tags": ["a"]},
        "outcome": agentcron.RunOutcome(output="opened a session", result={"session_id": "s-1"}),
        "text": "plain text",
        "large": {"blob": "x" * 20_000},
        "list": agentcron.RunOutcome(output="", result=["not", "an", "object"]),  # type: ignore[arg-type]
    }
    engine = engine_for(db_url, tmp_path, lambda ctx: returned[ctx.data["returns"]])
    app = FastAPI()
    engine.install(app, prefix="/scheduling", principal=owner_from_header)
    transport = httpx.ASGITransport(app=app)
    ran: dict[str, Any] = {}
    http = httpx.AsyncClient(transport=transport, base_url=HOST, headers={"X-User": OWNER})
    async with engine, http:
        for returns in returned:
            runner = {"type": "handler", "data": {"returns": returns}}
            ran[returns] = await run_once(engine, max_attempts=3, runner=runner)
        for returns in ("mapping", "outcome", "text"):
            run, _ = await engine.runs.get_run(ran[returns].id, OWNER)
            assert run.status == "succeeded", run.error
            answer = await http.get(f"/scheduling/api/v1/runs/{run.id}")
            assert answer.status_code == 200, answer.text
            assert (answer.json()["output"], answer.json()["result"]) == (run.output, run.result)
            listed = await http.get(f"/scheduling/api/v1/schedules/{run.schedule_id}/runs")
            assert [item["result"] for item in listed.json()["items"]] == [run.result]
        async with engine.db.session(write=False) as session:
            unset = select(Run.id).where(Run.result.is_(None))  # SQL NULL, not a JSON null
            without = {ran[returns].id for returns in ("text", "large", "list")}
            assert set(await session.scalars(unset)) == without
    assert {returns: (run.output, run.result) for returns, run in ran.items() if run.result} == {
        "mapping": ("", {"session_id": "s-81", "turns": 2, "tags": ["a"]}),
        "outcome": ("opened a session", {"session_id": "s-1"}),
    }
    assert ran["text"].output == "plain text"
    failed = {returns: run for returns, run in ran.items() if run.status != "succeeded"}
    assert {(run.status, run.attempt) for run in failed.values()} == {("failed", 1)}
    assert {returns: run.error for returns, run in failed.items()} == {
        "large": "the run's result is 20011 bytes of JSON; at most 16384 (keep a reference to"
        " your record, not the record)",
        "list": "the run's result is not a JSON object: it is a list",
    }


async def test_settings_are_checked_when_the_engine_is_built(tmp_path: Path) -> None:
    with pytest.raises(agentcron.ConfigurationError, match="scheduler_concurrency"):
        agentcron.Engine(database_url=f"sqlite:///{tmp_path}/x.db", scheduler_concurrency=0)
    with pytest.raises(agentcron.ConfigurationError, match="unknown setting 'concurency'"):
        agentcron.Engine(database_url=f"sqlite:///{tmp_path}/x.db", concurency=8)
    with pytest.raises(agentcron.ConfigurationError, match="database_url"):
        agentcron.Engine(database_url="mongodb://localhost/db")


async def test_properties_and_a_disabled_scheduler(db_url: str, tmp_path: Path) -> None:
    engine = engine_for(db_url, tmp_path, None, disable_scheduler=True)
    props = engine.properties
    assert props.pause_visibility_seconds == 0.0 and props.concurrency == 4
    assert props.recovery_scope == ("cluster" if db_url.startswith("postgresql") else "process")
    if db_url.startswith("postgresql"):
        # A dead replica is known by its vanished session (core.storage.liveness), not its lease.
        assert props.recovery_seconds == 2.25 < props.lease_seconds
        leases_only = engine_for(db_url, tmp_path, None, liveness=False).properties
        assert leases_only.recovery_seconds == leases_only.lease_seconds + 0.2  # + the tick
    else:
        assert props.recovery_seconds == 0.0  # the restarted engine's first claim
    async with engine:
        assert engine.loop is None  # AGENTCRON_DISABLE_SCHEDULER: the API alone
        assert (await engine.schedules.create(handler_schedule(), OWNER)).enabled


async def test_the_host_in_docs_library_md_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example host of docs/library.md as written: its own auth decides the owner of
    everything under its prefix, agentcron's errors keep their status and body there, its
    own routes are untouched, its sync handler runs in a worker thread with the run's context
    (the rest of the context: the engine contract, tests/integration/test_contract.py), and
    its permanent error is not retried."""
    block = LIBRARY_MD.split("<!-- example:")[1].split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)  # the example's relative database: var/host-jobs.db
    (tmp_path / "var").mkdir()
    monkeypatch.setenv("AGENTCRON_SCHEDULER_TICK_SECONDS", "0.2")
    monkeypatch.setenv("AGENTCRON_DATA_DIR", str(tmp_path / "data"))
    namespace: dict[str, Any] = {"__name__": "host_example"}
    exec(compile(block, "docs/library.md", "exec"), namespace)
    app, engine = namespace["app"], namespace["engine"]
    seen: list[tuple[HandlerContext, str]] = []

    def watched(ctx: HandlerContext) -> str:
        seen.append((ctx, threading.current_thread().name))
        result: str = namespace["run_agent"](ctx)
        return result

    engine.handler = watched
    app.add_api_route("/health", lambda: {"ok": "yes"})  # a route of the host's own
    body: dict[str, Any] = {"name": "news digest", "prompt": "summarise the news"}
    body["trigger"] = {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"}
    body["runner"] = {"type": "handler", "data": {"deployment": "d-42"}}
    api = "/scheduling/api/v1"
    alice, bob = {"X-User": "alice"}, {"X-User": "bob"}
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=HOST)
    async with app.router.lifespan_context(app), http:
        assert (await http.get("/health")).json() == {"ok": "yes"}
        assert (await http.post(f"{api}/schedules", json=body)).status_code == 401
        created = await http.post(f"{api}/schedules", json=body, headers=alice)
        assert created.status_code == 201, created.text
        schedule_id = created.json()["id"]
        assert created.json()["owner"] == "alice"
        mine = await http.get(f"{api}/schedules", headers=alice)
        assert [item["id"] for item in mine.json()["items"]] == [schedule_id]
        assert (await http.get(f"{api}/schedules", headers=bob)).json()["items"] == []
        hidden = await http.get(f"{api}/schedules/{schedule_id}", headers=bob)
        assert hidden.status_code == 404 and hidden.json()["error"]["type"] == "NotFound"
        bad = {**body, "runner": {"type": "handler", "data": [1]}}
        assert (await http.post(f"{api}/schedules", json=bad, headers=alice)).status_code == 422
        gone = {**body, "runner": {"type": "handler", "data": {"deployment": "gone"}}}
        gone_id = (await http.post(f"{api}/schedules", json=gone, headers=alice)).json()["id"]
        for made in (schedule_id, gone_id):
            ran = await http.post(f"{api}/schedules/{made}/run", headers=alice)
            assert ran.status_code == 202, ran.text
        (run,) = await finished(engine, uuid.UUID(schedule_id))
        (failed,) = await finished(engine, uuid.UUID(gone_id))
    assert run.status == "succeeded"
    assert run.output == "ran d-42: summarise the news (attempt 1)"
    ctx, thread = next((ctx, thread) for ctx, thread in seen if ctx.run_id == run.id)
    assert thread != "MainThread"
    assert ctx.schedule_id == run.schedule_id and ctx.payload["prompt"] == "summarise the news"
    assert (failed.status, failed.attempt) == ("failed", 1)
    assert "deployment was deleted" in (failed.error or "")
