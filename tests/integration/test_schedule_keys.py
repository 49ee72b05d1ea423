"""Schedules kept under the host's own key: PUT/GET/DELETE by key over HTTP, and ``apply``,
``delete_by_key`` and ``reconcile`` in Python, on SQLite and PostgreSQL.

What a host relies on: a PUT of a new key creates (201) and of a known one replaces (200) the
same schedule, run history included; an invalid record leaves the stored definition in force;
a reconcile with one bad record applies none, and deletes only its own scope.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest

from agentcron.core.errors import InvalidSchedule, NotFound
from agentcron.core.schedules.service import ScheduleService
from agentcron.core.specs import ScheduleCreate
from agentcron.testing.kit import SettableClock
from tests.conftest import app_client, issue_key
from tests.integration.engine_kit import assert_error
from tests.integration.test_schedules_api import API
from tests.integration.test_schedules_api import body as record


async def test_put_by_key_creates_then_replaces_the_same_schedule_and_keeps_its_runs(
    live_app: Any, client: httpx.AsyncClient
) -> None:
    created = await client.put(f"{API}/by-key/deployment:42", json=record(max_attempts=5))
    assert created.status_code == 201, created.text
    first = created.json()
    assert first["key"] == "deployment:42" and first["max_attempts"] == 5
    run = (await client.post(f"{API}/{first['id']}/run")).json()

    renamed = record(name="renamed", trigger={"cron": "30 9 * * *", "timezone": "UTC"})
    replaced = await client.put(f"{API}/by-key/deployment:42", json=renamed)
    assert replaced.status_code == 200, replaced.text
    second = replaced.json()
    assert second["id"] == first["id"] and second["key"] == "deployment:42"
    assert second["name"] == "renamed" and second["description"] == "At 09:30, UTC"
    # A full replace: a field the record leaves out takes its default again.
    assert second["max_attempts"] == 3

    got = await client.get(f"{API}/by-key/deployment:42")
    assert got.status_code == 200 and got.json()["id"] == first["id"]
    assert (await client.get(f"{API}/{first['id']}")).json()["key"] == "deployment:42"
    listed = (await client.get(API)).json()["items"]
    assert [item["id"] for item in listed] == [first["id"]]
    runs = (await client.get(f"{API}/{first['id']}/runs")).json()["items"]
    assert [item["id"] for item in runs] == [run["id"]]
    # The run keeps the input it was made with: replacing the record rewrites no run.
    kept, _ = await live_app.state.runs.get_run(run["id"], "local")
    assert kept.payload["prompt"] == record()["prompt"]
    assert kept.payload["key"] == "deployment:42"


async def test_an_invalid_record_leaves_the_stored_definition_in_force(
    client: httpx.AsyncClient,
) -> None:
    first = (await client.put(f"{API}/by-key/k2", json=record())).json()
    # Even a disable that carries a bad cron changes nothing.
    disabled = record(enabled=False, trigger={"cron": "61 8 * * *"})
    bad = await client.put(f"{API}/by-key/k2", json=disabled)
    assert_error(bad, 422, field="trigger.cron")
    kept = (await client.get(f"{API}/by-key/k2")).json()
    assert kept["enabled"] is True and kept["trigger"] == first["trigger"]
    assert kept["updated_at"] == first["updated_at"]

    unknown = await client.put(f"{API}/by-key/k2", json=record(colour="blue"))
    assert unknown.status_code == 422
    assert (await client.get(f"{API}/by-key/k2")).json()["updated_at"] == first["updated_at"]


async def test_a_bad_key_is_refused_naming_the_field(client: httpx.AsyncClient) -> None:
    for key in ("x" * 201, "a%20b"):
        assert_error(await client.put(f"{API}/by-key/{key}", json=record()), 422, field="key")
    assert (await client.get(API)).json()["items"] == []


async def test_keys_belong_to_their_owner(live_app: Any, client: httpx.AsyncClient) -> None:
    mine = (await client.put(f"{API}/by-key/shared-name", json=record())).json()
    # An admin key too keeps its own keys: by-key verbs act as the key's owner.
    async with app_client(live_app, await issue_key(live_app, "other", admin=True)) as other:
        assert (await other.get(f"{API}/by-key/shared-name")).status_code == 404
        assert (await other.delete(f"{API}/by-key/shared-name")).status_code == 404
        # The same key is free for another owner: a schedule of its own.
        theirs = await other.put(f"{API}/by-key/shared-name", json=record())
        assert theirs.status_code == 201, theirs.text
        assert theirs.json()["id"] != mine["id"]
    assert (await client.get(f"{API}/by-key/shared-name")).json()["id"] == mine["id"]


async def test_delete_by_key_frees_the_key_and_keeps_the_runs_readable(
    client: httpx.AsyncClient,
) -> None:
    # The key "runs": "by-key/runs" would match "/{schedule_id}/runs" if that route came first.
    first = (await client.put(f"{API}/by-key/runs", json=record())).json()
    assert (await client.get(f"{API}/by-key/runs")).json()["id"] == first["id"]
    run = (await client.post(f"{API}/{first['id']}/run")).json()
    assert (await client.delete(f"{API}/by-key/runs")).status_code == 204
    assert (await client.get(f"{API}/by-key/runs")).status_code == 404
    assert (await client.delete(f"{API}/by-key/runs")).status_code == 404
    assert (await client.get(f"/api/v1/runs/{run['id']}")).status_code == 200
    again = await client.put(f"{API}/by-key/runs", json=record())
    assert again.status_code == 201 and again.json()["id"] != first["id"]


async def test_reconcile_applies_pauses_and_deletes_only_its_scope_or_nothing(
    live_app: Any,
) -> None:
    schedules: ScheduleService = live_app.state.schedules
    await schedules.apply("host", "deploy:gone", record())
    await schedules.apply("host", "deploy:kept", record(name="old name"))
    outside = await schedules.apply("host", "other:1", record())
    unkeyed = await schedules.create(ScheduleCreate.model_validate(record()), "host")

    records = {"deploy:kept": record(name="new name"), "deploy:new": record()}
    records["deploy:off"] = record(enabled=False)
    done = await schedules.reconcile("host", records, scope="deploy:")
    assert sorted(done.created) == ["deploy:new", "deploy:off"]
    assert done.replaced == ["deploy:kept"] and done.deleted == ["deploy:gone"]
    assert (await schedules.get_by_key("host", "deploy:kept")).name == "new name"
    off = await schedules.get_by_key("host", "deploy:off")
    assert off.enabled is False and off.next_run is None and off.paused_at is not None
    with pytest.raises(NotFound):
        await schedules.get_by_key("host", "deploy:gone")
    # Outside the scope and without a key: untouched.
    assert (await schedules.get_by_key("host", "other:1")).id == outside.schedule.id
    assert (await schedules.get(unkeyed.id, "host")).deleted_at is None

    # With one bad record, none is applied.
    mars = record(trigger={"cron": "0 8 * * *", "timezone": "Mars/Olympus"})
    bad = {"deploy:kept": record(name="changed"), "deploy:b": record(), "deploy:c": mars}
    with pytest.raises(InvalidSchedule) as caught:
        await schedules.reconcile("host", bad, scope="deploy:")
    assert "deploy:c" in caught.value.message
    assert caught.value.field == "records.deploy:c.trigger.timezone"
    assert (await schedules.get_by_key("host", "deploy:kept")).name == "new name"
    with pytest.raises(NotFound):
        await schedules.get_by_key("host", "deploy:b")

    with pytest.raises(InvalidSchedule) as foreign:
        await schedules.reconcile("host", {"mine:x": record()}, scope="deploy:")
    assert foreign.value.field == "records.mine:x.key"
    # An empty reconcile of the scope deletes what is in it, and only that.
    done = await schedules.reconcile("host", {}, scope="deploy:")
    assert sorted(done.deleted) == ["deploy:kept", "deploy:new", "deploy:off"]
    assert (await schedules.get_by_key("host", "other:1")).id == outside.schedule.id


async def test_reconciles_and_applies_of_the_same_new_keys_at_once_make_one_schedule_each(
    live_app: Any,
) -> None:
    # A host's replicas all reconcile at start: whichever adds a key first, the others find
    # it and replace it, and none fails on the key index; so do applies of one new key.
    schedules: ScheduleService = live_app.state.schedules
    records = {f"deploy:{n}": record(enabled=n % 2 == 0) for n in range(4)}
    applies = ("deploy:0", "deploy:0", "deploy:0", "deploy:1")
    for round in range(3):
        results = await asyncio.gather(
            schedules.reconcile("host", records, scope="deploy:"),
            schedules.reconcile("host", records, scope="deploy:"),
            *(schedules.apply("host", key, records[key]) for key in applies),
        )
        created = [key for done in results[:2] for key in done.created]
        created += [
            key for key, applied in zip(applies, results[2:], strict=True) if applied.created
        ]
        assert sorted(created) == (sorted(records) if round == 0 else []), round
        page = await schedules.list("host")
        assert sorted(item.key or "" for item in page.items) == sorted(records), round


async def test_an_unchanged_record_whose_time_has_passed_is_still_unchanged(live_app: Any) -> None:
    # A one-shot that has fired and an interval past its end_at stay under their keys, and a
    # host keeps reconciling them: the checks a new trigger gets ("at lies in the past") judged
    # them when they were first given, not each time they are given again.
    schedules: ScheduleService = live_app.state.schedules
    clock = SettableClock()
    schedules.context.clock = clock
    soon = clock() + timedelta(hours=1)
    bounded = record(trigger={"every_seconds": 600, "end_at": soon.isoformat()}, max_runs=5)
    records = {"deploy:once": record(trigger={"at": soon.isoformat()}), "deploy:bounded": bounded}
    await schedules.reconcile("host", records, scope="deploy:")
    before = {key: await schedules.get_by_key("host", key) for key in records}
    clock.jump_to(soon + timedelta(hours=1))

    done = await schedules.reconcile("host", records, scope="deploy:")
    assert sorted(done.replaced) == sorted(records) and not done.created + done.deleted
    for key, rec in records.items():
        applied = await schedules.apply("host", key, rec)
        for schedule in (applied.schedule, await schedules.get_by_key("host", key)):
            assert timetable(schedule) == timetable(before[key]), key
    # A changed trigger is a new one, judged as such: an interval counts from now.
    with pytest.raises(InvalidSchedule) as caught:
        await schedules.apply("host", "deploy:once", record(trigger={"at": soon.isoformat()[:-6]}))
    assert caught.value.field == "trigger.at"
    await schedules.apply("host", "deploy:every", record(trigger={"every_seconds": 600}))
    earliest = clock().replace(microsecond=0)
    retimed = await schedules.apply("host", "deploy:every", record(trigger={"every_seconds": 900}))
    latest = clock().replace(microsecond=0)  # a second may turn during the save
    assert earliest <= retimed.schedule.next_run - timedelta(seconds=900) <= latest


def timetable(schedule: Any) -> tuple[Any, ...]:
    """What an unchanged record must leave as it was."""
    return (schedule.trigger, schedule.next_run, schedule.updated_at, schedule.warnings)
