"""Views stay mapped while anything exported from them lives."""
import gc

import numpy as np

import gpuipc
from conftest import mapped


def test_release_with_numpy_array_alive(client):
    client.register("life/a", np.arange(4096, dtype=np.int64))
    v = client.lookup("life/a")
    addr = v.ptr
    a = np.asarray(v)
    b = a[100:200]                       # a derived view keeps it too
    assert mapped(addr)
    v.release()
    assert v.released and not v.freed
    assert client.stat("life/a").leases == 1     # the lease is still held
    del a
    gc.collect()
    assert mapped(addr) and b.tolist() == list(range(100, 200))
    del b
    gc.collect()
    assert v.freed
    assert not mapped(addr)
    assert client.stat("life/a").leases == 0


def test_release_with_memoryview_alive(client):
    client.register("life/mv", b"memoryview!" * 1000)
    with client.lookup("life/mv") as v:
        addr = v.ptr
        mv = v.buffer[:11]
    assert v.released and not v.freed and mapped(addr)
    assert bytes(mv) == b"memoryview!"
    del mv
    gc.collect()
    assert v.freed and not mapped(addr)


def test_release_with_dlpack_array_alive(client):
    client.register("life/dl", np.arange(1000, dtype=np.float32))
    v = client.lookup("life/dl")
    addr = v.ptr
    a = np.from_dlpack(v)
    v.release()
    assert mapped(addr) and a[999] == 999.0
    del a
    gc.collect()
    assert v.freed and not mapped(addr)


def test_unused_view_is_released_at_once(client):
    client.register("life/plain", b"x" * 100)
    v = client.lookup("life/plain")
    addr = v.ptr
    v.release()
    assert v.freed and not mapped(addr)
    v.release()       # idempotent


def test_view_fields_first_read_after_free(client):
    """A view reads its layout from the C record on first use; one first
    read after the record is gone still gives the registration's."""
    client.register("life/late", np.arange(12, dtype=np.int32).reshape(3, 4))
    v = client.lookup("life/late")
    v.release()
    assert v.freed
    assert (v.shape, v.dtype, v.nbytes, v.kind) == ((3, 4), "int32", 48, "host")
    assert v.strides is None and v.ptr != 0 and v.readonly and not v.is_device
    assert v.name == "life/late"


def test_release_during_first_field_read(client, monkeypatch):
    """A release() that lands while the view reads its layout for the first
    time (as another thread's may) waits for the read: the fields are the
    registration's and the view is freed once the read is done."""
    from gpuipc import _lib
    client.register("life/race", np.arange(12, dtype=np.int32).reshape(3, 4))
    v = client.lookup("life/race")
    cstr = _lib.cstr

    def release_then_cstr(p):
        monkeypatch.setattr(_lib, "cstr", cstr)
        v.release()                 # inside the read of the record
        assert not v.freed
        return cstr(p)
    monkeypatch.setattr(_lib, "cstr", release_then_cstr)
    assert (v.shape, v.dtype, v.nbytes) == ((3, 4), "int32", 48)
    assert v.freed and client.stat("life/race").leases == 0


def test_garbage_collected_view_releases_its_lease(client):
    client.register("life/gc", b"x" * 100)
    v = client.lookup("life/gc")
    addr = v.ptr
    assert client.stat("life/gc").leases == 1
    del v
    gc.collect()
    assert not mapped(addr)
    assert client.stat("life/gc").leases == 0


def test_exports_refused_after_release(client):
    client.register("life/after", b"x" * 100)
    v = client.lookup("life/after")
    v.release()
    for f in (lambda: v.array, lambda: v.buffer, lambda: v.__dlpack__()):
        try:
            f()
        except ValueError:
            pass
        else:
            raise AssertionError("export after release succeeded")


def test_view_outlives_its_client(daemon):
    c = gpuipc.connect()
    c.register("life/client", b"still here")
    v = c.lookup("life/client")
    a = np.asarray(v)
    c.close()
    assert a.tobytes() == b"still here"
    v.release()
    assert a.tobytes() == b"still here"
    del a
    gc.collect()
    assert v.freed


def test_host_buffer_close_with_array_alive(client):
    buf = client.alloc_host((256,), "uint32")
    addr = buf.ptr
    arr = buf.array
    arr[:] = 7
    client.register("life/hb", buf)
    buf.close()
    assert mapped(addr) and arr.sum() == 7 * 256
    del arr
    gc.collect()
    assert buf.freed and not mapped(addr)
    with client.lookup("life/hb") as v:       # the daemon's copy lives on
        assert np.asarray(v).sum() == 7 * 256
