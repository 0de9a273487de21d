"""Host buffers through a real gpuipcd, across processes."""
import json
import os
import time

import numpy as np
import pytest

import gpuipc
from conftest import popen_py, run_py

CONSUME = """
import json, sys
import numpy as np
import gpuipc
with gpuipc.connect() as c, c.lookup(sys.argv[1], timeout=10) as v:
    a = np.asarray(v)
    print(json.dumps({"data": a.tolist(), "dtype": str(a.dtype), "shape": list(a.shape),
                      "bytes": v.tobytes().hex(), "kind": v.kind, "user": v.user,
                      "strides": v.info.strides}))
"""


def consume(name):
    return json.loads(run_py(CONSUME, name).stdout)


def test_register_numpy_other_process(client):
    a = np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5
    rid = client.register("py/np", a, {"origin": "test"})
    assert rid > 0
    out = consume("py/np")
    assert out["kind"] == "host"
    assert out["dtype"] == "float32" and out["shape"] == [3, 4]
    assert out["data"] == a.tolist()
    assert out["user"] == {"origin": "test"}
    info = client.stat("py/np")
    assert (info.dtype, info.shape, info.size) == ("float32", (3, 4), 48)


def test_register_bytes_and_bytearray(client):
    client.register("py/bytes", b"hello, gpuipc")
    out = consume("py/bytes")
    assert bytes.fromhex(out["bytes"]) == b"hello, gpuipc"
    assert out["dtype"] == "uint8" and out["shape"] == [13]
    ba = bytearray(range(256))
    client.register("py/bytearray", ba)
    client.register("py/mv", memoryview(ba)[10:20])
    assert bytes.fromhex(consume("py/bytearray")["bytes"]) == bytes(ba)
    assert bytes.fromhex(consume("py/mv")["bytes"]) == bytes(ba[10:20])


def test_register_copies_noncontiguous(client):
    a = np.arange(24, dtype=np.int16).reshape(4, 6)
    client.register("py/slice", a[:, ::2])
    out = consume("py/slice")
    assert out["data"] == a[:, ::2].tolist() and out["dtype"] == "int16"
    # register() copied: later writes to the source are not seen
    a[:] = 0
    assert consume("py/slice")["data"] == np.arange(24, dtype=np.int16).reshape(4, 6)[:, ::2].tolist()


def test_alloc_host_is_zero_copy_across_processes(client):
    buf = client.alloc_host((8,), "int32")
    buf.array[:] = np.arange(8)
    client.register("py/live", buf)
    p = popen_py("""
        import sys, numpy as np, gpuipc
        c = gpuipc.connect()
        v = c.lookup("py/live", timeout=10)
        a = np.asarray(v)
        print(a.tolist(), flush=True)
        sys.stdin.readline()
        print(a.tolist(), flush=True)
        v.release(); c.close()
    """)
    try:
        assert p.stdout.readline().strip() == str(list(range(8)))
        buf.array[3] = 1000          # after registration, in the producer's mapping
        p.stdin.write("go\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == str([0, 1, 2, 1000, 4, 5, 6, 7])
        assert p.wait(30) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    buf.close()


def test_two_lookups_share_the_mapping(client):
    client.register("py/shared", np.zeros(16, dtype=np.uint8), shared_write=True)
    with client.lookup("py/shared") as r1, client.lookup("py/shared") as r2:
        assert r1.ptr == r2.ptr and r1.ptr != 0     # one mapping per process
        with client.lookup("py/shared", writable=True) as w:
            assert w.ptr != r1.ptr                  # read-write maps separately
            np.asarray(w)[5] = 42
        assert np.asarray(r1)[5] == 42              # same memory
    with client.lookup("py/shared") as r2:
        assert r2.tobytes()[5] == 42    # the daemon's memory was written, not a copy


def test_readonly_by_default(client):
    client.register("py/ro", np.ones(4, dtype=np.float64))
    with client.lookup("py/ro") as v:
        a = np.asarray(v)
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a[0] = 2
        mv = v.buffer
        assert mv.readonly and len(mv) == 32
        with pytest.raises(TypeError):
            mv[0] = 1
        del a, mv


def test_metadata_round_trip(client):
    src = np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3))
    buf = client.alloc_host(src.nbytes)
    buf.buffer[:] = src.tobytes(order="A")     # Fortran-order bytes
    client.register("py/fortran", buf, {"layout": "F", "note": "x" * 100},
                    dtype="int64", shape=(2, 3), strides=src.strides)
    out = consume("py/fortran")
    assert out["data"] == src.tolist()
    assert out["strides"] == [8, 16]
    assert out["user"] == {"layout": "F", "note": "x" * 100}
    with client.lookup("py/fortran") as v:
        assert v.dtype == "int64" and v.shape == (2, 3) and v.strides == (8, 16)
        a = v.array
        assert a.dtype == np.int64 and a.shape == (2, 3) and a.strides == (8, 16)
        assert (a == src).all()
        del a
    # dtype given as a numpy dtype or typestr is normalised to a name
    client.register("py/typestr", b"\0" * 8, dtype=np.dtype("<f4"), shape=(2,))
    assert client.stat("py/typestr").dtype == "float32"
    with client.lookup("py/typestr") as v:
        assert np.asarray(v).dtype == np.float32


def test_metadata_mismatch_is_refused_on_export(client):
    client.register("py/bad", b"\0" * 8, dtype="float64", shape=(4,))
    with client.lookup("py/bad") as v:
        with pytest.raises(ValueError, match="exceeds"):
            v.array
        assert len(v.buffer) == 8      # raw bytes stay available


