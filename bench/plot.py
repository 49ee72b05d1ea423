"""Draw the chart of ``bench/results/latest.json`` (runs in ``bench/.venvs/plot``): one panel
per workload that was run, medians over rounds, one colour per database.

- burst: seconds from T0 until every run started, per contender (log scale);
- replicas: fires/s of the burst with one engine process and with two;
- bigidle: milliseconds spent in claim transactions, with and without the big idle table;
- idle: statements and commits per minute (title: how fast an outside change was noticed);
- steady: start delay p50/p99/max; dead tuples of ``runs`` over time.

    python -m bench.plot bench/results/latest.json bench/results/bench.png
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib  # type: ignore[import-not-found]

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # type: ignore[import-not-found]
from matplotlib.patches import Patch  # type: ignore[import-not-found]

COLOURS = {"postgresql": "tab:blue", "sqlite": "tab:orange"}
Panel = Callable[[Any, dict[str, Any]], None]


def bars(axis: Any, sections: dict[str, Any], key: str, fmt: str = "{:.3g}") -> None:
    """Horizontal bars of ``key`` per variant, one colour per database, values written."""
    names = sorted({name for section in sections.values() for name in section["medians"]})
    width = 0.8 / max(1, len(sections))
    for offset, (database, section) in enumerate(sections.items()):
        for p, name in enumerate(names):
            value = section["medians"].get(name, {}).get(key)
            y = p + (offset - (len(sections) - 1) / 2) * width
            if value:
                axis.barh(y, value, width, color=COLOURS[database])
                axis.annotate(fmt.format(value), (value, y), va="center", fontsize=8)
            elif name in section["medians"]:
                axis.annotate(" none", (0, y), va="center", fontsize=8, color="tab:red")
    axis.set_yticks(range(len(names)), names)
    legend(axis, sections)


def legend(axis: Any, sections: dict[str, Any]) -> None:
    """One colour per database, in the corner least in the way (none for one database)."""
    if len(sections) < 2:
        return
    handles = [Patch(color=COLOURS[database], label=database) for database in sections]
    axis.legend(handles=handles, loc="best", fontsize=8)


def burst(axis: Any, sections: dict[str, Any]) -> None:
    count = next(iter(sections.values()))["count"]
    bars(axis, sections, "all_started_s", "{:.3g} s")
    axis.set_xscale("log")
    axis.set_title(f"burst of {count:,}: every run started")
    axis.set_xlabel("seconds after T0 (log scale, lower is better)")


def replicas(axis: Any, sections: dict[str, Any]) -> None:
    section = sections["postgresql"]
    doubled = max(row["duplicated_max"] or 0 for row in section["medians"].values())
    bars(axis, sections, "fires_per_s", "{:.0f}/s")
    axis.set_title(f"replicas, burst of {section['count']:,}: doubled runs {doubled}")
    axis.set_xlabel("fires per second (higher is better)")


def bigidle(axis: Any, sections: dict[str, Any]) -> None:
    bars(axis, sections, "claim_ms_total", "{:.0f} ms")
    axis.set_title("bigidle: time in claims that took the due runs")
    axis.set_xlabel("milliseconds (lower is better)")


def idle(axis: Any, sections: dict[str, Any]) -> None:
    labels = ["statements/min", "commits/min"]
    width = 0.8 / len(sections)
    noticed = []
    for offset, (database, section) in enumerate(sections.items()):
        row = section["medians"]["agentcron"]
        values = [row.get("statements_per_min"), row.get("commits_per_min")]
        for p, value in enumerate(values):
            y = p + (offset - (len(sections) - 1) / 2) * width
            if value is not None:
                axis.barh(y, value, width, color=COLOURS[database])
                axis.annotate(f"{value:.3g}", (value, y), va="center", fontsize=8)
        noticed.append(f"{database} {row.get('noticed_ms')} ms")
    axis.set_yticks(range(len(labels)), labels)
    axis.set_xlim(left=0)
    legend(axis, sections)
    axis.set_title("idle, per replica; change noticed: " + ", ".join(noticed), fontsize=9)
    axis.set_xlabel("per minute, nothing due (lower is better)")


def steady(axis: Any, sections: dict[str, Any]) -> None:
    labels = ["p50", "p99", "max"]
    width = 0.8 / len(sections)
    for offset, (database, section) in enumerate(sections.items()):
        row = section["medians"]["agentcron"]
        for p, label in enumerate(labels):
            value = row.get(f"delay_{label}_ms")
            y = p + (offset - (len(sections) - 1) / 2) * width
            if value:
                axis.barh(y, value, width, color=COLOURS[database])
                axis.annotate(f"{value:.4g} ms", (value, y), va="center", fontsize=8)
    axis.set_yticks(range(len(labels)), labels)
    axis.set_xscale("log")
    legend(axis, sections)
    axis.set_title("steady, 100 fires/s: start delay (started - due)")
    axis.set_xlabel("milliseconds (log scale, lower is better)")


def dead_tuples(axis: Any, sections: dict[str, Any]) -> None:
    samples = sections["postgresql"]["per_round"][0]["agentcron"]["dead_tuples"]
    for table, style in (("runs", "-"), ("schedules", "--")):
        axis.plot([s["t"] for s in samples], [s.get(table, 0) for s in samples], style, label=table)
    axis.set_title("steady on postgresql: dead tuples")
    axis.set_xlabel("seconds after T0")
    axis.legend(fontsize=8)


def _any(sections: dict[str, Any] | None) -> bool:
    return bool(sections)


def _pg(sections: dict[str, Any] | None) -> bool:
    return bool(sections) and "postgresql" in sections  # type: ignore[operator]


# Which panel draws which workload, when its sections (by database) are there.
PANELS: list[tuple[str, Panel, Callable[[dict[str, Any] | None], bool]]] = [
    ("burst", burst, _any),
    ("replicas", replicas, _pg),
    ("bigidle", bigidle, _pg),
    ("idle", idle, _any),
    ("steady", steady, _any),
    ("steady", dead_tuples, _pg),
]


def main(source: Path, target: Path) -> None:
    report = json.loads(source.read_text())
    found = report["workloads"]
    chosen = [
        (panel, found[name])
        for name, panel, wanted in PANELS
        if name in found and wanted(found[name])
    ]
    columns = min(3, len(chosen)) or 1
    rows = -(-len(chosen) // columns) or 1
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 3.6 * rows), squeeze=False)
    for axis, (panel, sections) in zip(axes.flat, chosen, strict=False):
        panel(axis, sections)
    for axis in list(axes.flat)[len(chosen) :]:
        axis.set_visible(False)
    box = report["machine"]
    figure.suptitle(
        f"agentcron benchmarks{' (quick)' if report.get('quick') else ''}: PostgreSQL "
        f"{box['postgresql'].split()[0]}, {box['cpus']} CPUs; medians over rounds"
    )
    figure.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=110)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
