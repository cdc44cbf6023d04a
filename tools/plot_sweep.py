#!/usr/bin/python3
"""Plots a sophon-plan --sweep CSV: predicted epoch time against network bandwidth,
one panel per storage CPU count, one line per planner, the lower bound dashed.

Usage: /usr/bin/python3 tools/plot_sweep.py SWEEP.csv OUT.png
Needs the Debian package python3-matplotlib (tools/install-deps.sh installs it).
"""

import csv
import math
import sys
from collections import defaultdict

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError as exc:  # pragma: no cover - depends on the host
    sys.exit(f"plot_sweep: missing Python module ({exc}); install python3-matplotlib")

PLANNERS = ["nooff", "resizeoff", "alloff", "sophon", "optimal"]
STYLES = {
    "nooff": dict(color="tab:gray", marker="o"),
    "resizeoff": dict(color="tab:blue", marker="s"),
    "alloff": dict(color="tab:purple", marker="^"),
    "sophon": dict(color="tab:orange", marker="D"),
    "optimal": dict(color="tab:green", marker="*", linewidth=2.2),
}


def number(text):
    """CSV numbers; empty or 'null' (an infinite time) becomes NaN, which is not drawn."""
    return float(text) if text not in ("", "null") else math.nan


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    csv_path, png_path = sys.argv[1], sys.argv[2]
    # series[cpus][planner] = [(mbit, epoch_s)], bound[cpus] = [(mbit, bound_s)]
    series = defaultdict(lambda: defaultdict(list))
    bound = defaultdict(dict)
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            cpus, mbit = number(row["remote_cpus"]), number(row["net_mbit"])
            series[cpus][row["planner"]].append((mbit, number(row["epoch_s"])))
            bound[cpus][mbit] = number(row["lower_bound_s"])
    if not series:
        sys.exit(f"plot_sweep: {csv_path} has no rows")

    cpu_counts = sorted(series)
    cols = min(3, len(cpu_counts))
    rows = math.ceil(len(cpu_counts) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.0 * rows), squeeze=False,
                             sharey=True)
    for ax, cpus in zip(axes.flat, cpu_counts):
        for planner in PLANNERS:
            points = sorted(series[cpus].get(planner, []))
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], label=planner,
                        markersize=4, **STYLES[planner])
        b = sorted(bound[cpus].items())
        ax.plot([p[0] for p in b], [p[1] for p in b], "k--", linewidth=1, label="lower bound")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{cpus:g} storage CPUs")
        ax.set_xlabel("network bandwidth (Mbit/s)")
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("predicted epoch time (s)")
    for ax in list(axes.flat)[len(cpu_counts):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("Sophon cost model: predicted epoch time by planner")
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    main()
