"""Third-party runner and channel types arrive through entry points, as installed packages do."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentcron.core.notify as notify_registry
import agentcron.core.runners as runner_registry
from agentcron.core.errors import InvalidSchedule

PLUGIN = """
from agentcron.core.notify.file import FileNotifier
from agentcron.core.runners.command.config import CommandRunnerType


class EchoRunnerType(CommandRunnerType):
    name = "echo-plugin"


class LogNotifier(FileNotifier):
    name = "log-plugin"
"""


@pytest.fixture
def installed_plugin(tmp_path: Path) -> Iterator[None]:
    """A distribution on sys.path declaring both entry-point groups (as pip would install)."""
    (tmp_path / "acme_agentcron.py").write_text(PLUGIN)
    dist = tmp_path / "acme_agentcron-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-agentcron\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[agentcron.runners]\necho = acme_agentcron:EchoRunnerType\n\n"
        "[agentcron.notifiers]\nlog = acme_agentcron:LogNotifier\n"
    )
    sys.path.insert(0, str(tmp_path))
    runner_registry._plugins_loaded = False
    notify_registry._plugins_loaded = False
    try:
        yield
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("acme_agentcron", None)
        runner_registry._REGISTRY.pop("echo-plugin", None)
        notify_registry._REGISTRY.pop("log-plugin", None)
        runner_registry._plugins_loaded = False
        notify_registry._plugins_loaded = False


def test_plugin_types_are_found_through_entry_points(installed_plugin: None) -> None:
    config = runner_registry.validate_runner({"type": "echo-plugin", "argv": ["echo"]})
    assert config["type"] == "echo-plugin"
    channels = notify_registry.validate_channels([{"type": "log-plugin", "path": "log.jsonl"}])
    assert channels[0]["type"] == "log-plugin"


def test_without_the_plugin_the_type_is_unknown() -> None:
    with pytest.raises(InvalidSchedule) as caught:
        runner_registry.validate_runner({"type": "echo-plugin", "argv": ["echo"]})
    assert caught.value.field == "runner.type"
