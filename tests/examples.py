"""Loading the example hosts (``examples/``) in tests as the platform would find them.

``load_entry_point`` reads a distribution's entry point from its ``pyproject.toml`` and loads it
with ``importlib.metadata.EntryPoint``, the example's directory put on ``sys.path``: what
importlib.metadata does once the distribution is installed, without installing it into the
test run's virtualenv (the e2e test of the example installs it for real, into a directory of
its own, and finds it through the installed metadata).
"""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ASTRABOX = EXAMPLES / "astrabox_provider"
PROVIDER_GROUP = "astrabox.providers.scheduler"


def load_entry_point(project: Path, group: str, name: str) -> Any:
    """The object the entry point ``name`` of ``group`` declared in ``project``'s
    pyproject.toml names."""
    declared = tomllib.loads((project / "pyproject.toml").read_text())["project"]["entry-points"]
    if str(project) not in sys.path:
        sys.path.insert(0, str(project))
    return EntryPoint(name=name, value=declared[group][name], group=group).load()
