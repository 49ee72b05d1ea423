"""The ``file`` channel: writes the delivery body as one JSON line into the task's directory."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentcron.core.errors import InvalidSchedule, RunPermanentError
from agentcron.core.notify.base import DeliveryRequest, check_keys, encode_body, required_string

# A channel's own keys, besides the "type" and "notify_on" every channel has.
FIELDS = frozenset({"path", "mode"})


class FileNotifier:
    """``{"type": "file", "path": "relative/path", "mode": "append" | "replace"}``.

    ``append`` adds one JSON line per run (a daily log); ``replace`` atomically rewrites the
    file with the latest run, so a reader never sees half a document.

    The file stays inside the task's working directory whatever the agent did there: an
    absolute path or a ``..`` component is refused when the schedule is saved and again when
    delivering, and a symbolic link on the way (a directory or the file itself) fails the
    delivery instead of being followed.
    """

    name = "file"

    def validate(
        self, channel: Mapping[str, Any], field: str, *, allow_private: bool
    ) -> dict[str, Any]:
        check_keys(channel, FIELDS, field)
        path = required_string(channel, "path", field, max_len=500)
        if path.startswith(("/", "\\")) or ".." in path.replace("\\", "/").split("/"):
            raise InvalidSchedule(
                "path must stay inside the task's working directory", field=f"{field}.path"
            )
        mode = channel.get("mode", "append")
        if mode not in ("append", "replace"):
            raise InvalidSchedule("mode must be append or replace", field=f"{field}.mode")
        return {"type": self.name, "path": path, "mode": mode}

    def target(self, channel: Mapping[str, Any]) -> str:
        return f"file:{channel['path']}"

    async def deliver(self, request: DeliveryRequest) -> None:
        path = str(request.channel["path"])
        parts = [part for part in path.split("/") if part not in ("", ".")]
        if path.startswith("/") or not parts or ".." in parts:
            # validate() refuses these; a channel saved before it did must not get out either.
            raise RunPermanentError("file channel path leaves the task's working directory")
        line = encode_body(request.body).decode("utf-8") + "\n"
        append = request.channel.get("mode", "append") == "append"
        await asyncio.to_thread(_write, request.workdir, parts, line, append)


# Every component is opened relative to its parent's descriptor and never followed if it is a
# symbolic link: the agent owns the directory and may have planted links in it (a sandboxed
# agent cannot write outside it; the service writing through its link could), and checking a
# resolved path first would leave a window between the check and the open to swap one in.
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def _write(root: Path, parts: list[str], line: str, append: bool) -> None:
    root.mkdir(parents=True, exist_ok=True)
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, dir_fd=directory)
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=directory)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refused(part, exc) from exc
                raise
            os.close(directory)
            directory = inner
        name = parts[-1]
        if append:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | _NOFOLLOW
            _write_all(_open_file(name, flags, directory), line)
        else:
            # A fresh name (O_EXCL), then one rename over the target: a reader never sees half
            # a document, and a link at the target's name is replaced, not followed.
            tmp = f".{name}.{uuid.uuid4().hex}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
            _write_all(_open_file(tmp, flags, directory), line)
            try:
                os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=directory)
                raise
    finally:
        os.close(directory)


def _open_file(name: str, flags: int, directory: int) -> int:
    try:
        fd = os.open(name, flags, 0o644, dir_fd=directory)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise _refused(name, exc) from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device would block or leak
        os.close(fd)
        raise RunPermanentError(f"file channel target {name!r} is not a regular file")
    return fd


def _write_all(fd: int, line: str) -> None:
    try:
        data = memoryview(line.encode("utf-8"))
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def _refused(name: str, exc: OSError) -> RunPermanentError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return RunPermanentError(
            f"file channel path leaves the task's working directory ({name!r} is a symbolic "
            "link or not a directory)"
        )
    return RunPermanentError(f"file channel cannot write {name!r}: {exc.strerror}")
