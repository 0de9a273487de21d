#!/usr/bin/env python3
"""The GPU handoff benchmark with a Java producer (issue 13): the Java
binding's registerDevice (tests/gpu/java/GpuBench.java) to the same torch
consumer as gpu_handoff.py, with the same metric, idle times and patterns.
"reused" registers with RegisterFlag.CACHEABLE, as gpu_handoff.py's reused
producer registers cacheable=True, so the consumer keeps the block mapped.

usage: gpu_java.py BUILDDIR [ROUNDS] > gpu_java.csv   (needs java, torch, a
       gpuipcd on $GPUIPC_SOCKET, and `make java-tests` in BUILDDIR)
$GPU_HANDOFF_SIZES limits the sizes (default 1MiB,64MiB).
"""
import os
import statistics
import subprocess
import sys
import uuid

import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_handoff import SIZES, gi_consumer, pct  # noqa: E402


def run(ctx, b, size, pattern, idle, rounds):
    prefix = "java/" + uuid.uuid4().hex[:8]
    res, ready = ctx.Queue(), ctx.Event()
    cons = ctx.Process(target=gi_consumer, args=(prefix, rounds, res, ready, "torch"),
                       daemon=True)     # a failed producer must not leave it waiting
    cons.start()
    if not ready.wait(120):
        raise SystemExit("gpu_java: the consumer did not start")
    j = os.path.join(b, "java")
    cmd = ["java", "-Xmx2g", f"-Dorg.gpuipc.library={j}/libgpuipc_jni.so",
           f"-Dorg.gpuipc.test.native={j}/test/libgpuipc_jni_test.so",
           "-cp", f"{j}/gpuipc.jar:{j}/test-classes", "org.gpuipc.gpu.GpuBench",
           prefix, str(rounds), str(size), str(int(idle * 1e3)), pattern]
    prod = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    t0, call, t1, t2 = {}, {}, {}, {}
    for line in prod.stdout:
        f = line.split()
        if len(f) == 4 and f[0] == "t0":
            t0[int(f[1])] = int(f[2]) / 1e9
            call[int(f[1])] = int(f[3]) / 1e3
    if prod.wait() != 0:
        raise SystemExit(f"gpu_java: the Java producer exited with {prod.returncode}")
    while len(t1) < rounds:
        m = res.get(timeout=120)
        if m[3]:
            raise SystemExit(f"gpu_java: {m[3]} wrong bytes in round {m[0]}")
        t1[m[0]], t2[m[0]] = m[1], m[2]
    cons.join(60)
    keep = range(1, rounds)
    return ([(t1[i] - t0[i]) * 1e6 for i in keep], [(t2[i] - t0[i]) * 1e6 for i in keep],
            [call[i] for i in keep])


def main():
    b = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    only = os.environ.get("GPU_HANDOFF_SIZES", "1MiB,64MiB").split(",")
    ctx = mp.get_context("spawn")
    print("system,kind,pattern,idle_ms,size,rounds,tensor_p50_us,tensor_p99_us,"
          "kernel_p50_us,kernel_p99_us,register_p50_us")
    for size, label in SIZES:
        if label not in only:
            continue
        for idle in (0.002, 0.050):
            for pattern in ("reused", "fresh"):
                lat, ker, reg = run(ctx, b, size, pattern, idle, rounds)
                print(f"java+gpuipc,cuda-ipc,{pattern},{idle * 1e3:g},{label},{len(lat)},"
                      f"{statistics.median(lat):.0f},{pct(lat, 0.99):.0f},"
                      f"{statistics.median(ker):.0f},{pct(ker, 0.99):.0f},"
                      f"{statistics.median(reg):.0f}", flush=True)


if __name__ == "__main__":
    main()
