"""The AstraBox-style provider of ``examples/astrabox_provider``: loaded from its entry point,
bound to the contract suite, and its own promises (on SQLite and PostgreSQL): configure-time
refusal, properties, reconcile, capacity, errors by class in the provider's words."""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import AsyncIterator, Awaitable, Coroutine
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy.engine import make_url

from agentcron.testing import (
    Call,
    HostHandler,
    ProviderContract,
    Record,
    RunView,
    SettableClock,
    Store,
    fire_engine_due_times,
    settle_engine,
    until,
)
from tests.examples import ASTRABOX, PROVIDER_GROUP, load_entry_point
from tests.faults.conftest import through
from tests.faults.proxy import running_proxy

T = TypeVar("T")

Provider = load_entry_point(ASTRABOX, PROVIDER_GROUP, "agentcron")
box: ModuleType = __import__(Provider.__module__)


def repository(url: str | None) -> Any:
    """The platform's repository backend: a SQL one has a URL, a document one has none."""
    return SimpleNamespace(sql_url=lambda: url)


def configured(store: Store, **options: Any) -> Any:
    provider, backend = Provider(), repository(store.database_url)
    fast = {"scheduler_tick_seconds": 0.2, "log_format": "console"}
    provider.configure(repository_backend=backend, data_dir=store.data_dir, **fast, **options)
    return provider


# The provider's binding is the same on every database; the engine under it is held to the
# suite on SQLite and PostgreSQL in tests/integration/test_contract.py.
@pytest.mark.parametrize("backend", ["sqlite"])
class TestAstraBoxProviderContract(ProviderContract):
    max_attempts = box.ATTEMPTS
    permanent_error = box.PermanentFailure
    invalid_errors = (box.InvalidSchedule,)
    not_found_errors = (box.RunNotFound, box.DeploymentNotFound)

    @pytest.fixture
    def contract_store(self, db_url: str, tmp_path: Path) -> Store:
        return Store(db_url, tmp_path / "data", migrated=True)

    def make_engine(self, store: Store) -> Any:
        return configured(store, clock=SettableClock())

    async def fire_due_times(self, provider: Any, key: str, start: datetime, end: datetime) -> None:
        await fire_engine_due_times(
            provider.engine, box.OWNER, box.key_of(key), start, end, self.within
        )

    async def settle(self, provider: Any, key: str) -> None:
        await settle_engine(provider.engine, box.OWNER, box.key_of(key), self.within)

    async def start(self, provider: Any, handler: HostHandler) -> None:
        async def on_call(call: Any) -> None:
            assert call.idempotency_key == f"deployment-run:{call.run_id}"
            fields = ("run_id", "trigger", "due_at", "prompt", "attempt")  # named alike
            same = {name: getattr(call, name) for name in fields}
            replay_of, data = call.replayed_from_run_id, call.target
            await handler(Call(key=call.deployment_id, data=data, replay_of=replay_of, **same))

        await provider.start(on_call)

    async def stop(self, provider: Any) -> None:
        await provider.stop()

    async def apply(self, provider: Any, key: str, record: Record) -> None:
        await provider.apply(deployment(key, record))

    async def delete(self, provider: Any, key: str) -> None:
        await provider.delete(key)

    async def run_now(self, provider: Any, key: str) -> str:
        return str((await provider.run_now(key)).run_id)

    async def replay(self, provider: Any, key: str, run_id: str) -> str:
        return str((await provider.replay(key, run_id)).run_id)

    async def list_runs(self, provider: Any, key: str, limit: int) -> list[RunView]:
        return [
            RunView(run.run_id, run.trigger, run.status, run.due_at, run.replayed_from_run_id)
            for run in await provider.list_runs(key, limit)
        ]


def deployment(key: str, record: Record) -> Any:
    same = {name: getattr(record, name) for name in ("name", "prompt", "cron", "timezone")}
    return box.DeploymentRecord(id=key, enabled=record.enabled, target=record.data, **same)


async def raises(error: type[Exception], call: Awaitable[Any]) -> None:
    with pytest.raises(error):
        await call


