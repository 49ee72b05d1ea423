"""What a schedule says success means, beyond the agent ending well.

An agent that exits 0 with an empty answer, or with an answer nobody can use, has not done its
work. A schedule's ``expect`` names what its output must be; an attempt whose agent ended well
but whose output misses one of them is a failure like any other (tried again while attempts
remain, counted by the circuit breaker, delivered to channels that ask for failures), with an
error naming the expectation and why. No ``expect`` is a success on the agent's word alone.

Checked on the output as the run keeps it (``RunOutcome.output``: what the runner captured,
a command's last 64 KB of stdout), before it is recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from agentcron.core.errors import InvalidSchedule
from agentcron.core.extras import have, missing

MAX_PATTERN_CHARS = 1_000
MAX_SCHEMA_BYTES = 16_384
SHOWN_CHARS = 80  # of the output, in the reason a JSON expectation gives

EXPECT_DOC = (
    "What success means beyond the agent ending well, checked on the run's output: "
    '{"not_empty": true} (not only whitespace), {"matches": "<regular expression>"} (found '
    'anywhere in it, Python syntax), {"json": true} (parses as JSON), {"json_schema": {...}} '
    "(parses as JSON that this JSON Schema accepts; needs agentcron[expect]). A run that misses "
    "one fails with a reason naming it, and is tried again while attempts remain; null: none"
)


KNOWN = ("not_empty", "matches", "json", "json_schema")


def validate_expectations(expect: Any) -> dict[str, Any] | None:
    """``expect`` in the form a schedule keeps (only what it asks, in the order of
    ``KNOWN``), or None for no expectation. Raises ``InvalidSchedule`` naming the field
    (``expect.matches``...)."""
    if expect is None:
        return None
    if not isinstance(expect, Mapping):
        raise InvalidSchedule("expect must be an object or null", field="expect")
    unknown = sorted(set(expect) - set(KNOWN))
    if unknown:
        known = ", ".join(KNOWN)
        raise InvalidSchedule(
            f"unknown expectation {unknown[0]!r}; known: {known}", field=f"expect.{unknown[0]}"
        )
    stored: dict[str, Any] = {}
    for name in ("not_empty", "json"):
        if name in expect:
            if not isinstance(expect[name], bool):
                raise InvalidSchedule(
                    f"expect.{name} must be true or false", field=f"expect.{name}"
                )
            if expect[name]:
                stored[name] = True
    pattern = expect.get("matches")
    if pattern is not None:
        stored["matches"] = _pattern(pattern)
    schema = expect.get("json_schema")
    if schema is not None:
        stored["json_schema"] = _schema(schema)
    if not stored:
        raise InvalidSchedule("expect names no expectation: give one, or null", field="expect")
    return in_order(stored)


def in_order(expect: Mapping[str, Any]) -> dict[str, Any]:
    """``expect`` with its keys in the order of ``KNOWN``, as it was saved (PostgreSQL's jsonb
    gives an object's keys back in an order of its own)."""
    return {name: expect[name] for name in KNOWN if name in expect}


def _pattern(pattern: Any) -> str:
    field = "expect.matches"
    if not isinstance(pattern, str) or not pattern:
        raise InvalidSchedule("expect.matches must be a non-empty string", field=field)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidSchedule(f"expect.matches is over {MAX_PATTERN_CHARS:,} characters", field)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidSchedule(f"expect.matches is not a regular expression: {exc}", field) from None
    return pattern


def _schema(schema: Any) -> dict[str, Any]:
    field = "expect.json_schema"
    if not isinstance(schema, dict):
        raise InvalidSchedule("expect.json_schema must be an object (a JSON Schema)", field)
    size = len(json.dumps(schema, ensure_ascii=False).encode())
    if size > MAX_SCHEMA_BYTES:
        raise InvalidSchedule(
            f"expect.json_schema is {size:,} bytes as JSON; at most {MAX_SCHEMA_BYTES:,}", field
        )
    validator = _validator_for(schema)
    try:
        validator.check_schema(schema)
    except Exception as exc:  # jsonschema.SchemaError: what is wrong, in its own words
        message = getattr(exc, "message", str(exc))
        reason = f"expect.json_schema is not a valid JSON Schema: {message}"
        raise InvalidSchedule(reason, field) from None
    return schema


def _validator_for(schema: Mapping[str, Any]) -> Any:
    """The validator class of ``schema``'s ``$schema`` (the newest draft without one)."""
    if not have("expect"):
        raise InvalidSchedule(missing("expect", "a json_schema expectation"), "expect.json_schema")
    import jsonschema  # type: ignore[import-untyped]  # the expect extra, only when used

    return jsonschema.validators.validator_for(schema)


def unmet(expect: Mapping[str, Any] | None, output: str) -> str | None:
    """Why ``output`` misses the expectations ``expect`` (the stored form), or None when it
    meets them all (or there are none). The first unmet one is named, in the order of the
    fields."""
    if not expect:
        return None
    if expect.get("not_empty") and not output.strip():
        return "not_empty: the output is empty"
    pattern = expect.get("matches")
    if pattern is not None and re.search(pattern, output) is None:
        return f"matches: the output has no match for {pattern!r}"
    schema = expect.get("json_schema")
    if expect.get("json") or schema is not None:
        try:
            value = json.loads(output)
        except ValueError as exc:
            return f"json: the output is not JSON ({exc}): {_shown(output)}"
        if schema is not None:
            validator = _validator_for(schema)(schema)
            error = next(iter(validator.iter_errors(value)), None)
            if error is not None:
                where = "/".join(str(part) for part in error.absolute_path) or "the whole value"
                return f"json_schema: at {where}: {error.message}"
    return None


def _shown(output: str) -> str:
    text = " ".join(output.split())
    return repr(text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…")


def describe(expect: Mapping[str, Any] | None) -> str:
    """The expectations in words (the dashboard's "Success means"): "its output is not
    empty and matches '^OK'"; empty for none."""
    if not expect:
        return ""
    parts = []
    if expect.get("not_empty"):
        parts.append("is not empty")
    if expect.get("matches") is not None:
        parts.append(f"matches {expect['matches']!r}")
    if expect.get("json_schema") is not None:
        parts.append("is JSON its schema accepts")
    elif expect.get("json"):
        parts.append("is JSON")
    words = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"its output {words}"
