#!/usr/bin/env python3
"""Where a Python gpuipc handoff spends its time (issue 13): each layer of
register on the producer side and of lookup on the consumer side, timed one
by one in a loop with the same idle time before every round (2 ms, 50 ms).

usage: gpu_profile.py [ROUNDS]      (needs $GPUIPC_SOCKET and libgpuipc)"""
import ctypes
import statistics
import sys
import time
import uuid

import torch
import torch.multiprocessing as mp

import gpuipc
from gpuipc import _lib
from gpuipc.client import _cuda_stream_sync, _get_cai


def med(v):
    return f"{statistics.median(v):.1f}"


def consumer(prefix, n, q, ready):
    torch.cuda.init()
    torch.empty(1, device="cuda")
    c = gpuipc.connect()
    ready.set()
    t_look, t_tensor = [], []
    for i in range(n):
        a = time.perf_counter()
        v = c.lookup(f"{prefix}/{i}", timeout=60)
        b = time.perf_counter()
        t = torch.as_tensor(v, device="cuda")
        d = time.perf_counter()
        del t
        v.release()
        del v
        t_look.append((b - a) * 1e6)
        t_tensor.append((d - b) * 1e6)
        q.put(i)
    q.put(("cons", t_look, t_tensor))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    ctx = mp.get_context("spawn")
    torch.cuda.init()
    torch.empty(1, device="cuda")
    c = gpuipc.connect()
    print("idle_ms,layer,p50_us")
    for idle in (0.002, 0.050):
        prefix = "prof/" + uuid.uuid4().hex[:8]
        q, ready = ctx.Queue(), ctx.Event()
        p = ctx.Process(target=consumer, args=(prefix, n, q, ready))
        p.start()
        ready.wait(120)
        cai_t, sync_t, creg_t, ping_t, wait_t = [], [], [], [], []
        for i in range(n):
            x = torch.full((1 << 20,), 91, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            time.sleep(idle)
            a = time.perf_counter()
            cai = _get_cai(x)
            b = time.perf_counter()
            if cai.get("stream") is not None:
                _cuda_stream_sync(int(cai["stream"]))
            d = time.perf_counter()
            rid = ctypes.c_uint64()
            r = c._conn.call(lambda h: _lib.lib.gpuipc_register_cuda(
                h, f"{prefix}/{i}".encode(), x.data_ptr(), x.numel(), None, None,
                _lib.REGISTER_CACHEABLE, ctypes.byref(rid)))
            e = time.perf_counter()
            assert r == 0, r
            c.ping()
            f = time.perf_counter()
            q.get(timeout=60)
            c.wait_released(rid.value, timeout=60)
            g = time.perf_counter()
            cai_t.append((b - a) * 1e6)
            sync_t.append((d - b) * 1e6)
            creg_t.append((e - d) * 1e6)
            ping_t.append((f - e) * 1e6)
            wait_t.append((g - f) * 1e6)
            del x
        m = q.get(timeout=60)
        while not (isinstance(m, tuple) and m[0] == "cons"):
            m = q.get(timeout=60)
        p.join(60)
        ms = idle * 1e3
        for name, v in (("cai_dict", cai_t), ("stream_sync", sync_t),
                        ("gpuipc_register_cuda", creg_t), ("ping_after", ping_t),
                        ("consumer_lookup", m[1]), ("torch_as_tensor", m[2])):
            print(f"{ms:g},{name},{med(v[1:])}", flush=True)


if __name__ == "__main__":
    main()
