"""The memory users' allocators hand out, on a real GPU (issue 14).

Producers: torch's default caching allocator, torch with
``expandable_segments:True`` (VMM chunks), torch's ``cudaMallocAsync``
backend and CuPy's ``MemoryAsyncPool`` (the device's default pool: refused
with a message, then registered with ``copy=True``), CuPy's default pool,
and a pool created with the POSIX fd handle type through the driver API
(``cuda-pool``).  Consumers: torch and Numba, each in its own process, and
in a PID namespace of its own (``unshare --pid --fork``, as another
container) where the machine allows it.

Every buffer holds ``arange(n) % 251`` as uint8; producer and consumer both
sum it, so a wrong byte anywhere fails the case.  Needs a running gpuipcd
($GPUIPC_SOCKET) and libgpuipc ($GPUIPC_LIBRARY); see README.md.
"""
import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
PKGDIR = os.path.abspath(os.path.join(HERE, "..", "..", "..", "client", "python"))

COMMON = r"""
import ctypes, json, os, sys
import gpuipc

def out(**kw):
    print(json.dumps(kw), flush=True)

def expect(n):
    return int(sum((i % 251) for i in range(251)) * (n // 251) +
               sum(i % 251 for i in range(n - n % 251, n)))

def hold():
    sys.stdin.read()          # keep the memory until the test says so
"""

TORCH_PRODUCER = COMMON + r"""
import torch
sizes = json.loads(sys.argv[2])
prefix, copy = sys.argv[1], sys.argv[3] == "copy"
c = gpuipc.connect()
keep, regs = [], []
for i, n in enumerate(sizes):
    t = (torch.arange(n, device="cuda", dtype=torch.int64) % 251).to(torch.uint8)
    torch.cuda.synchronize()
    keep.append(t)
    name = f"{prefix}/{i}"
    try:
        c.register(name, t)
        path = "zero-copy"
    except gpuipc.Error as e:
        if not copy:
            out(refused=str(e), explain=gpuipc.explain(t))
            hold(); sys.exit(0)
        c.register(name, t, copy=True)
        path = "copy"
    info = c.stat(name)
    regs.append(dict(name=name, n=n, kind=info.kind, chunks=info.n_chunks,
                     copied=info.copied, path=path, sum=expect(n)))
out(regs=regs, explain=gpuipc.explain(keep[-1]))
hold()
"""

CUPY_PRODUCER = COMMON + r"""
import cupy as cp
prefix, mode = sys.argv[1], sys.argv[2]
if mode == "async":
    cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
c = gpuipc.connect()
n = (3 << 20) + 7
a = (cp.arange(n, dtype=cp.int64) % 251).astype(cp.uint8)
cp.cuda.runtime.deviceSynchronize()
name = prefix + "/0"
try:
    c.register(name, a)
    path = "zero-copy"
except gpuipc.Error as e:
    refused = str(e)
    c.register(name, a, copy=True)
    path = "copy"
else:
    refused = None
info = c.stat(name)
out(regs=[dict(name=name, n=n, kind=info.kind, chunks=info.n_chunks, copied=info.copied,
               path=path, sum=expect(n))], refused=refused, explain=gpuipc.explain(a))
hold()
"""

