#!/usr/bin/env python3
"""Where the 1000 x 64 KiB handoff's time goes (issue 13), as column
batches of 125: each Python layer and C call of the producer and the
consumer timed per batch, the driver calls inside them (when
$GPUIPC_LIBCUDA is the timecuda shim), a cProfile of each side, and the
warm cost of the torch calls a consumer could build its tensors with.

usage: gpu_many_profile.py [ROUNDS]     (needs $GPUIPC_SOCKET, as gpu_run.sh)
Prints a report on stdout; not a CSV (gpu_handoff.py has the figures).
Last comes a timeline of the pipelined path (register_batches() and
lookup_batches() + to_torch()): when each batch's request went out and came
back on the producer's thread, when each lookup ran on the consumer's, and
when the consumer had the batch and its tensors.
"""
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
import uuid

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_handoff import BATCH_COLUMNS, P, Probe, driver_delta, warm_cuda  # noqa: E402

N = 1000


def us(s):
    return f"{s * 1e6:8.0f}"


def micro():
    """Warm per-call costs, µs (median of 5 runs of 1000 calls)."""
    from gpuipc.client import _cuda_pointer_device, _torch_layout
    warm_cuda()
    xs = [torch.full((64 << 10,), P, dtype=torch.uint8, device="cuda") for _ in range(1000)]
    base = torch.empty(2 << 20, dtype=torch.uint8, device="cuda")
    cai = [type("C", (), {"__cuda_array_interface__": {
        "shape": (64 << 10,), "typestr": "|u1", "data": (x.data_ptr(), False), "version": 3,
        "strides": None, "stream": None}})() for x in xs]
    cases = {
        "_torch_layout(x)": lambda i: _torch_layout(xs[i]),
        "_cuda_pointer_device(ptr)": lambda i: _cuda_pointer_device(xs[i].data_ptr()),
        "torch.as_tensor(CAI object)": lambda i: torch.as_tensor(cai[i], device="cuda"),
        "base[a:b] (uint8 slice)": lambda i: base[(i % 32) << 16:((i % 32) + 1) << 16],
        "base[a:b].view(float32)": lambda i: base[(i % 32) << 16:((i % 32) + 1) << 16]
        .view(torch.float32),
        "base.narrow(0, a, n)": lambda i: base.narrow(0, (i % 32) << 16, 64 << 10),
        "base.as_strided((n,), (1,), a)": lambda i: base.as_strided((64 << 10,), (1,),
                                                                    (i % 32) << 16),
    }
    print("warm per-call costs (median of 5 x 1000 calls), us:")
    for name, fn in cases.items():
        runs = []
        for _ in range(5):
            t = time.perf_counter()
            for i in range(1000):
                fn(i)
            runs.append((time.perf_counter() - t) / 1000)
        print(f"  {name:34s} {statistics.median(runs) * 1e6:7.2f}")


def top(prof, n=14):
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(n)
    lines = [ln for ln in s.getvalue().splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if "ncalls" in ln), 0)
    return "\n".join("    " + ln for ln in lines[start:start + n + 1])


