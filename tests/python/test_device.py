"""CUDA buffers through the driver double: its CUdeviceptr values are host
addresses, so the tests read "device" memory with ctypes."""
import ctypes
import gc
import json

import numpy as np
import pytest

import gpuipc
from gpuipc import dlpack
from conftest import LIBCUDA_DOUBLE, run_py

CONSUME_CAI = """
import ctypes, json, sys
import numpy as np
import gpuipc
with gpuipc.connect() as c, c.lookup(sys.argv[1], timeout=10) as v:
    cai = v.__cuda_array_interface__
    ptr = cai["data"][0]
    # The double's device pointers are host addresses: read them directly.
    raw = (ctypes.c_ubyte * v.nbytes).from_address(ptr)
    a = np.ndarray(cai["shape"], dtype=np.dtype(cai["typestr"]), buffer=raw,
                   strides=cai["strides"])
    print(json.dumps({"cai": {k: cai[k] for k in ("shape", "typestr", "strides", "version")},
                      "readonly": cai["data"][1], "has_stream": "stream" in cai,
                      "data": a.tolist(), "device": v.device, "kind": v.kind,
                      "dlpack_device": v.__dlpack_device__(), "ptr_ok": ptr == v.ptr}))
"""


def consume(name):
    return json.loads(run_py(CONSUME_CAI, name).stdout)


def host_array(ptr, shape, dtype):
    dt = np.dtype(dtype)
    n = int(np.prod(shape)) * dt.itemsize
    return np.ndarray(shape, dtype=dt, buffer=(ctypes.c_ubyte * n).from_address(ptr))


class Driver:
    """The double, loaded with ctypes (the same instance libgpuipc dlopens)."""

    def __init__(self):
        cu = ctypes.CDLL(LIBCUDA_DOUBLE)
        self.cu = cu
        assert cu.cuInit(0) == 0
        ctx = ctypes.c_void_p()
        assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert cu.cuCtxSetCurrent(ctx) == 0
        cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        cu.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        cu.gpuipc_cuda_double_count.restype = ctypes.c_long
        cu.gpuipc_cuda_double_count.argtypes = [ctypes.c_char_p]

    def alloc(self, n):
        p = ctypes.c_uint64()
        assert self.cu.cuMemAlloc_v2(ctypes.byref(p), n) == 0
        return p.value

    def free(self, p):
        assert self.cu.cuMemFree_v2(p) == 0

    def count(self, fn):
        return self.cu.gpuipc_cuda_double_count(fn.encode())


@pytest.fixture
def driver():
    return Driver()


class FakeCudaArray:
    """What CuPy/PyTorch/Numba expose: only __cuda_array_interface__."""

    def __init__(self, ptr, shape, typestr, strides=None, stream=None):
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (ptr, False), "strides": strides,
            "version": 3}
        if stream is not None:
            self.__cuda_array_interface__["stream"] = stream


class _FakeDtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return "torch." + self.name


class Tensor:
    """Enough of a torch CUDA tensor for libgpuipc's torch fast path, which
    reads the tensor instead of its __cuda_array_interface__ (here the
    interface refuses, as torch's does for tensors that require grad)."""

    def __init__(self, ptr, shape, dtype, itemsize, strides=None, requires_grad=False):
        self._ptr, self.shape, self._isz = ptr, tuple(shape), itemsize
        self.dtype = _FakeDtype(dtype)
        self._strides = strides         # in elements, as torch's stride()
        self.is_cuda, self.is_sparse, self.requires_grad = True, False, requires_grad

    def element_size(self):
        return self._isz

    def is_contiguous(self):
        return self._strides is None

    def stride(self):
        return self._strides

    def numel(self):
        return int(np.prod(self.shape))

    def data_ptr(self):
        return self._ptr

    def get_device(self):
        return 0                        # the double's one device

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")


Tensor.__module__ = "torch"


