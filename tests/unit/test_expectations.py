"""A schedule's expectations: what is accepted at save (and the field a refusal names), and
which outputs meet them (``core.expectations``). Runs that miss them, for each runner type:
tests/integration/test_expectations.py."""

from __future__ import annotations

from typing import Any

import pytest

from agentcron.core.errors import InvalidSchedule
from agentcron.core.expectations import describe, unmet, validate_expectations

SCHEMA = {
    "type": "object",
    "required": ["headlines"],
    "properties": {"headlines": {"type": "array", "minItems": 1}},
}


def test_the_stored_form_keeps_only_what_is_asked_in_one_order() -> None:
    given = {"json_schema": SCHEMA, "json": False, "matches": "^OK", "not_empty": True}
    assert list(validate_expectations(given) or {}) == ["not_empty", "matches", "json_schema"]
    assert validate_expectations(None) is None


@pytest.mark.parametrize(
    ("expect", "field", "words"),
    [
        ([], "expect", "an object or null"),
        ({}, "expect", "names no expectation"),
        ({"not_empty": False}, "expect", "names no expectation"),
        ({"nonempty": True}, "expect.nonempty", "unknown expectation 'nonempty'"),
        ({"not_empty": "yes"}, "expect.not_empty", "true or false"),
        ({"json": 1}, "expect.json", "true or false"),
        ({"matches": ""}, "expect.matches", "non-empty string"),
        ({"matches": "(unclosed"}, "expect.matches", "not a regular expression"),
        ({"matches": "a" * 1001}, "expect.matches", "over 1,000 characters"),
        ({"json_schema": []}, "expect.json_schema", "must be an object"),
        (
            {"json_schema": {"type": "no such type"}},
            "expect.json_schema",
            "not a valid JSON Schema",
        ),
        ({"json_schema": {"enum": ["x" * 20_000]}}, "expect.json_schema", "at most 16,384"),
    ],
    ids=lambda value: str(value)[:40],
)
def test_a_bad_expectation_is_refused_naming_its_field(expect: Any, field: str, words: str) -> None:
    with pytest.raises(InvalidSchedule) as refused:
        validate_expectations(expect)
    assert refused.value.field == field
    assert words in refused.value.message


NOT_JSON = "json: the output is not JSON (Expecting value: line 1 column 1 (char 0)): 'Sure! {'"
HEADLINES = r"\d+ headlines"
EMPTY_LIST = "json_schema: at headlines: [] should be non-empty"
NOT_AN_OBJECT = "json_schema: at the whole value: [] is not of type 'object'"


@pytest.mark.parametrize(
    ("expect", "output", "reason"),
    [
        ({"not_empty": True}, "done", None),
        ({"not_empty": True}, " \n\t", "not_empty: the output is empty"),
        ({"matches": HEADLINES}, "today: 12 headlines", None),
        ({"matches": HEADLINES}, "no news", f"matches: the output has no match for {HEADLINES!r}"),
        ({"json": True}, '{"a": 1}', None),
        ({"json": True}, "Sure! {", NOT_JSON),
        ({"json_schema": SCHEMA}, '{"headlines": ["a"]}', None),
        ({"json_schema": SCHEMA}, '{"headlines": []}', EMPTY_LIST),
        ({"json_schema": SCHEMA}, "[]", NOT_AN_OBJECT),
        # Every one must hold; the first missed is the one named.
        ({"not_empty": True, "json": True}, "", "not_empty: the output is empty"),
        (None, "", None),
    ],
)  # fmt: skip
def test_an_output_meets_its_expectations_or_is_told_which_it_missed(
    expect: dict[str, Any] | None, output: str, reason: str | None
) -> None:
    stored = validate_expectations(expect)
    assert unmet(stored, output) == reason


def test_a_long_output_that_is_not_json_is_shown_cut() -> None:
    reason = unmet({"json": True}, "no " * 200) or ""
    shown = reason.rpartition(": ")[2]
    assert shown.startswith("'no no") and shown.endswith("…'") and len(shown) == 82


def test_the_expectations_in_words() -> None:
    assert describe({"not_empty": True}) == "its output is not empty"
    words = describe({"not_empty": True, "matches": "^OK", "json_schema": SCHEMA})
    assert words == "its output is not empty, matches '^OK' and is JSON its schema accepts"
    assert describe(None) == ""