def test_lookup_waits_for_registration(client):
    p = popen_py("""
        import time, gpuipc
        time.sleep(0.3)
        c = gpuipc.connect()
        c.register("py/late", b"late")
        print("done", flush=True)
        import sys; sys.stdin.readline()
    """)
    try:
        t = time.monotonic()
        with client.lookup("py/late", timeout=20) as v:
            assert v.tobytes() == b"late"
        assert time.monotonic() - t >= 0.2
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.wait(30) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_registration_outlives_producer_unless_ephemeral(client):
    run_py("""
        import gpuipc
        c = gpuipc.connect()
        c.register("py/durable", b"stays")
        c.register("py/eph", b"goes", ephemeral=True)
        buf = c.alloc_host(4); buf.buffer[:] = b"zcpy"; c.register("py/zc", buf)
        buf.close()
        c.close()
    """)
    # The daemon learns of the producer's exit asynchronously: poll for a while.
    deadline = time.monotonic() + 5
    while True:
        try:
            client.lookup("py/eph").release()
        except gpuipc.NotFound:
            break
        assert time.monotonic() < deadline, "py/eph still registered 5 s after its owner left"
        time.sleep(0.01)
    with client.lookup("py/durable") as v:
        assert v.tobytes() == b"stays"
        assert v.info.owner_gone and not v.info.ephemeral
    with client.lookup("py/zc") as v:
        assert v.tobytes() == b"zcpy"


def test_wait_released(client):
    rid = client.register("py/wr", b"0123456789")
    with pytest.raises(gpuipc.Timeout):
        client.wait_released(rid, timeout=0.05)
    run_py(CONSUME, "py/wr")
    client.wait_released(rid, timeout=10)    # the release happened before: it counts


def test_unregister_keeps_existing_views(client):
    client.register("py/un", b"abc")
    v = client.lookup("py/un")
    client.unregister("py/un")
    with pytest.raises(gpuipc.NotFound):
        client.lookup("py/un")
    assert v.tobytes() == b"abc"
    assert client.list("py") == []
    v.release()
    client.register("py/un", b"again")     # the name is free again
    assert consume("py/un")["bytes"] == b"again".hex()


def test_list_stat_stats(client):
    for i in range(3):
        client.register(f"py/ns/item-{i}", bytes([i]) * (i + 1))
    client.register("py/other", b"x")
    client.register("pyx/not-in-ns", b"y")
    names = [i.name for i in client.list("py/ns")]
    assert names == ["py/ns/item-0", "py/ns/item-1", "py/ns/item-2"]
    assert len(client.list()) == 5
    assert [i.name for i in client.list("py")] == names + ["py/other"]
    info = client.stat("py/ns/item-2")
    assert info.kind == "host" and info.size == 3 and info.device == ""
    assert info.owner_pid == os.getpid() and info.owner_uid == os.getuid()
    assert info.leases == 0 and not info.ephemeral and info.created_ms > 0
    with client.lookup("py/ns/item-2"):
        assert client.stat("py/ns/item-2").leases == 1
    assert client.stat("py/ns/item-2").leases == 0
    s = client.stats()
    assert s.server.startswith("gpuipcd") and s.protocol == 1
    assert s.registrations == 5 and s.leases == 0 and s.bytes_host == 1 + 2 + 3 + 1 + 1
    assert s.connections >= 1 and s.requests > 0
    client.ping()


def test_numpy_from_dlpack_host(client):
    client.register("py/dl", np.arange(10, dtype=np.int32))
    with client.lookup("py/dl") as v:
        assert v.__dlpack_device__() == (1, 0)
        a = np.from_dlpack(v)
        assert a.tolist() == list(range(10)) and a.dtype == np.int32
        assert a.ctypes.data == v.ptr          # zero-copy
        del a


def test_client_default_socket_and_context_manager(daemon):
    assert gpuipc.default_socket() == daemon.sock
    with gpuipc.connect() as c:
        c.ping()
        assert c.socket == daemon.sock
    assert c.closed
    with pytest.raises(gpuipc.Error):
        c.ping()


def test_writable_lookup_needs_shared_write(client):
    client.register("py/sealed", np.zeros(16, dtype=np.uint8))
    try:
        v = client.lookup("py/sealed", writable=True)
    except gpuipc.PermissionDenied as e:
        assert "SHARED_WRITE" in str(e)
    else:   # a kernel without F_SEAL_FUTURE_WRITE
        v.close()
    info = client.stat("py/sealed")
    assert info.access == {"public": False, "uids": [], "gids": [], "group": None}


def test_lookup_owner_uid(client):
    client.register("py/owned", b"mine")
    me = os.geteuid()
    with client.lookup("py/owned", owner_uid=me) as v:
        assert bytes(v.buffer) == b"mine"
    other = 1 if me != 1 else 2
    with pytest.raises(gpuipc.NotFound):
        client.lookup("py/owned", owner_uid=other)
    with pytest.raises(gpuipc.Timeout):
        client.lookup("py/owned", timeout=0.2, owner_uid=other)
    # the option lasts one call: a plain lookup finds it again
    with client.lookup("py/owned") as v:
        assert bytes(v.buffer) == b"mine"
    with pytest.raises(ValueError):
        client.lookup("py/owned", owner_uid=-1)
    assert client.lost_registrations() == []
