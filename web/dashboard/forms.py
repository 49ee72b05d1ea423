"""The schedule form: its fields as text, to and from the request shapes of ``core.specs``.

A form holds what the user typed (``values``, all strings, so a rejected form comes back
exactly as it was sent) and the errors found, keyed by form field. Errors come from three
places, all shown beside the field they name: text that is not a number or not JSON (here),
pydantic's checks of ``ScheduleCreate``/``ScheduleUpdate``, and ``InvalidSchedule`` from core.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from agentcron.core.errors import InvalidSchedule
from agentcron.core.expectations import in_order
from agentcron.core.triggers import KIND_KEYS, trigger_from_dict, trigger_to_dict
from agentcron.web.api.errors import field_path

TRIGGER_KINDS = ("cron", "every", "at")
RUNNER_KINDS = ("command", "json")
MODES = ("isolated", "persistent")
OVERLAPS = ("", "allow", "skip", "buffer_one", "cancel_other")
# A form field per path head; the rest of the path picks the trigger input (below).
_TRIGGER_INPUTS = {
    "cron": "cron",
    "timezone": "timezone",
    "every_seconds": "every_seconds",
    "start_at": "start_at",
    "end_at": "end_at",
    "dst_gap": "dst_gap",
    "dst_repeat": "dst_repeat",
    "at": "at",
}
_PLAIN = {
    "name",
    "prompt",
    "enabled",
    "mode",
    "overlap",
    "timeout_seconds",
    "max_attempts",
    "notify",
    "expect",
    "catchup",
    "catchup_window_seconds",
    "jitter_seconds",
    "max_runs",
    "pause_after_failures",
    "retention_days",
}
# Whole numbers of the settings where blank means null: "none" or the service's default.
OPTIONAL_NUMBERS = ("jitter_seconds", "max_runs", "pause_after_failures", "retention_days")
# A field's name in an error, as the form's label says it.
LABELS = {
    "name": "Name",
    "prompt": "Prompt",
    "timeout_seconds": "Timeout",
    "max_attempts": "Max attempts",
    "catchup_window_seconds": "Catch-up window",
    "jitter_seconds": "Jitter",
    "max_runs": "Max runs",
    "pause_after_failures": "Pause after failures",
    "retention_days": "Keep runs (days)",
}
FORM_ERROR = "_form"  # errors tied to no input: shown above the form

NEW_DEFAULTS: dict[str, str] = {
    "name": "",
    "prompt": "",
    "trigger_kind": "cron",
    "cron": "0 9 * * 1-5",
    "timezone": "UTC",
    "every_seconds": "3600",
    "at": "",
    "runner_kind": "command",
    "argv": "",
    "runner_json": '{"type": "command", "argv": ["cat"]}',
    "notify": "",
    "expect": "",
    "enabled": "on",
    "mode": "isolated",
    "overlap": "",
    "timeout_seconds": "3600",
    "max_attempts": "3",
    "start_at": "",
    "end_at": "",
    "dst_gap": "",
    "dst_repeat": "",
    "catchup": "skip",
    "catchup_window_seconds": "3600",
    "jitter_seconds": "",
    "max_runs": "",
    "pause_after_failures": "",
    "retention_days": "",
}


class FormInvalid(Exception):
    """The form cannot become a request: ``errors`` says why, per form field."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(errors)
        self.errors = errors


def input_for(path: str | None) -> str:
    """The form field showing an error about ``path`` (``trigger.cron`` -> ``cron``)."""
    if not path:
        return FORM_ERROR
    head, _, rest = path.partition(".")
    if head == "trigger":
        return _TRIGGER_INPUTS.get(rest.split(".", 1)[0], "trigger")
    if head == "runner":
        return "runner"
    return head if head in _PLAIN else FORM_ERROR


def validation_errors(exc: ValidationError) -> dict[str, str]:
    """Pydantic's errors as ``{form field: message}`` (the first error of each field)."""
    errors: dict[str, str] = {}
    for error in exc.errors():
        path = field_path(error.get("loc", ()))
        errors.setdefault(input_for(path), plain_message(path, error))
    return errors


def plain_message(path: str | None, error: Any) -> str:
    """A pydantic error in the form's words, for the field it is shown at: "Name cannot be
    empty", not "name: String should have at least 1 character"."""
    label = LABELS.get(path or "")
    context = error.get("ctx") or {}
    kind = error.get("type")
    if label is not None:
        if kind == "string_too_short" and context.get("min_length") == 1:
            return f"{label} cannot be empty."
        if kind == "string_too_long":
            return f"{label} is too long: at most {context.get('max_length'):,} characters."
        if kind in ("greater_than_equal", "greater_than"):
            least = context.get("ge", context.get("gt"))
            return f"{label} must be at least {least}."
        if kind in ("less_than_equal", "less_than"):
            return f"{label} must be at most {context.get('le', context.get('lt')):,}."
    return f"{path}: {error['msg']}" if path else str(error["msg"])