def test_torch_tensor_fast_path(client, driver):
    ptr = driver.alloc(4096)
    host_array(ptr, (4, 4), np.float32)[:] = np.arange(16).reshape(4, 4)
    client.register("dev/torch", Tensor(ptr, (4, 4), "float32", 4))
    info = client.stat("dev/torch")
    assert (info.kind, info.dtype, info.shape, info.strides, info.size) == \
        ("cuda-ipc", "float32", (4, 4), None, 64)
    assert consume("dev/torch")["data"] == np.arange(16).reshape(4, 4).tolist()
    # A transposed view: element strides (1, 4) are byte strides (4, 16).
    client.register("dev/torch-t", Tensor(ptr, (4, 4), "float32", 4, strides=(1, 4)))
    info = client.stat("dev/torch-t")
    assert (info.shape, info.strides) == ((4, 4), (4, 16))
    assert consume("dev/torch-t")["data"] == np.arange(16).reshape(4, 4).T.tolist()
    # What torch's interface refuses is refused as before (the interface path).
    with pytest.raises(RuntimeError, match="requires grad"):
        client.register("dev/torch-g", Tensor(ptr, (4,), "float32", 4, requires_grad=True))
    with pytest.raises(ValueError, match="empty"):
        client.register("dev/torch-e", Tensor(ptr, (0,), "float32", 4))
    for n in ("dev/torch", "dev/torch-t"):
        client.unregister(n)
    driver.free(ptr)


def test_alloc_device_to_other_process(client):
    buf = client.alloc_device((4, 8), "float32")
    assert buf.device == 0 and buf.nbytes == 128 and buf.alloc_size >= 128
    cai = buf.__cuda_array_interface__
    assert cai["data"] == (buf.ptr, False) and cai["typestr"] == "<f4"
    host_array(buf.ptr, (4, 8), np.float32)[:] = np.arange(32).reshape(4, 8)
    rid = client.register("dev/vmm", buf, {"producer": "alloc_device"})
    info = client.stat("dev/vmm")
    assert info.kind == "cuda-vmm" and info.device.startswith("GPU-")
    assert (info.dtype, info.shape, info.size) == ("float32", (4, 8), 128)
    out = consume("dev/vmm")
    assert out["kind"] == "cuda-vmm" and out["device"] == 0
    assert out["cai"] == {"shape": [4, 8], "typestr": "<f4", "strides": None, "version": 3}
    assert out["readonly"] is False and out["has_stream"] is False and out["ptr_ok"]
    assert out["dlpack_device"] == [2, 0]
    assert out["data"] == np.arange(32).reshape(4, 8).tolist()
    client.wait_released(rid, timeout=10)
    # cuda-vmm is durable: it outlives the producer's mapping
    buf.close()
    assert consume("dev/vmm")["data"] == np.arange(32).reshape(4, 8).tolist()


def test_cai_object_from_cuMemAlloc(client, driver):
    n = 6 * 5 * 2
    ptr = driver.alloc(1 << 16)
    src = np.arange(30, dtype=np.int16).reshape(6, 5)
    host_array(ptr + 4096, (6, 5), np.int16)[:] = src       # a sub-allocation
    obj = FakeCudaArray(ptr + 4096, (6, 5), "<i2")
    rid = client.register("dev/ipc", obj)
    info = client.stat("dev/ipc")
    assert info.kind == "cuda-ipc" and info.ephemeral
    assert info.offset == 4096 and info.alloc_size == 1 << 16 and info.size == n
    assert (info.dtype, info.shape) == ("int16", (6, 5))
    out = consume("dev/ipc")
    assert out["cai"]["typestr"] == "<i2" and out["cai"]["shape"] == [6, 5]
    assert out["data"] == src.tolist()
    client.wait_released(rid, timeout=10)
    # In the producer's own process a lookup returns the producer's pointer.
    with client.lookup("dev/ipc") as v:
        assert v.ptr == ptr + 4096 and v.__cuda_array_interface__["data"][0] == ptr + 4096
        del v
    client.unregister("dev/ipc")
    driver.free(ptr)


