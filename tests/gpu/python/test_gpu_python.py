"""gpuipc's Python package on a real GPU: CuPy and PyTorch across processes.

Skipped unless cupy and torch import and a CUDA device is present.  Needs a
running gpuipcd ($GPUIPC_SOCKET) and libgpuipc ($GPUIPC_LIBRARY, or found by
the package); see README.md beside this file.

Every producer and consumer runs in its own process (CUDA contexts are
per-process; IPC handles cannot be opened in the exporting process).  The
zero-copy proof: the consumer's pointer lies in a mapping whose base and
size (cuMemGetAddressRange, in the consumer) equal the producer's allocation
(base offset and size as the producer saw them), i.e. the consumer mapped the
producer's allocation rather than receiving a copy.
"""
import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

cupy = pytest.importorskip("cupy")
torch = pytest.importorskip("torch")
try:
    _ndev = cupy.cuda.runtime.getDeviceCount()
except Exception:  # no driver, no device
    _ndev = 0
if _ndev == 0 or not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
PKGDIR = os.path.abspath(os.path.join(HERE, "..", "..", "..", "client", "python"))
if PKGDIR not in sys.path:
    sys.path.insert(0, PKGDIR)

import gpuipc  # noqa: E402

COMMON = r"""
import ctypes, json, os, sys
import gpuipc

def out(**kw):
    print(json.dumps(kw), flush=True)

def addr_range(ptr):
    # cuMemGetAddressRange through the driver library, in this process.
    cu = ctypes.CDLL("libcuda.so.1")
    f = cu.cuMemGetAddressRange_v2
    f.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                  ctypes.c_uint64]
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    r = f(ctypes.byref(base), ctypes.byref(size), ptr)
    assert r == 0, f"cuMemGetAddressRange: CUresult {r}"
    return base.value, size.value
"""

CUPY_PRODUCER = COMMON + r"""
import cupy as cp
name = sys.argv[1]
x = cp.arange(1 << 20, dtype=cp.float32).reshape(1024, 1024) * 0.5
x = x[:, :]                      # a pool sub-allocation as CuPy hands it out
cp.cuda.runtime.deviceSynchronize()
ptr = x.data.ptr
base, size = addr_range(ptr)
c = gpuipc.connect()
rid = c.register(name, x)
info = c.stat(name)
out(kind=info.kind, ptr=ptr, base=base, alloc_size=size, offset=ptr - base,
    checksum=float(x.sum()))
c.wait_released(rid, timeout=120)  # keep x alive until the consumer is done
out(done=True)
"""

TORCH_CONSUMER = COMMON + r"""
import torch
name, mode = sys.argv[1], sys.argv[2]
c = gpuipc.connect()
v = c.lookup(name, timeout=60)
if mode == "cai":
    t = torch.as_tensor(v, device="cuda")
elif mode == "to_torch":
    t = v.to_torch()
else:
    t = torch.from_dlpack(v)
v.release()                      # t keeps the mapping
ptr = t.data_ptr()
base, size = addr_range(ptr)
expect = torch.arange(1 << 20, dtype=torch.float32, device="cuda").reshape(1024, 1024) * 0.5
out(shape=list(t.shape), dtype=str(t.dtype), equal=bool(torch.equal(t, expect)),
    ptr=ptr, view_ptr=v.ptr, base=base, alloc_size=size, offset=ptr - base,
    info_offset=v.info.offset, info_alloc_size=v.info.alloc_size,
    checksum=float(t.sum().item()))
del t
torch.cuda.synchronize()
c.close()
"""

VMM_PRODUCER = COMMON + r"""
import ctypes
name = sys.argv[1]
c = gpuipc.connect()
buf = c.alloc_device((512, 256), "int32")
# Fill through the driver (pure ctypes, no CUDA runtime): cuMemsetD32 in
# the device's primary context, made current here.
cu = ctypes.CDLL("libcuda.so.1")
ctx = ctypes.c_void_p()
assert cu.cuInit(0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
cu.cuMemsetD32_v2.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t]
assert cu.cuMemsetD32_v2(buf.ptr, 7, 512 * 256) == 0
assert cu.cuCtxSynchronize() == 0
base, size = addr_range(buf.ptr)
rid = c.register(name, buf)
out(kind=c.stat(name).kind, ptr=buf.ptr, base=base, alloc_size=size)
c.wait_released(rid, timeout=120)
buf.close()
out(done=True)
"""

CUPY_CONSUMER = COMMON + r"""
import cupy as cp
name, mode = sys.argv[1], sys.argv[2]
c = gpuipc.connect()
v = c.lookup(name, timeout=60)
a = cp.asarray(v) if mode == "cai" else cp.from_dlpack(v)
v.release()
ptr = a.data.ptr
base, size = addr_range(ptr)
out(shape=list(a.shape), dtype=str(a.dtype), all7=bool((a == 7).all()), ptr=ptr,
    base=base, alloc_size=size, info_alloc_size=v.info.alloc_size, kind=v.kind)
del a
c.close()
"""


