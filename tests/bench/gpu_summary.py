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
Each case of the Python and reused targets gets a verdict, and a last
table counts them: "met"; "blocked by N µs" where the target lies N µs
below the bound (the Python relay floor, measured, or the Python floor
plus the broker's hop) and gpuipc is not below the bound (where gpuipc
beat it, it bounds nothing); "blocked by N µs by the Python floor" where
gpuipc beat that bound, the bound is not within the target either, and
the Python floor alone (the py-floor row: no broker at all) is over the
target and not over gpuipc; else "neither".  The C target counts the cold
(fresh) cases.

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
    verdicts = []
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
                    if pat == "fresh":      # the target is the cold handoff's
                        verdicts.append("met" if r <= 2 else
                                        "no figure" if r != r else f"neither ({r:.2f}×)")
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
    return verdicts


def med(rs, system, key, idle=None):
    """The median of key over system's rows (of one idle time, or all)."""
    v = [f(r, key) for r in rs if r["system"] == system and idle in (None, r["idle_ms"])]
    v = [x for x in v if x == x]
    return statistics.median(v) if v else float("nan")


def py_floor(py, pat, idle, s):
    """The Python floor of a case alone (the py-floor row: no broker at
    all), NaN where the run lacks the row."""
    pf = pick(py, system="py-floor", pattern=pat, idle_ms=idle, size=s)
    return f(pf, "tensor_p50_us") if pf else float("nan")


def py_floor_hop(py, c, pat, idle, s):
    """The Python floor of a case plus the broker's hop (relay floor minus
    driver floor, C, cuda-ipc; a relay row below its floor row is the two
    rows' noise, and counts as no hop): the least a brokered handoff from
    Python costs.  (Python floor, that sum), NaN where a row is missing."""
    rl = pick(c, system="relay", kind="cuda-ipc", pattern=pat, idle_ms=idle, size=s)
    fl = pick(c, system="floor", kind="cuda-ipc", pattern=pat, idle_ms=idle, size=s)
    hop = (max(f(rl, "usable_p50_us") - f(fl, "usable_p50_us"), 0.0) if rl and fl
           else float("nan"))
    pf_v = py_floor(py, pat, idle, s)
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


def py_verdict(mp, bound, gv, floor=float("nan")):
    """The Python target's verdict for one case, from torch.mp's, the
    bound's and gpuipc's p50 (µs; NaN where the run lacks the row): "met"
    (gpuipc at most half of torch.mp), "blocked by N µs" (the target is N
    µs below the bound and gpuipc is not below the bound either: no
    brokered handoff from Python measured here meets it), else "neither (N
    µs over)".  Where gpuipc came out below the bound, and the bound is not
    itself within the target, the Python floor (floor: the same driver
    calls from Python with no broker) is the bound instead, by the same
    rule: "blocked by N µs by the Python floor" says that no handoff from
    Python measured here, brokered or not, meets the target."""
    return _verdict(mp / 2, bound, gv, floor)


def rtt_verdict(rtt_idle, bound, gv, floor=float("nan")):
    """The reused target's verdict (gpuipc at most 3x the socket round trip
    after the same idle), by py_verdict's rules."""
    return _verdict(3 * rtt_idle, bound, gv, floor)


def _verdict(target, bound, gv, floor=float("nan")):
    if gv != gv or target != target:
        return "no figure"
    if gv <= target:
        return "met"
    if bound == bound and target < bound <= gv:
        return f"blocked by {bound - target:.0f} µs"
    if floor == floor and target < floor <= gv and not bound <= target:
        return f"blocked by {floor - target:.0f} µs by the Python floor"
    return f"neither ({gv - target:.0f} µs over)"