def invalid_schedule_errors(field: str | None, message: str) -> dict[str, str]:
    """Core's ``InvalidSchedule`` at its form field. Inside a JSON field the message starts
    with the path (``notify.0.url: ...``) so the user knows which part of the JSON is wrong."""
    target = input_for(field)
    if field and target in ("runner", "notify") and field != target:
        message = f"{field}: {message}"
    return {target: message}


@dataclass
class ScheduleForm:
    """What the form holds; ``errors`` maps a form field (or ``FORM_ERROR``) to a message."""

    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_post(cls, posted: dict[str, str], base: dict[str, str] | None = None) -> ScheduleForm:
        """The form as posted. An unchecked checkbox is absent from a post: ``enabled`` is
        read as off. Every other field missing from the post (a page from before the input
        was added, a script) keeps its value in ``base`` (the defaults of a new schedule, or
        the stored schedule's form), or reads as empty without one."""
        values = {name: posted.get(name, (base or {}).get(name, "")) for name in NEW_DEFAULTS}
        values["enabled"] = "on" if posted.get("enabled") else ""
        return cls(values)

    @classmethod
    def from_view(cls, view: dict[str, Any]) -> ScheduleForm:
        """The form of a stored schedule (``schedule_view``): what the edit page shows."""
        values = dict(NEW_DEFAULTS)
        trigger: dict[str, Any] = view["trigger"]
        if "cron" in trigger:
            values.update(trigger_kind="cron", cron=trigger["cron"], timezone=trigger["timezone"])
            values.update(
                dst_gap=trigger.get("dst_gap") or "", dst_repeat=trigger.get("dst_repeat") or ""
            )
        elif "every_seconds" in trigger:
            values.update(trigger_kind="every", every_seconds=str(trigger["every_seconds"]))
        else:
            values.update(trigger_kind="at", at=str(trigger["at"]))
        values.update(start_at=trigger.get("start_at") or "", end_at=trigger.get("end_at") or "")
        runner: dict[str, Any] = view["runner"]
        if set(runner) == {"type", "argv"} and runner["type"] == "command":
            values.update(runner_kind="command", argv="\n".join(runner["argv"]))
        else:
            values.update(runner_kind="json", runner_json=json.dumps(runner, indent=2))
        values.update(
            name=view["name"],
            prompt=view["prompt"],
            notify=json.dumps(view["notify"], indent=2) if view["notify"] else "",
            expect=json.dumps(in_order(view["expect"])) if view.get("expect") else "",
            enabled="on" if view["enabled"] else "",
            mode=view["mode"],
            overlap=view["overlap"],
            timeout_seconds=str(view["timeout_seconds"]),
            max_attempts=str(view["max_attempts"]),
            catchup=view["catchup"],
            catchup_window_seconds=str(view["catchup_window_seconds"]),
        )
        for name in OPTIONAL_NUMBERS:
            values[name] = "" if view[name] is None else str(view[name])
        return cls(values)

    def trigger(self) -> dict[str, Any]:
        """The trigger the form describes (``FormInvalid`` if a number is not one)."""
        values = self.values
        kind = values.get("trigger_kind", "cron")
        # The bounds and policies the form shows; blank is null, which clears a stored one.
        bounds = {name: values.get(name, "").strip() or None for name in ("start_at", "end_at")}
        if kind == "every":
            return {"every_seconds": _integer(values, "every_seconds"), **bounds}
        if kind == "at":
            return {"at": values.get("at", "").strip()}
        if kind != "cron":
            raise FormInvalid({"trigger": "choose cron, every N seconds or at a time"})
        zone = values.get("timezone", "").strip()
        policies = {name: values.get(name, "") or None for name in ("dst_gap", "dst_repeat")}
        return {"cron": values.get("cron", ""), "timezone": zone, **bounds, **policies}

    def max_runs(self) -> int | None:
        """The ``max_runs`` typed (None: blank, no end); ``FormInvalid`` if not a number or
        not at least 1, at its input."""
        count = _optional_integer(self.values, "max_runs")
        if count is not None and count < 1:
            raise FormInvalid({"max_runs": "Max runs must be at least 1."})
        return count

    def body(self) -> dict[str, Any]:
        """Every field as a ``ScheduleCreate`` body; ``FormInvalid`` with every error found."""
        values = self.values
        body: dict[str, Any] = {"name": values["name"], "prompt": values["prompt"]}
        errors: dict[str, str] = {}
        parts: dict[str, Callable[[], Any]] = {
            "trigger": self.trigger,
            "runner": self._runner,
            "notify": self._notify,
            "expect": self._expect,
            "timeout_seconds": lambda: _integer(values, "timeout_seconds"),
            "max_attempts": lambda: _integer(values, "max_attempts"),
            "catchup_window_seconds": lambda: _integer(values, "catchup_window_seconds"),
            **{
                name: functools.partial(_optional_integer, values, name)
                for name in OPTIONAL_NUMBERS
            },
        }
        for name, build in parts.items():
            try:
                body[name] = build()
            except FormInvalid as exc:
                errors.update(exc.errors)
        if errors:
            raise FormInvalid(errors)
        body["enabled"] = bool(values["enabled"])
        body["mode"] = values["mode"] or "isolated"
        if values["overlap"]:
            body["overlap"] = values["overlap"]
        body["catchup"] = values["catchup"] or "skip"
        return body

    def changes(self, current: dict[str, Any], now: datetime) -> dict[str, Any]:
        """The PATCH of an edit of the stored schedule whose view is ``current``: the fields
        whose submitted value differs from the stored one, and no other (``FormInvalid`` as
        ``body``). The trigger and a command runner typed one argument per line are merged
        onto the stored ones first: the form shows only some of their keys, and the keys it
        does not show (a trigger's DST policies and bounds, a command's env) are kept, never
        reset. Fields the form has no input for are never in the PATCH, and notify is compared
        as shown (masked), so an untouched webhook secret is never sent back. An interval whose
        Not before was blanked counts from ``now`` (saving), as the form says: the API keeps the
        stored grid of an interval given without ``start_at``."""
        body = self.body()
        trigger = body["trigger"]
        if "every_seconds" in trigger and trigger.get("start_at") is None:
            trigger["start_at"] = now.replace(microsecond=0).isoformat()
        body["trigger"] = merged_trigger(body["trigger"], current["trigger"])
        if self.values["runner_kind"] == "command":
            body["runner"] = merged_command(body["runner"], current["runner"])
        return {name: value for name, value in body.items() if not _same(name, value, current)}

    def _runner(self) -> dict[str, Any]:
        if self.values["runner_kind"] == "json":
            runner = _json(self.values, "runner_json", "runner")
            if not isinstance(runner, dict):
                raise FormInvalid({"runner": 'the runner is a JSON object: {"type": ...}'})
            return runner
        # One argument per line; blank lines (a trailing newline) are not arguments.
        argv = [line.rstrip("\r") for line in self.values["argv"].split("\n")]
        return {"type": "command", "argv": [arg for arg in argv if arg.strip()]}

    def _notify(self) -> list[Any]:
        if not self.values["notify"].strip():
            return []
        channels = _json(self.values, "notify", "notify")
        if not isinstance(channels, list):
            raise FormInvalid({"notify": "notify is a JSON list of channels: [{...}, ...]"})
        return channels

    def _expect(self) -> dict[str, Any] | None:
        if not self.values["expect"].strip():
            return None  # blank: nothing expected beyond the agent ending well
        expect = _json(self.values, "expect", "expect")
        if not isinstance(expect, dict):
            raise FormInvalid({"expect": 'expect is a JSON object: {"not_empty": true, ...}'})
        return expect