def test_cai_strides_and_stream(client, driver):
    ptr = driver.alloc(4096)
    base = host_array(ptr, (4, 4), np.float64)
    base[:] = np.arange(16).reshape(4, 4)
    syncs = driver.count("cuStreamSynchronize")
    # a transposed view: byte strides (8, 32); the CAI carries the legacy stream
    obj = FakeCudaArray(ptr, (4, 4), "<f8", strides=(8, 32), stream=1)
    client.register("dev/strided", obj)
    assert driver.count("cuStreamSynchronize") == syncs + 1
    out = consume("dev/strided")
    assert out["cai"]["strides"] == [8, 32]
    assert out["data"] == base.T.tolist()
    with pytest.raises(ValueError):
        client.register("dev/neg", FakeCudaArray(ptr, (4,), "<f8", strides=(-8,)))
    client.unregister("dev/strided")
    driver.free(ptr)


_api = ctypes.pythonapi
_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", _api))
_USED = {b"dltensor": ctypes.create_string_buffer(b"used_dltensor"),
         b"dltensor_versioned": ctypes.create_string_buffer(b"used_dltensor_versioned")}


def _capsule_tensor(cap, name=b"dltensor"):
    assert _IsValid(cap, name)
    addr = _GetPointer(cap, name)
    cls = dlpack.DLManagedTensorVersioned if name == b"dltensor_versioned" \
        else dlpack.DLManagedTensor
    return addr, cls.from_address(addr)


def _consume_capsule(cap, name=b"dltensor"):
    """What a DLPack consumer does: rename the capsule, call the deleter later."""
    addr, m = _capsule_tensor(cap, name)
    assert _SetName(cap, ctypes.cast(_USED[name], ctypes.c_char_p)) == 0
    return addr, m


def test_dlpack_capsule_device(client):
    buf = client.alloc_device((3, 4), "float32")
    client.register("dev/dl", buf, dtype="float32", shape=(3, 4), strides=(4, 12))
    v = client.lookup("dev/dl")
    made, deleted = dlpack.stats["created"], dlpack.stats["deleted"]
    cap = v.__dlpack__(stream=None)
    assert type(cap).__name__ == "PyCapsule"
    addr, m = _consume_capsule(cap)
    t = m.dl_tensor
    assert t.data == v.ptr and t.byte_offset == 0
    assert (t.device.device_type, t.device.device_id) == (dlpack.kDLCUDA, v.device)
    assert t.ndim == 2 and [t.shape[0], t.shape[1]] == [3, 4]
    assert [t.strides[0], t.strides[1]] == [1, 3]       # elements, not bytes
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (dlpack.kDLFloat, 32, 1)
    assert dlpack.stats["created"] == made + 1
    del cap                                   # consumed: the capsule does not free it
    gc.collect()
    assert dlpack.stats["deleted"] == deleted
    v.release()
    assert not v.freed and client.stat("dev/dl").leases == 1
    m.deleter(addr)                           # the consumer's tensor dies
    assert dlpack.stats["deleted"] == deleted + 1
    assert v.freed and client.stat("dev/dl").leases == 0
    buf.close()


def test_dlpack_unconsumed_capsule_runs_deleter(client):
    buf = client.alloc_device(64)
    client.register("dev/dl2", buf)
    with client.lookup("dev/dl2") as v:
        deleted = dlpack.stats["deleted"]
        cap = v.__dlpack__()
        _capsule_tensor(cap)
        del cap
        gc.collect()
        assert dlpack.stats["deleted"] == deleted + 1
    assert v.freed
    buf.close()


def test_dlpack_versioned_capsule(client):
    buf = client.alloc_device((2, 2), "int64")
    client.register("dev/dlv", buf)
    with client.lookup("dev/dlv") as v:
        cap = v.__dlpack__(max_version=(1, 0))
        addr, m = _consume_capsule(cap, b"dltensor_versioned")
        assert (m.version.major, m.version.minor) == (1, 0) and m.flags == 0
        t = m.dl_tensor
        assert t.data == v.ptr and t.device.device_type == dlpack.kDLCUDA
        assert (t.dtype.code, t.dtype.bits) == (dlpack.kDLInt, 64)
        assert not t.strides
    assert not v.freed
    m.deleter(addr)
    assert v.freed
    with pytest.raises(BufferError):
        buf.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        buf.__dlpack__(dl_device=(1, 0))
    buf.close()


