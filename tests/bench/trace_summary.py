#!/usr/bin/env python3
"""Follows handoffs across processes in a profiling build's traces.

A build with -DGPUIPC_TRACE writes $GPUIPC_TRACE_DIR/trace.PID for each
process that used the library or ran the daemon (proto/trace.h).  This
reads them all, takes each producer's register call (c.cureg, c.hostreg)
as the start of a handoff, and prints, for every point that follows it
before the next start, the median time from the start (microseconds),
with the process's role: producer, daemon, or consumer (the process that
called lookup).  The first SKIP handoffs warm up and are left out.
Files trace.PID-py (gpu_handoff.py's points, p.*) count as process PID's.
--start POINT takes POINT as the start instead (p.call: the producer's
Python call).

usage: trace_summary.py [--start POINT] DIR [SKIP]
"""
import glob
import os
import statistics
import sys


def load(d):
    ev = []
    for f in glob.glob(os.path.join(d, "trace.*")):
        pid = f.rsplit(".", 1)[1].removesuffix("-py")
        with open(f) as fh:
            for line in fh:
                t, point, _ = line.split()
                ev.append((float(t), pid, point))
    ev.sort()
    return ev


def roles(ev):
    r = {}
    for _, pid, point in ev:
        if point.startswith("d."):
            r[pid] = "daemon"
        elif point in ("c.cureg", "c.hostreg", "p.call"):
            r.setdefault(pid, "producer")
        elif point in ("c.lookup", "p.lookup_ret"):
            r[pid] = "consumer"
    return r


def main():
    args = sys.argv[1:]
    start = ("c.cureg", "c.hostreg")
    if len(args) > 1 and args[0] == "--start":
        start, args = (args[1],), args[2:]
    if not args:
        sys.exit(__doc__.strip().splitlines()[-1])
    ev = load(args[0])
    skip = int(args[1]) if len(args) > 1 else 1
    role = roles(ev)
    starts = [i for i, e in enumerate(ev) if e[2] in start]
    offs = {}
    for n, i in enumerate(starts[skip:], skip):
        end = starts[n + 1] if n + 1 < len(starts) else len(ev)
        t0, seen = ev[i][0], {}
        for t, pid, point in ev[i:end]:
            key = (role.get(pid, pid), point)
            # the k-th time a point is reached in this handoff
            k = seen.get(key, 0)
            seen[key] = k + 1
            offs.setdefault(key + (k,), []).append(t - t0)
    rows = sorted(((statistics.median(v), k, len(v)) for k, v in offs.items()),
                  key=lambda r: r[0])
    print(f"{len(starts) - skip} handoffs; median µs from {' or '.join(start)}")
    print("| µs | process | point | # | handoffs |")
    print("| --- | --- | --- | --- | --- |")
    for med, (who, point, k), n in rows:
        print(f"| {med:.1f} | {who} | {point} | {k + 1} | {n} |")


if __name__ == "__main__":
    main()
