"""tests/bench/gpu_summary.py's verdicts: which issue-13 target a GPU run
met, which a measured floor blocks and by how much, and which neither.
The GPU runs are judged from these tables, so the rules are tested here on
made-up CSVs (no GPU needed)."""
import importlib.util
import math
import os

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "bench", "gpu_summary.py")
_spec = importlib.util.spec_from_file_location("gpu_summary", _PATH)
gs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gs)

NAN = math.nan


@pytest.mark.parametrize("mp,bound,gv,want", [
    (1000, 300, 500, "met"),                        # exactly half
    (1000, 300, 499, "met"),
    (1000, 300, 520, "neither (20 µs over)"),       # the target is above the bound
    (1000, 560, 600, "blocked by 60 µs"),           # the target is below the bound
    (1000, 560, 560, "blocked by 60 µs"),           # gpuipc at the bound
    (1000, 560, 530, "neither (30 µs over)"),       # gpuipc beat the "bound": none
    (1000, NAN, 600, "neither (100 µs over)"),      # no floor in the run
    (1000, 300, NAN, "no figure"),
    (NAN, 300, 400, "no figure"),
])
def test_python_target_verdict(mp, bound, gv, want):
    assert gs.py_verdict(mp, bound, gv) == want


@pytest.mark.parametrize("bound,floor,gv,want", [
    # gpuipc beat the relay floor but not the Python floor: that floor blocks
    (560, 520, 530, "blocked by 20 µs by the Python floor"),
    (560, 520, 520, "blocked by 20 µs by the Python floor"),
    # gpuipc at or over the relay floor: the relay floor, the higher, blocks
    (560, 520, 600, "blocked by 60 µs"),
    # gpuipc beat both floors: neither bounds it
    (560, 520, 510, "neither (10 µs over)"),
    # the Python floor is under the target: it blocks nothing
    (560, 480, 530, "neither (30 µs over)"),
    (NAN, 520, 530, "blocked by 20 µs by the Python floor"),
    # a relay floor within the target: a brokered handoff met it, nothing blocks
    (490, 520, 530, "neither (30 µs over)"),
])
def test_python_floor_bounds_where_gpuipc_beat_the_relay(bound, floor, gv, want):
    assert gs.py_verdict(1000, bound, gv, floor) == want


def test_rtt_verdict_is_three_round_trips():
    assert gs.rtt_verdict(100, 250, 300) == "met"
    assert gs.rtt_verdict(100, 250, 301) == "neither (1 µs over)"
    assert gs.rtt_verdict(100, 320, 400) == "blocked by 20 µs"
    assert gs.rtt_verdict(100, 320, 310, 305) == "blocked by 5 µs by the Python floor"


def test_tally_counts_each_kind():
    v = ["met", "blocked by 3 µs", "neither (2 µs over)", "met", "blocked by 9 µs"]
    assert gs.tally(v) == "met 2 of 5; 2 blocked; 1 neither"
    assert gs.tally(["met"]) == "met 1 of 1"


C_HEAD = ("system,kind,pattern,idle_ms,size,rounds,usable_p50_us,usable_p99_us,"
          "kernel_p50_us,kernel_p99_us,call_p50_us,rtt_p50_us,rtt_idle_p50_us\n")
PY_HEAD = ("system,kind,pattern,idle_ms,size,rounds,tensor_p50_us,tensor_p99_us,"
           "kernel_p50_us,kernel_p99_us\n")


def _run(tmp_path, capsys, c_rows, py_rows):
    c = tmp_path / "c.csv"
    py = tmp_path / "py.csv"
    c.write_text(C_HEAD + "".join(r + "\n" for r in c_rows))
    py.write_text(PY_HEAD + "".join(r + "\n" for r in py_rows))
    gs.main(str(c), str(py))
    out = capsys.readouterr().out
    return {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1].rstrip(" |")
            for line in out.split("### Targets in this run")[1].splitlines()
            if line.startswith("| ") and not line.startswith("| target")}