# A pool with the POSIX fd handle type, through the driver API (what RMM's
# cuda_async_memory_resource with an export handle type and cuda.core's
# IPC-enabled memory resource make).
POOL_PRODUCER = COMMON + r"""
import torch
torch.cuda.init(); torch.empty(1, device="cuda")
cu = ctypes.CDLL("libcuda.so.1")
class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
class Props(ctypes.Structure):
    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int), ("location", Loc),
                ("win32", ctypes.c_void_p), ("maxSize", ctypes.c_size_t),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_char * 54)]
p = Props(); p.allocType = 1; p.handleTypes = 1; p.location = Loc(1, 0)
pool = ctypes.c_void_p()
assert cu.cuMemPoolCreate(ctypes.byref(pool), ctypes.byref(p)) == 0
prefix = sys.argv[1]
c = gpuipc.connect()
ptrs, regs, ids = [], [], []
for i, n in enumerate([1 << 20, (64 << 20) + 3, 3000]):
    d = ctypes.c_uint64()
    assert cu.cuMemAllocFromPoolAsync(ctypes.byref(d), ctypes.c_size_t(n), pool, None) == 0
    assert cu.cuCtxSynchronize() == 0
    ptrs.append(d.value)
    # Fill through torch: a tensor over the pool memory (DLPack-free: CAI).
    class Arr:
        __cuda_array_interface__ = dict(shape=(n,), typestr="|u1", data=(d.value, False),
                                        version=3, strides=None)
    t = torch.as_tensor(Arr(), device="cuda")
    t.copy_((torch.arange(n, device="cuda", dtype=torch.int64) % 251).to(torch.uint8))
    torch.cuda.synchronize()
    name = f"{prefix}/{i}"
    ids.append(c.register(name, Arr()))
    info = c.stat(name)
    regs.append(dict(name=name, n=n, kind=info.kind, chunks=info.n_chunks, copied=info.copied,
                     path="zero-copy", sum=expect(n)))
out(regs=regs, explain=gpuipc.explain(Arr()))
# The free order: free only after every consumer let go.
for rid in ids:
    c.wait_released(rid, timeout=120)
for d in ptrs:
    assert cu.cuMemFree_v2(ctypes.c_uint64(d)) == 0
assert cu.cuMemPoolDestroy(pool) == 0
out(freed=True)
hold()
"""

CONSUMER = COMMON + r"""
regs, how = json.loads(sys.argv[1]), sys.argv[2]
got = []
with gpuipc.connect() as c:
    for r in regs:
        try:
            with c.lookup(r["name"], timeout=30) as v:
                if how == "numba":
                    from numba import cuda
                    import numpy as np
                    a = cuda.as_cuda_array(v)
                    s = int(a.copy_to_host().astype(np.int64).sum())
                else:
                    import torch
                    s = int(torch.as_tensor(v, device="cuda").to(torch.int64).sum().item())
                got.append(dict(name=r["name"], sum=s, kind=v.kind))
        except gpuipc.Error as e:
            got.append(dict(name=r["name"], error=type(e).__name__, message=str(e)))
out(got=got)
"""


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = PKGDIR + os.pathsep + e.get("PYTHONPATH", "")
    e["PYTHONUNBUFFERED"] = "1"
    return e


class Producer:
    def __init__(self, script, *args, extra_env=None):
        e = env()
        e.update(extra_env or {})
        self.p = subprocess.Popen([sys.executable, "-c", script, *args], env=e,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def line(self):
        s = self.p.stdout.readline()
        assert s, f"the producer ended (exit {self.p.poll()})"
        return json.loads(s)

    def close(self):
        self.p.stdin.close()
        assert self.p.wait(timeout=120) == 0


# A PID and IPC namespace of its own, with its own /proc, as a container has:
# without --mount-proc, cuInit fails there (CUDA_ERROR_OPERATING_SYSTEM,
# seen on an H200): the driver reads /proc of the wrong namespace.
UNSHARE = ["unshare", "--pid", "--ipc", "--fork", "--mount-proc"]


def can_unshare():
    return (os.geteuid() == 0 and shutil.which("unshare") is not None and
            subprocess.run(UNSHARE + ["true"]).returncode == 0)


def consume(regs, how="torch", pidns=False):
    cmd = [sys.executable, "-c", CONSUMER, json.dumps(regs), how]
    if pidns:
        cmd = UNSHARE + cmd
    r = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])["got"]


def check_sums(regs, got):
    for want, have in zip(regs, got):
        assert "error" not in have, have
        assert have["sum"] == want["sum"], (want, have)


def record(case, **kw):
    print(f"RESULT {case} " + json.dumps(kw, sort_keys=True))


def name():
    return "alloc/" + uuid.uuid4().hex[:8]


@pytest.mark.parametrize("how", ["torch", "numba"])
def test_torch_default(how):
    if how == "numba":
        pytest.importorskip("numba.cuda")
    sizes = [69000, 557058, 4400000, 64 << 20]
    p = Producer(TORCH_PRODUCER, name(), json.dumps(sizes), "nocopy")
    regs = p.line()["regs"]
    assert all(r["kind"] == "cuda-ipc" for r in regs)
    check_sums(regs, consume(regs, how))
    record("torch-default", consumer=how, kinds=[r["kind"] for r in regs])
    p.close()


