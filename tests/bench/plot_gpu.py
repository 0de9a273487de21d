"""Plots one GPU benchmark run (tests/bench/gpu_run.sh) as one PNG: for each
idle time, the C rows (driver floor, gpuipc, gpuipc with busy polling, the
pinned copy) and the Python rows (torch.multiprocessing, gpuipc, gpuipc with
busy polling) of cuda-ipc handoffs, median µs to a usable pointer / tensor.

usage: python3 tests/bench/plot_gpu.py GPU_CSV HANDOFF_CSV OUT_PNG
"""
import os
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_summary import SIZES, f, pick, rows  # noqa: E402

GROUPS = [(s, p) for s in SIZES for p in ("reused", "fresh")]


def value(rs, system, kind, pattern, idle, size, col):
    r = pick(rs, system=system, kind=kind, pattern=pattern, idle_ms=idle, size=size)
    return f(r, col) if r else float("nan")


def panel(ax, rs, systems, col, idle, title):
    width = 0.8 / len(systems)
    for k, (system, kind, label) in enumerate(systems):
        ys = [value(rs, system, kind, "-" if system == "pinned" else p, idle, s, col)
              for s, p in GROUPS]
        xs = [i + (k - (len(systems) - 1) / 2) * width for i in range(len(GROUPS))]
        ax.bar(xs, ys, width, label=label)
    ax.set_xticks(range(len(GROUPS)))
    ax.set_xticklabels([f"{s}\n{p}" for s, p in GROUPS], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("µs, median (log)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)


def main(cpath, pypath, dst):
    c, py = rows(cpath), rows(pypath)
    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    for row, idle in enumerate(("2", "50")):
        panel(axes[row][0], c, [("floor", "cuda-ipc", "driver floor"),
                                ("gpuipc", "cuda-ipc", "gpuipc (C)"),
                                ("gpuipc-busy", "cuda-ipc", "gpuipc, busy polling"),
                                ("pinned", "host", "pinned host copy")],
              "usable_p50_us", idle, f"C, cuda-ipc, {idle} ms idle: to a usable pointer")
        panel(axes[row][1], py, [("torch.mp", "cuda-ipc", "torch.multiprocessing"),
                                 ("gpuipc", "cuda-ipc", "gpuipc (Python, torch)"),
                                 ("gpuipc+cupy", "cuda-ipc", "gpuipc (Python, CuPy)"),
                                 ("gpuipc-busy", "cuda-ipc", "gpuipc, busy polling")],
              "tensor_p50_us", idle, f"Python, {idle} ms idle: to a usable tensor")
    fig.suptitle("GPU handoff on an H200 (tests/bench/gpu_run.sh)")
    fig.tight_layout()
    fig.savefig(dst, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
