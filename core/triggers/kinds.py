"""The three trigger kinds, read from user input and to and from their stored form.

``parse_trigger`` validates what a user sends (docs/api.md "Trigger"); ``trigger_to_dict`` and
``trigger_from_dict`` are the JSON-safe stored form and its inverse. Cron text is checked by
:mod:`core.triggers.cron`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from agentcron.core.errors import InvalidSchedule
from agentcron.core.triggers.cron import CRON_FIELD, parse_cron

MAX_INTERVAL_SECONDS: Final = 31_536_000
# DST policies (docs/design.md, promise 2 gives the defaults, which depend on the job kind).
GAP_POLICIES: Final = ("shift", "skip")
REPEAT_POLICIES: Final = ("first", "last", "both")


@dataclass(frozen=True)
class CronTrigger:
    """A validated cron expression (as the user wrote it, stripped) in an IANA zone.

    ``dst_gap`` (``shift`` | ``skip``) and ``dst_repeat`` (``first`` | ``last`` | ``both``)
    override what happens to a local time in a spring gap or an autumn repeated hour; ``None``
    means the contract's default for the job kind (``gap_policy`` / ``repeat_policy``).
    """

    cron: str
    timezone: str = "UTC"
    dst_gap: str | None = None
    dst_repeat: str | None = None
    # Bounds (aware UTC): no fire before ``start_at`` or after ``end_at``.
    start_at: datetime | None = None
    end_at: datetime | None = None

    @property
    def gap_policy(self) -> str:
        """The effective gap policy: fixed-time jobs shift, wildcard jobs skip by default."""
        if self.dst_gap is not None:
            return self.dst_gap
        return "skip" if parse_cron(self.cron).wildcard else "shift"

    @property
    def repeat_policy(self) -> str:
        """The effective repeat policy: fixed-time jobs fire the first pass, wildcard both."""
        if self.dst_repeat is not None:
            return self.dst_repeat
        return "both" if parse_cron(self.cron).wildcard else "first"


@dataclass(frozen=True)
class IntervalTrigger:
    """Fires at ``start_at + k * every_seconds`` (k >= 0) in real (UTC) time."""

    every_seconds: int
    start_at: datetime
    end_at: datetime | None = None  # no fire after it


@dataclass(frozen=True)
class OneShotTrigger:
    """Fires once, at ``at`` (aware, UTC)."""

    at: datetime


Trigger = CronTrigger | IntervalTrigger | OneShotTrigger

# The keys each kind accepts, keyed by the key that names the kind. A caller that rewrites part
# of a stored trigger (the dashboard form) keeps the keys it does not own from this table.
KIND_KEYS: Final = {
    "cron": frozenset({"cron", "timezone", "dst_gap", "dst_repeat", "start_at", "end_at"}),
    "every_seconds": frozenset({"every_seconds", "start_at", "end_at"}),
    "at": frozenset({"at"}),
}
_ALL_KEYS: Final = frozenset().union(*KIND_KEYS.values())
# "+08:00", "UTC+8", "GMT-5", "8": offsets, which do not follow DST; IANA names never match.
_OFFSET_LIKE = re.compile(r"^\s*(?:utc|gmt|z)?\s*[+\-\u2212]?\s*\d", re.IGNORECASE)


def _zone(name: object) -> ZoneInfo:
    """Load an IANA zone or raise ``InvalidSchedule`` on ``trigger.timezone``."""
    field = "trigger.timezone"
    if not isinstance(name, str):
        raise InvalidSchedule("timezone must be a string (an IANA name)", field=field)
    hint = "use an IANA zone name such as 'Asia/Shanghai' or 'UTC'"
    if not name.strip():
        raise InvalidSchedule(f"timezone is empty: {hint}", field=field)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        # Checked only once the lookup failed: "GMT0", "GMT+0" and "GMT-0" are IANA names.
        if _OFFSET_LIKE.match(name):
            raise InvalidSchedule(
                f"timezone {name!r} is a UTC offset, not a zone (offsets change with DST): {hint}",
                field=field,
            ) from exc
        suggestion = suggest_zone(name)
        if suggestion is not None:
            hint = f"did you mean {suggestion!r}? (zone names are case-sensitive)"
        raise InvalidSchedule(f"unknown timezone {name!r}: {hint}", field=field) from exc


@cache
def _zones_by_spelling() -> tuple[dict[str, str], dict[str, str | None]]:
    """Every IANA name keyed by its folded spelling (``europe/london``), and by its folded
    last part (``london``; None when two zones share one, as ``US/Central`` and
    ``Canada/Central`` do). Built once: there are about 600 names."""
    full: dict[str, str] = {}
    last: dict[str, str | None] = {}
    for zone in sorted(available_timezones()):
        full[_fold(zone)] = zone
        tail = _fold(zone.rsplit("/", 1)[-1])
        last[tail] = zone if tail not in last else None
    return full, last


def _fold(name: str) -> str:
    return name.strip().casefold().replace(" ", "_")


def suggest_zone(name: str) -> str | None:
    """The IANA zone ``name`` most likely means, written with other case or spaces for
    underscores (``europe/london``: ``Europe/London``; ``new york``: ``America/New_York``),
    or None."""
    full, last = _zones_by_spelling()
    folded = _fold(name)
    if folded in full:
        return full[folded]
    return last.get(folded) if "/" not in folded else None


def _aware_utc(value: object, field: str) -> datetime:
    """A datetime or ISO-8601 string with an offset, as aware UTC."""
    key = field.rsplit(".", 1)[-1]
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise InvalidSchedule(
                f"{key} {value!r} is not an ISO-8601 datetime", field=field
            ) from exc
    elif isinstance(value, datetime):
        parsed = value
    else:
        raise InvalidSchedule(f"{key} must be an ISO-8601 datetime string", field=field)
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise InvalidSchedule(
            f"{key} {parsed.isoformat()!r} has no UTC offset; add one, e.g. 'Z' or '+08:00'",
            field=field,
        )
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00+01:00 lies before year 1 in UTC
        raise InvalidSchedule(
            f"{key} {parsed.isoformat()!r} lies outside the years 1-9999 in UTC", field=field
        ) from None


def _policy(data: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str | None:
    """An optional DST policy value, or ``InvalidSchedule`` on ``trigger.<key>``."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value in allowed:
        return value
    choices = " or ".join(repr(choice) for choice in allowed)
    # Echo short strings only: a hostile value must not come back in the error whole.
    got = repr(value) if isinstance(value, str) and len(value) <= 40 else type(value).__name__
    raise InvalidSchedule(f"{key} must be {choices}, got {got}", field=f"trigger.{key}")


