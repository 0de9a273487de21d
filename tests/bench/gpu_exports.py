#!/usr/bin/env python3
"""The Python binding's own costs on a real GPU (issue 13, item 4), warm,
median of N calls each, µs:

* register: Client.register() of a torch tensor and of a CuPy array whose
  allocation the daemon already knows (cacheable, so no driver call beyond
  the buffer-id check), the C call inside it (gpuipc_cuda_register, timed
  around the ctypes call), and their difference, what Python adds;
* lookup: Client.lookup() of a registered name, and the C call inside;
* exports of a looked-up view: the __cuda_array_interface__ dict, the
  __dlpack__ capsule, what torch and CuPy build from them, and
  View.to_torch() (a DLPack struct filled by libgpuipc), beside
  torch.as_tensor of a bare interface object made beforehand (what
  gpu_handoff.py's Python floor builds its tensor from).

One process with two clients: the daemon hands the producer's own pointer
back to its lookups, so no mapping is opened and every figure is the
binding's and the library's, not the driver's.

$GPU_EXPORTS_IDLE_MS=T sleeps T ms before each timed call, as a handoff's
producer and consumer do before theirs: the same costs with the caches as
cold as a process finds them after that idle (the daemon's round trip, for
register and lookup, after its own idle too).

usage: gpu_exports.py [N] > exports.csv     (needs torch with CUDA, a gpuipcd
       on $GPUIPC_SOCKET; CuPy rows when CuPy imports)
"""
import os
import statistics
import sys
import time

import torch

import gpuipc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_handoff import _CAI, Probe  # noqa: E402

try:
    import cupy
except ImportError:
    cupy = None

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
IDLE = float(os.environ.get("GPU_EXPORTS_IDLE_MS", "0")) / 1e3


def pause():
    """The idle time before a timed call (none by default)."""
    if IDLE > 0:
        time.sleep(IDLE)


REG, LOOK = "gpuipc_cuda_register", "gpuipc_view_lookup"


def med(xs):
    return statistics.median(xs)


def main():
    # The C calls, as the package makes them, timed whatever
    # GPU_HANDOFF_PROFILE says: these rows are warm (the wrapper's own time
    # counts in the Python column).
    pr = Probe([REG, LOOK], on=True)
    p, c = gpuipc.connect(), gpuipc.connect()
    rows = []

    def register_rows(what, x):
        tot, inner = [], []
        for i in range(N + 1):
            name = f"ex/{what}/{i}"
            pause()
            t = time.perf_counter_ns()
            p.register(name, x, cacheable=True)
            d = (time.perf_counter_ns() - t) / 1e3
            if i:           # the first registers the allocation
                tot.append(d)
                inner.append(pr.dur[REG] * 1e6)
            p.unregister(name)
        rows.append((f"register {what}", med(tot), med(inner), med(tot) - med(inner)))

    x = torch.full((1 << 20,), 7, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    register_rows("torch", x)
    if cupy is not None:
        y = cupy.full((1 << 20,), 7, dtype=cupy.uint8)
        cupy.cuda.runtime.deviceSynchronize()
        register_rows("cupy", y)

    p.register("ex/buf", x, cacheable=True)
    tot, inner = [], []
    for _ in range(N):
        pause()
        t = time.perf_counter_ns()
        v = c.lookup("ex/buf")
        tot.append((time.perf_counter_ns() - t) / 1e3)
        inner.append(pr.dur[LOOK] * 1e6)
        v.release()
    rows.append(("lookup", med(tot), med(inner), med(tot) - med(inner)))

    def export_row(what, fn, check):
        out = []
        for _ in range(N):
            v = c.lookup("ex/buf")
            pause()
            t = time.perf_counter_ns()
            r = fn(v)
            out.append((time.perf_counter_ns() - t) / 1e3)
            if not check(r):
                raise SystemExit(f"gpu_exports: {what} gave a wrong result")
            del r
            v.release()
            del v
        rows.append((what, med(out), "", ""))

    ptr = x.data_ptr()
    export_row("view __cuda_array_interface__",
               lambda v: v.__cuda_array_interface__, lambda r: r["data"][0] == ptr)
    export_row("view __dlpack__", lambda v: v.__dlpack__(), lambda r: r is not None)
    export_row("torch.as_tensor(view)", lambda v: torch.as_tensor(v, device="cuda"),
               lambda r: r.data_ptr() == ptr)
    export_row("torch.from_dlpack(view)", torch.from_dlpack, lambda r: r.data_ptr() == ptr)
    export_row("view.to_torch()", lambda v: v.to_torch(), lambda r: r.data_ptr() == ptr)
    if cupy is not None:
        export_row("cupy.asarray(view)", cupy.asarray, lambda r: r.data.ptr == ptr)
        export_row("cupy.from_dlpack(view)", cupy.from_dlpack, lambda r: r.data.ptr == ptr)
    # What torch itself costs, for comparison: a bare interface, made
    # beforehand.
    bare = _CAI(ptr, 1 << 20)
    export_row("torch.as_tensor(bare interface)",
               lambda v: torch.as_tensor(bare, device="cuda"), lambda r: r.data_ptr() == ptr)
    p.unregister("ex/buf")
    if int((x != 7).sum().item()):
        raise SystemExit("gpu_exports: the tensor changed")

    print("what,total_p50_us,c_call_p50_us,python_p50_us,idle_ms")
    for what, a, b, d in rows:
        fmt = (lambda z: f"{z:.1f}" if z != "" else "")
        print(f"{what},{fmt(a)},{fmt(b)},{fmt(d)},{IDLE * 1e3:g}")
    p.close()
    c.close()


if __name__ == "__main__":
    main()