def hourly(id: str, **changes: Any) -> Any:
    fields = {"name": id, "prompt": "p", "cron": "0 * * * *", "timezone": "UTC", **changes}
    return box.DeploymentRecord(id=id, **fields)


async def nothing(call: Any) -> None:
    return None


@asynccontextmanager
async def started(store: Store, handler: Any = nothing, **options: Any) -> AsyncIterator[Any]:
    """A provider configured with ``options`` on ``store``, started with ``handler``."""
    provider = configured(store, **options)
    await provider.start(handler)
    try:
        yield provider
    finally:
        await provider.stop()


@pytest.fixture
def store(db_url: str, tmp_path: Path) -> Store:
    return Store(db_url, tmp_path / "data", migrated=True)


def test_the_entry_point_names_a_provider_that_refuses_a_backend_it_cannot_run_on() -> None:
    assert Provider.name == "agentcron" and Provider.__name__ == "AgentcronProvider"
    with pytest.raises(box.ProviderUnavailable, match="SQL repository backend"):
        Provider().configure(repository_backend=repository(None))  # a document database
    with pytest.raises(box.ProviderUnavailable) as refused:
        Provider().configure(repository_backend=repository("mongodb://db/astrabox"))
    assert "agentcron" not in str(refused.value).lower()


async def test_properties_and_not_started(store: Store) -> None:
    provider = configured(store, max_active_schedules=64)
    props = provider.properties
    expected = "cluster" if store.database_url.startswith("postgresql") else "executor"
    assert (props.recovery_scope, props.max_active_schedules) == (expected, 64)
    assert props.pause_visibility_seconds == 0.0
    with pytest.raises(box.ProviderUnavailable, match="not started"):
        await provider.apply(hourly("d1"))


async def test_reconcile_applies_pauses_and_deletes_only_its_own(store: Store) -> None:
    async with started(store) as provider:
        engine = provider.engine
        spec = {"name": "host's own", "prompt": "p", "trigger": {"every_seconds": 3600}}
        spec["runner"] = {"type": "handler"}
        await engine.schedules.apply(box.OWNER, "other:1", spec)  # not the provider's scope
        await provider.reconcile([hourly("d1"), hourly("d2"), hourly("d3"), hourly("d4")])
        run = await provider.run_now("d4")
        await ended(provider, "d4")
        edited = [hourly("d1", prompt="edited"), hourly("d2", enabled=False), hourly("d4")]
        await provider.reconcile(edited)
        kept = await engine.schedules.get_by_key(box.OWNER, "deployment:d1")
        paused = await engine.schedules.get_by_key(box.OWNER, "deployment:d2")
        assert (kept.prompt, kept.enabled, paused.enabled) == ("edited", True, False)
        assert await provider.list_runs("d3") == []
        await raises(box.DeploymentNotFound, provider.run_now("d3"))
        await engine.schedules.get_by_key(box.OWNER, "other:1")  # untouched
        with pytest.raises(box.InvalidSchedule) as refused:
            await provider.reconcile([hourly("d1", prompt="never"), hourly("d9", timezone="X/Y")])
        assert refused.value.deployment_id == "d9"
        assert str(refused.value) == "deployment d9: schedule cron or timezone is invalid"
        kept = await engine.schedules.get_by_key(box.OWNER, "deployment:d1")
        assert kept.prompt == "edited"  # one bad record: none applied

        # A record marked deleted removes its schedule; its runs stay readable.
        await provider.apply(hourly("d4", deleted=True))
        await raises(box.DeploymentNotFound, provider.get("d4"))
        assert (await provider.get_run("d4", run.run_id)).status == "succeeded"
        # A deleted record is not checked as a schedule: its cron may be anything.
        await provider.reconcile([hourly("d2", cron="gone", deleted=True), hourly("d1")])
        await raises(box.DeploymentNotFound, provider.get("d2"))
        assert (await provider.get("d1")).state == "active"
        await provider.apply(hourly("never-applied", deleted=True))  # nothing to delete: fine


