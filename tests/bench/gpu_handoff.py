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
``py-floor`` rows are the least a handoff from Python costs, with no broker
and no library (see run_pyfloor); the ``py-relay`` rows are the same through
a forwarding C process ($GPU_HANDOFF_RELAY, gpu_bench, which gpu_run.sh
sets), the least a brokered handoff from Python costs.  The
first round of each series is a warm-up and is left out.  Then 1000 tensors
of 64 KiB handed over back to back: one name each (``gpuipc``), and as eight
column batches of 125 (``gpuipc-batch``: one register and one lookup per
batch, the tensors from ``BatchView.to_torch()``; ``gpuipc-batch-views``:
the same with a column view and ``torch.as_tensor`` per tensor;
``gpuipc-batch-pipelined``: both sides pipelined, the producer with
``Client.register_batches()`` (the next batch built while the request of one
goes out) and the consumer with ``Client.lookup_batches()`` (one lookup
ahead while it makes the tensors of one with ``to_torch()``).

usage: gpu_handoff.py [ROUNDS] > gpu_handoff.csv     (needs $GPUIPC_SOCKET,
       the gpuipc package on PYTHONPATH and libgpuipc; see gpu_run.sh)
$GPU_HANDOFF_SIZES (e.g. "1MiB,64MiB") limits the sizes; $GPU_HANDOFF_MANY=N
runs N passes of the 1000 small tensors (default 3, 0 none), and
$GPU_HANDOFF_MANY_ROWS (e.g. "torch.mp,gpuipc-batch-pipelined") picks their
rows; $GPU_HANDOFF_LABEL (e.g. "-busy") is
appended to the gpuipc rows' system, and then torch.mp is left out (a
second pass of gpuipc alone, with other settings); $GPU_HANDOFF_PASSES=N runs
each row of a case N times with new processes, the case's rows in turn, and
reports each row over all its rounds (pass p starts at the case's row p,
so each row takes each place in turn); $GPU_HANDOFF_ROWS (e.g.
"torch.mp,py-floor,gpuipc") picks the rows of each case, by the names
torch.mp, py-floor, py-relay, gpuipc, gpuipc+cupy and gpuipc/vmm (default
all), and gpuipc/as_tensor (only when named: the gpuipc row with the
consumer's tensor made by torch.as_tensor, in the same passes, for an A/B);
$GPU_HANDOFF_TENSOR picks how the gpuipc torch consumers make their
tensor: ``to_torch`` (the default) ``view.to_torch()``, ``as_tensor``
``torch.as_tensor(view, device="cuda")``, ``dlpack``
``torch.from_dlpack(view)``.

Profile columns (gpuipc rows, with $GPU_HANDOFF_PROFILE=1; NaN without):
the C call under Python's register, the driver time inside it (when
$GPUIPC_LIBCUDA is the timecuda shim, as gpu_run.sh's profile pass sets it),
when the consumer's C lookup and its Python lookup returned (from the
producer's call), the driver time inside the lookup, the driver calls of the
last round, and the Python time of the register before its C call began.
With $GPUIPC_TRACE_DIR set (a trace build's), the Python side's points go
there too, for trace_summary.py.
"""
import os
import statistics
import sys
import time
import uuid

import torch
import torch.multiprocessing as mp

P = 91
# The gpuipc torch consumer's constructor (GPU_HANDOFF_TENSOR): view.to_torch()
# by default, torch.as_tensor(view) (the __cuda_array_interface__), or
# torch.from_dlpack(view).
TENSOR = os.environ.get("GPU_HANDOFF_TENSOR", "to_torch")
if TENSOR not in ("to_torch", "as_tensor", "dlpack"):
    raise SystemExit(f"gpu_handoff: GPU_HANDOFF_TENSOR={TENSOR!r}: to_torch, as_tensor or dlpack")
try:
    import cupy  # noqa: F401  (CuPy consumers, when it imports)
    HAVE_CUPY = True
except ImportError:
    HAVE_CUPY = False
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


# ---- profile: the C calls under the Python ones, the driver under both ---


# $GPU_HANDOFF_PROFILE=1: time the C calls under the Python ones (Probe).
# Off by default: its wrapper is a Python call and two clock reads on each
# side of the handoff, cold after the idle time, which the other rows do
# not pay.
PROFILE = os.environ.get("GPU_HANDOFF_PROFILE", "") == "1"


class Probe:
    """Times libgpuipc's C entry points as Python calls them, and, when
    GPUIPC_LIBCUDA is the timecuda shim (tests/bench/timecuda.c), the driver
    calls libgpuipc makes.  Everything is read per round.  Off (on=False,
    or PROFILE unset) it wraps nothing, and its times are NaN."""

    def __init__(self, names, on=None):
        import ctypes
        from gpuipc import _lib
        self.t_end = dict.fromkeys(names, float("nan"))
        self.dur = dict.fromkeys(names, float("nan"))
        self.shim = None
        self._c = ctypes
        if not (PROFILE if on is None else on):
            return
        for n in names:
            fn = getattr(_lib.lib, n)

            def wrap(*a, _fn=fn, _n=n):
                t = time.monotonic()
                r = _fn(*a)
                e = time.monotonic()
                self.dur[_n] = e - t
                self.t_end[_n] = e
                return r
            setattr(_lib.lib, n, wrap)
        path = os.environ.get("GPUIPC_LIBCUDA", "")
        if "timecuda" in path:
            self.shim = ctypes.CDLL(path)
            self.shim.timecuda_get.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                               ctypes.POINTER(ctypes.c_ulonglong),
                                               ctypes.POINTER(ctypes.c_ulonglong)]

    def driver(self):
        """{entry point: (calls, ns)} so far."""
        out = {}
        if self.shim is None:
            return out
        c = self._c
        name, calls, ns = c.c_char_p(), c.c_ulonglong(), c.c_ulonglong()
        i = 0
        while self.shim.timecuda_get(i, c.byref(name), c.byref(calls), c.byref(ns)) == 0:
            out[name.value.decode()] = (calls.value, ns.value)
            i += 1
        return out


def write_marks(marks):
    """The Python side's points, as $GPUIPC_TRACE_DIR/trace.PID-py in
    proto/trace.h's format, beside a trace build's own files
    (trace_summary.py puts both under one process)."""
    d = os.environ.get("GPUIPC_TRACE_DIR")
    if not d:
        return
    with open(os.path.join(d, f"trace.{os.getpid()}-py"), "w") as f:
        for t, point in marks:
            if t != t:      # NaN: a Probe time without PROFILE
                continue
            f.write(f"{t * 1e6:.3f} {point} 0\n")


def driver_delta(a, b):
    """Driver time between two Probe.driver() readings, µs, and a short
    "name×calls:µs" list of what was called."""
    tot, parts = 0.0, []
    for k, (n, ns) in b.items():
        n0, ns0 = a.get(k, (0, 0))
        if n > n0:
            us = (ns - ns0) / 1e3
            tot += us
            parts.append(f"{k}x{n - n0}:{us:.0f}")
    return tot, " ".join(parts)


# ---- gpuipc -------------------------------------------------------------


def tensor_of(v, tensor=TENSOR):
    """The torch consumer's tensor over view v, made as GPU_HANDOFF_TENSOR
    (or tensor) says (gi_consumer makes it inline)."""
    if tensor == "to_torch":
        return v.to_torch()
    if tensor == "dlpack":
        return torch.from_dlpack(v)
    return torch.as_tensor(v, device="cuda")


def gi_consumer(prefix, n, res, ready, lib="torch", tensor=TENSOR):
    import gpuipc
    warm_cuda()
    if lib == "cupy":
        import cupy
        w = cupy.full((1 << 20,), P, dtype=cupy.uint8)
        assert int((w != P).sum()) == 0
    pr = Probe(["gpuipc_view_lookup"])
    c = gpuipc.connect()
    marks = []
    ready.set()
    for i in range(n):
        d0 = pr.driver()
        v = c.lookup(f"{prefix}/{i}", timeout=120)
        t_lk = time.monotonic()
        # Inline, not tensor_of(): a frame more in the timed span costs
        # microseconds after an idle.
        if lib == "cupy":
            t = cupy.asarray(v)
        elif tensor == "to_torch":
            t = v.to_torch()
        elif tensor == "dlpack":
            t = torch.from_dlpack(v)
        else:
            t = torch.as_tensor(v, device="cuda")
        t1 = time.monotonic()
        bad = int((t != P).sum().item())
        t2 = time.monotonic()
        # read after the timed span: the shim's table takes tens of µs to read
        drv, calls = driver_delta(d0, pr.driver())
        # A view whose __cuda_array_interface__ was taken lives until it is
        # collected (the interface has no owner slot): drop it now, or its
        # release would wait for the next lookup, which waits for the
        # producer, which waits for this release.
        del t
        v.release()
        del v
        res.put((i, t1, t2, bad, pr.t_end["gpuipc_view_lookup"], t_lk, drv, calls))
        marks.extend(((pr.t_end["gpuipc_view_lookup"], "p.lookup_c_ret"),
                      (t_lk, "p.lookup_ret"), (t1, "p.tensor")))
    write_marks(marks)
    c.close()


def gi_producer(prefix, n, size, pattern, idle, res, go):
    import gpuipc
    warm_cuda()
    pr = Probe(["gpuipc_cuda_register"])
    c = gpuipc.connect()
    marks = []
    go.wait()
    for i in range(n):
        if pattern == "fresh":
            torch.cuda.empty_cache()
        x = torch.full((size,), P, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        time.sleep(idle)
        d0 = pr.driver()
        t0 = time.monotonic()
        rid = c.register(f"{prefix}/{i}", x, cacheable=(pattern == "reused"))
        t_reg = time.monotonic()
        c.wait_released(rid, timeout=120)
        # Read and reported only now: the shim's table takes tens of µs to
        # read, and a queue's put wakes its feeder thread and the parent,
        # which would run beside the consumer's side of the handoff.
        drv, calls = driver_delta(d0, pr.driver())
        c_end = pr.t_end["gpuipc_cuda_register"]
        c_start = c_end - pr.dur["gpuipc_cuda_register"]
        res.put(("t0", i, t0, t_reg - t0, pr.dur["gpuipc_cuda_register"], drv, calls,
                 c_start - t0))
        marks.extend(((t0, "p.call"), (c_start, "p.c_call"), (c_end, "p.c_ret"),
                      (t_reg, "p.ret")))
        if pattern == "fresh":
            c.unregister(f"{prefix}/{i}")
        del x
    write_marks(marks)
    kind = c.stat(f"{prefix}/{n - 1}").kind if pattern == "reused" else ""
    if pattern == "reused":
        # cuda-vmm registrations are durable: give the memory back.
        for i in range(n):
            c.unregister(f"{prefix}/{i}")
    res.put(("done", kind, 0, 0))
    c.close()


def run_gpuipc(ctx, size, pattern, idle, rounds, vmm, lib="torch", tensor=TENSOR):
    prefix = "bench/" + uuid.uuid4().hex[:8]
    res, ready, go = ctx.Queue(), ctx.Event(), ctx.Event()
    cons = ctx.Process(target=gi_consumer, args=(prefix, rounds, res, ready, lib, tensor))
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
    t0, t1, t2, reg, kind, prof = {}, {}, {}, {}, "", {}
    while len(t1) < rounds or len(t0) < rounds or not kind:
        m = res.get(timeout=600)
        if m[0] == "t0":
            t0[m[1]], reg[m[1]] = m[2], m[3]
            prof.setdefault(m[1], {}).update(reg_c=m[4] * 1e6, reg_drv=m[5], reg_calls=m[6],
                                             reg_pre=m[7] * 1e6)
        elif m[0] == "done":
            kind = m[1] or "cuda-ipc"
        else:
            i, a, b, bad, t_lkc, t_lk, drv, calls = m
            if bad:
                raise SystemExit(f"gpu_handoff: {bad} wrong bytes in round {i}")
            t1[i], t2[i] = a, b
            prof.setdefault(i, {}).update(lkc=t_lkc, lk=t_lk, lk_drv=drv, lk_calls=calls)
    prod.join(120)
    cons.join(120)
    keep = range(1, rounds)     # round 0 warms up
    p = {
        "register_c": [prof[i]["reg_c"] for i in keep],
        "register_pre_c": [prof[i]["reg_pre"] for i in keep],
        "register_driver": [prof[i]["reg_drv"] for i in keep],
        "lookup_c_done": [(prof[i]["lkc"] - t0[i]) * 1e6 for i in keep],
        "lookup_py_done": [(prof[i]["lk"] - t0[i]) * 1e6 for i in keep],
        "lookup_driver": [prof[i]["lk_drv"] for i in keep],
        "calls": prof[rounds - 1]["reg_calls"] + " | " + prof[rounds - 1]["lk_calls"],
    }
    return ([(t1[i] - t0[i]) * 1e6 for i in keep], [(t2[i] - t0[i]) * 1e6 for i in keep],
            [reg[i] * 1e6 for i in keep], kind, p)


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


def producer_rounds(size, pattern, idle, rounds, res, what, hand):
    """The producer's side of run_mp and run_pyfloor: each round a new
    tensor (a new block after empty_cache() when fresh), the idle time,
    then hand(i, x), timed from its call to the consumer's (i, t1, t2,
    bad) on res.  Round 0 warms up and is left out."""
    lat, ker = [], []
    for i in range(rounds):
        if pattern == "fresh":
            torch.cuda.empty_cache()
        x = torch.full((size,), P, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        time.sleep(idle)
        t0 = time.monotonic()
        hand(i, x)
        j, t1, t2, bad = res.get(timeout=600)
        if bad:
            raise SystemExit(f"gpu_handoff: {what} saw {bad} wrong bytes")
        if i > 0:
            lat.append((t1 - t0) * 1e6)
            ker.append((t2 - t0) * 1e6)
        del x
    return lat, ker


def run_mp(ctx, size, pattern, idle, rounds):
    q, res, ready = ctx.Queue(), ctx.Queue(), ctx.Event()
    cons = ctx.Process(target=mp_consumer, args=(q, res, ready))
    cons.start()
    if not ready.wait(120):
        raise SystemExit("gpu_handoff: the torch.mp consumer did not start")
    lat, ker = producer_rounds(size, pattern, idle, rounds, res, "torch.mp",
                               lambda i, x: q.put((i, x)))
    q.put(None)
    cons.join(120)
    return lat, ker


# ---- the Python floor: no broker, driver calls through ctypes ---------------


class _CAI:
    """The least object torch.as_tensor takes: a CUDA Array Interface."""
    __slots__ = ("__cuda_array_interface__",)

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3, "strides": None}


def _libcuda():
    """libcuda through ctypes, and its CUipcMemHandle (passed by value)."""
    import ctypes

    class Handle(ctypes.Structure):
        _fields_ = [("reserved", ctypes.c_char * 64)]
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(Handle), ctypes.c_uint64]
    cu.cuMemGetAddressRange_v2.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
    cu.cuIpcOpenMemHandle_v2.argtypes = [ctypes.c_void_p, Handle, ctypes.c_uint]
    cu.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
    return cu, Handle


def pf_consumer(conn, res, ready):
    import ctypes
    import struct
    warm_cuda()
    cu, Handle = _libcuda()
    base = ctypes.c_uint64()
    last = None
    ready.set()
    while True:
        m = conn.recv_bytes()
        if not m:
            break
        i, off, n, fresh = struct.unpack_from("<iQQi", m)
        h = m[24:88]
        if h != last:
            if last is not None:
                cu.cuIpcCloseMemHandle(base.value)
            if cu.cuIpcOpenMemHandle_v2(ctypes.byref(base), Handle.from_buffer_copy(h), 1):
                raise SystemExit("gpu_handoff: py-floor cuIpcOpenMemHandle failed")
            last = h
        t = torch.as_tensor(_CAI(base.value + off, n), device="cuda")
        t1 = time.monotonic()
        bad = int((t != P).sum().item())
        t2 = time.monotonic()
        del t
        if fresh:       # the producer frees it next: close first
            cu.cuIpcCloseMemHandle(base.value)
            last = None
        res.put((i, t1, t2, bad))


def relayed_pipe():
    """(producer's end, consumer's end, relay process): two socketpairs
    with gpu_bench's relay (`gpu_bench relay FD_A FD_B`, $GPU_HANDOFF_RELAY)
    between them, a forwarding C process with no work of its own, each end
    a multiprocessing Connection as ctx.Pipe() gives."""
    import socket
    import subprocess
    from multiprocessing.connection import Connection
    exe = os.environ.get("GPU_HANDOFF_RELAY", "")
    if not os.access(exe, os.X_OK):
        raise RuntimeError(f"py-relay needs $GPU_HANDOFF_RELAY, gpu_bench (got {exe!r})")
    p, q = socket.socketpair()
    r, s = socket.socketpair()
    with q, r:
        rel = subprocess.Popen([exe, "relay", str(q.fileno()), str(r.fileno())],
                               pass_fds=(q.fileno(), r.fileno()))
    return Connection(p.detach()), Connection(s.detach()), rel


def run_pyfloor(ctx, size, pattern, idle, rounds, relay=False):
    """The driver floor from Python: cuIpcGetMemHandle and
    cuMemGetAddressRange through ctypes on the tensor (once for a reused
    block), the handle over a multiprocessing pipe, cuIpcOpenMemHandle
    through ctypes (once for a reused block) and torch.as_tensor of a bare
    CUDA Array Interface: the least a Python handoff costs, with no broker
    and no library.  relay=True (the py-relay rows) puts gpu_bench's C relay
    process between the two ends of the pipe: the least a brokered handoff
    from Python costs, with no broker work."""
    import ctypes
    import struct
    rel = None
    if relay:
        a, b, rel = relayed_pipe()
    else:
        a, b = ctx.Pipe()
    res, ready = ctx.Queue(), ctx.Event()
    cons = ctx.Process(target=pf_consumer, args=(b, res, ready))
    cu, Handle = _libcuda()
    h, base, asz = Handle(), ctypes.c_uint64(), ctypes.c_size_t()
    fresh, have = pattern == "fresh", [0]

    def hand(i, x):
        ptr = x.data_ptr()
        if fresh or ptr != have[0]:
            if (cu.cuIpcGetMemHandle(ctypes.byref(h), ptr) or
                    cu.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(asz), ptr)):
                raise SystemExit("gpu_handoff: py-floor cuIpcGetMemHandle failed")
            have[0] = ptr
        a.send_bytes(struct.pack("<iQQi", i, ptr - base.value, size, fresh) + bytes(h))
    what = "py-relay" if relay else "py-floor"
    try:        # the relay, when there is one, ends at the pipe's EOF
        cons.start()
        b.close()
        if not ready.wait(120):
            raise SystemExit(f"gpu_handoff: the {what} consumer did not start")
        lat, ker = producer_rounds(size, pattern, idle, rounds, res, what, hand)
        a.send_bytes(b"")
        cons.join(120)
    finally:
        a.close()
        if rel is not None:
            rel.wait(60)
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
        keep.append((v, tensor_of(v)))
    t1 = time.monotonic()
    bad = sum(int((t != P).sum().item()) for _, t in keep)
    for v, _ in keep:
        v.release()
    del keep, v
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


def many_gpuipc(ctx, n, batch=False, views=False, prefetch=False):
    prefix = "many/" + uuid.uuid4().hex[:8]
    res, ready, go = ctx.Queue(), ctx.Event(), ctx.Event()
    if batch:
        cons = ctx.Process(target=gi_batch_consumer, args=(prefix, n, res, ready),
                           kwargs={"views": views, "prefetch": prefetch})
        prod = ctx.Process(target=gi_batch_producer, args=(prefix, n, res, go),
                           kwargs={"pipelined": prefetch})
    else:
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


# The same 1000 tensors as column batches: one register and one lookup per
# batch of BATCH_COLUMNS tensors: 125 cuda-ipc parts, their handles and
# records, fit one 64 KiB reply frame (250 do not).
BATCH_COLUMNS = 125


def gi_batch_consumer(prefix, n, res, ready, views=False, prefetch=False):
    """Tensors from BatchView.to_torch() (one tensor per mapping, the
    columns slices of it), or with views=True from a BatchColumn view per
    column and torch.as_tensor of each (the per-column path); prefetch=True
    looks the batches up with Client.lookup_batches(), the next lookup
    under way while the tensors of one are made."""
    import gpuipc
    warm_cuda()
    c = gpuipc.connect()
    ready.set()
    keep = []
    names = [f"{prefix}/{b}" for b in range((n + BATCH_COLUMNS - 1) // BATCH_COLUMNS)]
    views_of = (c.lookup_batches(names, timeout=120) if prefetch else
                (c.lookup_batch(name, timeout=120) for name in names))
    for bv in views_of:
        if views:
            cols = [bv[name] for name in bv.columns]
            keep.append((bv, cols, [torch.as_tensor(col, device="cuda") for col in cols]))
        else:
            keep.append((bv, [], list(bv.to_torch().values())))
    t1 = time.monotonic()
    bad = sum(int((t != P).sum().item()) for _, _, ts in keep for t in ts)
    for bv, cols, _ in keep:
        for col in cols:
            col.release()
        bv.release()
    del keep
    res.put((t1, bad))


def gi_batch_producer(prefix, n, res, go, pipelined=False):
    """register_batch per batch, or with pipelined=True register_batches()
    (the next batch built while the request of one goes out)."""
    import gpuipc
    warm_cuda()
    c = gpuipc.connect()
    xs = [torch.full((64 << 10,), P, dtype=torch.uint8, device="cuda") for _ in range(n)]
    torch.cuda.synchronize()
    go.wait()
    t0 = time.monotonic()
    # a generator: each batch's dict is made when it is its turn, on every path
    items = ((f"{prefix}/{b}", {f"t{i}": xs[i] for i in range(b * BATCH_COLUMNS,
                                                               min(n, (b + 1) * BATCH_COLUMNS))})
             for b in range((n + BATCH_COLUMNS - 1) // BATCH_COLUMNS))
    if pipelined:
        ids = c.register_batches(items, ephemeral=True)
    else:
        ids = [c.register_batch(name, cols, ephemeral=True) for name, cols in items]
    res.put(("t0", t0))
    for rid in ids:
        c.wait_released(rid, timeout=120)
    res.put(("done", 0))


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


# $GPU_HANDOFF_PASSES=N (default 1): each row of a case runs N times, each
# time with new processes, the rows of the case in turn; its figures are
# over all the rounds of all its passes.
PASSES = max(1, int(os.environ.get("GPU_HANDOFF_PASSES", "1")))


# $GPU_HANDOFF_ROWS: the rows of each case to run (default all).
ROW_KEYS = ("torch.mp", "py-floor", "py-relay", "gpuipc", "gpuipc+cupy", "gpuipc/vmm",
            "gpuipc/as_tensor")
ROWS = set(filter(None, os.environ.get("GPU_HANDOFF_ROWS", "").split(",")))
if ROWS - set(ROW_KEYS):
    raise SystemExit(f"gpu_handoff: GPU_HANDOFF_ROWS names unknown rows "
                     f"{sorted(ROWS - set(ROW_KEYS))} (known: {', '.join(ROW_KEYS)})")


def row_key(system, vmm):
    """The GPU_HANDOFF_ROWS name of a case's row: its system less the
    label's suffix, and gpuipc/vmm for the cuda-vmm one."""
    if vmm is None:
        return system
    if system.endswith("-as_tensor"):
        return "gpuipc/as_tensor"
    base = "gpuipc+cupy" if system.endswith("+cupy") else "gpuipc"
    return "gpuipc/vmm" if vmm else base


def join(acc, res):
    """A row's results so far (None at first) with one more pass's: the
    per-round lists joined, a dict's lists too, anything else the last."""
    if acc is None:
        return res
    out = []
    for a, b in zip(acc, res):
        if isinstance(b, list):
            out.append(a + b)
        elif isinstance(b, dict):
            out.append({k: a[k] + v if isinstance(v, list) else v for k, v in b.items()})
        else:
            out.append(b)
    return tuple(out)


def gi_row(system, vmm, res, pattern, idle, label):
    """Prints a gpuipc row from run_gpuipc's (joined) results."""
    lat, ker, reg, kind, p = res
    k = kind if pattern == "reused" else ("cuda-vmm" if vmm else "cuda-ipc")
    med = {key: statistics.median(v) for key, v in p.items() if key != "calls"}
    print(f"{system},{k},{pattern},{idle * 1e3:g},{label},{len(lat)},"
          f"{statistics.median(lat):.0f},{pct(lat, 0.99):.0f},"
          f"{statistics.median(ker):.0f},{pct(ker, 0.99):.0f},"
          f"{statistics.median(reg):.0f},{med['register_c']:.0f},"
          f"{med['register_driver']:.0f},{med['lookup_c_done']:.0f},"
          f"{med['lookup_py_done']:.0f},{med['lookup_driver']:.0f},"
          f"{p['calls']},{med['register_pre_c']:.0f}", flush=True)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    ctx = mp.get_context("spawn")
    print("system,kind,pattern,idle_ms,size,rounds,tensor_p50_us,tensor_p99_us,"
          "kernel_p50_us,kernel_p99_us,register_p50_us,register_c_p50_us,"
          "register_driver_p50_us,lookup_c_done_p50_us,lookup_py_done_p50_us,"
          "lookup_driver_p50_us,last_round_driver_calls,register_pre_c_p50_us")
    def case(what, fn):
        try:
            fn()
        except Exception as e:  # one broken case must not hide the others
            print(f"error,{what},{type(e).__name__}: {e}".replace("\n", " "), flush=True)

    only = os.environ.get("GPU_HANDOFF_SIZES")
    label_sfx = os.environ.get("GPU_HANDOFF_LABEL", "")
    for size, label in SIZES:
        if only and label not in only.split(","):
            continue
        n = rounds if size < (1 << 30) else max(10, rounds * 10 // 16)
        for idle in IDLES:
            for pattern in ("reused", "fresh"):
                # (system, vmm, run): vmm None for the rows that are not gpuipc's
                rows = [] if label_sfx else [
                    ("torch.mp", None, run_mp), ("py-floor", None, run_pyfloor),
                    ("py-relay", None, lambda *a: run_pyfloor(*a, relay=True))]
                for vmm, lib in ((False, "torch"), (False, "cupy"), (True, "torch")):
                    if lib != "cupy" or HAVE_CUPY:
                        rows.append((f"gpuipc{label_sfx}{'+cupy' if lib == 'cupy' else ''}", vmm,
                                     lambda c, sz, pat, i, k, v=vmm, lb=lib:
                                     run_gpuipc(c, sz, pat, i, k, v, lb)))
                # Only when named: the torch consumer with as_tensor in the
                # same passes as the default one, for an A/B of the two.
                if "gpuipc/as_tensor" in ROWS and TENSOR != "as_tensor":
                    rows.append((f"gpuipc{label_sfx}-as_tensor", False,
                                 lambda c, sz, pat, i, k:
                                 run_gpuipc(c, sz, pat, i, k, False, "torch", "as_tensor")))
                if ROWS:
                    rows = [r for r in rows if row_key(r[0], r[1]) in ROWS]
                got, failed = {}, {}
                # PASSES passes, each of every row in turn (new processes
                # each time), so that drift between them falls on all rows;
                # pass p starts at row p (mod the rows), so that no row
                # always runs right after the same one (a row's processes
                # may still be tearing down 1 GiB mappings when the next
                # row starts).
                for p in range(PASSES):
                    first = p % len(rows) if rows else 0
                    for j in [*range(first, len(rows)), *range(first)]:
                        system, vmm, run = rows[j]
                        if j in failed:
                            continue
                        try:
                            got[j] = join(got.get(j), run(ctx, size, pattern, idle, n))
                        except Exception as e:  # one broken row must not hide the others
                            failed[j] = f"{type(e).__name__}: {e}"
                for j, (system, vmm, _) in enumerate(rows):
                    if j in failed:
                        what = f"{system} {label} {pattern} {idle}" + (
                            "" if vmm is None else f" vmm={vmm}")
                        print(f"error,{what},{failed[j]}".replace("\n", " "), flush=True)
                    elif vmm is not None:
                        gi_row(system, vmm, got[j], pattern, idle, label)
                    else:
                        lat, ker = got[j]
                        print(f"{system},cuda-ipc,{pattern},{idle * 1e3:g},{label},{len(lat)},"
                              f"{statistics.median(lat):.0f},{pct(lat, 0.99):.0f},"
                              f"{statistics.median(ker):.0f},{pct(ker, 0.99):.0f},,,,,,,,",
                              flush=True)
    # 1000 x 64 KiB: GPU_HANDOFF_MANY passes (default 3; 0: none) of the
    # rows named in GPU_HANDOFF_MANY_ROWS (default all), each pass in turn.
    many_rows = {
        "torch.mp": lambda: many_mp(ctx, 1000),
        "gpuipc": lambda: many_gpuipc(ctx, 1000),
        "gpuipc-batch": lambda: many_gpuipc(ctx, 1000, batch=True),
        "gpuipc-batch-pipelined": lambda: many_gpuipc(ctx, 1000, batch=True, prefetch=True),
        "gpuipc-batch-views": lambda: many_gpuipc(ctx, 1000, batch=True, views=True),
    }
    want = os.environ.get("GPU_HANDOFF_MANY_ROWS")
    unknown = set(want.split(",")) - set(many_rows) if want else set()
    if unknown:
        raise SystemExit(f"gpu_handoff: GPU_HANDOFF_MANY_ROWS names unknown rows {sorted(unknown)}")
    for _ in range(int(os.environ.get("GPU_HANDOFF_MANY", "3"))):
        for row, fn in many_rows.items():
            if (want and row not in want.split(",")) or (label_sfx and row == "torch.mp"):
                continue
            label = row + ("" if row == "torch.mp" else label_sfx)
            case(f"{row} 1000x64KiB", lambda: print(
                f"{label},cuda-ipc,1000x64KiB,0,64KiB,1000,{fn():.0f},,,,,,,,,,,", flush=True))


if __name__ == "__main__":
    main()