def tally(verdicts):
    """'met 4 of 12; 5 blocked; 3 neither' from a list of verdicts."""
    n = len(verdicts)
    met = sum(v == "met" for v in verdicts)
    out = [f"met {met} of {n}"]
    for word in ("blocked", "neither", "no figure"):
        k = sum(v.startswith(word) for v in verdicts)
        if k:
            out.append(f"{k} {word}")
    return "; ".join(out)


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
          "target − bound | gpuipc Python | gpuipc − bound | verdict |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    verdicts = []
    for idle in ("2", "50"):
        for s in SIZES:
            for pat in ("reused", "fresh"):
                mp = pick(py, system="torch.mp", pattern=pat, idle_ms=idle, size=s)
                rl = pick(c, system="relay", kind="cuda-ipc", pattern=pat, idle_ms=idle, size=s)
                g = pick(py, system="gpuipc", kind="cuda-ipc", pattern=pat, idle_ms=idle, size=s)
                if not mp:
                    continue
                t = f(mp, "tensor_p50_us") / 2
                r = f(rl, "usable_p50_us") if rl else float("nan")
                pf_v, est = py_floor_hop(py, c, pat, idle, s)
                bv, how = py_bound(py, c, pat, idle, s)
                relayed = bv if how == "measured" else float("nan")
                gv = f(g, "tensor_p50_us") if g else float("nan")
                v = py_verdict(2 * t, bv, gv, pf_v)
                verdicts.append(v)
                print(f"| {idle} ms, {s} | {pat} | {2 * t:.0f} | {t:.0f} | {r:.0f} | "
                      f"{t - r:+.0f} | {pf_v:.0f} | {est:.0f} | {relayed:.0f} | {t - bv:+.0f} | "
                      f"{gv:.0f} | {gv - bv:+.0f} | {v} |")
    print()
    return verdicts


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
    targets = {"py": bound_table(py, c), "rtt": []}
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
          "| / socket rtt after idle | / gpuipc ping after idle | verdict |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for idle in ("2", "50"):
        for s in SIZES:
            pv, how = py_bound(py, c, "reused", idle, s)
            if pv == pv:
                a, _, gp = idle_rtt[idle]
                what = "Python relay floor" if how == "measured" else "Python floor + hop"
                print(f"| {idle} ms, {s} | {what} | {pv:.0f} | {ratio(pv, sock):.1f} "
                      f"| {ratio(pv, ping):.1f} | {ratio(pv, a):.1f} | {ratio(pv, gp):.1f} | |")
            for system in ("gpuipc", "gpuipc-busy"):
                g = pick(py, system=system, kind="cuda-ipc", pattern="reused", idle_ms=idle,
                         size=s)
                if g:
                    v = f(g, "tensor_p50_us")
                    a, _, gp = idle_rtt[idle]
                    ri = ratio(v, a)
                    mark = "**" if ri <= 3 else ""
                    verdict = rtt_verdict(a, pv, v, py_floor(py, "reused", idle, s))
                    if system == "gpuipc":
                        targets["rtt"].append(verdict)
                    print(f"| {idle} ms, {s} | {system} | {v:.0f} | {ratio(v, sock):.1f} | "
                          f"{ratio(v, ping):.1f} | {mark}{ri:.1f}{mark} | {ratio(v, gp):.1f} | "
                          f"{verdict} |")
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
            r = ratio(statistics.median(mp), statistics.median(v))
            if system != "torch.mp":
                targets.setdefault("many", []).append((r, system))
            print(f"| {system} | {', '.join(f'{x / 1e3:.1f}' for x in v)} | {r:.2f} |")
        print()
    return targets


def targets_table(c_verdicts, targets):
    """The verdict of each issue-13 target in this run, counted."""
    print("### Targets in this run\n")
    print("| target | verdict |\n| --- | --- |")
    print(f"| C library, cold: at most 2× the driver floor | {tally(c_verdicts)} |")
    print(f"| Python: at most 0.5× torch.multiprocessing | {tally(targets['py'])} |")
    print(f"| reused blocks from Python: at most 3× the socket round trip after idle | "
          f"{tally(targets['rtt'])} |")
    many = [m for m in targets.get("many", []) if m[0] == m[0]]    # the best row counts
    if many:
        r, system = max(many)
        print(f"| 1000 × 64 KiB: at least 3× faster than torch.mp | "
              f"{'met' if r >= 3 else 'not met'}: {r:.2f}× ({system}) |")
    print()


def main(cpath, pypath):
    c = rows(cpath)
    c_verdicts = c_table(c)
    targets_table(c_verdicts, py_table(rows(pypath), c))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
