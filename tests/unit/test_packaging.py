"""The installed names: everything imports ``agentcron.core`` and ``agentcron.web``; and the
extras, said alike in pyproject.toml and core/extras.py, their packages imported only behind
the check.

The repository keeps ``core/`` and ``web/`` at its top, where a bare ``import core`` would still
work from a checkout; installed, only ``agentcron`` exists, so such an import would fail in a
host's process, or pick up the host's own ``core``. Both names must also never be loaded twice
(once under each name) in one process: SQLAlchemy would see two sets of the same tables.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

from agentcron.core.errors import StartupError
from agentcron.core.extras import EXTRAS, ExtraMissing, have, missing, require

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("core", "web", "migrations", "tests", "bench", "agentcron")
BARE = {"core", "web"}


def _bare_imports(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [
            f"{path.relative_to(REPO)}:{node.lineno}: {name}"
            for name in names
            if name.split(".")[0] in BARE
        ]
    return found


def test_no_module_imports_core_or_web_by_their_checkout_names() -> None:
    files = [
        path
        for top in SOURCES
        for path in (REPO / top).rglob("*.py")
        if ".venvs" not in path.parts and not (REPO / top).is_symlink()
    ]
    assert len(files) > 100
    assert [hit for path in files for hit in _bare_imports(path)] == []


def test_the_package_links_to_the_checkout_folders() -> None:
    for name in ("core", "web", "migrations"):
        link = REPO / "agentcron" / name
        assert link.is_symlink() and link.resolve() == (REPO / name).resolve()


# The extras: pyproject.toml's optional dependencies and core/extras.py name the same sets, and
# no module a slim install loads imports an extra's package at its top.

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# Where an extra's package may be imported at a module's top: modules loaded only behind the
# check of their extra (the command line and the dashboard: server; /mcp and `agentcron mcp`:
# mcp; the SMTP exchange: email; the spans: otel, imported only once core.tracing has checked).
BEHIND_A_CHECK = (
    "web/cli/",
    "web/dashboard/",
    "web/mcp/",
    "core/notify/email/transport.py",
    "core/otel.py",
)


def _module(requirement: str) -> str:
    """The module of a requirement such as ``prometheus-client>=0.20``; OpenTelemetry's
    packages share one namespace (``opentelemetry-sdk`` is ``opentelemetry.sdk``)."""
    name = re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower()
    return name.replace("-", "." if name.startswith("opentelemetry-") else "_")


def test_the_extras_of_pyproject_are_those_core_extras_checks() -> None:
    optional: dict[str, list[str]] = PYPROJECT["optional-dependencies"]
    named = {extra: tuple(map(_module, needs)) for extra, needs in optional.items()}
    assert {extra: named[extra] for extra in EXTRAS} == EXTRAS
    assert set(optional) == {*EXTRAS, "all", "dev"}
    assert optional["all"] == [f"agentcron[{','.join(EXTRAS)}]"]
    assert "agentcron[all]" in optional["dev"]  # make install, make test and CI get every one
    base = {_module(requirement) for requirement in PYPROJECT["dependencies"]}
    assert base.isdisjoint(module for modules in EXTRAS.values() for module in modules)
    assert PYPROJECT["scripts"] == {"agentcron": "agentcron.web.command:main"}


def _top_level_imports(path: Path) -> list[tuple[int, str]]:
    """The modules ``path`` imports when it is imported: its top, not its functions, and not
    what is under ``if TYPE_CHECKING:``."""
    found: list[tuple[int, str]] = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_no_module_outside_a_check_imports_an_extras_package_at_its_top() -> None:
    optional = {m.split(".")[0] for modules in EXTRAS.values() for m in modules} | {"mcp_types"}
    hits = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for top in ("core", "web")
        for path in (REPO / top).rglob("*.py")
        if not str(path.relative_to(REPO)).startswith(BEHIND_A_CHECK)
        for line, name in _top_level_imports(path)
        if name.split(".")[0] in optional
    ]
    assert hits == []


def test_a_missing_extra_is_one_line_naming_it() -> None:
    assert all(have(extra) for extra in EXTRAS)  # the dev install has every one
    assert missing("email", "an email channel") == (
        "an email channel needs the email extra: pip install 'agentcron[email]'"
    )
    require("metrics", "GET /metrics")  # installed: nothing to say
    with pytest.raises(KeyError):
        missing("no-such-extra", "anything")
    assert issubclass(ExtraMissing, StartupError)