async def test_a_change_past_the_capacity_is_refused_and_the_previous_one_stays(
    store: Store,
) -> None:
    async with started(store, max_active_schedules=1) as provider:
        await provider.apply(hourly("d1"))
        await provider.apply(hourly("d2", enabled=False))
        with pytest.raises(box.ScheduleCapacityExceeded) as refused:
            await provider.apply(hourly("d2", prompt="now enabled"))
        assert "agentcron" not in str(refused.value).lower()
        engine = provider.engine
        still = await engine.schedules.get_by_key(box.OWNER, "deployment:d2")
        assert (still.enabled, still.prompt) == (False, "p")
        with pytest.raises(box.InvalidSchedule, match="^schedule cron or timezone is invalid$"):
            await provider.apply(hourly("d1", cron="0 0 * * * *"))  # six fields


async def ended(provider: Any, deployment_id: str, count: int = 1) -> list[Any]:
    """The deployment's runs, newest first, once ``count`` of them exist and all have ended."""

    async def done() -> list[Any]:
        runs = await provider.list_runs(deployment_id)
        over = all(run.status not in ("pending", "running") for run in runs)
        return runs if len(runs) >= count and over else []

    result: list[Any] = await until(done, f"the runs of {deployment_id} to end", within=15)
    return result


async def test_get_reads_one_schedule_back_as_the_provider_holds_it(store: Store) -> None:
    async with started(store) as provider:
        zone = "Asia/Shanghai"
        target = {"agent": "a1"}
        await provider.apply(hourly("d1", cron="30 9 * * *", timezone=zone, target=target))
        held = await provider.get("d1")
        expected = ("d1", "active", "30 9 * * *", zone)
        assert (held.deployment_id, held.state, held.cron, held.timezone) == expected
        assert (held.name, held.prompt, dict(held.target)) == ("d1", "p", target)
        local = held.next_due_at.astimezone(ZoneInfo(zone))
        assert (local.hour, local.minute, local.second) == (9, 30, 0)
        assert datetime.now(UTC) < held.next_due_at <= datetime.now(UTC) + timedelta(days=1)
        await provider.apply(hourly("d1", cron="30 9 * * *", timezone=zone, enabled=False))
        paused = await provider.get("d1")
        assert (paused.state, paused.next_due_at, paused.cron) == ("paused", None, "30 9 * * *")
        await raises(box.DeploymentNotFound, provider.get("never-applied"))
        await provider.delete("d1")
        await raises(box.DeploymentNotFound, provider.get("d1"))


async def test_a_run_keeps_its_saved_input_and_what_the_handler_returned(store: Store) -> None:
    """The console's run row: the input the run started with, even after the record is
    edited, and the session the platform's handler opened for it."""

    def session(run_id: str, target: dict[str, Any]) -> dict[str, Any]:
        return {"session_id": f"session-{run_id}", "target": target}

    async def opens_a_session(call: Any) -> dict[str, Any]:
        return session(call.run_id, dict(call.target))

    a1, a2 = {"agent": "a1"}, {"agent": "a2"}
    async with started(store, opens_a_session) as provider:
        await provider.apply(hourly("d1", prompt="first", target=a1))
        queued = await provider.run_now("d1")
        assert (queued.prompt, dict(queued.target), queued.result) == ("first", a1, None)
        (run,) = await ended(provider, "d1")
        await provider.apply(hourly("d1", prompt="second", target=a2))
        edited = await provider.run_now("d1")
        newest, first = await ended(provider, "d1", count=2)
        assert (first.run_id, first.status, first.error) == (run.run_id, "succeeded", None)
        assert (first.prompt, dict(first.target)) == ("first", a1)
        assert first.result == session(run.run_id, a1)
        assert first.started_at is not None and first.finished_at is not None
        assert first.created_at <= first.started_at <= first.finished_at
        assert (newest.run_id, newest.prompt, dict(newest.target)) == (edited.run_id, "second", a2)
        assert newest.result == session(edited.run_id, a2)
        assert await provider.get_run("d1", run.run_id) == first
        await provider.apply(hourly("d2"))
        await raises(box.RunNotFound, provider.get_run("d2", run.run_id))  # another one's run
        await raises(box.RunNotFound, provider.get_run("d1", "not-a-run-id"))


