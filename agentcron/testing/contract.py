"""The contract suite: ``agentcron.testing.ProviderContract``, subclassed by a host's tests.

A subclass named ``Test...`` supplies ``make_engine(store)`` and ``fire_due_times(engine, key,
start, end)`` (and, for a provider of its own, the verbs of ``EngineVerbs``); pytest then runs
every check below against it, each on a fresh store from ``contract_store`` (a SQLite file by
default; override the fixture for another database). The handler the suite starts the engine
with records every call, and fails as the record's ``data`` asks: ``{"fail": "permanent"}``
raises ``permanent_error``; ``{"fail": "transient", "until_attempt": n}`` raises an ordinary
exception on the attempts before ``n`` (every attempt without ``until_attempt``).
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentcron.core.clock import utcnow
from agentcron.testing.kit import Call, EngineVerbs, Record, Store, next_hour, zone_due_times

HOURLY = "0 * * * *"
YEARLY = "0 0 1 1 *"  # a record that only runs when asked, within any test's window


class ProviderContract(EngineVerbs):
    """The checks of the scheduler contract that one process can make."""

    calls: list[Call]

    @pytest.fixture
    def contract_store(self, tmp_path: Path) -> Store:
        """A fresh store per test: an empty SQLite file. Override it for another database."""
        return Store(f"sqlite+aiosqlite:///{tmp_path / 'contract.db'}", tmp_path / "data")

    # -- the frame of every check ---------------------------------------------------------

    def check(self, store: Store, body: Callable[[Any], Awaitable[None]]) -> None:
        asyncio.run(self._session(store, body))

    async def _session(self, store: Store, body: Callable[[Any], Awaitable[None]]) -> None:
        self.calls = []
        engine = self.make_engine(store)
        if inspect.isawaitable(engine):
            engine = await engine
        await self.start(engine, self.handle)
        try:
            await body(engine)
        finally:
            await self.stop(engine)

    async def handle(self, call: Call) -> None:
        """The suite's handler: record the call, fail as the record's data says."""
        self.calls.append(call)
        mode = call.data.get("fail")
        if mode == "permanent":
            raise self.permanent_error("the record's target is gone")
        if mode == "transient" and call.attempt < int(call.data.get("until_attempt", 1_000)):
            raise ConnectionError("the record's target did not answer")

    def calls_of(self, key: str) -> list[Call]:
        return [call for call in self.calls if call.key == key]

    async def run_and_settle(self, engine: Any, key: str) -> str:
        run_id = await self.run_now(engine, key)
        await self.settle(engine, key)
        return run_id

    # -- the checks ---------------------------------------------------------------------

    def test_the_handler_gets_the_run_context(self, contract_store: Store) -> None:
        async def body(engine: Any) -> None:
            start = next_hour(utcnow())
            end = start + timedelta(hours=1)
            await self.apply(engine, "ctx", Record("hourly", "summarise", HOURLY, data={"t": 1}))
            await self.fire_due_times(engine, "ctx", start, end)
            calls = self.calls_of("ctx")
            assert [call.due_at for call in calls] == [start, end], calls
            for call in calls:
                assert (call.trigger, call.attempt, call.replay_of) == ("schedule", 1, None)
                assert (call.prompt, dict(call.data)) == ("summarise", {"t": 1})
            runs = await self.list_runs(engine, "ctx", 10)
            assert {run.id for run in runs} == {call.run_id for call in calls}
            assert sorted(run.due_at for run in runs if run.due_at) == [start, end]
            assert {(run.trigger, run.status) for run in runs} == {("schedule", "succeeded")}
            manual = await self.run_and_settle(engine, "ctx")
            last = self.calls_of("ctx")[-1]
            assert (last.run_id, last.trigger, last.due_at) == (manual, "manual", None)

        self.check(contract_store, body)

    def test_due_times_follow_the_records_zone(self, contract_store: Store) -> None:
        async def body(engine: Any) -> None:
            zone = "Asia/Shanghai"
            record = Record("morning in Shanghai", "p", "0 9 * * *", timezone=zone)
            start = utcnow()
            end = start + timedelta(days=2)
            await self.apply(engine, "zoned", record)
            await self.fire_due_times(engine, "zoned", start, end)
            expected = zone_due_times(9, zone, start, end)
            assert len(expected) == 2
            assert [call.due_at for call in self.calls_of("zoned")] == expected

        self.check(contract_store, body)

    def test_a_permanent_failure_is_not_retried(self, contract_store: Store) -> None:
        async def body(engine: Any) -> None:
            await self.apply(
                engine, "gone", Record("gone", "p", YEARLY, data={"fail": "permanent"})
            )
            run_id = await self.run_and_settle(engine, "gone")
            assert [(c.run_id, c.attempt) for c in self.calls_of("gone")] == [(run_id, 1)]
            (run,) = await self.list_runs(engine, "gone", 10)
            assert (run.id, run.status) == (run_id, "failed")

        self.check(contract_store, body)

    def test_other_failures_are_retried_until_the_attempts_run_out(
        self, contract_store: Store
    ) -> None:
        async def body(engine: Any) -> None:
            flaky = {"fail": "transient", "until_attempt": 2}
            await self.apply(engine, "flaky", Record("flaky", "p", YEARLY, data=flaky))
            await self.apply(
                engine, "down", Record("down", "p", YEARLY, data={"fail": "transient"})
            )
            for key, attempts, status in (
                ("flaky", [1, 2], "succeeded"),
                ("down", list(range(1, self.max_attempts + 1)), "failed"),
            ):
                run_id = await self.run_and_settle(engine, key)
                calls = self.calls_of(key)
                assert [call.attempt for call in calls] == attempts, (key, calls)
                assert {call.run_id for call in calls} == {run_id}  # one run, every attempt
                assert [run.status for run in await self.list_runs(engine, key, 10)] == [status]

        self.check(contract_store, body)

    def test_the_run_history_is_newest_first_and_its_limit_clamped(
        self, contract_store: Store
    ) -> None:
        async def body(engine: Any) -> None:
            start = next_hour(utcnow())
            await self.apply(engine, "hist", Record("history", "p", HOURLY))
            await self.fire_due_times(engine, "hist", start, start + timedelta(hours=2))
            manual = await self.run_and_settle(engine, "hist")
            scheduled = sorted(
                (c for c in self.calls_of("hist") if c.trigger == "schedule"),
                key=lambda call: call.due_at or start,
            )
            newest_first = [manual, *reversed([call.run_id for call in scheduled])]
            assert len(newest_first) == 4
            assert [run.id for run in await self.list_runs(engine, "hist", 50)] == newest_first
            assert [run.id for run in await self.list_runs(engine, "hist", 2)] == newest_first[:2]
            assert [run.id for run in await self.list_runs(engine, "hist", 0)] == newest_first[:1]
            assert [run.id for run in await self.list_runs(engine, "hist", 10_000)] == newest_first

        self.check(contract_store, body)

    def test_the_saved_payload_comes_back_as_given(self, contract_store: Store) -> None:
        async def body(engine: Any) -> None:
            first = {"target": {"kind": "agent", "id": 7, "tags": ["a", "b"]}, "note": "café"}
            start = next_hour(utcnow())
            await self.apply(engine, "pay", Record("payload", "first prompt", HOURLY, data=first))
            await self.fire_due_times(engine, "pay", start, start)
            (ran,) = self.calls_of("pay")
            assert (ran.prompt, dict(ran.data)) == ("first prompt", first)
            edited = Record("payload", "second prompt", HOURLY, data={"target": "edited"})
            await self.apply(engine, "pay", edited)
            await self.run_and_settle(engine, "pay")
            now = self.calls_of("pay")[-1]
            assert (now.prompt, dict(now.data)) == ("second prompt", {"target": "edited"})
            await self.replay(engine, "pay", ran.run_id)
            await self.settle(engine, "pay")
            again = self.calls_of("pay")[-1]  # the edit rewrote nothing the run had saved
            assert (again.prompt, dict(again.data)) == ("first prompt", first)

        self.check(contract_store, body)

    def test_a_replay_reruns_the_saved_input_and_points_back(self, contract_store: Store) -> None:
        async def body(engine: Any) -> None:
            await self.apply(engine, "rep", Record("replayed", "p", YEARLY, data={"x": 1}))
            original = await self.run_and_settle(engine, "rep")
            replay = await self.replay(engine, "rep", original)
            await self.settle(engine, "rep")
            assert replay != original
            last = self.calls_of("rep")[-1]
            assert (last.run_id, last.trigger, last.replay_of) == (replay, "replay", original)
            newest = (await self.list_runs(engine, "rep", 10))[0]
            assert (newest.id, newest.trigger, newest.replay_of) == (replay, "replay", original)
            assert newest.status == "succeeded"

        self.check(contract_store, body)

    def test_a_replay_of_another_records_run_is_not_found(self, contract_store: Store) -> None:
        async def body(engine: Any) -> None:
            await self.apply(engine, "mine", Record("mine", "p", YEARLY))
            await self.apply(engine, "theirs", Record("theirs", "p", YEARLY))
            theirs = await self.run_and_settle(engine, "theirs")
            with pytest.raises(self.not_found_errors):
                await self.replay(engine, "mine", theirs)
            with pytest.raises(self.not_found_errors):
                await self.replay(engine, "mine", str(uuid.uuid4()))
            assert [run.id for run in await self.list_runs(engine, "mine", 10)] == []

        self.check(contract_store, body)

    def test_a_due_time_fired_twice_runs_once(self, contract_store: Store) -> None:
        async def body(engine: Any) -> None:
            start = next_hour(utcnow())
            end = start + timedelta(hours=1)
            await self.apply(engine, "once", Record("once", "p", HOURLY))
            await self.fire_due_times(engine, "once", start, end)
            await asyncio.gather(
                self.fire_due_times(engine, "once", start, end),
                self.fire_due_times(engine, "once", start, end),
            )
            assert [call.due_at for call in self.calls_of("once")] == [start, end]
            runs = await self.list_runs(engine, "once", 10)
            assert sorted(run.due_at for run in runs if run.due_at) == [start, end]

        self.check(contract_store, body)

    def test_a_deleted_record_runs_no_more(self, contract_store: Store) -> None:
        async def body(engine: Any) -> None:
            start = next_hour(utcnow())
            later: tuple[datetime, datetime] = (
                start + timedelta(hours=1),
                start + timedelta(hours=2),
            )
            await self.apply(engine, "gone", Record("deleted", "p", HOURLY))
            await self.apply(engine, "kept", Record("kept", "p", HOURLY))
            await self.fire_due_times(engine, "gone", start, start)
            await self.delete(engine, "gone")
            await self.fire_due_times(engine, "kept", *later)  # the engine fired these hours
            await self.fire_due_times(engine, "gone", *later)
            assert [call.due_at for call in self.calls_of("gone")] == [start]
            assert [call.due_at for call in self.calls_of("kept")] == [start, *later]
            with pytest.raises(self.not_found_errors):
                await self.run_now(engine, "gone")

        self.check(contract_store, body)

    def test_a_disabled_record_does_not_fire_and_is_not_run_late(
        self, contract_store: Store
    ) -> None:
        async def body(engine: Any) -> None:
            start = next_hour(utcnow())
            record = Record("paused", "p", HOURLY)
            await self.apply(engine, "off", record)
            await self.fire_due_times(engine, "off", start, start)
            await self.apply(engine, "off", Record("paused", "p", HOURLY, enabled=False))
            await self.fire_due_times(
                engine, "off", start + timedelta(hours=1), start + timedelta(hours=2)
            )
            await self.apply(engine, "off", record)
            back = start + timedelta(hours=3)
            await self.fire_due_times(engine, "off", back, back)
            assert [call.due_at for call in self.calls_of("off")] == [start, back]

        self.check(contract_store, body)

    def test_an_invalid_change_leaves_the_previous_definition_in_force(
        self, contract_store: Store
    ) -> None:
        async def body(engine: Any) -> None:
            start = next_hour(utcnow())
            await self.apply(engine, "kept", Record("v1", "first", HOURLY, data={"v": 1}))
            for bad in (
                Record("v2", "second", "61 * * * *", data={"v": 2}),
                Record("v2", "second", "0 * * *", data={"v": 2}),
                # A disable carrying a bad cron or zone: refused whole, so still enabled.
                Record("v2", "second", "not a cron", enabled=False),
                Record("v2", "second", HOURLY, timezone="Mars/Olympus", enabled=False),
            ):
                with pytest.raises(self.invalid_errors):
                    await self.apply(engine, "kept", bad)
            await self.fire_due_times(engine, "kept", start, start)
            (ran,) = self.calls_of("kept")
            assert (ran.due_at, ran.prompt, dict(ran.data)) == (start, "first", {"v": 1})
            await self.apply(engine, "kept", Record("v2", "second", HOURLY, data={"v": 2}))
            history = [run.id for run in await self.list_runs(engine, "kept", 10)]
            assert history == [ran.run_id]  # replaced in place: the same run history

        self.check(contract_store, body)


__all__ = ["ProviderContract"]
