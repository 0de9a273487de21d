"""The issue-13 ratios of one GPU benchmark run, as Markdown tables.

Reads the C CSV (gpu_bench: floor, gpuipc, pinned) and the Python CSV
(gpu_handoff.py: gpuipc from Python against torch.multiprocessing) of one
tests/bench/gpu_run.sh run and prints, per idle time, size and pattern:
the C library against the driver floor (target: at most 2x) and against
the relay floor (the driver floor through one forwarding process: the
least any brokered handoff costs), Python against torch.mp (target: at most
0.5x), with the relay floor and the Python floor (py-floor rows) beside
each target (and the py-relay rows, the Python floor through a relay,
where the run has them), reused Python handoffs
against the socket round trip, warm and after the same idle (target: at
most 3x), and 1000 x 64 KiB (target: torch.mp at least 3x slower).

usage: python3 tests/bench/gpu_summary.py GPU_CSV HANDOFF_CSV
"""
import csv
import statistics
import sys

SIZES = ["1MiB", "64MiB", "1GiB"]


def rows(path):
    with open(path) as f:
        return [r for r in csv.DictReader(f) if not r["system"].startswith("error")]


def f(r, k):
    try:
        return float(r[k])
    except (KeyError, TypeError, ValueError):
        return float("nan")


def pick(rs, **kw):
    for r in rs:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
    return None


def ratio(a, b):
    return a / b if a == a and b == b and b > 0 else float("nan")


