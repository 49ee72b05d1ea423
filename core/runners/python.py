"""The ``python`` runner: a function of the host process, named by its import path.

Configuration: ``{"type": "python", "target": "package.module:function"}`` (the part after the
colon may be a dotted attribute path, ``module:Class.method``). ``validate`` imports the
module and checks that the attribute exists and is callable, so a bad path is rejected when
the schedule is created or updated (``InvalidSchedule`` on ``runner.target``). Importing runs
the module's top-level code in the service process, and the call runs with the service's
rights and in its environment (``os.environ``, database URL and keys included: neither
``AGENTCRON_AGENT_ENV`` nor the sandbox applies to the service's own threads): this runner is
for hosts that embed agentcron in their own application. So only the modules the host lists
may be named: ``AGENTCRON_PYTHON_MODULES`` holds comma-separated module names (a name also
admits its submodules) or ``fnmatch`` patterns (``myapp.agents.*``). Unset,
the runner admits nothing: without it, anyone holding an API key could make the service call
``os:system`` or import any installed module. The list is checked before anything is imported,
when a schedule is saved and again at each attempt (a target taken off the list fails its run
and pauses the schedule).

Each attempt calls ``function(RunContext(request, cancel))``:

- an ``async def`` target (or an object with an ``async def __call__``) runs on the event
  loop; once the cancel token is set, its task is cancelled;
- any other target runs in a worker thread (``asyncio.to_thread``), so it cannot block the
  loop; a thread cannot be interrupted, so a long sync target should poll
  ``ctx.cancel.cancelled`` and return. The attempt itself ends as soon as the token is set.
  If a sync target returns an awaitable, it is awaited on the loop.

The target is resolved again at each attempt, on the event loop: once its module is
imported that is a dictionary lookup, and a module uninstalled since (seen after a restart)
is noticed at once.

Return value: a ``RunOutcome`` is used as is; a ``str`` becomes the output; ``None`` an empty
output; a mapping (a ``dict``) the run's ``result``, a JSON object kept as given, with an empty
output; anything else ``str(value)``. ``RunPermanentError`` (and its ``TargetUnavailable``)
and ``TransientRunError`` raised by the target propagate; any other exception becomes a
``TransientRunError`` naming its type and message. If the target cannot be resolved at run
time (its module no longer imports, the attribute is gone or not callable), the run raises
``TargetUnavailable``, which fails it and pauses the schedule.
"""

from __future__ import annotations

import asyncio
import contextvars
import fnmatch
import functools
import importlib
import inspect
import os
import re
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from agentcron.core.errors import InvalidSchedule, RunPermanentError, TargetUnavailable
from agentcron.core.logging import get_logger
from agentcron.core.runners.base import (
    CancelToken,
    RunContext,
    Runner,
    RunOutcome,
    RunRequest,
    TransientRunError,
)
from agentcron.core.runners.threads import AgentThreads

log = get_logger(__name__)

FIELDS = frozenset({"type", "target"})
TARGET_LIMIT = 500
CANCEL_GRACE_SECONDS = 5.0  # how long a cancelled async target may take to unwind
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_TARGET = re.compile(rf"^{_IDENTIFIER}(\.{_IDENTIFIER})*:{_IDENTIFIER}(\.{_IDENTIFIER})*$")

Target = Callable[[RunContext], Any]


