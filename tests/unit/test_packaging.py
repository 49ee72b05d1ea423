"""The installed names: everything imports ``agentcron.core`` and ``agentcron.web``.

The repository keeps ``core/`` and ``web/`` at its top, where a bare ``import core`` would still
work from a checkout; installed, only ``agentcron`` exists, so such an import would fail in a
host's process, or pick up the host's own ``core``. Both names must also never be loaded twice
(once under each name) in one process: SQLAlchemy would see two sets of the same tables.
"""

from __future__ import annotations

import ast
from pathlib import Path

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
