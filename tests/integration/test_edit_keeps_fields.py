"""An edit changes only the fields it names: through the dashboard's form, ``PATCH`` and the
command line, on SQLite and PostgreSQL.

Each schedule of ``LOADED`` carries a value other than the default in every field a request
may set, and between them they set every key of each trigger kind, runner type and notify
channel (keys that exclude each other in different schedules or channels).
``test_the_loaded_schedules_cover_every_field`` derives those fields from the code, so a field
added later fails here until it is added to ``LOADED``, and is then checked by every edit path
below instead of being silently dropped by one of them.

The dashboard is driven as a browser drives it: the edit page is fetched, its form read from
the HTML, one input changed, and the form posted back whole, with the line breaks of its
textareas as browsers send them.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Set
from contextlib import asynccontextmanager
from datetime import timedelta
from html.parser import HTMLParser
from pprint import pformat
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from cryptography.fernet import Fernet
from fastapi import FastAPI
from pydantic import SecretStr

from agentcron.core.config import Settings
from agentcron.core.notify import NOTIFY_ON
from agentcron.core.notify import file as file_channel
from agentcron.core.notify import webhook as webhook_channel
from agentcron.core.notify.email import notifier as email_channel
from agentcron.core.runners import python
from agentcron.core.runners.command import config as command
from agentcron.core.runners.openai import config as openai
from agentcron.core.secrets.resolution import referenced_secrets
from agentcron.core.specs import ScheduleCreate, ScheduleUpdate
from agentcron.core.storage.models import Schedule
from agentcron.core.triggers import KIND_KEYS
from agentcron.testing.kit import SettableClock
from agentcron.web.api.schemas import ScheduleOut
from agentcron.web.cli import main as cli_main
from tests.conftest import app_client, issue_key
from tests.integration.engine_kit import fetch_schedule
from tests.integration.test_dashboard import ORIGIN, browser

API = "/api/v1/schedules"
OWNER = "local"  # a trusted owner: every runner type (core.policy)
SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
NOTIFY = [
    {
        "type": "webhook",
        "url": "https://hooks.example.com/agentcron",
        "secret": SECRET,
        "notify_on": ["failed", "timed_out"],
    },
    {
        "type": "email",
        "to": ["ops@example.com", "oncall@example.com"],
        "from": "agentcron@example.com",
        "smtp_url_env": "SMTP_URL",
        "notify_on": ["succeeded", "failed"],
    },
    {"type": "file", "path": "log/runs.jsonl", "mode": "replace", "notify_on": ["timed_out"]},
    # The same channels with their secrets stored apart (core.secrets), referred to by name.
    {
        "type": "webhook",
        "url": "https://hooks.example.com/stored",
        "secret": {"secret": "hook"},
        "notify_on": ["failed"],
    },
    {
        "type": "email",
        "to": ["ops@example.com"],
        "from": "agentcron@example.com",
        "smtp_url_secret": "smtp-url",
        "notify_on": ["timed_out"],
    },
]
# Every request field but the trigger and the runner, away from its default.
SETTINGS: dict[str, Any] = {
    "enabled": False,
    "mode": "persistent",
    "overlap": "buffer_one",
    "catchup": "latest",
    "catchup_window_seconds": 7200,
    "misfire_grace_seconds": 120,
    "timeout_seconds": 900,
    "max_attempts": 5,
    "notify": NOTIFY,
    "retention_days": 30,
    "pause_after_failures": 4,
    "max_runs": 50,
    "jitter_seconds": 15,
    "expect": {"not_empty": True, "matches": "^[A-Z]", "json_schema": {"type": "object"}},
}
# One per trigger kind, each with another runner type, and an openai runner whose key is a
# stored secret; between them every key of each.
LOADED: dict[str, dict[str, Any]] = {
    "cron-command": {
        "name": "campaign",
        "prompt": "Summarise the news.\n\nKeep it short.\n",
        "trigger": {
            "cron": "30 2 * * *",
            "timezone": "America/New_York",
            "dst_gap": "skip",
            "dst_repeat": "both",
            "start_at": "2020-01-01T00:00:00+00:00",
            "end_at": "2099-12-31T00:00:00+00:00",
        },
        "runner": {
            "type": "command",
            "argv": ["sh", "-c", "cat"],
            "env": {"AGENT_MODE": "campaign"},
            "kill_grace_seconds": 2.5,
        },
        **SETTINGS,
    },
    "every-python": {
        "name": "poller",
        # A textarea drops one newline right after its start tag: this one must survive.
        "prompt": "\nPoll the feed.",
        "trigger": {
            "every_seconds": 900,
            "start_at": "2030-01-01T00:00:00+00:00",
            "end_at": "2098-01-01T00:00:00+00:00",
        },
        "runner": {"type": "python", "target": "tests.agents_fixture:greet"},
        **SETTINGS,
    },
    "at-openai": {
        "name": "reminder",
        "prompt": "Remind me.",
        "trigger": {"at": "2097-06-01T12:00:00+00:00"},
        "runner": {
            "type": "openai",
            "base_url": "https://llm.example.com/v1",
            "model": "small",
            "api_key_env": "LLM_KEY",
            "system": "Be brief.",
            "temperature": 0.2,
            "max_tokens": 100,
            "private_endpoints": True,
        },
        **SETTINGS,
    },
    "cron-agent": {
        "name": "declared agent",
        "prompt": "Digest.",
        "trigger": {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"},
        "runner": {
            "type": "command",
            "agent": "digest",  # tests/agents.toml
            "params": {"topic": "ai news"},
            "env": {"STYLE": "terse"},
            "kill_grace_seconds": 4,
        },
        **SETTINGS,
    },
    "every-openai-secret": {
        "name": "stored key",
        "prompt": "Answer.",
        "trigger": {"every_seconds": 7200},
        "runner": {
            "type": "openai",
            "base_url": "https://llm.example.com/v1",
            "model": "small",
            "api_key_secret": "llm-key",
        },
        **SETTINGS,
    },
}
# The keys of each built-in runner type and notify channel type (a channel also has "type"
# and "notify_on").
RUNNER_FIELDS = {"command": command.FIELDS, "python": python.FIELDS, "openai": openai.FIELDS}
CHANNEL_FIELDS = {
    "webhook": webhook_channel.FIELDS,
    "email": email_channel.FIELDS,
    "file": file_channel.FIELDS,
}
# What the service sets, never a request: an edit of a field keeps these unless it says so.
SERVER_SET = frozenset(
    {
        *("id", "owner", "key", "description", "warnings", "created_at", "updated_at"),
        *("next_run", "paused_at", "paused_note", "scheduled_runs", "consecutive_failures"),
        *("last_run_at", "last_status", "last_error", "last_run_id"),
    }
)
# Columns the API does not show, and what it shows that no column holds (the trigger in words).
HIDDEN_COLUMNS = frozenset({"task_id", "deleted_at"})
SHOWN_ONLY = frozenset({"description"})
# What every edit moves: the time of the last change. Nothing else may change unless the
# edit names it.
EDITED = frozenset({"updated_at"})
# What a new timetable legitimately recomputes (core.schedules: next_run and the warnings;
# the description is the trigger in words).
RETIMED = frozenset({"next_run", "description", "warnings"})


def test_the_loaded_schedules_cover_every_field() -> None:
    request_fields = set(ScheduleCreate.model_fields)
    assert set(ScheduleUpdate.model_fields) == request_fields, (
        "PATCH names exactly the fields a create can set"
    )
    assert set(ScheduleOut.model_fields) == request_fields | SERVER_SET, (
        "every field a schedule shows is set by a request (LOADED) or by the service"
    )
    assert {column.key for column in Schedule.__table__.columns} == (
        request_fields | SERVER_SET - SHOWN_ONLY | HIDDEN_COLUMNS
    ), "every column is set by a request (LOADED), by the service, or not shown"
    for label, body in LOADED.items():
        for name, info in ScheduleCreate.model_fields.items():
            assert name in body, f"{label} does not set {name}: add it to LOADED"
            if not info.is_required():
                default = info.get_default(call_default_factory=True)
                assert body[name] != default, f"{label}: {name} is its default"
        ScheduleCreate.model_validate(body)

    triggers = [body["trigger"] for body in LOADED.values()]
    for kind, keys in KIND_KEYS.items():
        assert any(set(trigger) == keys for trigger in triggers if kind in trigger), (
            f"no loaded {kind!r} trigger sets all of {sorted(keys)}"
        )
    runners = [body["runner"] for body in LOADED.values()]
    for kind, keys in RUNNER_FIELDS.items():
        loaded = [set(runner) for runner in runners if runner["type"] == kind]
        assert loaded and set().union(*loaded) == keys, kind
    for kind, keys in CHANNEL_FIELDS.items():
        loaded = [set(channel) for channel in NOTIFY if channel["type"] == kind]
        assert loaded and set().union(*loaded) == keys | {"type", "notify_on"}, kind
    assert all(channel["notify_on"] != ["succeeded"] for channel in NOTIFY)
    assert {item for channel in NOTIFY for item in channel["notify_on"]} == set(NOTIFY_ON)


# -- what is stored ----------------------------------------------------------------------------


async def stored(app: FastAPI, api: httpx.AsyncClient, id: str) -> dict[str, dict[str, Any]]:
    """The schedule as the API shows it and as its row holds it (the row has the webhook
    secret unmasked, which the API never shows)."""
    response = await api.get(f"{API}/{id}")
    assert response.status_code == 200, response.text
    row = await fetch_schedule(app.state.db, uuid.UUID(id))
    columns = {column.key: getattr(row, column.key) for column in Schedule.__table__.columns}
    return {"api": response.json(), "row": columns}


def only_moved(
    before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], allowed: Set[str]
) -> None:
    """Fail naming every field outside ``allowed`` whose value moved, in the API document or
    the row, with its value before and after."""
    moved: dict[str, tuple[Any, Any]] = {}
    for view in ("api", "row"):
        for name in sorted(before[view].keys() | after[view].keys()):
            old, new = before[view].get(name), after[view].get(name)
            if name not in allowed and old != new:
                moved[f"{view}.{name}"] = (old, new)
    assert not moved, f"fields that moved (before, after):\n{pformat(moved, width=100)}"


@asynccontextmanager
async def clients(app: FastAPI) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """An API client and a signed-in dashboard browser, both as ``OWNER``."""
    key = await issue_key(app, OWNER)
    async with app_client(app, key) as api, browser(app, key) as http:
        yield api, http


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The conftest settings with an operator's key: LOADED refers to stored secrets."""
    key = SecretStr(Fernet.generate_key().decode())
    return settings.model_copy(update={"secrets_key": key})