def test_cai_ties_lifetime_to_the_view(client):
    buf = client.alloc_device(4096)
    client.register("dev/cai-life", buf)
    v = client.lookup("dev/cai-life")
    holder = [v]          # what cupy.asarray(v) / torch.as_tensor(v) keep
    v.__cuda_array_interface__
    v.release()
    assert not v.freed and client.stat("dev/cai-life").leases == 1
    del v
    gc.collect()
    assert not holder[0].freed
    del holder
    gc.collect()
    assert client.stat("dev/cai-life").leases == 0
    buf.close()


def test_cai_read_twice_is_one_export(client):
    """torch.as_tensor reads the interface twice: the second read gives the
    same dict and takes no second export, so one release and one
    collection free the view; a view released before any read refuses."""
    buf = client.alloc_device((16,), "float32")
    client.register("dev/cai-twice", buf)
    v = client.lookup("dev/cai-twice")
    first = v.__cuda_array_interface__
    assert v.__cuda_array_interface__ is first
    assert first == {"shape": (16,), "typestr": "<f4", "data": (v.ptr, False),
                     "strides": None, "version": 3}
    v.release()
    assert v.__cuda_array_interface__ is first      # the export still holds it
    assert not v.freed and client.stat("dev/cai-twice").leases == 1
    del v, first
    gc.collect()
    assert client.stat("dev/cai-twice").leases == 0
    w = client.lookup("dev/cai-twice")
    w.release()
    assert w.freed
    with pytest.raises(ValueError, match="released"):
        w.__cuda_array_interface__
    buf.close()


def test_torch_tensor_subclass_takes_the_interface_path(client, driver):
    """Only torch.Tensor itself is read directly; a subclass (as
    nn.Parameter is) goes through its __cuda_array_interface__, which
    here refuses as torch's does for a tensor that requires grad."""
    class Sub(Tensor):
        pass
    ptr = driver.alloc(4096)
    client.register("dev/torch-first", Tensor(ptr, (4,), "float32", 4))
    with pytest.raises(RuntimeError, match="requires grad"):
        client.register("dev/torch-sub", Sub(ptr, (4,), "float32", 4))
    assert client.stat("dev/torch-first").shape == (4,)
    with pytest.raises(gpuipc.NotFound):
        client.stat("dev/torch-sub")
    client.unregister("dev/torch-first")
    driver.free(ptr)


def test_host_view_has_no_cai(client):
    client.register("dev/host", b"abc")
    with client.lookup("dev/host") as v:
        assert not hasattr(v, "__cuda_array_interface__")
    buf = client.alloc_device(16)
    with pytest.raises(TypeError):
        buf.array
    buf.close()


def test_adopt(client, driver):
    ptr = driver.alloc(8192)
    host_array(ptr, (16,), np.float32)[:] = np.arange(16)
    client.register("dev/adopt", FakeCudaArray(ptr, (16,), "<f4"))
    assert client.adopt("dev/adopt") == 0
    info = client.stat("dev/adopt")
    assert info.kind == "cuda-vmm" and info.offset == 0
    host_array(ptr, (16,), np.float32)[:] = -1     # the daemon's copy is independent
    driver.free(ptr)
    out = consume("dev/adopt")
    assert out["data"] == list(range(16)) and out["kind"] == "cuda-vmm"


def test_sync_false_and_wait_stream(client):
    buf = client.alloc_device(256)
    client.register("dev/nosync", buf)
    with client.lookup("dev/nosync", sync=False) as v:
        v.wait_stream(None)                  # no producer event: a no-op
        cap = v.__dlpack__(stream=1)
        del cap
    buf.close()