async def test_a_failed_run_shows_its_error_and_when_it_finished(store: Store) -> None:
    """A permanent failure, or a handler return a run cannot keep (the handler's work is
    done), fails the run once, its error saying why in the provider's words."""
    calls: list[tuple[str, int]] = []

    async def returns(call: Any) -> Any:
        calls.append((call.deployment_id, call.attempt))
        if call.target["returns"] == "archived":
            raise box.PermanentFailure("the agent is archived")
        return "session-1"

    async with started(store, returns) as provider:
        errors = {}
        for returns_what in ("archived", "text"):
            await provider.apply(hourly(returns_what, target={"returns": returns_what}))
            await provider.run_now(returns_what)
            (run,) = await ended(provider, returns_what)
            assert (run.status, run.result) == ("failed", None)
            assert run.started_at is not None and run.finished_at is not None
            assert run.started_at <= run.finished_at
            errors[returns_what] = run.error
        assert errors == {
            "archived": "the agent is archived",
            "text": "the handler returned a str; it returns None or a mapping (the run's result)",
        }
        assert calls == [("archived", 1), ("text", 1)]  # ATTEMPTS allows retries: none was made


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_a_failing_execution_store_is_execution_unavailable_then_recovers(
    db_url: str, tmp_path: Path
) -> None:
    """The execution store gone (every connection to PostgreSQL reset by the fault proxy):
    each call raises ``ExecutionUnavailable`` in the provider's words, none hangs or leaks
    driver text, and the same provider works again once the database is back."""
    upstream = make_url(db_url)
    with running_proxy(upstream.host or "127.0.0.1", upstream.port or 5432) as proxy:
        provider = configured(Store(through(proxy, db_url), tmp_path / "data", migrated=True))
        await provider.start(nothing)
        try:
            await provider.apply(hourly("d1"))
            proxy.cut()
            calls = {
                "apply": lambda: provider.apply(hourly("d2")),
                "delete": lambda: provider.delete("d1"),
                "apply deleted": lambda: provider.apply(hourly("d1", deleted=True)),
                "reconcile": lambda: provider.reconcile([hourly("d1")]),
                "get": lambda: provider.get("d1"),
                "list_runs": lambda: provider.list_runs("d1"),
                "get_run": lambda: provider.get_run("d1", str(uuid.uuid4())),
                "run_now": lambda: provider.run_now("d1"),
            }
            for name, call in calls.items():
                with pytest.raises(box.ExecutionUnavailable) as failed:
                    await answered(name, call())
                text = str(failed.value).lower()
                assert "agentcron" not in text and "asyncpg" not in text, (name, text)
            proxy.restore()
            await answered("apply after the restore", provider.apply(hourly("d2")))
            run = await answered("run_now after the restore", provider.run_now("d1"))
            runs = await answered("list_runs after the restore", provider.list_runs("d1"))
            assert [r.run_id for r in runs] == [run.run_id]
            got = await answered("get_run after the restore", provider.get_run("d1", run.run_id))
            assert got.run_id == run.run_id
        finally:
            proxy.restore()
            await answered("stop", provider.stop(), within=60)


async def answered(name: str, call: Coroutine[Any, Any, T], within: float = 30) -> T:
    """``call``'s result or exception within ``within`` seconds; otherwise fail at once,
    naming it, with the stack of every task (``wait_for`` would wait for a cancelled call
    that does not end, and hide which one hung)."""
    task = asyncio.ensure_future(call)
    await asyncio.wait({task}, timeout=within)
    if not task.done():
        stacks = io.StringIO()
        for other in asyncio.all_tasks():
            other.print_stack(file=stacks)
        task.cancel()
        pytest.fail(f"{name} did not answer within {within:g} s\n{stacks.getvalue()}")
    return task.result()
