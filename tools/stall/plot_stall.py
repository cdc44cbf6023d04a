#!/usr/bin/python3
"""Stacked bar plot of a stall CSV (written by sophon-stall-report).

Usage: tools/stall/plot_stall.py STALL_CSV OUT_PNG [--title TEXT]

One bar per row (model or mode): compute, prep stall and fetch stall seconds of
the configured epoch, each labelled with its share of the epoch.
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

PARTS = [
    ("compute_seconds", "compute", "#4c72b0"),
    ("prep_stall_seconds", "prep stall", "#dd8452"),
    ("fetch_stall_seconds", "fetch stall", "#c44e52"),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("png")
    parser.add_argument("--title", default="Epoch time: compute and data stalls")
    args = parser.parse_args()

    with open(args.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot_stall: {args.csv} has no rows")
    labels = [r["label"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(rows) + 2), 4.5))
    bottoms = [0.0] * len(rows)
    for key, name, color in PARTS:
        values = [float(r[key]) for r in rows]
        bars = ax.bar(labels, values, bottom=bottoms, label=name, color=color)
        for bar, value, bottom, r in zip(bars, values, bottoms, rows):
            epoch = float(r["configured_epoch_seconds"])
            if epoch > 0 and value / epoch >= 0.06:
                ax.text(bar.get_x() + bar.get_width() / 2, bottom + value / 2,
                        f"{100 * value / epoch:.0f}%", ha="center", va="center",
                        color="white", fontsize=9)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.set_ylabel("seconds per epoch")
    ax.set_title(args.title)
    ax.set_ylim(0, 1.2 * (max(bottoms) or 1.0))  # headroom for the legend
    ax.legend(loc="upper center", ncol=3, frameon=False)
    fig.tight_layout()
    fig.savefig(args.png, dpi=120)
    print(f"plot_stall: wrote {args.png}")


if __name__ == "__main__":
    main()