def consumer(prefix, res, ready, profile):
    import gpuipc
    warm_cuda()
    probe = Probe(["gpuipc_batch_view_lookup"])
    c = gpuipc.connect()
    ready.set()
    keep, rows = [], []
    prof = cProfile.Profile() if profile else None
    for b in range(N // BATCH_COLUMNS):
        if prof:
            prof.enable()
        d0 = probe.driver()
        t0 = time.monotonic()
        bv = c.lookup_batch(f"{prefix}/{b}", timeout=120)
        t1 = time.monotonic()
        cols = [bv[name] for name in bv.columns]
        t2 = time.monotonic()
        ts = [torch.as_tensor(col, device="cuda") for col in cols]
        t3 = time.monotonic()
        fast = list(bv.to_torch().values())
        t4 = time.monotonic()
        if prof:
            prof.disable()
        drv, calls = driver_delta(d0, probe.driver())
        rows.append((t0, t1 - t0, probe.dur["gpuipc_batch_view_lookup"], drv, calls, t2 - t1,
                     t3 - t2, t3, t4 - t3))
        keep.append((bv, cols, ts + fast))
    bad = sum(int((t != P).sum().item()) for _, _, ts in keep for t in ts)
    for bv, cols, _ in keep:
        for col in cols:
            col.release()
        bv.release()
    del keep
    res.put(("consumer", rows, bad, top(prof) if prof else ""))


def producer(prefix, res, go, profile):
    import gpuipc
    warm_cuda()
    probe = Probe(["gpuipc_batch_register", "gpuipc_batch_add_column"])
    c = gpuipc.connect()
    xs = [torch.full((64 << 10,), P, dtype=torch.uint8, device="cuda") for _ in range(N)]
    torch.cuda.synchronize()
    go.wait()
    rows, ids = [], []
    prof = cProfile.Profile() if profile else None
    for b in range(N // BATCH_COLUMNS):
        cols = {f"t{i}": xs[i] for i in range(b * BATCH_COLUMNS, (b + 1) * BATCH_COLUMNS)}
        if prof:
            prof.enable()
        d0 = probe.driver()
        t0 = time.monotonic()
        ids.append(c.register_batch(f"{prefix}/{b}", cols, ephemeral=True))
        t1 = time.monotonic()
        if prof:
            prof.disable()
        drv, calls = driver_delta(d0, probe.driver())
        rows.append((t0, t1 - t0, probe.dur["gpuipc_batch_register"], drv, calls, t1))
    res.put(("producer", rows, top(prof) if prof else ""))
    for rid in ids:
        c.wait_released(rid, timeout=120)


def pipe_consumer(prefix, res, ready):
    import gpuipc
    warm_cuda()
    c = gpuipc.connect()
    looked = {}
    plain = c.lookup_batch

    def timed(name, timeout=None):
        t0 = time.monotonic()
        bv = plain(name, timeout)
        looked[name] = (t0, time.monotonic())
        return bv
    c.lookup_batch = timed
    ready.set()
    names = [f"{prefix}/{b}" for b in range(N // BATCH_COLUMNS)]
    rows, keep = [], []
    for name, bv in zip(names, c.lookup_batches(names, timeout=120)):
        t0 = time.monotonic()
        ts = list(bv.to_torch().values())
        rows.append((name, t0, time.monotonic()))
        keep.append((bv, ts))
    bad = sum(int((t != P).sum().item()) for _, ts in keep for t in ts)
    for bv, _ in keep:
        bv.release()
    del keep
    res.put(("consumer", [(n, looked[n][0], looked[n][1], a, b) for n, a, b in rows], bad))


def pipe_producer(prefix, res, go):
    import gpuipc
    from gpuipc import batch
    warm_cuda()
    c = gpuipc.connect()
    xs = [torch.full((64 << 10,), P, dtype=torch.uint8, device="cuda") for _ in range(N)]
    torch.cuda.synchronize()
    sent = []
    plain_send, plain_build = batch.send, batch.build

    def timed_send(conn, name, b, flags):
        t0 = time.monotonic()
        r = plain_send(conn, name, b, flags)
        sent.append((name.decode(), t0, time.monotonic()))
        return r

    def timed_build(columns, meta, event):
        t0 = time.monotonic()
        b = plain_build(columns, meta, event)
        built.append((t0, time.monotonic()))
        return b
    built = []
    batch.send, batch.build = timed_send, timed_build
    go.wait()
    t0 = time.monotonic()
    items = ((f"{prefix}/{b}", {f"t{i}": xs[i] for i in range(b * BATCH_COLUMNS,
                                                               (b + 1) * BATCH_COLUMNS)})
             for b in range(N // BATCH_COLUMNS))
    ids = c.register_batches(items, ephemeral=True)
    res.put(("producer", t0, sent, built))
    for rid in ids:
        c.wait_released(rid, timeout=120)


def run_pair(ctx, prefix, cons_fn, cons_args, prod_fn, prod_args):
    """Runs cons_fn(prefix, res, ready, *cons_args) and prod_fn(prefix, res,
    go, *prod_args) as two processes, lets the producer go 0.5 s after the
    consumer is ready, and returns {"producer": ..., "consumer": ...}: the
    rest of the message each put on res."""
    prefix += uuid.uuid4().hex[:8]
    res, ready, go = ctx.Queue(), ctx.Event(), ctx.Event()
    cons = ctx.Process(target=cons_fn, args=(prefix, res, ready) + cons_args)
    prod = ctx.Process(target=prod_fn, args=(prefix, res, go) + prod_args)
    cons.start()
    prod.start()
    ready.wait(120)
    time.sleep(0.5)
    go.set()
    got = {}
    while len(got) < 2:
        m = res.get(timeout=600)
        got[m[0]] = m[1:]
    prod.join(120)
    cons.join(120)
    return got


def pipelined(ctx):
    got = run_pair(ctx, "pipe/", pipe_consumer, (), pipe_producer, ())
    start, sent, built = got["producer"]
    crows, bad = got["consumer"]
    if bad:
        raise SystemExit("gpu_many_profile: wrong bytes")
    print(f"--- pipelined: {(crows[-1][4] - start) * 1e3:.1f} ms from the first register to the "
          "last tensor; per batch, us from the start:")
    print("   built from..to | sent..replied (producer thread) | lookup from..to (consumer "
          "thread) | tensors from..to")
    for (b0, b1), (_, s0, s1), (_, l0, l1, t0, t1) in zip(built, sent, crows):
        print(f"   {us(b0 - start)}..{us(b1 - start)} | {us(s0 - start)}..{us(s1 - start)} | "
              f"{us(l0 - start)}..{us(l1 - start)} | {us(t0 - start)}..{us(t1 - start)}")


def one(ctx, profile):
    got = run_pair(ctx, "prof/", consumer, (profile,), producer, (profile,))
    prows, ptop = got["producer"]
    crows, bad, ctop = got["consumer"]
    if bad:
        raise SystemExit("gpu_many_profile: wrong bytes")
    start = prows[0][0]
    print(f"--- {'cProfile on' if profile else 'no profiler'}: 1000 x 64 KiB in "
          f"{N // BATCH_COLUMNS} batches: {(crows[-1][7] - start) * 1e3:.1f} ms "
          "from the first register to the last tensor")
    print("  producer, per batch (us): register_batch | C gpuipc_batch_register | driver "
          "in it | done at")
    for r in prows:
        print(f"   {us(r[1])} {us(r[2])} {r[3]:8.0f} {us(r[5] - start)}   {r[4]}")
    print("  consumer, per batch (us): started at | lookup_batch | C lookup | driver in it | "
          "bv[name] x125 | as_tensor x125 | done at | then to_torch() (125 tensors)")
    for r in crows:
        print(f"   {us(r[0] - start)} {us(r[1])} {us(r[2])} {r[3]:8.0f} {us(r[5])} {us(r[6])} "
              f"{us(r[7] - start)} {us(r[8])}   {r[4]}")
    if profile:
        print("  producer cProfile (8 register_batch calls):\n" + ptop)
        print("  consumer cProfile (8 lookups, columns, tensors):\n" + ctop)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    micro()
    ctx = mp.get_context("spawn")
    for _ in range(rounds):
        one(ctx, False)
    one(ctx, True)
    for _ in range(2):
        pipelined(ctx)


if __name__ == "__main__":
    main()
