"""Every test the documentation names exists.

docs/reliability.md proves each promise by naming its tests, and docs/design.md and
docs/security.md do the same for theirs: a test renamed, merged or removed without its row
would leave a promise proved by nothing while the table still says otherwise. A name is
`` `tests/path.py::test_name` ``, or `` `::test_name` `` for a test of the path named last before
it (in the row, or above the table). docs/benchmarks.md is left out: its sections are records of
past commits, whose tests were what they were then.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
HISTORY = {"benchmarks.md"}
CITATION = re.compile(r"`(tests/[\w/.-]+\.py)?(?:::(\w+))?[^`]*`")


def _missing(doc: Path) -> list[str]:
    missing: list[str] = []
    last: str | None = None
    for match in CITATION.finditer(doc.read_text()):
        path, name = match.group(1), match.group(2)
        if path is not None:
            last = path
            if not (REPO / path).is_file():
                missing.append(f"{doc.name}: {path} (no such file)")
                continue
        if name is None:
            continue
        if last is None:
            missing.append(f"{doc.name}: ::{name} (no file named before it)")
        elif not re.search(rf"def {name}\b", (REPO / last).read_text()):
            missing.append(f"{doc.name}: {last}::{name}")
    return missing


def test_every_test_a_doc_names_exists() -> None:
    missing = [line for doc in DOCS if doc.name not in HISTORY for line in _missing(doc)]
    assert not missing, "named in the docs but not found:\n" + "\n".join(missing)
