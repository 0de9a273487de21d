"""Plots a gpu_bench CSV (tests/bench/gpu_run.sh) as docs/perf-gpu.png.

usage: /usr/bin/python3 tests/bench/plot_gpu.py GPU_CSV OUT_PNG
"""
import csv
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    rows = [r for r in csv.DictReader(open(src)) if r["register_to_kernel_done_ms"] not in ("", "nan")]
    sizes = ["1MiB", "64MiB", "1GiB"]
    modes = []
    for r in rows:
        if r["mode"] not in modes:
            modes.append(r["mode"])
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(modes)
    for k, mode in enumerate(modes):
        ys = []
        for s in sizes:
            v = [float(r["register_to_kernel_done_ms"]) for r in rows
                 if r["mode"] == mode and r["size"] == s]
            ys.append(v[0] if v else float("nan"))
        xs = [i + (k - (len(modes) - 1) / 2) * width for i in range(len(sizes))]
        ax.bar(xs, ys, width, label=mode)
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels(sizes)
    ax.set_yscale("log")
    ax.set_ylabel("register → consumer's first full-read kernel done (ms, log)")
    ax.set_title("GPU handoff on an H200: gpuipcd against the pinned copy path and torch.multiprocessing")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