class _Unresolvable(Exception):
    """The target path names nothing callable; ``message`` says why (safe to show)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


MODULES_VARIABLE = "AGENTCRON_PYTHON_MODULES"


def allowed_modules() -> list[str]:
    """The host's list of modules python targets may live in (read at each use, so a change
    of the environment, in tests say, is seen at once)."""
    return [
        entry.strip() for entry in os.environ.get(MODULES_VARIABLE, "").split(",") if entry.strip()
    ]


# (module, the host's list as set) -> whether the module is on it: every attempt asks, and
# matching the list's patterns was most of what resolving a target cost per run.
_ADMITTED: dict[tuple[str, str], bool] = {}


def _admitted(module_name: str) -> bool:
    key = (module_name, os.environ.get(MODULES_VARIABLE, ""))
    known = _ADMITTED.get(key)
    if known is None:
        known = _ADMITTED[key] = any(
            module_name == entry
            or module_name.startswith(entry + ".")
            or fnmatch.fnmatchcase(module_name, entry)
            for entry in allowed_modules()
        )
        if len(_ADMITTED) > 1024:  # a host that keeps changing the list: start over
            _ADMITTED.clear()
    return known


def _resolve(target: str) -> Target:
    """Import ``module`` and walk ``attr.path`` of ``"module:attr.path"``.

    Returns the callable; raises ``_Unresolvable`` if the module is not on the host's list
    (checked before importing anything), does not import, an attribute is missing, or the
    result is not callable. An exception raised by the module's own code while importing is
    reported by type only (its text may hold anything).
    """
    module_name, _, attr_path = target.partition(":")
    if not _admitted(module_name):
        raise _Unresolvable(
            f"module {module_name!r} is not one the host allows python targets in"
            f" (the list in {MODULES_VARIABLE})"
        )
    obj: Any = sys.modules.get(module_name)
    try:
        # Imported and done initialising: the module itself (``import_module`` would also
        # look it up, at several times the cost, on every attempt).
        if obj is None or getattr(getattr(obj, "__spec__", None), "_initializing", False):
            obj = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        raise _Unresolvable(f"cannot import {module_name!r}: no module named {missing!r}") from exc
    except Exception as exc:
        log.warning("python_target_import_failed", target=target, exc_info=True)
        raise _Unresolvable(
            f"cannot import {module_name!r}: importing it raised {type(exc).__name__}"
        ) from exc
    parts = attr_path.split(".")
    for index, part in enumerate(parts):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            path = ".".join(parts[: index + 1])
            raise _Unresolvable(f"module {module_name!r} has no attribute {path!r}") from None
    if not callable(obj):
        raise _Unresolvable(f"{target!r} is not callable (it is a {type(obj).__name__})")
    return obj  # type: ignore[no-any-return]


def _is_async(target: Target) -> bool:
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - an instance with an async __call__
    )


def _outcome(value: object) -> RunOutcome:
    if isinstance(value, RunOutcome):
        return value
    if value is None:
        return RunOutcome(output="")
    if isinstance(value, str):
        return RunOutcome(output=value)
    if isinstance(value, Mapping):
        return RunOutcome(result=value)  # the engine checks it (``checked_outcome``)
    return RunOutcome(output=str(value))


async def _awaited(value: Awaitable[Any]) -> RunOutcome:
    """What an async target (or a sync one that handed back an awaitable) gave, awaited on
    the loop and converted."""
    try:
        return _outcome(await value)
    except SystemExit as exc:
        raise _run_error(exc) from exc


def _run_error(error: BaseException) -> BaseException:
    """What a target's exception is raised as: its own ``RunPermanentError`` or
    ``TransientRunError``, else a ``TransientRunError`` naming it."""
    if isinstance(error, RunPermanentError | TransientRunError):
        return error
    if isinstance(error, SystemExit):
        # Re-raised by asyncio out of the event loop, it would stop the whole service.
        return TransientRunError(f"the target called exit ({error.code!r})")
    return TransientRunError(f"{type(error).__name__}: {error}")


class PythonRunner:
    """Calls ``target`` once per attempt; see the module docstring for the contract."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __repr__(self) -> str:
        return f"PythonRunner(target={self.target!r})"

    async def run(self, request: RunRequest, cancel: CancelToken) -> RunOutcome:
        """Resolve the target, call it with ``RunContext(request, cancel)``, map the result.

        Raises ``TargetUnavailable`` when the target no longer resolves,
        ``RunPermanentError("cancelled (<reason>)")`` as soon as ``cancel`` is set, the
        target's own ``RunPermanentError``/``TransientRunError``, and ``TransientRunError``
        for any other exception it raised.
        """
        try:
            target = _resolve(self.target)
        except _Unresolvable as exc:
            raise TargetUnavailable(
                f"python target {self.target!r} is unavailable: {exc.message}"
            ) from exc

        return await call_target(target, RunContext(request, cancel), cancel, request.threads)


async def call_target(
    target: Callable[[Any], Any],
    context: Any,
    cancel: CancelToken,
    threads: AgentThreads | None = None,
) -> RunOutcome:
    """Call a host's callable with ``context`` as a runner would: sync in a worker thread (of
    ``threads``, the request's), async on the loop, stopped when ``cancel`` is set. Returns its
    outcome; raises ``RunPermanentError("cancelled (<reason>)")`` once cancelled, the callable's
    own ``RunPermanentError``/``TransientRunError``, and ``TransientRunError`` for anything else
    it raised (shared by the ``python`` and ``handler`` runners). A sync target that returned
    before the cancel could reach it has its outcome returned even if the token was set in the
    same turn of the loop: its work is done, and the engine decides what the cancel means."""
    if _is_async(target):
        return await _on_loop(_awaited(target(context)), cancel)
    result = await _in_thread(target, context, cancel, threads)
    if inspect.isawaitable(result):  # a sync target that hands back a coroutine
        return await _on_loop(_awaited(result), cancel)
    return _outcome(result)


