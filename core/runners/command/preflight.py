"""What a ``command`` runner is worth being told when it is saved: warnings, never errors.

A program that is not installed yet may be installed before the first run, so a missing one is
not a reason to refuse the schedule; but finding out only at the first due time (which fails
the run and pauses the schedule, ``TargetUnavailable``) is finding out late. So the save looks
the program up as the run will, and says so when it is not there:

- ``command_not_found``: ``argv[0]`` is not found on the PATH agents get (the service's, or
  ``DEFAULT_PATH``), or, for a path with a ``/`` in it, not there: a relative one is read from
  the schedule's working directory, where every run starts;
- ``script_not_found``: ``argv[1]`` is a relative path to a script (``my_agent.py``) and there
  is no such file in that directory: the interpreter starts, then fails at once.

The lookups are what ``CommandRunner._check_executable`` does at each attempt, and as cheap (a
few ``stat`` calls). A declared agent (``agent``: the operator's argv) is the operator's to
install, and is not looked at.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from agentcron.core.runners.containment import DEFAULT_PATH

# The suffixes of scripts an interpreter is given as its first argument.
SCRIPT_SUFFIXES: Final = frozenset({".py", ".sh", ".bash", ".js", ".mjs", ".ts", ".rb", ".pl"})

WarningItem = dict[str, str]


def agent_path(service_env: Mapping[str, str] | None = None) -> str:
    """The PATH every agent gets (``core.runners.containment.agent_environment``)."""
    env = os.environ if service_env is None else service_env
    return env.get("PATH") or DEFAULT_PATH


def command_warnings(
    runner: Mapping[str, Any], workdir: Path | None, path: str | None = None
) -> list[WarningItem]:
    """The warnings of a validated ``runner`` config whose runs start in ``workdir`` (None:
    unknown, and relative paths are not judged), looking programs up on ``path`` (default:
    the PATH agents get). ``[]`` for any other runner type."""
    argv = runner.get("argv")
    if runner.get("type") != "command" or not isinstance(argv, list) or not argv:
        return []
    program = str(argv[0])
    search = agent_path() if path is None else path
    if os.sep in program:
        target = Path(program) if os.path.isabs(program) else None
        if target is None and workdir is not None:
            target = workdir / program
        if target is not None and not _executable(target):
            where = "" if os.path.isabs(program) else f" (relative to {workdir}, where runs start)"
            return [
                _warning(
                    "command_not_found",
                    f"{program!r} is not an executable file{where}: every run fails at once "
                    "and pauses the schedule until it is there",
                    "runner.argv.0",
                )
            ]
        return []
    if shutil.which(program, path=search) is None:
        return [
            _warning(
                "command_not_found",
                f"{program!r} is not found on the PATH agents get ({search}): every run fails "
                "at once and pauses the schedule until it is installed there, or give its "
                "absolute path",
                "runner.argv.0",
            )
        ]
    if len(argv) > 1 and workdir is not None:
        script = str(argv[1])
        if (
            not os.path.isabs(script)
            and not script.startswith("-")
            and Path(script).suffix in SCRIPT_SUFFIXES
            and not (workdir / script).is_file()
        ):
            return [
                _warning(
                    "script_not_found",
                    f"{script!r} is a relative path, read from the schedule's working "
                    f"directory {workdir}, where every run starts, and there is no such file "
                    "there: give its absolute path",
                    "runner.argv.1",
                )
            ]
    return []


def _executable(target: Path) -> bool:
    return target.is_file() and os.access(target, os.X_OK)


def _warning(code: str, message: str, field: str) -> WarningItem:
    return {"code": code, "message": message, "field": field}
