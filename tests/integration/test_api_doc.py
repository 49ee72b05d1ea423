"""docs/api.md against the app's own OpenAPI document, so the reference cannot drift.

The app is built in-process (no server, no database: ``app.openapi()`` needs neither) and its
OpenAPI document is compared with the page. The page follows two conventions, both about
Markdown headings (lines inside ``` fences are not headings):

- **An endpoint** is a heading whose whole text is ``METHOD /path`` in backticks, the path
  exactly as the OpenAPI document spells it: ``#### `POST /api/v1/schedules/{schedule_id}/run```.
  Its section (up to the next heading of the same or a higher level) must mention each 2xx
  status the operation declares, each query parameter as `` `name` ``, and each schema of its
  request body and 2xx answers as `` `SchemaName` `` (a link such as [`RunOut`](#runout) counts).
- **A schema** of ``components.schemas`` is a heading whose whole text is its name in
  backticks: ``### `ScheduleOut```. Its section must hold a table row for each property, the
  property's name in backticks in the first cell and a non-empty last cell (its meaning):
  ``| `next_run` | datetime or `null` | the next due time ... |``.

Both directions are checked: whatever the app has must be on the page, and every endpoint or
schema heading, and every field row under a schema heading, must name something the app has
(an endpoint the app serves outside the OpenAPI document, such as ``GET /metrics``, counts).
Each test fails listing everything missing or stale, not only the first.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.routing import Match

from agentcron.core.config import Settings
from agentcron.web.app import create_app

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ENDPOINT = re.compile(r"^`([A-Z]+) (/\S*)`$")
_SCHEMA = re.compile(r"^`([A-Z][A-Za-z0-9_]*)`$")
_FIELD_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass
class Section:
    heading: str
    line: int  # 1-based line of the heading
    body: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.body)


@dataclass
class Page:
    endpoints: dict[tuple[str, str], Section]
    schemas: dict[str, Section]
    duplicates: list[str]


SETTINGS = Settings(
    database_url="sqlite+aiosqlite:///:memory:", disable_scheduler=True, log_format="console"
)
_PARAMETER = re.compile(r"\{[^}/]*\}")


@cache
def app() -> FastAPI:
    """The app as ``agentcron serve`` builds it; its lifespan (the database) is never entered."""
    return create_app(SETTINGS)


@cache
def openapi() -> dict[str, Any]:
    document: dict[str, Any] = app().openapi()
    return document


def served(method: str, path: str) -> bool:
    """Whether the app routes ``method path`` to an endpoint (routes left out of the OpenAPI
    document, such as ``/metrics``, included); path parameters are filled with ``x``."""
    scope = http_scope(method, _PARAMETER.sub("x", path))
    return any(route.matches(scope)[0] == Match.FULL for route in app().router.routes)


def http_scope(method: str, path: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """The ASGI scope of a request for ``path`` (no query string), as a server passes it."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }


def parse(text: str) -> Page:
    """The endpoint and schema sections of ``text`` (see the module docstring)."""
    headings: list[tuple[int, int, str]] = []  # (line index, level, text)
    lines = text.splitlines()
    fenced = False
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            headings.append((index, len(match.group(1)), match.group(2)))
    page = Page({}, {}, [])
    for position, (index, level, title) in enumerate(headings):
        later = (at for at, later_level, _ in headings[position + 1 :] if later_level <= level)
        end = next(later, len(lines))
        section = Section(title, index + 1, lines[index + 1 : end])
        if endpoint := _ENDPOINT.match(title):
            key = (endpoint.group(1), endpoint.group(2))
            if key in page.endpoints:
                page.duplicates.append(title)
            page.endpoints[key] = section
        elif schema := _SCHEMA.match(title):
            if schema.group(1) in page.schemas:
                page.duplicates.append(title)
            page.schemas[schema.group(1)] = section
    return page