def merged_trigger(typed: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """The trigger the form describes on top of the ``stored`` one. The form owns only the
    keys saying when (cron and timezone, every_seconds, or at); every other stored key that
    applies to the typed kind (dst_gap, dst_repeat, start_at, end_at) is kept, so changing
    the expression keeps a campaign's end and an interval keeps its grid."""
    kind = next(key for key in KIND_KEYS if key in typed)
    kept = {key: value for key, value in stored.items() if key in KIND_KEYS[kind]}
    return {**kept, **typed}


def merged_command(typed: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """The argv typed one argument per line on top of a stored command runner: the other
    keys of the command (env, kill_grace_seconds) have no input here and are kept."""
    if stored.get("type") != typed["type"]:
        return typed
    return {**stored, **typed}


def _same(name: str, value: Any, current: dict[str, Any]) -> bool:
    if name == "trigger":
        return _same_trigger(value, current["trigger"])
    if name == "prompt" and isinstance(value, str):
        # Browsers send every line break of a textarea as CRLF: a prompt saved untouched
        # differs from the stored one only in those and is not rewritten.
        return _line_breaks(value) == _line_breaks(current["prompt"])
    return bool(current.get(name) == value)


def _same_trigger(typed: dict[str, Any], stored: dict[str, Any]) -> bool:
    # Compared in the stored form, so a cron typed with spaces around it or an instant written
    # with another offset is the same trigger; an invalid one differs and is sent, so its
    # error comes back at its input.
    try:
        return trigger_to_dict(trigger_from_dict(typed)) == trigger_to_dict(
            trigger_from_dict(stored)
        )
    except InvalidSchedule:
        return False


def _line_breaks(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _integer(values: dict[str, str], name: str) -> int:
    text = values.get(name, "").strip()
    try:
        return int(text)
    except ValueError:
        raise FormInvalid({name: f"{name}: a whole number is needed, not {text!r}"}) from None


def _optional_integer(values: dict[str, str], name: str) -> int | None:
    """A whole number, or None when the input is blank (the setting's "none")."""
    return _integer(values, name) if values.get(name, "").strip() else None


def _json(values: dict[str, str], name: str, error_field: str) -> Any:
    try:
        return json.loads(values.get(name, ""))
    except json.JSONDecodeError as exc:
        raise FormInvalid(
            {error_field: f"{error_field}: not valid JSON ({exc.msg}, line {exc.lineno})"}
        ) from None