def test_stats_report_cuda(client):
    buf = client.alloc_device(1000)
    client.register("dev/stats", buf)
    s = client.stats()
    assert s.bytes_cuda_vmm == 1000 and s.registrations == 1
    buf.close()


class _FakeTorch:
    """torch as View.to_torch() uses it: from_dlpack takes a "dltensor"
    capsule as torch does (renames it, keeps the struct, calls its deleter
    when the tensor dies); as_tensor records the fallback."""

    class Tensor:
        def __init__(self, addr, m):
            self.addr, self.m = addr, m

        def __del__(self):
            self.m.deleter(self.addr)

    def __init__(self, fail=False):
        self.fail = fail
        self.as_tensor_calls = []

    def from_dlpack(self, cap):
        if self.fail:
            raise RuntimeError("no CUDA here")
        addr, m = _consume_capsule(cap)
        return self.Tensor(addr, m)

    def as_tensor(self, obj, device=None):
        self.as_tensor_calls.append(device)
        return obj.__cuda_array_interface__


@pytest.fixture
def fake_torch(monkeypatch):
    from gpuipc import view
    t = _FakeTorch()
    monkeypatch.setattr(view, "_TORCH", [t])
    return t


def test_to_torch_layout_and_lease(client, fake_torch):
    buf = client.alloc_device((3, 4), "float32")
    client.register("dev/tt", buf, dtype="float32", shape=(3, 4), strides=(4, 12))
    v = client.lookup("dev/tt")
    t = v.to_torch()
    d = t.m.dl_tensor
    assert d.data == v.ptr and d.byte_offset == 0
    assert (d.device.device_type, d.device.device_id) == (dlpack.kDLCUDA, v.device)
    assert (d.dtype.code, d.dtype.bits, d.dtype.lanes) == (dlpack.kDLFloat, 32, 1)
    assert d.ndim == 2 and [d.shape[0], d.shape[1]] == [3, 4]
    assert [d.strides[0], d.strides[1]] == [1, 3]
    # The tensor keeps the lease after release(), as every export does.
    v.release()
    assert not v.freed and client.stat("dev/tt").leases == 1
    del t
    gc.collect()
    assert v.freed and client.stat("dev/tt").leases == 0
    assert fake_torch.as_tensor_calls == []
    with pytest.raises(ValueError):
        v.to_torch()                    # released
    buf.close()


def test_to_torch_then_fields_after_free(client, fake_torch):
    """to_torch() needs no layout in Python; the view's fields, first read
    after the tensor freed the view, are still the registration's."""
    buf = client.alloc_device((3, 4), "float32")
    client.register("dev/tt-late", buf, dtype="float32", shape=(3, 4))
    v = client.lookup("dev/tt-late")
    t = v.to_torch()
    ptr = t.m.dl_tensor.data
    v.release()
    del t
    gc.collect()
    assert v.freed
    assert (v.shape, v.dtype, v.nbytes, v.strides) == ((3, 4), "float32", 48, None)
    assert v.ptr == ptr and v.is_device and not v.readonly
    assert v.kind == "cuda-vmm" and v.name == "dev/tt-late"
    buf.close()


def test_first_field_read_survives_a_collection_that_frees_the_view(client, fake_torch):
    """The last export (a tensor in a reference cycle) is collected while
    the view reads its layout for the first time: the record must stay
    mapped until that read is done, and the view is freed after it.  Where
    in the read the collection lands depends on the collector's threshold,
    so each of a range of thresholds gets a view of its own."""
    buf = client.alloc_device((3, 4), "float32")
    client.register("dev/tt-gc", buf, dtype="float32", shape=(3, 4))
    old = gc.get_threshold()
    for k in range(1, 41):
        v = client.lookup("dev/tt-gc")
        t = v.to_torch()
        ptr = t.m.dl_tensor.data
        gc.collect()
        cycle = [t]
        cycle.append(cycle)
        del t, cycle
        v.release()
        assert not v.freed
        gc.set_threshold(k)
        try:
            got = (v.ptr, v.nbytes, v.dtype, v.shape, v.kind)
        finally:
            gc.set_threshold(*old)
        gc.collect()
        assert v.freed, k
        assert got == (ptr, 48, "float32", (3, 4), "cuda-vmm"), k
    assert client.stat("dev/tt-gc").leases == 0
    buf.close()


