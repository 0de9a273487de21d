#!/usr/bin/env python3
"""Follows handoffs across processes in a profiling build's traces.

A build with -DGPUIPC_TRACE writes $GPUIPC_TRACE_DIR/trace.PID for each
process that used the library or ran the daemon (proto/trace.h).  This
reads them all, takes each producer's register call (c.cureg, c.hostreg)
as the start of a handoff, and prints, for every point that follows it
before the next start, the median time from the start (microseconds),
with the process's role: producer, daemon, or consumer (the process that
called lookup).  The first SKIP handoffs warm up and are left out.

usage: trace_summary.py DIR [SKIP]
"""
import glob
import os
import statistics
import sys


def load(d):
    ev = []
    for f in glob.glob(os.path.join(d, "trace.*")):
        pid = f.rsplit(".", 1)[1]
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
        elif point in ("c.cureg", "c.hostreg"):
            r.setdefault(pid, "producer")
        elif point == "c.lookup":
            r[pid] = "consumer"
    return r


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    ev = load(sys.argv[1])
    skip = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    role = roles(ev)
    starts = [i for i, e in enumerate(ev) if e[2] in ("c.cureg", "c.hostreg")]
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
    print(f"{len(starts) - skip} handoffs; median µs from the register call")
    print("| µs | process | point | # | handoffs |")
    print("| --- | --- | --- | --- | --- |")
    for med, (who, point, k), n in rows:
        print(f"| {med:.1f} | {who} | {point} | {k + 1} | {n} |")


if __name__ == "__main__":
    main()