def require_aware(value: datetime, what: str) -> datetime:
    """``value`` as aware UTC; ``ValueError`` (a caller bug) if it is naive."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be an aware datetime, got {value!r}")
    return value.astimezone(UTC)


def _build(data: Mapping[str, Any], now: datetime | None) -> Trigger:
    """Shared by ``parse_trigger`` (``now`` given) and ``trigger_from_dict`` (trusted)."""
    if not isinstance(data, Mapping):
        raise InvalidSchedule("trigger must be an object", field="trigger")
    for key in data:
        if key not in _ALL_KEYS:
            raise InvalidSchedule(f"unknown trigger field {key!r}", field=f"trigger.{key}")
    kinds = [kind for kind in KIND_KEYS if kind in data]
    if len(kinds) != 1:
        found = " and ".join(repr(k) for k in kinds) if kinds else "none"
        raise InvalidSchedule(
            f"trigger needs exactly one of 'cron', 'every_seconds' or 'at' (got {found})",
            field="trigger",
        )
    kind = kinds[0]
    for key in data:
        if key not in KIND_KEYS[kind]:
            why = " (it fires once, at 'at')" if kind == "at" and key.endswith("_at") else ""
            raise InvalidSchedule(
                f"{key!r} does not apply to a {kind!r} trigger{why}", field=f"trigger.{key}"
            )
    end_at = _end_at(data, now)

    if kind == "cron":
        cron = data["cron"]
        if not isinstance(cron, str):
            raise InvalidSchedule("cron must be a string", field=CRON_FIELD)
        # A JSON null timezone means "not given", as for any optional field.
        timezone = data.get("timezone")
        timezone = "UTC" if timezone is None else timezone
        _zone(timezone)
        parse_cron(cron)
        start = data.get("start_at")
        cron_start = None if start is None else _aware_utc(start, "trigger.start_at")
        _ordered(cron_start, end_at)
        return CronTrigger(
            cron=cron.strip(),
            timezone=timezone,
            dst_gap=_policy(data, "dst_gap", GAP_POLICIES),
            dst_repeat=_policy(data, "dst_repeat", REPEAT_POLICIES),
            start_at=cron_start,
            end_at=end_at,
        )

    if kind == "every_seconds":
        every = data["every_seconds"]
        field = "trigger.every_seconds"
        if isinstance(every, bool) or not isinstance(every, int):
            raise InvalidSchedule("every_seconds must be an integer", field=field)
        if not 1 <= every <= MAX_INTERVAL_SECONDS:
            raise InvalidSchedule(
                f"every_seconds {every} is out of range 1-{MAX_INTERVAL_SECONDS} (one year)",
                field=field,
            )
        start = data.get("start_at")
        if start is not None:
            start_at = _aware_utc(start, "trigger.start_at")
        elif now is not None:
            start_at = require_aware(now, "now").replace(microsecond=0)
        else:
            raise InvalidSchedule("stored interval trigger lacks start_at", "trigger.start_at")
        _ordered(start_at, end_at)
        return IntervalTrigger(every_seconds=every, start_at=start_at, end_at=end_at)

    at = _aware_utc(data["at"], "trigger.at")
    if now is not None and at <= require_aware(now, "now"):
        raise InvalidSchedule(
            f"at {at.isoformat()} lies in the past (now is {now.astimezone(UTC).isoformat()})",
            field="trigger.at",
        )
    return OneShotTrigger(at=at)


def _end_at(data: Mapping[str, Any], now: datetime | None) -> datetime | None:
    """The optional ``end_at`` bound; on input (``now`` given) it must still lie ahead."""
    value = data.get("end_at")
    if value is None:
        return None
    end_at = _aware_utc(value, "trigger.end_at")
    if now is not None and end_at <= require_aware(now, "now"):
        raise InvalidSchedule(
            f"end_at {end_at.isoformat()} has passed: the schedule would never run",
            field="trigger.end_at",
        )
    return end_at


def _ordered(start_at: datetime | None, end_at: datetime | None) -> None:
    if start_at is not None and end_at is not None and end_at <= start_at:
        raise InvalidSchedule(
            f"end_at {end_at.isoformat()} is not after start_at {start_at.isoformat()}",
            field="trigger.end_at",
        )


def parse_trigger(data: Mapping[str, Any], now: datetime) -> Trigger:
    """Validate user input (docs/api.md "Trigger") into a ``Trigger``.

    ``data`` holds exactly one of ``{"cron", "timezone"?, "dst_gap"?, "dst_repeat"?}``,
    ``{"every_seconds", "start_at"?}`` or ``{"at"}``; ``now`` is an aware datetime. Datetimes
    may be given as ``datetime`` or as ISO-8601 strings, and must carry an offset; they are
    stored as UTC. A DST policy is ``shift`` | ``skip`` (gap) or ``first`` | ``last`` |
    ``both`` (repeat), refused on the other kinds. An interval's ``start_at`` defaults to
    ``now`` truncated to the whole second; a one-shot ``at`` must lie strictly after ``now``.
    A JSON null for an optional key counts as absent.

    Raises ``InvalidSchedule`` whose ``field`` is ``trigger`` or ``trigger.<key>`` and whose
    message says what is wrong. Raises ``ValueError`` if ``now`` is naive (a caller bug).
    """
    require_aware(now, "now")
    return _build(data, now)


def restated(data: object, stored: Mapping[str, Any]) -> Trigger | None:
    """The trigger stored as ``stored`` when the user input ``data`` says the same, else None.

    An interval given without ``start_at`` says what a stored interval says when the rest
    agrees: the stored ``start_at`` is the one filled in when it was first given, so giving
    the trigger again keeps its due times where they were. No check against the current
    time is made: those judged the trigger when it was first given, and a one-shot that has
    fired or a bound that has passed is still the trigger it was. Anything ``data`` gets
    wrong is None here, for ``parse_trigger`` to say."""
    if not isinstance(data, Mapping):
        return None
    try:
        current = trigger_from_dict(stored)
        given = dict(data)
        if (
            isinstance(current, IntervalTrigger)
            and "every_seconds" in given
            and given.get("start_at") is None
        ):
            given["start_at"] = current.start_at
        return current if _build(given, None) == current else None
    except InvalidSchedule:
        return None


def trigger_to_dict(trigger: Trigger) -> dict[str, Any]:
    """The JSON-safe stored form; ``trigger_from_dict`` turns it back into an equal trigger."""
    if isinstance(trigger, CronTrigger):
        stored: dict[str, Any] = {"cron": trigger.cron, "timezone": trigger.timezone}
        # Only when given: an absent policy keeps following the default for the job kind.
        if trigger.dst_gap is not None:
            stored["dst_gap"] = trigger.dst_gap
        if trigger.dst_repeat is not None:
            stored["dst_repeat"] = trigger.dst_repeat
        if trigger.start_at is not None:
            stored["start_at"] = trigger.start_at.astimezone(UTC).isoformat()
        if trigger.end_at is not None:
            stored["end_at"] = trigger.end_at.astimezone(UTC).isoformat()
        return stored
    if isinstance(trigger, IntervalTrigger):
        interval: dict[str, Any] = {
            "every_seconds": trigger.every_seconds,
            "start_at": trigger.start_at.astimezone(UTC).isoformat(),
        }
        if trigger.end_at is not None:
            interval["end_at"] = trigger.end_at.astimezone(UTC).isoformat()
        return interval
    return {"at": trigger.at.astimezone(UTC).isoformat()}


def trigger_from_dict(data: Mapping[str, Any]) -> Trigger:
    """Rebuild a trigger from its stored form (no "lies in the future" check).

    Raises ``InvalidSchedule`` if the stored form is not one ``trigger_to_dict`` could make.
    """
    return _build(data, None)
