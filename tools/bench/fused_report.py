#!/usr/bin/python3
"""Summary of tools/bench/fused.sh: fused model arrays against the same models run one by one.

Reads OUT/fused-B.json (sophon-train --fused-models=B --report-json) and OUT/separate-B-k.json
(the ordinary run of model k) for each B of --models, prints markdown tables and writes
OUT/fused.csv. Wall and data-wait seconds are summed over a run's epochs (the warm-up batches
are not in them); models x images per second = B * images / wall for a fused run, and all
images of the B separate runs / their summed wall for the separate ones. Prep CPU seconds are
the preprocessing CPU time on both nodes (sophon-train's workers and the server's prep workers).

Usage: fused_report.py --out=DIR --models=1,2,4,8
"""
import argparse
import csv
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("fused_report.py: cannot read the report %s: %s" % (path, e))


def totals(report):
    """(wall seconds, data-wait seconds, images, prep CPU seconds on both nodes) summed over the
    epochs of one report."""
    epochs = report["epochs"]
    if not epochs:
        sys.exit("fused_report.py: a report has no epochs")
    return (sum(e["wall_seconds"] for e in epochs), sum(e["data_wait_seconds"] for e in epochs),
            sum(e["images"] for e in epochs),
            sum(e["local_prep_cpu_seconds"] + e["server_prep_cpu_seconds"] for e in epochs))


def share(wait, wall):
    return wait / wall if wall > 0 else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the directory of fused.sh's reports")
    parser.add_argument("--models", required=True, help="comma-separated model counts B")
    args = parser.parse_args()
    counts = [int(b) for b in args.models.split(",")]

    rows, losses, warnings = [], [], []
    for b in counts:
        fused = load(os.path.join(args.out, "fused-%d.json" % b))
        if fused.get("fused_models") != b or len(fused["epochs"][-1]["models"]) != b:
            sys.exit("fused_report.py: fused-%d.json does not report %d fused models" % (b, b))
        f_wall, f_wait, f_images, f_prep = totals(fused)
        labels = fused.get("model_hyperparameters", [])
        s_wall = s_wait = s_images = s_prep = 0.0
        max_diff = 0.0
        for k in range(b):
            separate = load(os.path.join(args.out, "separate-%d-%d.json" % (b, k)))
            wall, wait, images, prep = totals(separate)
            s_wall, s_wait, s_images = s_wall + wall, s_wait + wait, s_images + images
            s_prep += prep
            if images != f_images:
                warnings.append("B=%d: separate run %d trained %d images, the fused run %d" %
                                (b, k, images, f_images))
            f_loss = fused["epochs"][-1]["models"][k]["mean_loss"]
            s_loss = separate["epochs"][-1]["mean_loss"]
            max_diff = max(max_diff, abs(f_loss - s_loss))
            losses.append((b, k, labels[k] if k < len(labels) else "", f_loss, s_loss,
                           f_loss - s_loss))
        f_rate = b * f_images / f_wall if f_wall > 0 else 0.0
        s_rate = s_images / s_wall if s_wall > 0 else 0.0
        rows.append({
            "models": b,
            "images_per_model": f_images,
            "fused_wall_seconds": round(f_wall, 3),
            "separate_wall_seconds": round(s_wall, 3),
            "fused_model_images_per_second": round(f_rate, 1),
            "separate_model_images_per_second": round(s_rate, 1),
            "speedup": round(f_rate / s_rate, 3) if s_rate > 0 else 0.0,
            "fused_data_wait_share": round(share(f_wait, f_wall), 4),
            "separate_data_wait_share": round(share(s_wait, s_wall), 4),
            "fused_prep_cpu_seconds": round(f_prep, 2),
            "separate_prep_cpu_seconds": round(s_prep, 2),
            "max_final_loss_abs_diff": "%.3g" % max_diff,
        })

    path = os.path.join(args.out, "fused.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)

    print("| B | images/model | fused s | separate s | fused models x img/s | "
          "separate models x img/s | speed-up | data wait fused | data wait separate | "
          "prep CPU-s fused | prep CPU-s separate | max loss diff |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %d | %d | %.2f | %.2f | %.1f | %.1f | %.2fx | %.0f%% | %.0f%% | %.1f | %.1f | %s |" % (
            r["models"], r["images_per_model"], r["fused_wall_seconds"],
            r["separate_wall_seconds"], r["fused_model_images_per_second"],
            r["separate_model_images_per_second"], r["speedup"],
            100 * r["fused_data_wait_share"], 100 * r["separate_data_wait_share"],
            r["fused_prep_cpu_seconds"], r["separate_prep_cpu_seconds"],
            r["max_final_loss_abs_diff"]))
    print()
    print("Final-epoch mean loss per model (fused slice vs its separate run):")
    print()
    print("| B | model | hyperparameters | fused loss | separate loss | difference |")
    print("|---:|---:|---|---:|---:|---:|")
    for b, k, label, f_loss, s_loss, diff in losses:
        print("| %d | %d | %s | %.6f | %.6f | %+.2e |" % (b, k, label, f_loss, s_loss, diff))
    for w in warnings:
        print("fused_report.py: warning: " + w, file=sys.stderr)
    print()
    print("fused_report.py: CSV %s" % path)


if __name__ == "__main__":
    main()