def c_table(c):
    print("### C library against the driver floor (usable pointer, p50 µs; target ≤ 2×)\n")
    print("| idle, size | kind | pattern | floor | gpuipc | ratio | gpuipc busy-poll | ratio "
          "| relay floor | gpuipc / relay | floor kernel | gpuipc kernel | pinned copy kernel |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for idle in ("2", "50"):
        for s in SIZES:
            pin = pick(c, system="pinned", idle_ms=idle, size=s)
            for kind in ("cuda-ipc", "cuda-vmm"):
                for pat in ("fresh", "reused"):
                    fl = pick(c, system="floor", kind=kind, pattern=pat, idle_ms=idle, size=s)
                    gi = pick(c, system="gpuipc", kind=kind, pattern=pat, idle_ms=idle, size=s)
                    if not fl or not gi:
                        continue
                    r = ratio(f(gi, "usable_p50_us"), f(fl, "usable_p50_us"))
                    mark = "**" if r <= 2 else ""
                    bu = pick(c, system="gpuipc-busy", kind=kind, pattern=pat, idle_ms=idle, size=s)
                    bv = f(bu, "usable_p50_us") if bu else float("nan")
                    br = ratio(bv, f(fl, "usable_p50_us"))
                    bmark = "**" if br <= 2 else ""
                    rl = pick(c, system="relay", kind=kind, pattern=pat, idle_ms=idle, size=s)
                    rv = f(rl, "usable_p50_us") if rl else float("nan")
                    print(f"| {idle} ms, {s} | {kind} | {pat} | {f(fl, 'usable_p50_us'):.0f} | "
                          f"{f(gi, 'usable_p50_us'):.0f} | {mark}{r:.2f}{mark} | "
                          f"{bv:.0f} | {bmark}{br:.2f}{bmark} | "
                          f"{rv:.0f} | {ratio(f(gi, 'usable_p50_us'), rv):.2f} | "
                          f"{f(fl, 'kernel_p50_us'):.0f} | {f(gi, 'kernel_p50_us'):.0f} | "
                          f"{f(pin, 'kernel_p50_us') if pin else float('nan'):.0f} |")
    print()


def med(rs, system, key, idle=None):
    """The median of key over system's rows (of one idle time, or all)."""
    v = [f(r, key) for r in rs if r["system"] == system and idle in (None, r["idle_ms"])]
    v = [x for x in v if x == x]
    return statistics.median(v) if v else float("nan")


def py_floor_hop(py, c, pat, idle, s):
    """The Python floor of a case plus the broker's hop (relay floor minus
    driver floor, C, cuda-ipc; a relay row below its floor row is the two
    rows' noise, and counts as no hop): the least a brokered handoff from
    Python costs.  (Python floor, that sum), NaN where a row is missing."""
    rl = pick(c, system="relay", kind="cuda-ipc", pattern=pat, idle_ms=idle, size=s)
    fl = pick(c, system="floor", kind="cuda-ipc", pattern=pat, idle_ms=idle, size=s)
    pf = pick(py, system="py-floor", pattern=pat, idle_ms=idle, size=s)
    hop = (max(f(rl, "usable_p50_us") - f(fl, "usable_p50_us"), 0.0) if rl and fl
           else float("nan"))
    pf_v = f(pf, "tensor_p50_us") if pf else float("nan")
    return pf_v, pf_v + hop


def py_bound(py, c, pat, idle, s):
    """The least a brokered handoff from Python costs, as this run gives
    it: the py-relay row (the Python floor through gpu_bench's C relay,
    measured) where there is one, else the Python floor plus the broker's
    hop (an estimate).  (value, "measured" or "estimate")."""
    pr = pick(py, system="py-relay", pattern=pat, idle_ms=idle, size=s)
    v = f(pr, "tensor_p50_us") if pr else float("nan")
    if v == v:
        return v, "measured"
    return py_floor_hop(py, c, pat, idle, s)[1], "estimate"


def bound_table(py, c):
    """The Python target (half of torch.mp's time) beside the floors: the
    relay floor (the driver calls and one forwarding process, no daemon and
    no Python) and the Python floor (gpu_handoff's py-floor: the driver
    calls through ctypes, the handle over a pipe, torch.as_tensor of a bare
    interface; no broker, no library), to which the broker's hop (relay
    minus floor, from C) is added.  Where the target is below a floor, no
    brokered handoff from Python is expected to meet it; where gpuipc came
    out below the Python floor plus the hop, that sum is no bound in the run
    (its py-floor rows talk over a multiprocessing pipe, framed in Python:
    not the least a Python process can pay)."""
    print("### The Python target against the floors (p50 µs)\n")
    print("The relay floor is the C driver floor through one forwarding process: the "
          "least a handoff through any broker costs, with no daemon work and no Python. "
          "The Python floor is the same driver calls made from Python (ctypes), the "
          "handle over a pipe and `torch.as_tensor` of a bare CUDA Array Interface, "
          "with no broker and no library; the broker's hop (relay floor minus driver "
          "floor, C, or 0 where the relay row came out below its floor row) is added "
          "to it. Where half of torch.mp's time is below a floor, "
          "the target is out of reach of a brokered handoff from Python by the "
          "difference, as far as the floors measure: where gpuipc came out below the "
          "Python floor plus the hop (a negative last column), that sum bounds nothing "
          "in this run (the Python floor talks over a multiprocessing pipe, framed in "
          "Python: not the least a Python process can pay).\n")
    print("The Python relay floor (py-relay rows) is the Python floor with gpu_bench's C "
          "relay between its two ends: the same least brokered handoff from Python, "
          "measured in the run rather than estimated. The bound is that measurement where "
          "the run has it, else the Python floor plus the hop.\n")
    print("| idle, size | pattern | torch.mp | target (0.5×) | relay floor, cuda-ipc | "
          "target − relay floor | Python floor | + broker hop | Python relay floor | "
          "target − bound | gpuipc Python | gpuipc − bound |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for idle in ("2", "50"):
        for s in SIZES:
            for pat in ("reused", "fresh"):
                mp = pick(py, system="torch.mp", pattern=pat, idle_ms=idle, size=s)
                rl = pick(c, system="relay", kind="cuda-ipc", pattern=pat, idle_ms=idle, size=s)
                g = pick(py, system="gpuipc", kind="cuda-ipc", pattern=pat, idle_ms=idle, size=s)
                if not mp or not rl:
                    continue
                t = f(mp, "tensor_p50_us") / 2
                r = f(rl, "usable_p50_us")
                pf_v, est = py_floor_hop(py, c, pat, idle, s)
                bv, how = py_bound(py, c, pat, idle, s)
                relayed = bv if how == "measured" else float("nan")
                gv = f(g, "tensor_p50_us") if g else float("nan")
                print(f"| {idle} ms, {s} | {pat} | {2 * t:.0f} | {t:.0f} | {r:.0f} | "
                      f"{t - r:+.0f} | {pf_v:.0f} | {est:.0f} | {relayed:.0f} | {t - bv:+.0f} | "
                      f"{gv:.0f} | {gv - bv:+.0f} |")
    print()


def py_table(py, c):
    print("### Python against torch.multiprocessing (usable tensor, p50 µs; target ≤ 0.5×)\n")
    print("| idle, size | pattern | torch.mp | gpuipc cuda-ipc | ratio | gpuipc + CuPy consumer "
          "| ratio | gpuipc cuda-vmm | ratio | busy-poll cuda-ipc | ratio | busy-poll + CuPy "
          "| ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for idle in ("2", "50"):
        for s in SIZES:
            for pat in ("reused", "fresh"):
                mp = pick(py, system="torch.mp", pattern=pat, idle_ms=idle, size=s)
                if not mp:
                    continue
                m = f(mp, "tensor_p50_us")
                cells = []
                for system, kind in (("gpuipc", "cuda-ipc"), ("gpuipc+cupy", "cuda-ipc"),
                                     ("gpuipc", "cuda-vmm"), ("gpuipc-busy", "cuda-ipc"),
                                     ("gpuipc-busy+cupy", "cuda-ipc")):
                    g = pick(py, system=system, kind=kind, pattern=pat, idle_ms=idle, size=s)
                    v = f(g, "tensor_p50_us") if g else float("nan")
                    r = ratio(v, m)
                    mark = "**" if r <= 0.5 else ""
                    cells.append(f"{v:.0f} | {mark}{r:.2f}{mark}")
                print(f"| {idle} ms, {s} | {pat} | {m:.0f} | " + " | ".join(cells) + " |")
    print()
    bound_table(py, c)
    sock = med(c, "floor", "rtt_p50_us")
    ping = med(c, "gpuipc", "rtt_p50_us")
    print(f"### Reused blocks from Python against the socket round trip (target ≤ 3×)\n\n"
          f"Socketpair round trip {sock:.1f} µs; gpuipc_client_ping {ping:.1f} µs (medians of the "
          f"C cases).\n")
    idle_rtt = {idle: (med(c, "floor", "rtt_idle_p50_us", idle),
                       med(c, "relay", "rtt_idle_p50_us", idle),
                       med(c, "gpuipc", "rtt_idle_p50_us", idle)) for idle in ("2", "50")}
    print("After the same idle as the handoff (medians of the C cases), the socketpair "
          "round trip, the round trip through the relay and gpuipc_client_ping:\n")
    print("| idle | socketpair | through the relay | gpuipc ping |\n| --- | --- | --- | --- |")
    for idle, (a, b, g) in idle_rtt.items():
        print(f"| {idle} ms | {a:.1f} | {b:.1f} | {g:.1f} |")
    print()
    print("The bound of the floor table (the Python relay floor, measured, or the Python "
          "floor plus the broker's hop, estimated) is the least a brokered handoff from "
          "Python costs: where it is over 3× the round trip after idle, and gpuipc is not "
          "below it, that floor blocks the target.\n")
    print("| idle, size | system | cuda-ipc reused | / socket rtt | / gpuipc ping "
          "| / socket rtt after idle | / gpuipc ping after idle |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for idle in ("2", "50"):
        for s in SIZES:
            pv, how = py_bound(py, c, "reused", idle, s)
            if pv == pv:
                a, _, gp = idle_rtt[idle]
                what = "Python relay floor" if how == "measured" else "Python floor + hop"
                print(f"| {idle} ms, {s} | {what} | {pv:.0f} | {ratio(pv, sock):.1f} "
                      f"| {ratio(pv, ping):.1f} | {ratio(pv, a):.1f} | {ratio(pv, gp):.1f} |")
            for system in ("gpuipc", "gpuipc-busy"):
                g = pick(py, system=system, kind="cuda-ipc", pattern="reused", idle_ms=idle,
                         size=s)
                if g:
                    v = f(g, "tensor_p50_us")
                    a, _, gp = idle_rtt[idle]
                    ri = ratio(v, a)
                    mark = "**" if ri <= 3 else ""
                    print(f"| {idle} ms, {s} | {system} | {v:.0f} | {ratio(v, sock):.1f} | "
                          f"{ratio(v, ping):.1f} | {mark}{ri:.1f}{mark} | {ratio(v, gp):.1f} |")
    print()
    many = {}
    for r in py:
        if r["pattern"] == "1000x64KiB":
            many.setdefault(r["system"], []).append(f(r, "tensor_p50_us"))
    mp = many.get("torch.mp")
    if mp and len(many) > 1:
        print("### 1000 × 64 KiB (target: torch.mp ≥ 3× gpuipc's time)\n")
        print("| system | ms, each run | torch.mp / it (medians) |\n| --- | --- | --- |")
        for system, v in many.items():
            print(f"| {system} | {', '.join(f'{x / 1e3:.1f}' for x in v)} | "
                  f"{ratio(statistics.median(mp), statistics.median(v)):.2f} |")
        print()


def main(cpath, pypath):
    c = rows(cpath)
    c_table(c)
    py_table(rows(pypath), c)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
