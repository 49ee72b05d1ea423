"""A run's ``result``: the JSON object a runner's outcome may carry, checked before the
engine records it (``checked_outcome``)."""

from __future__ import annotations

import json

import pytest

from agentcron.core.errors import RunPermanentError
from agentcron.core.runners.base import RESULT_LIMIT, RunOutcome, checked_outcome


def sized(size: int) -> dict[str, str]:
    """A result of exactly ``size`` bytes of compact JSON."""
    empty = len(json.dumps({"x": ""}, separators=(",", ":")))
    return {"x": "y" * (size - empty)}


def test_an_outcome_without_a_result_is_kept_as_is() -> None:
    outcome = RunOutcome(output="text", turns=({"role": "assistant", "content": "text"},))
    assert checked_outcome(outcome) is outcome


def test_a_result_up_to_the_limit_is_kept_in_its_stored_form() -> None:
    given = {1: ("a", 2.5), "nested": {"ok": True, "none": None}, "fits": sized(RESULT_LIMIT - 80)}
    kept = checked_outcome(RunOutcome(output="o", result=given)).result
    # What the database gives back later: keys as strings, tuples as lists; a copy of its own.
    assert kept == {"1": ["a", 2.5], "nested": {"ok": True, "none": None}, "fits": given["fits"]}
    given["nested"]["ok"] = False  # type: ignore[index]
    assert kept is not None and kept["nested"]["ok"] is True
    at_limit = sized(RESULT_LIMIT)
    assert len(json.dumps(at_limit, separators=(",", ":")).encode()) == RESULT_LIMIT
    assert checked_outcome(RunOutcome(result=at_limit)).result == at_limit


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (
            sized(RESULT_LIMIT + 1),
            (
                f"the run's result is {RESULT_LIMIT + 1} bytes of JSON; at most {RESULT_LIMIT}"
                " (keep a reference to your record, not the record)"
            ),
        ),
        ([1, 2], "the run's result is not a JSON object: it is a list"),
        ("text", "the run's result is not a JSON object: it is a str"),
        ({"at": float("inf")}, "the run's result is not a JSON object: Out of range float"),
        ({"obj": object()}, "the run's result is not a JSON object: Object of type object"),
        ({("a", "b"): 1}, "the run's result is not a JSON object: keys must be str"),
        # Measured as the JSON text with non-ASCII escaped, as a schedule's runner.data is.
        ({"note": "é" * 3000}, "the run's result is 18011 bytes of JSON; at most"),
    ],
)
def test_any_other_result_is_a_permanent_error_saying_why(result: object, message: str) -> None:
    with pytest.raises(RunPermanentError) as refused:
        checked_outcome(RunOutcome(output="o", result=result))  # type: ignore[arg-type]
    assert refused.value.message.startswith(message)
