#!/usr/bin/python3
"""Plots of `make bench` results: plot.py RESULTS.csv OUTDIR.

Writes perf-latency.png (1-connection p50 of gpuipcd against its raw floor
and Redis), perf-throughput.png (ops/s by connections) and perf-handoff.png
(host handoff time by size and mode)."""
import csv
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return float("nan")


def main():
    src, out = sys.argv[1], sys.argv[2]
    rows = list(csv.reader(open(src)))
    main_rows = [r for r in rows if r and r[0] in ("floor", "gpuipcd", "redis")
                 and len(r) >= 7]
    handoff = [r for r in rows if r and r[0] == "handoff" and len(r) >= 4]

    one = [r for r in main_rows if r[2] == "1" and r[3] == "1"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels = [f"{r[0]}: {r[1]}" for r in one]
    ax.barh(labels, [num(r[4]) for r in one], color=[
        {"floor": "#999999", "gpuipcd": "#1f77b4", "redis": "#d62728"}[r[0]] for r in one])
    ax.set_xlabel("round trip p50, µs (1 connection)")
    ax.invert_yaxis()
    ax.set_title("gpuipcd vs raw AF_UNIX floor and Redis GET")
    fig.tight_layout()
    fig.savefig(f"{out}/perf-latency.png", dpi=110)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    series = {}
    for r in main_rows:
        if r[3] != "1":
            continue
        series.setdefault(f"{r[0]}: {r[1]}", []).append((int(r[2]), num(r[6])))
    for name, pts in series.items():
        if not any(k in name for k in ("lookup (library)", "raw lookup shape", "GET",
                                       "register (library)", "raw register shape")):
            continue
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("connections (threads; 2 vCPUs)")
    ax.set_ylabel("ops/s")
    ax.legend(fontsize=7)
    ax.set_title("throughput by connections")
    fig.tight_layout()
    fig.savefig(f"{out}/perf-throughput.png", dpi=110)

    if handoff:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        modes = [m for m in dict.fromkeys(r[2] for r in handoff) if "returned" not in m]
        sizes = list(dict.fromkeys(r[1] for r in handoff))
        w = 0.8 / max(1, len(modes))
        for i, m in enumerate(modes):
            ys = []
            for s in sizes:
                v = [num(r[3]) for r in handoff if r[1] == s and r[2] == m]
                ys.append(v[0] if v else float("nan"))
            ax.bar([j + i * w for j in range(len(sizes))], ys, width=w, label=m)
        ax.set_xticks([j + w * (len(modes) - 1) / 2 for j in range(len(sizes))])
        ax.set_xticklabels(sizes)
        ax.set_yscale("log")
        ax.set_ylabel("register -> every byte read, ms")
        ax.legend(fontsize=7)
        ax.set_title("host handoff")
        fig.tight_layout()
        fig.savefig(f"{out}/perf-handoff.png", dpi=110)
    print(f"plots in {out}/perf-*.png")


if __name__ == "__main__":
    main()
