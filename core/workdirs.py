"""Where a run's files live: ``<data dir>/tasks/<owner>/<schedule id>``.

One root per owner, so a sandbox can hide every other owner's files at once; one directory per
schedule, stable across its runs, so files an agent keeps survive even when each run starts a
fresh conversation (isolated mode). Directories of the layout before owners had roots
(``tasks/<schedule id>``) move into their owner's root with the schedule's next new task.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from agentcron.core.keys import check_owner
from agentcron.core.logging import get_logger

log = get_logger(__name__)


class TaskDirectories:
    """The task directories under one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.root = (data_dir / "tasks").resolve()
        # Schedules with a directory of the old layout, found at start.
        self._legacy = legacy_task_directories(self.root)
        # Each owner's root as a string: a claim asks for hundreds of working directories,
        # and joining Paths was a tenth of its CPU.
        self._owner_roots: dict[str, str] = {}

    def workdir(self, owner: str, schedule_id: uuid.UUID) -> str:
        """The working directory of a schedule's tasks (moved from the old layout if need be)."""
        root = self._owner_roots.get(owner)
        if root is None:
            # check_owner's names cannot be "..", contain "/" or start with "." (ValueError
            # if one got in): the owner is one path component, never a way out of tasks/.
            root = self._owner_roots[owner] = str(self.root / check_owner(owner))
        if schedule_id in self._legacy:
            self._legacy.discard(schedule_id)
            adopt_legacy_directory(self.root, owner, schedule_id)
        return f"{root}{os.sep}{schedule_id}"


def make_workdir(path: str) -> None:
    """Make the task directory ``path``, and its parents, unless it exists (``OSError`` if it
    cannot be made). Every attempt asks: a schedule's later runs find it with one ``stat``,
    its first makes it with one ``mkdir`` (``Path.mkdir(parents=True, exist_ok=True)`` took
    two or three system calls, and raised and caught an exception, on every run)."""
    if os.path.isdir(path):
        return
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
    except FileNotFoundError:  # the owner's root (or the data directory) is not there yet
        os.makedirs(path, exist_ok=True)


def task_workdir(data_dir: Path, owner: str, schedule_id: uuid.UUID) -> Path:
    """Where a schedule's runs will start (``TaskDirectories.workdir``'s answer for a new
    schedule), without touching the disk: for saying so before the first run."""
    return (data_dir / "tasks").resolve() / check_owner(owner) / str(schedule_id)


def legacy_task_directories(tasks_dir: Path) -> set[uuid.UUID]:
    """Schedule ids with a directory straight under ``tasks_dir`` (the layout before
    per-owner roots); an already moved one is a symbolic link, and is left out."""
    found: set[uuid.UUID] = set()
    try:
        entries = list(os.scandir(tasks_dir))
    except FileNotFoundError:
        return found
    for entry in entries:
        try:
            schedule_id = uuid.UUID(entry.name)
        except ValueError:
            continue  # an owner's root
        if str(schedule_id) == entry.name and entry.is_dir(follow_symlinks=False):
            found.add(schedule_id)
    return found


def adopt_legacy_directory(tasks_dir: Path, owner: str, schedule_id: uuid.UUID) -> None:
    """Move ``tasks/<schedule id>`` to ``tasks/<owner>/<schedule id>`` unless that exists,
    and leave a relative symbolic link in its place.

    One rename, atomic on one filesystem, so files an agent kept there are never half moved;
    the link keeps the stored workdir of every task saved before the move (``Task.workdir``)
    leading to the same directory.
    """
    legacy = tasks_dir / str(schedule_id)
    workdir = tasks_dir / owner / str(schedule_id)
    if os.path.lexists(workdir) or not legacy.is_dir() or legacy.is_symlink():
        return
    try:
        workdir.parent.mkdir(parents=True, exist_ok=True)
        os.rename(legacy, workdir)
        os.symlink(os.path.join(owner, str(schedule_id)), legacy)
    except OSError as exc:
        log.warning("task_directory_not_moved", schedule_id=str(schedule_id), error=str(exc))
        return
    log.info("task_directory_moved", schedule_id=str(schedule_id), to=str(workdir))
