"""Hostile input through the real app (docs/api.md, README "Bad input"): on SQLite and
PostgreSQL where a database could answer differently (NUL characters, metacharacters, Unicode,
the largest prompt, numbers, instants, cursors, ids), on SQLite alone what the app refuses
before any storage (oversized fields, nesting, bodies that are not objects, content types,
zones, hang-ups).

Every bad request must get a 4xx with the documented error body
``{"error": {"type", "message", "field"}}`` (the field named where the error is about one), never
a 500 and never driver text, and must leave nothing behind: the tables are counted directly
after each test. Inputs that are valid however odd (SQL metacharacters, any Unicode) must be
stored verbatim and read back unchanged.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from datetime import datetime
from itertools import pairwise
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from agentcron.core.storage.database import Database
from agentcron.core.storage.models import Delivery, Run, Schedule, Task
from tests.integration.engine_kit import assert_error
from tests.integration.test_api_doc import http_scope, openapi
from tests.integration.test_auth import OWNED
from tests.integration.test_dashboard import ORIGIN, browser
from tests.integration.test_schedules_api import body, create

API = "/api/v1/schedules"
JSON = {"content-type": "application/json"}
PREVIEW = f"{API}/preview"


async def rows(db: Database) -> dict[str, int]:
    """Row counts of every table a request could write (deleted schedules included)."""
    async with db.session(write=False) as session:
        return {
            model.__tablename__: await session.scalar(select(func.count()).select_from(model)) or 0
            for model in (Schedule, Run, Task, Delivery)
        }


EMPTY = {"schedules": 0, "runs": 0, "tasks": 0, "deliveries": 0}
ONE_SCHEDULE = {**EMPTY, "schedules": 1}


async def left_alone(client: httpx.AsyncClient, db: Database, schedule: dict[str, Any]) -> None:
    """Nothing was written: the one schedule the test made is all there is, unchanged."""
    assert await rows(db) == ONE_SCHEDULE
    got = await client.get(f"{API}/{schedule['id']}")
    assert got.status_code == 200
    assert got.json() == schedule


# -- Size -------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"])  # the app refuses it before any storage
async def test_one_megabyte_of_any_field_is_refused(
    client: httpx.AsyncClient, db: Database
) -> None:
    existing = await create(client)
    megabyte = "x" * 1_000_000
    emoji_megabyte = "\U0001f916" * 250_000  # 1 MB of UTF-8 in 4-byte characters
    for prompt in (megabyte, emoji_megabyte):
        assert_error(await client.post(API, json=body(prompt=prompt)), 422, field="prompt")
        response = await client.patch(f"{API}/{existing['id']}", json={"prompt": prompt})
        assert_error(response, 422, field="prompt")
    assert_error(await client.post(API, json=body(name=megabyte)), 422, field="name")
    response = await client.post(f"{API}/{existing['id']}/pause", json={"note": megabyte})
    assert_error(response, 422, field="note")
    # These are copied into every run's payload: a megabyte here would be a megabyte per run.
    oversized = {
        "runner": {"type": "command", "argv": ["cat", megabyte]},
        "notify": [{"type": "file", "path": "out.jsonl", "notify_on": ["succeeded"] * 40_000}],
        "trigger": {"cron": "0 8 * * *", "timezone": "Europe/London", "x": megabyte},
    }
    for field, value in oversized.items():
        refused = assert_error(await client.post(API, json=body(**{field: value})), 422)["error"]
        assert refused["field"] == field and "bytes as JSON" in refused["message"], refused
        response = await client.patch(f"{API}/{existing['id']}", json={field: value})
        assert_error(response, 422, field=field)
    env = {"type": "command", "argv": ["cat"], "env": {f"K{i}": "v" * 100 for i in range(1000)}}
    assert_error(await client.post(API, json=body(runner=env)), 422, field="runner")
    await left_alone(client, db, existing)


# -- Structure: nesting, non-objects, content types, empty bodies -----------------------------


def nested(depth: int, kind: str) -> str:
    return "[" * depth + "]" * depth if kind == "list" else '{"a":' * depth + "1" + "}" * depth


def with_value(key: str, raw: str) -> bytes:
    """A valid create body whose ``key`` is the raw JSON text ``raw``."""
    data = body()
    data[key] = "@@"
    return json.dumps(data).replace('"@@"', raw).encode()


def deep_requests(some_id: str, deep: str) -> list[tuple[str, str, bytes, str]]:
    """(method, path, body, field) of requests that carry the JSON text ``deep`` as a value."""
    runner = f'{{"type": "command", "argv": ["cat"], "env": {deep}}}'
    keys = ("name", "trigger", "runner", "notify", "max_attempts", "unknown_key")
    return [
        ("PATCH", f"{API}/{some_id}", f'{{"runner": {runner}}}'.encode(), "runner.env"),
        ("POST", f"{API}/preview", f'{{"trigger": {{"cron": {deep}}}}}'.encode(), "trigger.cron"),
        ("POST", f"{API}/{some_id}/pause", f'{{"note": {deep}}}'.encode(), "note"),
    ] + [("POST", API, with_value(key, deep), key) for key in keys]


# Nested 100 or 900 deep, the parser takes a value and it is refused naming its field; 10,000
# deep is deeper than the parser goes, and the body is a 400.
@pytest.mark.parametrize("depth", [100, 900, 10_000])
async def test_nested_values_are_refused_by_field_or_as_too_deep(
    client: httpx.AsyncClient, db: Database, depth: int
) -> None:
    existing = await create(client)
    for kind in ("list", "dict"):
        for method, path, content, field in deep_requests(existing["id"], nested(depth, kind)):
            response = await client.request(method, path, content=content, headers=JSON)
            if depth == 10_000:
                assert_error(response, 400, "ValidationError")
            else:
                named = assert_error(response, 422)["error"]["field"]
                assert named == field or named.startswith(f"{field}."), (method, path, named)
    await left_alone(client, db, existing)


NOT_AN_OBJECT = [
    *(b"", b"[]", b"null", b"42", b'"text"', b"true"),  # nothing, or JSON that is no object
    *(b"{", b'{"name": "x",', b"\xff\xfe"),  # no JSON: cut short, or not UTF-8
    json.dumps([body(), body(name="second")]).encode(),  # an array of valid schedules
    nested(10_000, "list").encode(),  # deeper than the parser goes
    nested(10_000, "dict").encode(),
]


@pytest.mark.parametrize("backend", ["sqlite"])  # the app refuses it before any storage
async def test_body_that_is_not_a_json_object_or_is_too_deep_is_a_400(
    client: httpx.AsyncClient, db: Database, subtests: pytest.Subtests
) -> None:
    existing = await create(client)
    for content in NOT_AN_OBJECT:
        for method, path in (
            ("POST", API),
            ("POST", f"{API}/preview"),
            ("PATCH", f"{API}/{existing['id']}"),
        ):
            with subtests.test(content=content, method=method, path=path):
                response = await client.request(method, path, content=content, headers=JSON)
                assert_error(response, 400, "ValidationError")
        # Pause takes an optional body: none (or null) is fine, anything but an object is not.
        if content not in (b"", b"null"):
            with subtests.test(content=content, method="POST", path="pause"):
                response = await client.post(
                    f"{API}/{existing['id']}/pause", content=content, headers=JSON
                )
                assert_error(response, 400)
    await left_alone(client, db, existing)


WRONG_TYPES = [
    *("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=xyz"),
    *("application/xml", "image/png", "application/jsonx", None),
]


def body_operations(some_id: str) -> list[tuple[str, str]]:
    """Every operation of the OpenAPI document that takes a request body, its path ids filled."""
    return [
        (method.upper(), re.sub(r"\{[^}]+\}", some_id, path))
        for path, operations in openapi()["paths"].items()
        for method, operation in operations.items()
        if "requestBody" in operation
    ]


@pytest.mark.parametrize("backend", ["sqlite"])  # the app refuses it before any storage
async def test_a_body_without_a_json_content_type_is_a_415_naming_it(
    client: httpx.AsyncClient, db: Database, subtests: pytest.Subtests
) -> None:
    existing = await create(client)
    operations = body_operations(existing["id"])
    assert len(operations) >= 10  # create, preview, by-key, update, pause, resume, ... secrets
    valid = json.dumps(body(name="smuggled")).encode()  # valid JSON, refused all the same
    for content_type in WRONG_TYPES:
        headers = {} if content_type is None else {"content-type": content_type}
        said = (content_type or "none").split(";")[0]
        for method, path in operations:
            with subtests.test(content_type=content_type, method=method, path=path):
                response = await client.request(method, path, content=valid, headers=headers)
                error = assert_error(response, 415, "ValidationError")["error"]
                assert error["message"] == (
                    "the request body must be JSON sent with Content-Type: application/json "
                    f"(the Content-Type was {said})"
                )
                assert error["field"] is None
    await left_alone(client, db, existing)


# -- Content: NUL bytes, SQL metacharacters, Unicode ------------------------------------------

NUL_CREATE = [
    ({"name": "a\x00b"}, "name"),
    ({"prompt": "\x00"}, "prompt"),
    ({"trigger": {"cron": "0 8 * * *", "timezone": "Europe/\x00London"}}, "trigger.timezone"),
    ({"trigger": {"cron": "0 8 * * *\x00"}}, "trigger.cron"),
    (
        {"trigger": {"every_seconds": 60, "start_at": "2030-01-01T00:00:00Z\x00"}},
        "trigger.start_at",
    ),
    ({"runner": {"type": "command", "argv": ["cat", "a\x00"]}}, "runner.argv.1"),
    ({"runner": {"type": "command", "argv": ["cat"], "env": {"K\x00": "v"}}}, "runner.env"),
    ({"runner": {"type": "command", "argv": ["cat"], "env": {"K": "v\x00"}}}, "runner.env.K"),
    ({"notify": [{"type": "file", "path": "log\x00.txt"}]}, "notify.0.path"),
]


async def test_nul_characters_are_refused_naming_the_field(
    client: httpx.AsyncClient, db: Database, subtests: pytest.Subtests
) -> None:
    for overrides, field in NUL_CREATE:
        with subtests.test(field=field):
            assert_error(await client.post(API, json=body(**overrides)), 422, field=field)
    existing = await create(client)
    sid = existing["id"]
    zone = {"cron": "0 8 * * *", "timezone": "\x00"}
    after = {"trigger": {"cron": "* * * * *"}, "after": "2030-01-01\x00"}
    for method, path, sent, field in [
        ("PATCH", f"{API}/{sid}", {"json": {"name": "\x00"}}, "name"),
        ("PATCH", f"{API}/{sid}", {"json": {"trigger": {"cron": "\x00"}}}, "trigger.cron"),
        ("POST", f"{API}/{sid}/pause", {"json": {"note": "\x00"}}, "note"),
        ("POST", f"{API}/preview", {"json": {"trigger": zone}}, "trigger.timezone"),
        ("POST", f"{API}/preview", {"json": after}, "after"),
        ("GET", API, {"params": {"cursor": "\x00"}}, "cursor"),
        ("GET", API, {"params": {"limit": "\x00"}}, "limit"),
    ]:
        assert_error(await client.request(method, path, **sent), 422, field=field)
    assert_error(await client.get(f"{API}/%00"), 404)
    assert_error(await client.get(f"{API}/{sid}%00"), 404)
    await left_alone(client, db, existing)


SQL_METACHARACTERS = [
    "'; DROP TABLE schedules; --",
    "Robert'); DELETE FROM runs WHERE ('1'='1",
    '" OR ""="',
    "' OR 1=1 --",
    "%_%\\%",
    "$1 $$ :name ? %s %(name)s {0}",
    "/* comment */ -- ; \\x00 \\' \\\\",
    "E'\\\\x41' || chr(0) || U&'\\0041'",
    '`backtick` [bracket] "quote"',
]


UNICODE_NAMES = [
    "日本語のスケジュール",
    "morning \U0001f305 digest \U0001f916",
    "עברית \u202eRTL override\u202c",
    "e\u0301 (combining) vs \u00e9 (precomposed)",
    "zero\u200bwidth\u200djoiner\ufeff",
    "line\u2028separator\u2029paragraph",
    "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466" * 28,  # 196 code points
    "\U0001f916" * 200,  # the longest name, 800 bytes of UTF-8
    "\ud7ff\ue000\uffff",  # edges of the non-surrogate BMP
]


async def test_metacharacters_and_any_unicode_are_stored_verbatim(
    client: httpx.AsyncClient, db: Database
) -> None:
    texts = SQL_METACHARACTERS + UNICODE_NAMES
    created = [await create(client, name=text, prompt=text * 3) for text in texts]
    for text, schedule in zip(texts, created, strict=True):
        assert schedule["name"] == text
        got = (await client.get(f"{API}/{schedule['id']}")).json()
        # No normalisation, no truncation.
        assert (got["name"], got["prompt"]) == (text, text * 3)
    listed = (await client.get(API, params={"limit": 500})).json()["items"]
    assert sorted(item["name"] for item in listed) == sorted(texts)
    # The limit counts characters: 100,000 four-byte characters (400 KB) fit, exactly.
    prompt = ("\U0001f916a\u00e9\u4e2d" * 25_000)[:100_000]
    largest = await create(client, prompt=prompt)
    assert (await client.get(f"{API}/{largest['id']}")).json()["prompt"] == prompt
    # Renaming to one works the same; as an id, a cursor, a zone or a cron it is only refused.
    first = created[0]["id"]
    patched = await client.patch(f"{API}/{first}", json={"name": SQL_METACHARACTERS[1]})
    assert patched.status_code == 200 and patched.json()["name"] == SQL_METACHARACTERS[1]
    for text in SQL_METACHARACTERS:
        assert_error(await client.get(API, params={"cursor": text}), 422, field="cursor")
        zone = {"cron": "0 8 * * *", "timezone": text}
        assert_error(await client.post(API, json=body(trigger=zone)), 422, field="trigger.timezone")
        cron = {"cron": text}
        assert_error(await client.post(API, json=body(trigger=cron)), 422, field="trigger.cron")
        assert_error(await client.get(f"/api/v1/runs/{text}"), 404)
    assert_error(await client.post(API, json=body(name="\U0001f916" * 201)), 422, field="name")
    # A lone surrogate is not a character: refused, not stored as mojibake.
    raw = with_value("name", '"bad \\ud800 surrogate"')
    assert_error(await client.post(API, content=raw, headers=JSON), 422, field="name")
    assert await rows(db) == {**EMPTY, "schedules": len(texts) + 1}


# -- Numbers, pagination, ids -----------------------------------------------------------------

BAD_NUMBERS = ["1e400", "-1e400", "NaN", "Infinity", "1.0", "1.5", "true", "null", "10" * 20]


async def test_hostile_numbers_are_refused_naming_the_field(
    client: httpx.AsyncClient, db: Database
) -> None:
    existing = await create(client, runner={"type": "handler", "data": {"n": 1}})
    for raw in BAD_NUMBERS:
        for key in ("max_attempts", "timeout_seconds", "catchup_window_seconds"):
            response = await client.post(API, content=with_value(key, raw), headers=JSON)
            assert_error(response, 422, field=key)
        trigger = json.dumps(body(trigger="@@")).replace('"@@"', f'{{"every_seconds": {raw}}}')
        response = await client.post(API, content=trigger.encode(), headers=JSON)
        assert_error(response, 422, field="trigger.every_seconds")
        preview = f'{{"trigger": {{"cron": "* * * * *"}}, "count": {raw}}}'
        response = await client.post(f"{API}/preview", content=preview.encode(), headers=JSON)
        assert_error(response, 422, field="count")
    # Python's parser takes NaN and Infinity; PostgreSQL's JSON refuses them, so in a handler's
    # data they are refused where they are given, as they would be on any database.
    for raw in ("NaN", "Infinity", "-Infinity"):
        runner = f'{{"type": "handler", "data": {{"n": 1, "deep": [{{"x": {raw}}}]}}}}'
        response = await client.post(API, content=with_value("runner", runner), headers=JSON)
        assert_error(response, 422, field="runner.data")
        patch = f'{{"runner": {runner}}}'.encode()
        response = await client.patch(f"{API}/{existing['id']}", content=patch, headers=JSON)
        assert_error(response, 422, field="runner.data")
    await left_alone(client, db, existing)


EXTREME_INSTANTS = [
    "0001-01-01T00:00:00+14:00",  # before year 1 in UTC
    "0001-01-01T00:00:00-14:00",
    "0001-01-01T00:00:00+00:00",
    "9999-12-31T23:59:59-14:00",  # after year 9999 in UTC
    "9999-12-31T23:59:59+14:00",
    "9999-12-31T23:59:59.999999+00:00",
]


async def test_instants_at_the_ends_of_time_never_500(
    client: httpx.AsyncClient, db: Database, subtests: pytest.Subtests
) -> None:
    """Out-of-range instants are refused naming the field; in-range ones work."""
    stored = 0
    for instant in EXTREME_INSTANTS:
        for trigger, field in (
            ({"every_seconds": 60, "start_at": instant}, "trigger.start_at"),
            ({"at": instant}, "trigger.at"),
        ):
            with subtests.test(trigger=trigger):
                response = await client.post(API, json=body(trigger=trigger))
                if response.status_code == 201:
                    stored += 1
                else:
                    assert_error(response, 422, field=field)
                response = await client.post(PREVIEW, json={"trigger": trigger, "count": 3})
                if response.status_code != 200:
                    assert_error(response, 422, field=field)
        for trigger in (
            {"cron": "* * * * *", "timezone": "Pacific/Kiritimati"},
            {"cron": "0 0 29 2 1", "timezone": "Etc/GMT+12"},
            {"every_seconds": 5, "start_at": "2025-01-01T00:00:00Z"},
            {"at": "2999-01-01T00:00:00Z"},
        ):
            with subtests.test(after=instant, trigger=trigger):
                sent = {"trigger": trigger, "count": 1000, "after": instant}
                response = await client.post(PREVIEW, json=sent)
                if response.status_code == 200:
                    due = [datetime.fromisoformat(d) for d in response.json()["next"]]
                    assert all(a < b for a, b in pairwise(due))
                    if due:
                        assert due[0] > datetime.fromisoformat(instant)
                else:
                    assert_error(response, 422, field="after")
    assert await rows(db) == {**EMPTY, "schedules": stored}


BAD_LIMITS: list[Any] = [10**12, -1, 0, 501, 10**100, "abc", "1.5", "1e3", "", "0x10", " ", "5 5"]


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


BAD_CURSORS = [
    "",
    "abc",
    "x" * 501,
    "\U0001f916",
    _b64('["2025-01-01T00:00:00", "00000000-0000-0000-0000-000000000000"]'),  # naive
    _b64('["2025-01-01T00:00:00+00:00", "not-a-uuid"]'),
    _b64('["2025-01-01T00:00:00+00:00"]'),
    _b64('{"created": "2025-01-01T00:00:00+00:00"}'),
    _b64("[1, 2]"),
    _b64("null"),
    _b64("[" * 5_000),
]


async def test_hostile_pagination_is_refused_naming_the_field(
    client: httpx.AsyncClient, db: Database
) -> None:
    existing = await create(client)
    for path in (API, f"{API}/{existing['id']}/runs"):
        for limit in BAD_LIMITS:
            assert_error(await client.get(path, params={"limit": limit}), 422, field="limit")
        for cursor in BAD_CURSORS:
            # A malformed query parameter, as a limit out of range is: not a refused schedule.
            response = await client.get(path, params={"cursor": cursor})
            error = assert_error(response, 422, "ValidationError", field="cursor")["error"]
            assert error["message"].startswith("cursor: "), error
        assert (await client.get(path, params={"limit": 500})).status_code == 200
    await left_alone(client, db, existing)


UNKNOWN_ID = str(uuid.uuid4())
BAD_IDS = [
    # Numbers, and text that is no UUID.
    *("-1", "0", "1.5", "-0.0", "1e400", "9" * 400, "NaN"),
    *("not-a-uuid", "' OR '1'='1", "a" * 10_000),
    # UUIDs of nothing here, in each spelling a UUID parser may take.
    *("00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff", UNKNOWN_ID),
    *(str(uuid.uuid4()).upper(), "{" + str(uuid.uuid4()) + "}", "urn:uuid:" + str(uuid.uuid4())),
    uuid.uuid4().hex,
    # Escaped bytes (NUL, an emoji, a right-to-left override), and words of other routes.
    *("%00", "%F0%9F%A4%96", "%E2%80%AE", "preview", "..", "%2E%2E%2Fruns"),
]


# Ids a person could mistype or copy from elsewhere: the 404 names them.
NAMED_IN_THE_404 = ("not-a-uuid", "1.5", "00000000-0000-0000-0000-000000000000", UNKNOWN_ID)


def id_routes(some_id: str) -> list[tuple[str, str, Any]]:
    """(method, path, body) of every endpoint that names one object (test_auth's table), with
    ``some_id`` for its id."""
    ids = dict.fromkeys(("schedule_id", "run_id", "task_id"), some_id)
    return [(method, path.format(**ids), sent) for method, path, sent, _ok in OWNED]


async def test_bad_ids_in_every_path_are_404(client: httpx.AsyncClient, db: Database) -> None:
    existing = await create(client)
    for bad in BAD_IDS:
        for method, path, sent in id_routes(bad):
            response = await client.request(method, path, json=sent)
            if response.status_code == 405:  # ".." can resolve onto another route
                assert bad in ("..", "%2E%2E%2Fruns"), (method, path)
                continue
            error = assert_error(response, (404, 422))["error"]
            assert error["type"] in ("NotFound", "ValidationError"), (method, path, error)
            if bad in NAMED_IN_THE_404:
                assert (response.status_code, error["type"]) == (404, "NotFound"), (method, path)
                assert bad in error["message"], (method, path, error)
    await left_alone(client, db, existing)
    # An id of another kind: a run's on the schedule paths, a schedule's on the others.
    run = await client.post(f"{API}/{existing['id']}/run")
    assert run.status_code == 202
    before = await rows(db)
    routes = [route for route in id_routes(run.json()["id"]) if route[1].startswith(API)]
    routes += [route for route in id_routes(existing["id"]) if not route[1].startswith(API)]
    for method, path, sent in routes:
        assert_error(await client.request(method, path, json=sent), 404, "NotFound")
    assert await rows(db) == before


async def _send_and_hang_up(app: Any, path: str, headers: dict[str, str]) -> int:
    """Send half a body to ``app`` over raw ASGI, then disconnect: what a browser does when it
    aborts a superseded request. Returns the status the app answered (nobody would read it)."""
    chunks: list[dict[str, Any]] = [
        {"type": "http.request", "body": b'{"name": "half', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(http_scope("POST", path, headers), receive, send)
    starts = [m for m in sent if m["type"] == "http.response.start"]
    return int(starts[0]["status"]) if starts else 0


@pytest.mark.parametrize("backend", ["sqlite"])  # the app refuses it before any storage
async def test_a_client_that_hangs_up_mid_body_is_no_error_and_writes_nothing(
    client: httpx.AsyncClient, live_app: Any, db: Database
) -> None:
    from structlog.testing import capture_logs

    key = client.headers["authorization"]
    # The dashboard's preview is signed in by cookie: take one from the sign-in form.
    async with browser(live_app, key.removeprefix("Bearer ")) as web:
        cookie = "; ".join(f"{name}={value}" for name, value in web.cookies.items())
    form = {"cookie": cookie, "content-type": "application/x-www-form-urlencoded"}
    posts = [
        (API, {"authorization": key, **JSON}),
        ("/ui/preview", {**form, "origin": ORIGIN, "host": "agentcron"}),
    ]
    with capture_logs() as logs:
        statuses = [await _send_and_hang_up(live_app, path, h) for path, h in posts]
    assert all(status != 500 for status in statuses), statuses
    events = [entry["event"] for entry in logs]
    assert "unhandled_error" not in events, logs
    assert await rows(db) == EMPTY