async def store_secrets(api: httpx.AsyncClient, body: dict[str, Any]) -> None:
    """Store the secrets ``body`` refers to, so it can be saved."""
    for name in referenced_secrets(body["runner"], body["notify"]):
        stored = await api.put(f"/api/v1/secrets/{name}", json={"value": SECRET})
        assert stored.status_code == 200, stored.text


async def create(api: httpx.AsyncClient, body: dict[str, Any], *, note: bool = False) -> str:
    """A schedule made over the API, after storing the secrets it refers to; with ``note`` it
    is paused with a note too, so the note is a stored value an edit must keep."""
    await store_secrets(api, body)
    response = await api.post(API, json=body)
    assert response.status_code == 201, response.text
    id: str = response.json()["id"]
    if note:
        response = await api.post(f"{API}/{id}/pause", json={"note": "waiting for launch"})
        assert response.status_code == 200, response.text
    return id


def variants(body: dict[str, Any]) -> Iterator[tuple[dict[str, Any], bool]]:
    """``body`` as loaded (paused, with a note) and enabled: an enabled schedule has a
    ``next_run``, which an edit of another field must not move."""
    yield body, True
    yield {**body, "enabled": True}, False


# -- the dashboard, as a browser uses it -------------------------------------------------------


class _FormReader(HTMLParser):
    """The successful controls of the schedule form, as a browser would submit them."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[tuple[str, str]] = []
        self.textareas: set[str] = set()
        self._in_form = False
        self._text: list[str] = []  # of the open textarea or option
        self._textarea: str | None = None
        self._select: str | None = None
        self._options: list[tuple[str | None, bool]] = []  # (value, selected) of the select's

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        self._in_form |= tag == "form" and attr.get("id") == "schedule-form"
        name = attr.get("name")
        if not self._in_form:
            return
        if tag == "input" and name:
            kind = attr.get("type", "text")
            if kind in ("radio", "checkbox") and "checked" in attr:
                self.entries.append((name, attr.get("value") or "on"))
            elif kind not in ("radio", "checkbox", "submit", "button", "reset"):
                self.entries.append((name, attr.get("value") or ""))
        elif tag == "textarea" and name:
            self._textarea, self._text = name, []
        elif tag == "select" and name:
            self._select, self._options = name, []
        elif tag == "option" and self._select is not None:
            self._options.append((attr.get("value"), "selected" in attr))
            self._text = []

    def handle_data(self, data: str) -> None:
        self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        text = "".join(self._text)
        if tag == "form":
            self._in_form = False
        elif tag == "textarea" and self._textarea is not None:
            # HTML: a newline right after the start tag is not part of the value.
            self.entries.append((self._textarea, text.removeprefix("\n")))
            self.textareas.add(self._textarea)
            self._textarea = None
        elif tag == "option" and self._select is not None:
            value, selected = self._options.pop()
            self._options.append((text if value is None else value, selected))
        elif tag == "select" and self._select is not None:
            chosen = [value for value, selected in self._options if selected]
            self.entries.append((self._select, (chosen or [self._options[0][0]])[0] or ""))
            self._select = None


def _browser_line_breaks(value: str) -> str:
    # HTML form submission sends every line break of a textarea as CRLF.
    return value.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\r\n")


async def edit_in_dashboard(http: httpx.AsyncClient, id: str, **typed: str) -> httpx.Response:
    """Open the edit page, type ``typed`` into its inputs and save, as a browser does."""
    page = await http.get(f"/schedules/{id}/edit")
    assert page.status_code == 200, page.text
    reader = _FormReader()
    reader.feed(page.text)
    form = dict(reader.entries)
    assert len(form) == len(reader.entries), "a form input appears twice"
    missing = typed.keys() - form.keys()
    assert not missing, f"the form has no input {missing}"
    form.update(typed)
    posted = {
        name: _browser_line_breaks(value) if name in reader.textareas else value
        for name, value in form.items()
    }
    encoded = {"Content-Type": "application/x-www-form-urlencoded"}
    return await http.post(f"/schedules/{id}/edit", content=urlencode(posted), headers=encoded)


@pytest.mark.parametrize("path", ["dashboard", "patch"])
@pytest.mark.parametrize("body", LOADED.values(), ids=LOADED.keys())
async def test_a_rename_keeps_every_other_field(
    live_app: FastAPI, body: dict[str, Any], path: str
) -> None:
    async with clients(live_app) as (api, http):
        for variant, note in variants(body):
            id = await create(api, variant, note=note)
            before = await stored(live_app, api, id)
            if path == "dashboard":
                # Saved as it is, the form changes nothing.
                response = await edit_in_dashboard(http, id)
                assert response.headers["location"].endswith("?done=unchanged")
                only_moved(before, await stored(live_app, api, id), frozenset())
                response = await edit_in_dashboard(http, id, name="renamed")
                assert response.status_code == 303, response.text
                assert response.headers["location"].endswith("?done=updated")
            else:
                response = await api.patch(f"{API}/{id}", json={"name": "renamed"})
                assert response.status_code == 200, response.text
            after = await stored(live_app, api, id)
            assert after["api"]["name"] == "renamed"
            only_moved(before, after, EDITED | {"name"})


# One form input changed; what the stored schedule must then hold (the trigger and the runner:
# the stored one with only that key changed), and what else may move with it. A runner with
# env shows as JSON; switching to the one-argument-per-line input rewrites argv only, as the
# trigger inputs rewrite only their keys.
LATER = "2096-01-01T00:00:00+00:00"
ONE_INPUT = [
    (
        "cron-command",
        {"runner_kind": "command", "argv": "cat\n-n\n"},
        {"runner": {"argv": ["cat", "-n"]}},
        EDITED,
    ),
    ("cron-command", {"prompt": "Only this."}, {"prompt": "Only this."}, EDITED),
    ("cron-command", {"timeout_seconds": "60"}, {"timeout_seconds": 60}, EDITED | {"warnings"}),
    ("cron-command", {"cron": "0 9 * * 1-5"}, {"trigger": {"cron": "0 9 * * 1-5"}}, RETIMED),
    ("cron-command", {"timezone": "Asia/Tokyo"}, {"trigger": {"timezone": "Asia/Tokyo"}}, RETIMED),
    ("every-python", {"prompt": "Only this."}, {"prompt": "Only this."}, EDITED),
    ("every-python", {"every_seconds": "600"}, {"trigger": {"every_seconds": 600}}, RETIMED),
    ("at-openai", {"at": LATER}, {"trigger": {"at": LATER}}, RETIMED),
]


@pytest.mark.parametrize(
    ("label", "typed", "expected", "moves"),
    ONE_INPUT,
    ids=[f"{label}-{'-'.join(typed)}" for label, typed, _, _ in ONE_INPUT],
)
async def test_one_input_changed_in_the_dashboard_changes_only_its_field(
    live_app: FastAPI,
    label: str,
    typed: dict[str, str],
    expected: dict[str, Any],
    moves: frozenset[str],
) -> None:
    async with clients(live_app) as (api, http):
        id = await create(api, {**LOADED[label], "enabled": True})
        before = await stored(live_app, api, id)
        response = await edit_in_dashboard(http, id, **typed)
        assert response.status_code == 303, response.text
        after = await stored(live_app, api, id)
        for name, value in expected.items():
            if name in ("trigger", "runner"):
                value = {**before["api"][name], **value}
            assert after["api"][name] == value
            assert after["row"][name] == value
        only_moved(before, after, moves | EDITED | expected.keys())


async def test_a_new_trigger_kind_keeps_the_stored_keys_that_apply_to_it(live_app: FastAPI) -> None:
    # Bounds apply to a cron and an interval alike and are kept across the switch; the DST
    # policies apply only to a cron and a one-shot takes nothing but its time.
    trigger = LOADED["cron-command"]["trigger"]
    async with clients(live_app) as (api, http):
        id = await create(api, LOADED["cron-command"])
        response = await edit_in_dashboard(http, id, trigger_kind="every", every_seconds="600")
        assert response.status_code == 303, response.text
        kept = {"every_seconds": 600, "start_at": trigger["start_at"], "end_at": trigger["end_at"]}
        assert (await stored(live_app, api, id))["row"]["trigger"] == kept
        response = await edit_in_dashboard(http, id, trigger_kind="at", at=LATER)
        assert response.status_code == 303, response.text
        assert (await stored(live_app, api, id))["row"]["trigger"] == {"at": LATER}


# -- the API -----------------------------------------------------------------------------------


@pytest.mark.parametrize("body", LOADED.values(), ids=LOADED.keys())
async def test_putting_an_unchanged_record_by_key_later_changes_nothing(
    live_app: FastAPI, body: dict[str, Any]
) -> None:
    # A host puts its whole record again (at every start, or more often than the schedule
    # fires): nothing may move, not updated_at, not next_run, not an interval's phase, which
    # its start_at fixed when it was first put (every-openai-secret gives none).
    clock = SettableClock()
    live_app.state.schedules.context.clock = clock
    async with clients(live_app) as (api, _):
        await store_secrets(api, body)
        for variant, _note in variants(body):
            key = f"record:{variant['enabled']}"
            created = await api.put(f"{API}/by-key/{key}", json=variant)
            assert created.status_code == 201, created.text
            before = await stored(live_app, api, created.json()["id"])
            clock.jump_to(clock() + timedelta(minutes=50))
            again = await api.put(f"{API}/by-key/{key}", json=variant)
            assert again.status_code == 200, again.text
            only_moved(before, await stored(live_app, api, created.json()["id"]), frozenset())


# -- the command line --------------------------------------------------------------------------


class _AppTransport(httpx.BaseTransport):
    """The command line's (synchronous) requests, answered by ``app`` on the test's event
    loop: the command runs in a worker thread while the loop serves it."""

    def __init__(self, app: FastAPI, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.loop = loop

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        future = asyncio.run_coroutine_threadsafe(self._answer(request), self.loop)
        return future.result(timeout=60)

    async def _answer(self, request: httpx.Request) -> httpx.Response:
        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(transport=transport) as http:
            answer = await http.request(
                request.method, request.url, headers=request.headers, content=request.read()
            )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


RunCli = Callable[..., Awaitable[None]]


@pytest.fixture
async def run_cli(
    live_app: FastAPI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> RunCli:
    """``await run_cli(key, *args)``: ``agentcron ARGS --url ... --key KEY --json`` run
    in-process against ``live_app``; its exit code must be 0."""
    transport = _AppTransport(live_app, asyncio.get_running_loop())
    monkeypatch.setattr(httpx, "Client", functools.partial(httpx.Client, transport=transport))

    async def run(key: str, *args: str) -> None:
        argv = [*args, "--url", ORIGIN, "--key", key, "--json"]
        code = await asyncio.to_thread(cli_main, argv)
        assert code == 0, (argv, capsys.readouterr())

    return run


@pytest.mark.parametrize("body", LOADED.values(), ids=LOADED.keys())
async def test_the_command_lines_resume_and_pause_keep_every_other_field(
    live_app: FastAPI, body: dict[str, Any], run_cli: RunCli
) -> None:
    # `schedules resume` and `schedules pause` are the command line's only edits of an
    # existing schedule (it has no `edit`): each may change the state it names and nothing
    # else. `skip` and `run` act on a schedule's runs and must leave the schedule as it is.
    state = frozenset({"enabled", "paused_at", "paused_note", "next_run"})
    key = await issue_key(live_app, OWNER)
    async with app_client(live_app, key) as api:
        id = await create(api, body, note=True)
        before = await stored(live_app, api, id)

        await run_cli(key, "schedules", "resume", id)
        resumed = await stored(live_app, api, id)
        assert resumed["api"]["enabled"] is True and resumed["api"]["paused_at"] is None
        assert resumed["api"]["paused_note"] is None and resumed["api"]["next_run"]
        only_moved(before, resumed, EDITED | state)

        await run_cli(key, "schedules", "skip", id, resumed["api"]["next_run"])
        await run_cli(key, "schedules", "run", id)
        only_moved(resumed, await stored(live_app, api, id), frozenset())

        await run_cli(key, "schedules", "pause", id, "--note", "again")
        paused = await stored(live_app, api, id)
        assert paused["api"]["enabled"] is False and paused["api"]["paused_note"] == "again"
        assert paused["api"]["next_run"] is None and paused["api"]["paused_at"] is not None
        only_moved(resumed, paused, EDITED | state)