def test_torch_expandable_segments():
    # 64 tensors of 69 KB to 4.4 MB, as the issue measured, and two large
    # ones that cross several 20 MiB chunks.
    sizes = [69000 + (i * 68111) % 4331000 for i in range(64)] + [64 << 20, 300 << 20]
    p = Producer(TORCH_PRODUCER, name(), json.dumps(sizes), "nocopy",
                 extra_env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    first = p.line()
    assert "regs" in first, first
    regs = first["regs"]
    assert all(r["kind"] == "cuda-vmm" and r["path"] == "zero-copy" for r in regs)
    multi = [r for r in regs if r["chunks"] > 1]
    assert multi, "no tensor crossed a chunk: the case proves nothing"
    check_sums(regs, consume(regs, "torch"))
    record("torch-expandable", n=len(regs), multi_chunk=len(multi),
           max_chunks=max(r["chunks"] for r in regs), explain=first["explain"])
    p.close()


def test_torch_expandable_in_other_pid_namespace():
    if not can_unshare():
        pytest.skip("needs root and unshare --pid")
    sizes = [557058, 64 << 20]
    p = Producer(TORCH_PRODUCER, name(), json.dumps(sizes), "nocopy",
                 extra_env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    regs = p.line()["regs"]
    check_sums(regs, consume(regs, "torch", pidns=True))
    record("torch-expandable-pidns", chunks=[r["chunks"] for r in regs])
    p.close()


def test_torch_default_in_other_pid_namespace_is_refused():
    if not can_unshare():
        pytest.skip("needs root and unshare --pid")
    p = Producer(TORCH_PRODUCER, name(), json.dumps([1 << 20]), "nocopy")
    regs = p.line()["regs"]
    got = consume(regs, "torch", pidns=True)
    assert got[0].get("error") == "Unsupported", got
    assert "PID namespace" in got[0]["message"], got
    record("torch-default-pidns", message=got[0]["message"][:160])
    p.close()


def test_torch_cuda_malloc_async_refused_then_copied():
    sizes = [1 << 20, 64 << 20]
    e = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    p = Producer(TORCH_PRODUCER, name(), json.dumps(sizes), "nocopy", extra_env=e)
    first = p.line()
    assert "refused" in first, first
    assert "default pool" in first["refused"], first
    assert "GPUIPC_REGISTER_COPY" in first["refused"], first
    assert first["explain"][0] == "none", first
    p.close()
    p = Producer(TORCH_PRODUCER, name(), json.dumps(sizes), "copy", extra_env=e)
    regs = p.line()["regs"]
    assert all(r["kind"] == "cuda-vmm" and r["copied"] for r in regs), regs
    check_sums(regs, consume(regs, "torch"))
    record("torch-cudaMallocAsync", refused=first["refused"][:120], copied=regs[0]["copied"])
    p.close()


@pytest.mark.parametrize("mode", ["default", "async"])
def test_cupy(mode):
    pytest.importorskip("cupy")
    p = Producer(CUPY_PRODUCER, name(), mode)
    first = p.line()
    regs = first["regs"]
    if mode == "default":
        assert first["refused"] is None and regs[0]["kind"] == "cuda-ipc", first
    else:
        assert "default pool" in (first["refused"] or ""), first
        assert regs[0]["kind"] == "cuda-vmm" and regs[0]["copied"], first
    check_sums(regs, consume(regs, "torch"))
    record(f"cupy-{mode}", kind=regs[0]["kind"], refused=(first["refused"] or "")[:80])
    p.close()


@pytest.mark.parametrize("how,pidns", [("torch", False), ("numba", False), ("torch", True)])
def test_exportable_pool(how, pidns):
    if how == "numba":
        pytest.importorskip("numba.cuda")
    if pidns and not can_unshare():
        pytest.skip("needs root and unshare --pid")
    p = Producer(POOL_PRODUCER, name())
    first = p.line()
    regs = first["regs"]
    assert all(r["kind"] == "cuda-pool" for r in regs), first
    assert first["explain"][0] == "cuda-pool", first
    got = consume(regs, how, pidns=pidns)
    record("pool", consumer=how, pidns=pidns, got=[g.get("error", "ok") for g in got],
           message=next((g["message"][:200] for g in got if "error" in g), ""))
    if any("error" in g for g in got):
        p.p.kill()              # it would wait for releases that never come
        p.p.wait()
    check_sums(regs, got)
    # The producer frees only after every release: it must get there.
    assert p.line() == {"freed": True}
    p.close()
