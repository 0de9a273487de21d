"""BatchView.to_torch() on a real GPU: the columns of one mapping come back
as tensors over exactly their memory, whatever their order, gaps and
overlaps, and a write to one lands in the producer's memory and in that
column only.

Skipped unless torch imports and a CUDA device is present.  Needs a running
gpuipcd ($GPUIPC_SOCKET); see README.md beside this file.
"""
import json
import os
import subprocess
import sys
import uuid

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
PKGDIR = os.path.abspath(os.path.join(HERE, "..", "..", "..", "client", "python"))

# One 1 MiB tensor of float32 values 0, 1, 2, ...; the columns (every
# column of a batch has its row count, ROWS) are slices of it: (name, start
# element), out of order, back to back and with gaps.  Two int64 columns of
# another tensor overlap.
ROWS = 100
COLUMNS = [("c", 5000), ("a", 0), ("b", 100), ("d", 70000), ("tail", 262144 - ROWS)]

PRODUCER = r"""
import json, sys, torch, gpuipc
name, cols, rows = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
base = torch.arange(262144, dtype=torch.float32, device="cuda")
ints = torch.arange(4096, dtype=torch.int64, device="cuda") * 3   # a second mapping
torch.cuda.synchronize()
c = gpuipc.connect()
batch = {n: base[at:at + rows] for n, at in cols}
batch["i1"] = ints[100:200]
batch["i2"] = ints[150:250]
rid = c.register_batch(name, batch, ephemeral=True)
print(json.dumps({"id": rid}), flush=True)
c.wait_released(rid, timeout=120)
torch.cuda.synchronize()
print(json.dumps({"released": True, "b": base[100:102].tolist()}), flush=True)
sys.stdin.readline()
"""

CONSUMER = r"""
import json, sys, torch, gpuipc
name, cols, rows = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
out = {}
with gpuipc.connect() as c:
    with c.lookup_batch(name, timeout=60) as bv:
        ts = bv.to_torch()
        out["order"] = list(ts)
        for n, at in cols:
            t = ts[n]
            want = torch.arange(at, at + rows, dtype=torch.float32, device="cuda")
            out[n] = dict(shape=list(t.shape), dtype=str(t.dtype), device=t.device.type,
                          equal=bool(torch.equal(t, want)), stride=list(t.stride()))
        out["ints"] = [bool(torch.equal(ts[n].cpu(), torch.arange(at, at + 100) * 3))
                       for n, at in (("i1", 100), ("i2", 150))]
        # Writes land in the producer's memory and only in that column.
        ts["b"].add_(torch.ones(rows, device="cuda", requires_grad=True))
        torch.cuda.synchronize()
        out["b_written"] = ts["b"].tolist()[:2]
        out["neighbours"] = [ts["a"][-1].item(), ts["c"][0].item()]
        out["grad"] = ts["b"].requires_grad
        del ts, t
print(json.dumps(out), flush=True)
"""


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = PKGDIR + os.pathsep + e.get("PYTHONPATH", "")
    return e


def test_to_torch_columns_of_one_mapping():
    name = "bt-torch/" + uuid.uuid4().hex[:8]
    cols = json.dumps(COLUMNS)
    p = subprocess.Popen([sys.executable, "-c", PRODUCER, name, cols, str(ROWS)], env=env(),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert "id" in json.loads(p.stdout.readline())
        r = subprocess.run([sys.executable, "-c", CONSUMER, name, cols, str(ROWS)], env=env(),
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert got["order"] == [n for n, _ in COLUMNS] + ["i1", "i2"]
        for n, _ in COLUMNS:
            assert got[n] == dict(shape=[ROWS], dtype="torch.float32", device="cuda", equal=True,
                                  stride=[1]), (n, got[n])
        assert got["ints"] == [True, True]
        assert got["b_written"] == [101.0, 102.0]
        assert got["neighbours"] == [99.0, 5000.0]
        assert got["grad"] is True
        # the consumer's write, seen in the producer's tensor
        assert json.loads(p.stdout.readline()) == {"released": True, "b": [101.0, 102.0]}
    finally:
        p.stdin.close()
        assert p.wait(timeout=120) == 0
