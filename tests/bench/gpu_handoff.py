#!/usr/bin/env python3
"""GPU handoff from Python, side by side in one run: gpuipc against
torch.multiprocessing (issue 13).

Metric: from the producer's call (``register`` / ``Queue.put``) to the
consumer holding a usable torch tensor (``t1``), and to its first full-read
kernel done (``t2``: ``(t != P).sum().item()``), CLOCK_MONOTONIC
(time.monotonic) in both processes of one host.  Producer and consumer are
separate processes (spawn); the control messages go through
multiprocessing queues outside the timed span.

Before every handoff the producer sleeps the same idle time on every path
(2 ms and 50 ms: after 50 ms every driver call is slower).  Patterns:
``reused``, the caching allocator hands the same block back each round
(gpuipc producers register it ``cacheable=True``, so the consumer keeps it
mapped); ``fresh``, ``torch.cuda.empty_cache()`` between rounds, so every
round is a new cudaMalloc.  Kinds: gpuipc with the default allocator
(``cuda-ipc``) and with ``expandable_segments:True`` (``cuda-vmm``).  The
first round of each series is a warm-up and is left out.  Then 1000 tensors
of 64 KiB handed over back to back.

usage: gpu_handoff.py [ROUNDS] > gpu_handoff.csv     (needs $GPUIPC_SOCKET,
       the gpuipc package on PYTHONPATH and libgpuipc; see gpu_run.sh)
"""
import os
import statistics
import sys
import time
import uuid

import torch
import torch.multiprocessing as mp

P = 91
SIZES = [(1 << 20, "1MiB"), (64 << 20, "64MiB"), (1 << 30, "1GiB")]
IDLES = [0.002, 0.050]


def pct(v, q):
    s = sorted(v)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def warm_cuda():
    torch.cuda.init()
    w = torch.full((1 << 20,), P, dtype=torch.uint8, device="cuda")
    assert int((w != P).sum()) == 0
    torch.cuda.synchronize()


# ---- gpuipc -------------------------------------------------------------


def gi_consumer(prefix, n, res, ready):
    import gpuipc
    warm_cuda()
    c = gpuipc.connect()
    ready.set()
    for i in range(n):
        v = c.lookup(f"{prefix}/{i}", timeout=120)
        t = torch.as_tensor(v, device="cuda")
        t1 = time.monotonic()
        bad = int((t != P).sum().item())
        t2 = time.monotonic()
        del t
        v.release()
        res.put((i, t1, t2, bad))
    c.close()