@cache
def page() -> Page:
    return parse(DOC.read_text(encoding="utf-8"))


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    """(METHOD, path, operation) of every operation of the OpenAPI document."""
    return [
        (method.upper(), path, operation)
        for path, item in openapi()["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def schema_refs(node: Any) -> set[str]:
    """Names of the component schemas ``node`` refers to directly (not through them)."""
    return set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(node)))


def field_rows(section: Section) -> dict[str, list[str]]:
    """The table rows of ``section`` whose first cell is a name in backticks, by that name."""
    rows: dict[str, list[str]] = {}
    for line in section.body:
        match = _FIELD_ROW.match(line.strip())
        if match:
            cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
            rows[match.group(1)] = cells
    return rows


def fail_listing(problems: list[str], what: str) -> None:
    assert not problems, f"docs/api.md: {what}:\n  " + "\n  ".join(problems)


def test_every_operation_has_a_section_naming_its_statuses_parameters_and_schemas() -> None:
    documented = page().endpoints
    problems: list[str] = []
    for method, path, operation in operations():
        section = documented.get((method, path))
        if section is None:
            problems.append(f"`{method} {path}` ({operation.get('summary', '')}): no heading")
            continue
        text = section.text
        where = f"`{method} {path}` (line {section.line})"
        successes = {code: it for code, it in operation["responses"].items() if code[0] == "2"}
        problems += [
            f"{where}: status {code} not mentioned"
            for code in successes
            if not re.search(rf"\b{code}\b", text)
        ]
        problems += [
            f"{where}: query parameter `{parameter['name']}` not mentioned"
            for parameter in operation.get("parameters", [])
            if parameter["in"] == "query" and f"`{parameter['name']}`" not in text
        ]
        shapes = schema_refs(operation.get("requestBody", {})) | schema_refs(successes)
        problems += [
            f"{where}: schema `{name}` not mentioned"
            for name in sorted(shapes)
            if f"`{name}`" not in text
        ]
    fail_listing(
        problems, "operations without a `METHOD /path` heading, or missing what they declare"
    )


def test_every_schema_property_has_a_row_in_its_schema_section() -> None:
    documented = page().schemas
    problems: list[str] = []
    for name, schema in openapi()["components"]["schemas"].items():
        section = documented.get(name)
        if section is None:
            problems.append(f"schema `{name}`: no heading ### `{name}`")
            continue
        rows = field_rows(section)
        for prop in schema.get("properties", {}):
            cells = rows.get(prop)
            if cells is None:
                problems.append(f"schema `{name}` (line {section.line}): no row for `{prop}`")
            elif len(cells) < 2 or not cells[-1]:
                problems.append(f"schema `{name}` (line {section.line}): `{prop}` has no meaning")
    fail_listing(problems, "schema properties of the OpenAPI document not documented")


def test_nothing_on_the_page_is_stale() -> None:
    """Every endpoint heading is served by the app, every schema heading is a schema of the
    OpenAPI document, and every field row under it is one of that schema's properties."""
    current = page()
    schemas = openapi()["components"]["schemas"]
    problems = [f"heading `{title}` appears more than once" for title in current.duplicates]
    declared = {(method, _PARAMETER.sub("{}", path)): path for method, path, _ in operations()}
    for (method, path), section in current.endpoints.items():
        spelled = declared.get((method, _PARAMETER.sub("{}", path)))
        if spelled == path:
            continue
        if spelled is not None:
            problems.append(f"line {section.line}: `{method} {path}` is `{method} {spelled}`")
        elif not served(method, path):
            problems.append(f"line {section.line}: `{method} {path}` is not served by the app")
    for name, section in current.schemas.items():
        if name not in schemas:
            problems.append(f"line {section.line}: `{name}` is not a schema of the app")
            continue
        properties = schemas[name].get("properties", {})
        problems += [
            f"line {section.line}: `{name}` has no property `{prop}`"
            for prop in field_rows(section)
            if prop not in properties
        ]
    fail_listing(problems, "what the page names that the app does not have")