def spawn(code, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = PKGDIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_json(p):
    line = p.stdout.readline()
    if not line:
        p.wait(30)
        raise AssertionError(f"process exited {p.returncode}: {p.stderr.read()}")
    return json.loads(line)


def finish(p):
    try:
        rc = p.wait(120)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 0, p.stderr.read()


@pytest.fixture(autouse=True)
def _daemon_reachable():
    try:
        gpuipc.connect().close()
    except gpuipc.Unreachable as e:
        pytest.skip(f"no gpuipcd: {e} (set GPUIPC_SOCKET)")


@pytest.mark.parametrize("mode", ["cai", "dlpack", "to_torch"])
def test_cupy_producer_torch_consumer(mode):
    name = f"pytest-gpu/cupy-torch-{mode}-{uuid.uuid4().hex[:8]}"
    prod = spawn(CUPY_PRODUCER, name)
    try:
        p = read_json(prod)
        assert p["kind"] == "cuda-ipc"
        cons = spawn(TORCH_CONSUMER, name, mode)
        c = read_json(cons)
        finish(cons)
        assert c["shape"] == [1024, 1024] and c["dtype"] == "torch.float32" and c["equal"]
        assert c["checksum"] == p["checksum"]
        assert c["ptr"] == c["view_ptr"]
        # Zero-copy: the consumer's tensor lies in a mapping of exactly the
        # producer's allocation, at the producer's offset in it.
        assert c["alloc_size"] == p["alloc_size"] == c["info_alloc_size"]
        assert c["offset"] == p["offset"] == c["info_offset"]
        assert read_json(prod) == {"done": True}
        finish(prod)
    finally:
        if prod.poll() is None:
            prod.kill()


@pytest.mark.parametrize("mode", ["cai", "dlpack"])
def test_ctypes_vmm_producer_cupy_consumer(mode):
    name = f"pytest-gpu/vmm-cupy-{mode}-{uuid.uuid4().hex[:8]}"
    prod = spawn(VMM_PRODUCER, name)
    try:
        p = read_json(prod)
        assert p["kind"] == "cuda-vmm"
        cons = spawn(CUPY_CONSUMER, name, mode)
        c = read_json(cons)
        finish(cons)
        assert c["shape"] == [512, 256] and c["dtype"] == "int32" and c["all7"]
        assert c["kind"] == "cuda-vmm"
        # The consumer mapped the producer's whole VMM allocation (same size),
        # and its pointer is the mapping's start (offset 0).
        assert c["alloc_size"] == p["alloc_size"] == c["info_alloc_size"]
        assert c["ptr"] == c["base"]
        assert read_json(prod) == {"done": True}
        finish(prod)
    finally:
        if prod.poll() is None:
            prod.kill()


C_CONSUMER = COMMON + r"""
import cupy as cp
# The C producer (tests/gpu/gpu_test.c, "producer pool") fills a 64 MiB
# cuMemAlloc with p[i] = 11 + 7 * i and registers three ranges of it.
ranges = {"gpu/pool/a": 0, "gpu/pool/b": 4 << 20, "gpu/pool/c": (40 << 20) + 123}
res = {}
with gpuipc.connect() as c:
    for name in ("gpu/pool/c", "gpu/pool/a", "gpu/pool/b"):
        off = ranges[name]
        with c.lookup(name, timeout=30) as v:
            a = cp.asarray(v)            # zero-copy through __cuda_array_interface__
            i = cp.arange(a.size, dtype=cp.uint64) + off
            want = ((11 + 7 * i) & 0xFF).astype(cp.uint8)
            ptr = a.data.ptr
            base, size = addr_range(ptr)
            res[name] = dict(equal=bool((a.view(cp.uint8) == want).all()), n=int(a.size),
                             alloc_size=size, offset=ptr - base)
            del a
out(**res)
"""


def test_c_producer_cupy_consumer():
    gpu_test = os.environ.get("GPUIPC_GPU_TEST")
    if not gpu_test or not os.environ.get("GPUIPC_GPU_PTX"):
        pytest.skip("set GPUIPC_GPU_TEST (build/gpu/gpu_test) and GPUIPC_GPU_PTX")
    prod = subprocess.Popen([gpu_test, "producer", "pool"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        cons = spawn(C_CONSUMER)
        c = read_json(cons)
        finish(cons)
        for name, off in (("gpu/pool/a", 0), ("gpu/pool/b", 4 << 20),
                          ("gpu/pool/c", (40 << 20) + 123)):
            r = c[name]
            assert r["equal"] and r["n"] == 1 << 20, (name, r)
            # Zero-copy: a view into the producer's whole 64 MiB allocation.
            assert r["alloc_size"] == 64 << 20 and r["offset"] == off, (name, r)
        finish(prod)
    finally:
        if prod.poll() is None:
            prod.kill()