async def _in_thread(
    target: Callable[[Any], Any], context: Any, cancel: CancelToken, threads: AgentThreads | None
) -> Any:
    """What a sync target returned, called in one of ``threads`` (the loop's default executor
    when None: as ``asyncio.to_thread`` does, which has min(32, cores + 4) threads, fewer than
    the slots of a busy engine). Its future is awaited in place, with no task of its own: the
    caller goes on one loop turn after the thread returns. A cancel drops the result at once;
    the thread keeps running until the target returns (it should poll
    ``ctx.cancel.cancelled``)."""
    if cancel.cancelled:
        raise RunPermanentError(f"cancelled ({cancel.reason})")
    call = functools.partial(contextvars.copy_context().run, target, context)
    if threads is None:
        future = asyncio.get_running_loop().run_in_executor(None, call)
    else:
        future = threads.call(call)
    forget = cancel.on_cancel(future.cancel)
    try:
        return await future
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if not cancel.cancelled or (current is not None and current.cancelling()):
            raise  # the caller's task is being cancelled, not this attempt
        raise RunPermanentError(f"cancelled ({cancel.reason})") from None
    except (Exception, SystemExit) as exc:
        error = _run_error(exc)
        if error is exc:
            raise
        raise error from exc
    finally:
        forget()


async def _on_loop(invoke: Coroutine[Any, Any, RunOutcome], cancel: CancelToken) -> RunOutcome:
    """Run an async target's ``invoke`` as a task of its own, so that a cancel can stop it
    (it gets CancelledError) and, should it not stop, leave it behind after a grace. One
    future wakes the caller at the task's end or at the cancel, whichever comes first: a
    second task waiting on the token, and ``asyncio.wait`` over both, cost every run about
    10 us of the event loop's time."""
    call = asyncio.ensure_future(invoke)
    woken: asyncio.Future[None] = call.get_loop().create_future()

    def wake(*_: object) -> None:
        if not woken.done():
            woken.set_result(None)

    call.add_done_callback(wake)
    forget = cancel.on_cancel(wake)
    try:
        await woken
    finally:
        forget()
        if not call.done():
            call.cancel()
            await asyncio.wait({call}, timeout=CANCEL_GRACE_SECONDS)
        if call.done() and not call.cancelled():
            call.exception()  # retrieved here; handled below
    if cancel.cancelled:
        raise RunPermanentError(f"cancelled ({cancel.reason})")
    if call.cancelled():
        raise TransientRunError("the target was cancelled by its own code")
    error = call.exception()
    if error is None:
        return call.result()
    raised = _run_error(error)
    if raised is error:
        raise error
    raise raised from error


class PythonRunnerType:
    """The ``python`` runner type: ``{"type": "python", "target": "module:function"}``."""

    name = "python"

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Return ``{"type": "python", "target": ...}`` once the target resolves.

        Raises ``InvalidSchedule`` on ``runner.<key>`` for an unknown key, and on
        ``runner.target`` when it is missing, not of the ``module:function`` form, or does not
        import to a callable (the module is imported here, in this process).
        """
        unknown = set(config) - FIELDS
        if unknown:
            key = sorted(unknown)[0]
            raise InvalidSchedule(f"unknown field {key!r}", field=f"runner.{key}")
        target = config.get("target")
        if not isinstance(target, str) or len(target) > TARGET_LIMIT or not _TARGET.match(target):
            raise InvalidSchedule(
                "target must be an import path of the form 'package.module:function'",
                field="runner.target",
            )
        try:
            _resolve(target)
        except _Unresolvable as exc:
            raise InvalidSchedule(exc.message, field="runner.target") from exc
        return {"type": self.name, "target": target}

    def build(self, config: Mapping[str, Any]) -> Runner:
        """A runner for a validated configuration; the target is resolved at each run."""
        return PythonRunner(str(config["target"]))


__all__ = ["PythonRunner", "PythonRunnerType"]
