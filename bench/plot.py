"""Draw the burst chart from ``bench/results/latest.json`` (runs in ``bench/.venvs/plot``).

Left: seconds from T0 until every run started and until every run finished, per contender
(medians over rounds, log scale). Right: commits per fire. Title: count, rounds, machine.

    python -m bench.plot bench/results/latest.json bench/results/burst.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib  # type: ignore[import-not-found]

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # type: ignore[import-not-found]


def main(source: Path, target: Path) -> None:
    report = json.loads(source.read_text())
    medians = report["medians"]
    names = list(medians)
    started = [medians[n]["all_started_s"] or 0 for n in names]
    finished = [medians[n]["all_finished_s"] or 0 for n in names]
    commits = [medians[n]["commits_per_fire"] or 0 for n in names]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), width_ratios=[2, 1])
    positions = range(len(names))
    width = 0.38
    left.barh([p - width / 2 for p in positions], started, width, label="every run started")
    left.barh([p + width / 2 for p in positions], finished, width, label="every run finished")
    left.set_yticks(list(positions), names)
    left.set_xscale("log")
    left.set_xlabel("seconds after T0 (log scale, lower is better)")
    left.legend(loc="upper right")
    floor = min((value for value in started if value), default=0.01)
    for p, name, value in zip(positions, names, started, strict=True):
        if value:
            left.annotate(f"{value:.3g} s", (value, p - width / 2), va="center", fontsize=8)
        else:  # nothing ran: say how many runs were dropped instead of an empty row
            lost = medians[name]["lost_max"]
            left.annotate(f"{lost:,} runs dropped", (floor, p), va="center", color="tab:red")
    right.barh(list(positions), commits, color="tab:gray")
    right.set_yticks(list(positions), [])
    right.set_xlabel("commits per fire")
    for p, value in zip(positions, commits, strict=True):
        right.annotate(f"{value:.3g}", (value, p), va="center", fontsize=8)
    box = report["machine"]
    figure.suptitle(
        f"Burst: {report['count']:,} one-shot schedules due at T0, PostgreSQL "
        f"{box['postgresql'].split()[0]}, {box['cpus']} CPUs; medians of "
        f"{report['rounds']} round(s)"
    )
    figure.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=120)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
