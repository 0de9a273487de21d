#!/usr/bin/env python3
"""torch.multiprocessing comparison for tests/bench/gpu_bench.c.

A producer process fills a CUDA uint8 tensor and puts it on a
torch.multiprocessing queue (CUDA IPC under the hood); a consumer process,
CUDA already initialised, takes it and runs a reading kernel over every byte
((t != pattern).sum(), synchronised): the first kernel able to read.  Timed
with time.monotonic() (CLOCK_MONOTONIC, comparable across the processes)
from just before put() to the kernel's completion.  "warm" puts the same
tensor again: the consumer's IPC handle cache makes that a second open of
the same storage.  Prints CSV rows in gpu_bench's format.

usage: gpu_torch_mp.py [ROUNDS]"""
import statistics
import sys
import time

try:
    import torch
    import torch.multiprocessing as mp
except ImportError as e:  # pragma: no cover - only on hosts without torch
    print(f"gpu_torch_mp: torch is not importable ({e}); skipped", file=sys.stderr)
    sys.exit(3)

SIZES = [(1 << 20, "1MiB"), (64 << 20, "64MiB"), (1 << 30, "1GiB")]
PATTERN = 91


def consumer(q, res, ready):
    torch.cuda.init()
    w = torch.full((1 << 20,), PATTERN, dtype=torch.uint8, device="cuda")
    assert int((w != PATTERN).sum()) == 0
    torch.cuda.synchronize()
    ready.set()
    keep = []   # hold the first tensor: the second put then hits the IPC cache
    for _ in range(2):
        t = q.get()
        keep.append(t)
        bad = int((t != PATTERN).sum())   # .item() synchronises
        t_done = time.monotonic()
        res.put((t_done, bad))
        q.get()                           # "go on" marker
    del keep


def one_size(ctx, size, rounds):
    cold, warm = [], []
    for _ in range(rounds):
        q, res, ready = ctx.Queue(), ctx.Queue(), ctx.Event()
        p = ctx.Process(target=consumer, args=(q, res, ready))
        p.start()
        src = torch.full((size,), PATTERN, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        if not ready.wait(120):
            raise SystemExit("gpu_torch_mp: the consumer did not start")
        time.sleep(0.05)
        for lst in (cold, warm):
            t0 = time.monotonic()
            q.put(src)
            t_done, bad = res.get(timeout=600)
            if bad:
                raise SystemExit(f"gpu_torch_mp: {bad} wrong bytes")
            lst.append((t_done - t0) * 1e3)
            q.put(None)
        p.join(120)
        if p.exitcode != 0:
            raise SystemExit(f"gpu_torch_mp: consumer exited with {p.exitcode}")
        del src
    return statistics.median(cold), statistics.median(warm)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    if not torch.cuda.is_available():
        print("gpu_torch_mp: torch sees no CUDA device; skipped", file=sys.stderr)
        sys.exit(3)
    ctx = mp.get_context("spawn")
    for size, name in SIZES:
        c, w = one_size(ctx, size, rounds)
        print(f"gpu,{name},torch.multiprocessing cold,{rounds},{c:.4f},,,,,")
        print(f"gpu,{name},torch.multiprocessing warm,{rounds},{w:.4f},,,,,")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
