"""The error hierarchy of agentcron.

Every error a caller can act on is one of these classes. The web layer maps each class to one
HTTP status in one table (``web/api/errors.py``); driver exceptions are kept as ``__cause__``
and their text never reaches a response.
"""

from __future__ import annotations


class AgentcronError(Exception):
    """Base of every agentcron error. ``message`` is safe to show to a client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidSchedule(AgentcronError):
    """Rejected input: a bad trigger, zone, runner or field.

    ``field`` is the dotted path of the offending input (``trigger.cron``, ``notify.0.url``),
    or ``None`` when the problem is not tied to one field.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class MalformedInput(InvalidSchedule):
    """A parameter that is not of the form it takes, which only agentcron can tell (a cursor
    it did not hand out, a page size out of bounds): a malformed request, not refused content.
    A library caller catches it as ``InvalidSchedule``; the API answers it as it answers what
    the request's schema refuses, ``422 ValidationError``, its message led by the field."""


class NotFound(AgentcronError):
    """The named object does not exist (or is not visible to the caller)."""

    def __init__(self, kind: str, id: str) -> None:
        super().__init__(f"{kind} {id} not found")
        self.kind = kind
        self.id = id


class Unauthorized(AgentcronError):
    """No API key, or one that is unknown or revoked. The message never repeats the key."""


class Conflict(AgentcronError):
    """The request cannot be applied in the object's current state."""


class SchedulerUnavailable(AgentcronError):
    """The database or the engine cannot serve the request right now (retry later)."""


class ScheduleCapacityExceeded(AgentcronError):
    """A configured limit (for example the maximum of active schedules) would be exceeded."""


class RunPermanentError(AgentcronError):
    """Raised by a runner when retrying cannot help: bad config, target gone, input rejected."""


class TargetUnavailable(RunPermanentError):
    """The schedule's runner or channel can no longer work at all (its entry point vanished,
    its command is missing, its import path fails). The run fails and the schedule is paused
    with this message, instead of failing again at every due time."""


class StartupError(AgentcronError):
    """A configuration that cannot work; the message says what to change."""