def test_targets_of_a_run(tmp_path, capsys):
    c_rows = [
        # cold: 1.5x (met) and 2.5x (not) the floor; reused rows do not count
        "floor,cuda-ipc,fresh,2,1MiB,15,200,250,0,0,0,13,50",
        "gpuipc,cuda-ipc,fresh,2,1MiB,15,300,350,0,0,0,20,60",
        "relay,cuda-ipc,fresh,2,1MiB,15,220,260,0,0,0,20,100",
        "floor,cuda-ipc,fresh,50,1MiB,15,400,450,0,0,0,13,120",
        "gpuipc,cuda-ipc,fresh,50,1MiB,15,1000,1100,0,0,0,20,150",
        "floor,cuda-ipc,reused,50,1MiB,15,40,50,0,0,0,13,120",
        "gpuipc,cuda-ipc,reused,50,1MiB,15,400,450,0,0,0,20,150",
    ]
    py_rows = [
        # 2 ms reused: met (0.4x) and 2.8x the round trip after idle (50)
        "torch.mp,cuda-ipc,reused,2,1MiB,15,350,400,0,0",
        "py-relay,cuda-ipc,reused,2,1MiB,15,100,120,0,0",
        "gpuipc,cuda-ipc,reused,2,1MiB,15,140,160,0,0",
        # 2 ms fresh: the target (250) is below the floor (300): blocked
        "torch.mp,cuda-ipc,fresh,2,1MiB,15,500,600,0,0",
        "py-relay,cuda-ipc,fresh,2,1MiB,15,300,350,0,0",
        "gpuipc,cuda-ipc,fresh,2,1MiB,15,320,380,0,0",
        # 50 ms reused: neither (0.6x over a low floor), over 3x rtt (360)
        "torch.mp,cuda-ipc,reused,50,1MiB,15,1000,1200,0,0",
        "py-relay,cuda-ipc,reused,50,1MiB,15,300,350,0,0",
        "gpuipc,cuda-ipc,reused,50,1MiB,15,600,700,0,0",
        "torch.mp,cuda-ipc,1000x64KiB,0,64KiB,1000,40000,,,",
        "gpuipc-batch,cuda-ipc,1000x64KiB,0,64KiB,1000,15000,,,",
        "gpuipc-batch-pipelined,cuda-ipc,1000x64KiB,0,64KiB,1000,12000,,,",
    ]
    t = _run(tmp_path, capsys, c_rows, py_rows)
    assert t["C library, cold: at most 2× the driver floor"] == "met 1 of 2; 1 neither"
    assert t["Python: at most 0.5× torch.multiprocessing"] == "met 1 of 3; 1 blocked; 1 neither"
    assert t["reused blocks from Python: at most 3× the socket round trip after idle"] == \
        "met 1 of 2; 1 neither"
    assert t["1000 × 64 KiB: at least 3× faster than torch.mp"] == \
        "met: 3.33× (gpuipc-batch-pipelined)"
    # a Python floor over the target, under gpuipc, which beat the relay
    # floor; at 50 ms reused the relay floor met the target, so none blocks
    py_rows += ["py-floor,cuda-ipc,reused,50,1MiB,15,550,600,0,0",
                "py-relay,cuda-ipc,fresh,50,1MiB,15,900,950,0,0",
                "py-floor,cuda-ipc,fresh,50,1MiB,15,700,750,0,0",
                "torch.mp,cuda-ipc,fresh,50,1MiB,15,1200,1300,0,0",
                "gpuipc,cuda-ipc,fresh,50,1MiB,15,800,850,0,0"]
    t = _run(tmp_path, capsys, c_rows, py_rows)
    assert t["Python: at most 0.5× torch.multiprocessing"] == "met 1 of 4; 2 blocked; 1 neither"


def test_many_not_met(tmp_path, capsys):
    t = _run(tmp_path, capsys, ["floor,cuda-ipc,fresh,2,1MiB,15,200,250,0,0,0,13,50",
                                "gpuipc,cuda-ipc,fresh,2,1MiB,15,300,350,0,0,0,20,60"],
             ["torch.mp,cuda-ipc,1000x64KiB,0,64KiB,1000,30000,,,",
              "gpuipc-batch,cuda-ipc,1000x64KiB,0,64KiB,1000,11000,,,"])
    assert t["1000 × 64 KiB: at least 3× faster than torch.mp"] == \
        "not met: 2.73× (gpuipc-batch)"
