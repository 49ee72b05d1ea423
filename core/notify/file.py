"""The ``file`` channel: writes the delivery body as one JSON line into the task's directory."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.errors import InvalidSchedule, RunPermanentError
from core.notify.base import DeliveryRequest, check_keys, encode_body, required_string

# A channel's own keys, besides the "type" and "notify_on" every channel has.
FIELDS = frozenset({"path", "mode"})


class FileNotifier:
    """``{"type": "file", "path": "relative/path", "mode": "append" | "replace"}``.

    ``append`` adds one JSON line per run (a daily log); ``replace`` atomically rewrites the
    file with the latest run, so a reader never sees half a document.
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
        root = request.workdir.resolve()
        path = (root / str(request.channel["path"])).resolve()
        if not path.is_relative_to(root):
            raise RunPermanentError("file channel path leaves the task's working directory")
        line = encode_body(request.body).decode("utf-8") + "\n"
        append = request.channel.get("mode", "append") == "append"
        await asyncio.to_thread(_write, path, line, append)


def _write(path: Path, line: str, append: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if append:
        with path.open("a", encoding="utf-8") as handle:
            handle.write(line)
    else:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(line, encoding="utf-8")
        tmp.replace(path)
