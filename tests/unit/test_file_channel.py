"""The ``file`` channel writes inside the task's working directory and nowhere else, whatever
the channel says and whatever the agent left in that directory (links, FIFOs)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentcron.core.errors import InvalidSchedule, RunPermanentError
from agentcron.core.notify.base import DeliveryRequest
from agentcron.core.notify.file import FileNotifier

BODY = {"type": "run.finished", "run": {"id": "r1", "status": "succeeded"}}


async def deliver(workdir: Path, path: str, mode: str = "append") -> None:
    channel: dict[str, Any] = {"type": "file", "path": path, "mode": mode}
    await FileNotifier().deliver(DeliveryRequest("r1.0", channel, BODY, workdir))


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """A task directory and, beside it, a directory standing for everything outside it."""
    workdir, outside = tmp_path / "task", tmp_path / "outside"
    workdir.mkdir()
    outside.mkdir()
    return workdir, outside


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "\\etc", "../x", "a/../../x", "a/..", "..\\x", "a\\..\\..\\x"]
)
def test_paths_leaving_the_directory_are_refused_when_saved(path: str) -> None:
    with pytest.raises(InvalidSchedule, match="stay inside") as caught:
        FileNotifier().validate({"type": "file", "path": path}, "notify.0", allow_private=False)
    assert caught.value.field == "notify.0.path"


@pytest.mark.parametrize("path", ["/tmp/escape.jsonl", "../escape.jsonl", "a/../../escape"])
async def test_a_stored_path_leaving_the_directory_is_refused_when_delivering(
    dirs: tuple[Path, Path], path: str
) -> None:
    # A channel saved before validation refused it (or written straight into the database).
    workdir, _ = dirs
    with pytest.raises(RunPermanentError, match="leaves the task's working directory"):
        await deliver(workdir, path)
    assert not (workdir.parent / "escape.jsonl").exists()


async def test_append_and_replace_write_inside(dirs: tuple[Path, Path]) -> None:
    workdir, _ = dirs
    await deliver(workdir, "logs/daily/runs.jsonl")
    await deliver(workdir, "logs/daily/runs.jsonl")
    await deliver(workdir, "./latest.json", mode="replace")
    await deliver(workdir, "latest.json", mode="replace")
    lines = (workdir / "logs" / "daily" / "runs.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [BODY, BODY]
    assert json.loads((workdir / "latest.json").read_text()) == BODY
    assert sorted(p.name for p in workdir.iterdir()) == ["latest.json", "logs"]  # no .tmp left


async def test_a_symlinked_directory_on_the_way_is_not_followed(dirs: tuple[Path, Path]) -> None:
    workdir, outside = dirs
    (workdir / "logs").symlink_to(outside)
    with pytest.raises(RunPermanentError, match="symbolic link"):
        await deliver(workdir, "logs/runs.jsonl")
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(
    ("planted", "mode", "refused"),
    [
        ("runs.jsonl", "append", True),  # the link is not followed
        ("latest.json", "replace", False),  # the link itself is replaced
        # The channel once wrote "<name>.tmp" then renamed it: an agent that linked that name to
        # a file outside had the service overwrite it (its content replaced by the run's JSON).
        ("latest.json.tmp", "replace", False),
    ],
)
async def test_a_planted_symlink_is_never_written_through(
    dirs: tuple[Path, Path], planted: str, mode: str, refused: bool
) -> None:
    workdir, outside = dirs
    victim = outside / "victim.txt"
    victim.write_text("precious\n")
    (workdir / planted).symlink_to(victim)
    path = planted.removesuffix(".tmp")
    if refused:
        with pytest.raises(RunPermanentError, match="symbolic link"):
            await deliver(workdir, path, mode)
    else:
        await deliver(workdir, path, mode)
        assert not (workdir / path).is_symlink()
        assert json.loads((workdir / path).read_text()) == BODY
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("planted", [os.mkfifo, Path.mkdir], ids=["fifo", "directory"])
async def test_a_fifo_or_a_directory_in_place_of_the_file_fails_permanently(
    dirs: tuple[Path, Path], planted: Callable[[Path], None]
) -> None:
    workdir, _ = dirs
    planted(workdir / "runs.jsonl")
    with pytest.raises(RunPermanentError):  # and a FIFO never blocks the delivery
        await asyncio.wait_for(deliver(workdir, "runs.jsonl"), 5)