def test_to_torch_bytes_and_two_tensors(client, fake_torch):
    buf = client.alloc_device(4096)
    client.register("dev/tt-bytes", buf)
    with client.lookup("dev/tt-bytes") as v:
        a, b = v.to_torch(), v.to_torch()
        for t in (a, b):
            d = t.m.dl_tensor
            assert (d.dtype.code, d.dtype.bits) == (dlpack.kDLUInt, 8)
            assert d.ndim == 1 and d.shape[0] == 4096 and not d.strides
    del a, t, d
    gc.collect()
    assert not v.freed                  # b is alive
    del b
    gc.collect()
    assert v.freed and client.stat("dev/tt-bytes").leases == 0
    buf.close()


def test_to_torch_falls_back_to_as_tensor(client, fake_torch):
    """A layout the C struct cannot carry (a big-endian dtype here) goes
    through torch.as_tensor(view), which holds the view as before."""
    buf = client.alloc_device(64)
    client.register("dev/tt-be", buf, dtype=">f4", shape=(16,))
    v = client.lookup("dev/tt-be")
    cai = v.to_torch()
    assert fake_torch.as_tensor_calls == [f"cuda:{v.device}"]
    assert cai["typestr"] == ">f4"
    v.release()
    assert not v.freed                  # the interface export, until collected
    del v, cai
    gc.collect()
    assert client.stat("dev/tt-be").leases == 0
    buf.close()


def _to_torch_fails_and_lets_go(client, name, exc):
    """to_torch() of a fresh registration raises exc, and leaves no export
    behind: the struct's deleter ran once, and release() frees the view."""
    from gpuipc import view
    buf = client.alloc_device(64)
    client.register(name, buf)
    v = client.lookup(name)
    with pytest.raises(exc):
        v.to_torch()
    assert not view._DL_EXPORTS
    v.release()
    assert v.freed and client.stat(name).leases == 0
    buf.close()


def test_to_torch_consumer_failure_lets_go(client, monkeypatch):
    from gpuipc import view
    monkeypatch.setattr(view, "_TORCH", [_FakeTorch(fail=True)])
    _to_torch_fails_and_lets_go(client, "dev/tt-fail", RuntimeError)


def test_to_torch_consumer_that_ran_the_deleter_then_failed(client, monkeypatch):
    """A consumer that took the struct, ran its deleter while unwinding and
    raised before renaming the capsule: the struct is freed once (a second
    deleter call would free it twice)."""
    from gpuipc import view

    class Unwinding(_FakeTorch):
        def from_dlpack(self, cap):
            addr, m = _capsule_tensor(cap)
            m.deleter(addr)
            raise MemoryError("from_blob")
    monkeypatch.setattr(view, "_TORCH", [Unwinding()])
    _to_torch_fails_and_lets_go(client, "dev/tt-unwind", MemoryError)


def test_to_torch_capsule_failure_keeps_no_lease(client, fake_torch, monkeypatch):
    """A failure between the C call and torch (no capsule made) frees the
    struct and drops the export."""
    def no_capsule(managed):
        raise MemoryError("PyCapsule_New")
    monkeypatch.setattr(dlpack, "capsule_of", no_capsule)
    _to_torch_fails_and_lets_go(client, "dev/tt-nocap", MemoryError)


def test_to_torch_host_view_is_a_type_error(client, monkeypatch):
    """Even without torch: the view is checked before torch is imported."""
    import sys
    from gpuipc import view
    monkeypatch.setattr(view, "_TORCH", [])
    monkeypatch.setitem(sys.modules, "torch", None)     # import torch fails
    hb = client.alloc_host(64)
    client.register("host/tt", hb)
    with client.lookup("host/tt") as v:
        with pytest.raises(TypeError):
            v.to_torch()
    hb.close()