def gi_producer(prefix, n, size, pattern, idle, res, go):
    import gpuipc
    warm_cuda()
    c = gpuipc.connect()
    go.wait()
    for i in range(n):
        if pattern == "fresh":
            torch.cuda.empty_cache()
        x = torch.full((size,), P, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        time.sleep(idle)
        t0 = time.monotonic()
        rid = c.register(f"{prefix}/{i}", x, cacheable=(pattern == "reused"))
        t_reg = time.monotonic()
        res.put(("t0", i, t0, t_reg - t0))
        c.wait_released(rid, timeout=120)
        if pattern == "fresh":
            c.unregister(f"{prefix}/{i}")
        del x
    kind = c.stat(f"{prefix}/{n - 1}").kind if pattern == "reused" else ""
    if pattern == "reused":
        # cuda-vmm registrations are durable: give the memory back.
        for i in range(n):
            c.unregister(f"{prefix}/{i}")
    res.put(("done", kind, 0, 0))
    c.close()


def run_gpuipc(ctx, size, pattern, idle, rounds, vmm):
    prefix = "bench/" + uuid.uuid4().hex[:8]
    res, ready, go = ctx.Queue(), ctx.Event(), ctx.Event()
    cons = ctx.Process(target=gi_consumer, args=(prefix, rounds, res, ready))
    old = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if vmm:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    prod = ctx.Process(target=gi_producer, args=(prefix, rounds, size, pattern, idle, res, go))
    cons.start()
    prod.start()
    if old is None:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    else:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = old
    if not ready.wait(120):
        raise SystemExit("gpu_handoff: the consumer did not start")
    go.set()
    t0, t1, t2, reg, kind = {}, {}, {}, {}, ""
    while len(t1) < rounds or len(t0) < rounds or not kind:
        m = res.get(timeout=600)
        if m[0] == "t0":
            t0[m[1]], reg[m[1]] = m[2], m[3]
        elif m[0] == "done":
            kind = m[1] or "cuda-ipc"
        else:
            i, a, b, bad = m
            if bad:
                raise SystemExit(f"gpu_handoff: {bad} wrong bytes in round {i}")
            t1[i], t2[i] = a, b
    prod.join(120)
    cons.join(120)
    keep = range(1, rounds)     # round 0 warms up
    return ([(t1[i] - t0[i]) * 1e6 for i in keep], [(t2[i] - t0[i]) * 1e6 for i in keep],
            [reg[i] * 1e6 for i in keep], kind)


# ---- torch.multiprocessing ----------------------------------------------


def mp_consumer(q, res, ready):
    warm_cuda()
    ready.set()
    while True:
        m = q.get()
        if m is None:
            break
        i, t = m
        t1 = time.monotonic()
        bad = int((t != P).sum().item())
        t2 = time.monotonic()
        del t
        res.put((i, t1, t2, bad))


def run_mp(ctx, size, pattern, idle, rounds):
    q, res, ready = ctx.Queue(), ctx.Queue(), ctx.Event()
    cons = ctx.Process(target=mp_consumer, args=(q, res, ready))
    cons.start()
    if not ready.wait(120):
        raise SystemExit("gpu_handoff: the torch.mp consumer did not start")
    lat, ker = [], []
    for i in range(rounds):
        if pattern == "fresh":
            torch.cuda.empty_cache()
        x = torch.full((size,), P, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        time.sleep(idle)
        t0 = time.monotonic()
        q.put((i, x))
        j, t1, t2, bad = res.get(timeout=600)
        if bad:
            raise SystemExit(f"gpu_handoff: torch.mp saw {bad} wrong bytes")
        if i > 0:
            lat.append((t1 - t0) * 1e6)
            ker.append((t2 - t0) * 1e6)
        del x
    q.put(None)
    cons.join(120)
    return lat, ker


# ---- many small tensors ---------------------------------------------------


def gi_many_consumer(prefix, n, res, ready):
    import gpuipc
    warm_cuda()
    c = gpuipc.connect()
    ready.set()
    keep = []
    for i in range(n):
        v = c.lookup(f"{prefix}/{i}", timeout=120)
        keep.append((v, torch.as_tensor(v, device="cuda")))
    t1 = time.monotonic()
    bad = sum(int((t != P).sum().item()) for _, t in keep)
    for v, t in keep:
        del t
        v.release()
    res.put((t1, bad))


def gi_many_producer(prefix, n, res, go):
    import gpuipc
    warm_cuda()
    c = gpuipc.connect()
    xs = [torch.full((64 << 10,), P, dtype=torch.uint8, device="cuda") for _ in range(n)]
    torch.cuda.synchronize()
    go.wait()
    t0 = time.monotonic()
    ids = [c.register(f"{prefix}/{i}", x) for i, x in enumerate(xs)]
    res.put(("t0", t0))
    for rid in ids:
        c.wait_released(rid, timeout=120)
    res.put(("done", 0))


def many_gpuipc(ctx, n):
    prefix = "many/" + uuid.uuid4().hex[:8]
    res, ready, go = ctx.Queue(), ctx.Event(), ctx.Event()
    cons = ctx.Process(target=gi_many_consumer, args=(prefix, n, res, ready))
    prod = ctx.Process(target=gi_many_producer, args=(prefix, n, res, go))
    cons.start()
    prod.start()
    ready.wait(120)
    time.sleep(0.5)
    go.set()
    t0 = t1 = None
    while t0 is None or t1 is None:
        m = res.get(timeout=600)
        if m[0] == "t0":
            t0 = m[1]
        elif m[0] == "done":
            continue
        else:
            if m[1]:
                raise SystemExit("gpu_handoff: wrong bytes among the small tensors")
            t1 = m[0]
    prod.join(120)
    cons.join(120)
    return (t1 - t0) * 1e6


def mp_many_consumer(q, n, res, ready):
    warm_cuda()
    ready.set()
    keep = [q.get() for _ in range(n)]
    t1 = time.monotonic()
    bad = sum(int((t != P).sum().item()) for t in keep)
    res.put((t1, bad))
    q.get()


def many_mp(ctx, n):
    q, res, ready = ctx.Queue(), ctx.Queue(), ctx.Event()
    cons = ctx.Process(target=mp_many_consumer, args=(q, n, res, ready))
    cons.start()
    ready.wait(120)
    xs = [torch.full((64 << 10,), P, dtype=torch.uint8, device="cuda") for _ in range(n)]
    torch.cuda.synchronize()
    time.sleep(0.5)
    t0 = time.monotonic()
    for x in xs:
        q.put(x)
    t1, bad = res.get(timeout=600)
    if bad:
        raise SystemExit("gpu_handoff: torch.mp saw wrong bytes among the small tensors")
    q.put(None)
    cons.join(120)
    return (t1 - t0) * 1e6


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    ctx = mp.get_context("spawn")
    print("system,kind,pattern,idle_ms,size,rounds,tensor_p50_us,tensor_p99_us,"
          "kernel_p50_us,register_p50_us")
    def case(what, fn):
        try:
            fn()
        except Exception as e:  # one broken case must not hide the others
            print(f"error,{what},{type(e).__name__}: {e}".replace("\n", " "), flush=True)

    for size, label in SIZES:
        n = rounds if size < (1 << 30) else max(10, rounds * 10 // 16)
        for idle in IDLES:
            for pattern in ("reused", "fresh"):
                def mp_row():
                    lat, ker = run_mp(ctx, size, pattern, idle, n)
                    print(f"torch.mp,cuda-ipc,{pattern},{idle * 1e3:g},{label},{len(lat)},"
                          f"{statistics.median(lat):.0f},{pct(lat, 0.99):.0f},"
                          f"{statistics.median(ker):.0f},", flush=True)
                case(f"torch.mp {label} {pattern} {idle}", mp_row)
                for vmm in (False, True):
                    def gi_row():
                        lat, ker, reg, kind = run_gpuipc(ctx, size, pattern, idle, n, vmm)
                        k = kind if pattern == "reused" else ("cuda-vmm" if vmm else "cuda-ipc")
                        print(f"gpuipc,{k},{pattern},{idle * 1e3:g},{label},{len(lat)},"
                              f"{statistics.median(lat):.0f},{pct(lat, 0.99):.0f},"
                              f"{statistics.median(ker):.0f},{statistics.median(reg):.0f}",
                              flush=True)
                    case(f"gpuipc {label} {pattern} {idle} vmm={vmm}", gi_row)
    for _ in range(3):
        case("torch.mp many", lambda: print(
            f"torch.mp,cuda-ipc,1000x64KiB,0,64KiB,1000,{many_mp(ctx, 1000):.0f},,,", flush=True))
        case("gpuipc many", lambda: print(
            f"gpuipc,cuda-ipc,1000x64KiB,0,64KiB,1000,{many_gpuipc(ctx, 1000):.0f},,,",
            flush=True))


if __name__ == "__main__":
    main()
