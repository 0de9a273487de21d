"""Column batches from Python (issue 19): register_batch, lookup_batch,
BatchView, and the Arrow PyCapsule interface both ways."""
from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

import gpuipc
from gpuipc import arrow as A
from conftest import mapped, run_py
from test_device import FakeCudaArray, Tensor, driver  # noqa: F401  (a fixture)


def table():
    ints = np.arange(10, dtype=np.int64) * 3
    floats = np.linspace(0.0, 1.0, 10, dtype=np.float32)
    flags = np.array([i % 3 == 0 for i in range(10)])
    nullable = np.ma.masked_array(np.arange(10, dtype=np.int32),
                                  mask=[i in (2, 7) for i in range(10)])
    words = ["a", "bb", None, "ccc", "", "dé", "e", None, "ff", "g"]
    point = {"x": np.arange(10, dtype=np.float64), "y": np.arange(10, dtype=np.int16) - 5}
    return {"ints": ints, "floats": floats, "flags": flags, "nullable": nullable,
            "words": words, "point": point}


def check_table(bv):
    assert bv.num_rows == 10
    assert bv.columns == ("ints", "floats", "flags", "nullable", "words", "point")
    assert bv["ints"].format == "l" and list(bv["ints"].array) == [3 * i for i in range(10)]
    assert np.allclose(np.asarray(bv["floats"]), np.linspace(0.0, 1.0, 10, dtype=np.float32))
    assert bv["flags"].to_pylist() == [i % 3 == 0 for i in range(10)]
    n = bv["nullable"]
    assert n.nullable and n.null_count == 2 and n.validity is not None
    assert n.to_pylist() == [None if i in (2, 7) else i for i in range(10)]
    w = bv["words"]
    assert w.format == "u" and w.null_count == 2
    assert list(w.offsets.array)[-1] == len("abbcccdéeffg".encode())
    assert w.to_pylist() == ["a", "bb", None, "ccc", "", "dé", "e", None, "ff", "g"]
    p = bv["point"]
    assert p.format == "+s" and set(p.children) == {"x", "y"}
    assert list(p.children["y"].array) == [i - 5 for i in range(10)]


def test_host_batch_round_trip(client):
    rid = client.register_batch("bt/t1", table(), meta={"origin": "spark", "part": "7"})
    assert rid > 0
    with client.lookup_batch("bt/t1") as bv:
        check_table(bv)
        assert bv.metadata == {"origin": "spark", "part": "7"}
        assert bv.info.kind == "batch" and bv.id == rid
        # zero copy: every column's memory is the daemon's shared memory
        assert mapped(bv["ints"].ptr) and mapped(bv["words"].offsets.ptr)
    info = client.stat("bt/t1")
    assert info.kind == "batch" and info.leases == 0


CONSUME = """
import json, sys, gpuipc
with gpuipc.connect() as c, c.lookup_batch(sys.argv[1], timeout=10) as bv:
    print(json.dumps({k: bv[k].to_pylist() for k in bv.columns if bv[k].format != "+s"}))
"""


def test_batch_to_another_process(client):
    client.register_batch("bt/xp", {k: v for k, v in table().items() if k != "point"})
    got = json.loads(run_py(CONSUME, "bt/xp").stdout)
    assert got["ints"] == [3 * i for i in range(10)]
    assert got["words"] == ["a", "bb", None, "ccc", "", "dé", "e", None, "ff", "g"]
    assert got["nullable"][2] is None and got["nullable"][3] == 3
    assert got["flags"][:4] == [True, False, False, True]


def decode(schema_cap, array_cap):
    """Reads an exported struct array as a consumer would: (names, columns
    as (format, length, buffer pointers))."""
    s = A.ArrowSchema.from_address(A.capsule_pointer(schema_cap, A.SCHEMA))
    a = A.ArrowArray.from_address(A.capsule_pointer(array_cap, A.ARRAY))
    assert s.format == b"+s" and a.n_children == s.n_children
    out = {}
    for i in range(s.n_children):
        cs, ca = s.children[i].contents, a.children[i].contents
        out[cs.name.decode()] = (cs.format.decode(), ca.length,
                                 [ca.buffers[k] for k in range(ca.n_buffers)])
    return a.length, out


def test_arrow_capsules_zero_copy_and_release(client):
    client.register_batch("bt/cap", {"v": np.arange(6, dtype=np.uint32),
                                     "s": ["x", "yy", "zzz", None, "", "w"]})
    bv = client.lookup_batch("bt/cap")
    sc, ac = bv.__arrow_c_array__()
    rows, cols = decode(sc, ac)
    assert rows == 6 and cols["v"][0] == "I" and cols["s"][0] == "u"
    assert cols["v"][2][1] == bv["v"].ptr            # the mapped memory itself
    vals = (ctypes.c_uint32 * 6).from_address(cols["v"][2][1])
    assert list(vals) == list(range(6))
    dsc, dac = bv.__arrow_c_device_array__()
    da = A.ArrowDeviceArray.from_address(A.capsule_pointer(dac, A.DEVICE_ARRAY))
    assert da.device_type == A.DEVICE_CPU and da.device_id == -1
    schema_only = bv.__arrow_c_schema__()
    assert A.ArrowSchema.from_address(A.capsule_pointer(schema_only, A.SCHEMA)).n_children == 2
    # The lease outlives the view while exports live, and goes with the last.
    bv.release()
    assert client.stat("bt/cap").leases == 1
    del sc, ac, dsc, dac, schema_only
    import gc
    gc.collect()
    client.ping()
    assert client.stat("bt/cap").leases == 0


def test_batch_view_is_an_arrow_producer(client):
    """A BatchView's export feeds register_batch: the capsule path a pyarrow
    RecordBatch takes, without pyarrow."""
    client.register_batch("bt/src", {"a": np.arange(5, dtype=np.int8),
                                     "b": ["p", None, "q", "r", "s"]})
    with client.lookup_batch("bt/src") as src:
        client.register_batch("bt/copy", src)               # a record batch object
    with client.lookup_batch("bt/copy") as bv:
        assert bv.columns == ("a", "b")
        assert bv["b"].to_pylist() == ["p", None, "q", "r", "s"]
        assert list(bv["a"].array) == [0, 1, 2, 3, 4]


def test_column_objects_with_capsules(client):
    client.register_batch("bt/one", {"a": np.arange(4, dtype=np.float64)})

    class Col:
        """A column that exports itself, as a pyarrow Array does."""

        def __init__(self, bv):
            self.bv = bv

        def __arrow_c_array__(self, requested_schema=None):
            return self.bv.__arrow_c_array__()

    with client.lookup_batch("bt/one") as bv:
        # the struct array of one column is itself a valid struct column
        client.register_batch("bt/nested", {"wrapped": Col(bv)})
    with client.lookup_batch("bt/nested") as bv:
        w = bv["wrapped"]
        assert w.format == "+s" and list(w.children["a"].array) == [0.0, 1.0, 2.0, 3.0]


def test_device_batch_against_double(client, driver):  # noqa: F811
    n = 256
    p = driver.alloc(n * 4)
    src = np.arange(n, dtype=np.float32).tobytes()
    ctypes.memmove(p, src, len(src))           # the double's device memory is shared memory
    client.register_batch("bt/dev", {"x": FakeCudaArray(p, (n,), "<f4")}, ephemeral=True)
    with client.lookup_batch("bt/dev") as bv:
        x = bv["x"]
        assert x.is_device and x.kind in ("cuda-ipc", "cuda-vmm")
        cai = x.__cuda_array_interface__
        assert cai["shape"] == (n,) and cai["typestr"] == "<f4"
        sc, dc = bv.__arrow_c_device_array__()
        da = A.ArrowDeviceArray.from_address(A.capsule_pointer(dc, A.DEVICE_ARRAY))
        assert da.device_type == A.DEVICE_CUDA and da.device_id == x.device
        with pytest.raises(gpuipc.Error):
            bv.__arrow_c_array__()                      # device memory is not host
        del sc, dc
    driver.free(p)


def test_torch_columns_added_in_runs(client, driver):  # noqa: F811
    """torch tensors are added a run at a time (one C call): a host column
    between two runs keeps its place, and a run with a wrong row count adds
    nothing."""
    n = 16
    p = driver.alloc(4 * 4096)
    for k in range(4):
        ctypes.memmove(p + 4096 * k, (np.arange(n, dtype=np.int32) + 10 * k).tobytes(), 4 * n)
    cols = {"t0": Tensor(p, (n,), "int32", 4), "t1": Tensor(p + 4096, (n,), "int32", 4),
            "h": np.arange(n, dtype=np.int16),
            "t2": Tensor(p + 8192, (n,), "int32", 4), "t3": Tensor(p + 12288, (n,), "int32", 4)}
    client.register_batch("bt/runs", cols, ephemeral=True)
    with client.lookup_batch("bt/runs") as bv:
        assert bv.columns == ("t0", "t1", "h", "t2", "t3")
        for k in range(4):
            col = bv[f"t{k}"]
            assert col.is_device and col.format == "i" and col.length == n
            got = np.frombuffer(ctypes.string_at(col.ptr, 4 * n), dtype=np.int32)
            assert (got == np.arange(n) + 10 * k).all()
        assert not bv["h"].is_device and list(bv["h"].array) == list(range(n))
    bad = {"t0": Tensor(p, (n,), "int32", 4), "t1": Tensor(p + 4096, (n - 1,), "int32", 4)}
    with pytest.raises(gpuipc.Error) as e:
        client.register_batch("bt/runs-bad", bad)
    assert "rows" in str(e.value) and "t1" in str(e.value)
    with pytest.raises(gpuipc.NotFound):
        client.stat("bt/runs-bad")
    driver.free(p)


HOLD = """
import sys, gpuipc
c = gpuipc.connect()
with c.lookup_batch(sys.argv[1], timeout=10) as bv:
    print(sum(bv[k].nbytes for k in bv.columns), flush=True)
print("released", flush=True)
sys.stdin.readline()        # keeps the mapping (and the hold) until then
"""


def test_cacheable_batch_waits_for_its_consumers(client, driver):  # noqa: F811
    """A batch registered cacheable=True: its consumer keeps the memory
    mapped after the view, so the producer's wait_unmapped of the batch's
    id waits for it; without the flag there is nothing to wait for."""
    import subprocess
    import sys
    n = 64
    p = driver.alloc(2 * 4096)
    cols = {"a": Tensor(p, (n,), "int32", 4), "b": Tensor(p + 4096, (n,), "int32", 4)}
    rid = client.register_batch("bt/cache", cols, cacheable=True)
    cons = subprocess.Popen([sys.executable, "-c", HOLD, "bt/cache"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert cons.stdout.readline().strip() == str(2 * 4 * n)
        assert cons.stdout.readline().strip() == "released"
        client.wait_released(rid, timeout=10)
        client.unregister("bt/cache")
        with pytest.raises(gpuipc.Timeout) as e:
            client.wait_unmapped(rid, timeout=0.3)      # the consumer still maps it
        assert "still mapped" in str(e.value)
    finally:
        cons.communicate("\n", timeout=30)              # its disconnect drops the hold
    assert cons.returncode == 0
    client.wait_unmapped(rid, timeout=10)
    other = client.register_batch("bt/nocache", cols, ephemeral=True)
    with pytest.raises(gpuipc.NotFound):
        client.wait_unmapped(other, timeout=1)
    client.unregister("bt/nocache")
    driver.free(p)


def test_batch_errors(client):
    with pytest.raises(ValueError):
        client.register_batch("bt/e1", {})
    with pytest.raises(ValueError):
        client.register_batch("bt/e2", {"m": np.zeros((2, 2), dtype=np.int32)})
    with pytest.raises(TypeError):
        client.register_batch("bt/e3", {"o": np.array([object()])})
    with pytest.raises(gpuipc.Error) as e:
        client.register_batch("bt/e4", {"a": np.arange(3), "b": np.arange(4)})
    assert "row" in str(e.value) or "length" in str(e.value)
    with pytest.raises(TypeError):
        client.register_batch("bt/e5", 42)
    client.register("bt/single", np.arange(4, dtype=np.uint8))
    with pytest.raises(gpuipc.Error):
        client.lookup_batch("bt/single")
    with pytest.raises(gpuipc.NotFound):
        client.lookup_batch("bt/none")


def test_to_numpy_one_array_per_mapping(client):
    cols = {"a": np.arange(10, dtype=np.int64), "b": np.arange(10, dtype=np.int64) * 7,
            "f": np.linspace(0.0, 1.0, 10, dtype=np.float32),
            "words": ["x"] * 10, "flags": np.array([i % 2 == 0 for i in range(10)])}
    client.register_batch("bt/np", cols)
    bv = client.lookup_batch("bt/np")
    got = bv.to_numpy()
    assert list(got) == ["a", "b", "f", "words", "flags"]
    assert (got["a"] == cols["a"]).all() and (got["b"] == cols["b"]).all()
    assert np.allclose(got["f"], cols["f"]) and got["f"].dtype == np.float32
    # copied into one memfd: the int64 columns are slices of one array
    assert got["a"].base is got["b"].base and not got["a"].flags.writeable
    assert mapped(got["a"].ctypes.data)
    # other types are what np.asarray(bv[name]) makes of them: their bytes
    assert bytes(got["words"]) == b"x" * 10 and got["words"].dtype == np.uint8
    assert got["flags"].nbytes == 2
    bv.release()
    assert client.stat("bt/np").leases == 1, "the arrays hold the batch"
    assert got["b"][3] == 21
    del got
    import gc
    gc.collect()
    assert client.stat("bt/np").leases == 0


def test_device_columns_of_one_allocation_share_a_span(client, driver):  # noqa: F811
    n = 64
    p = driver.alloc(3 * 4096)
    for k in range(3):
        src = (np.arange(n, dtype=np.float32) + 100 * k).tobytes()
        ctypes.memmove(p + 4096 * k, src, len(src))
    cols = {f"c{k}": FakeCudaArray(p + 4096 * k, (n,), "<f4") for k in range(3)}
    client.register_batch("bt/span", cols, ephemeral=True)
    with client.lookup_batch("bt/span") as bv:
        # _arrays() with the span itself, so the grouping shows without torch
        got = bv._arrays(True, lambda s: s, lambda s, at, length: (s, at, length),
                         lambda col: None)
        spans = {id(s) for s, _, _ in got.values()}
        assert len(spans) == 1, "one allocation, one span"
        for k in range(3):
            s, at, length = got[f"c{k}"]
            base = s.__cuda_array_interface__["data"][0]
            assert length == n and base + 4 * at == bv[f"c{k}"].ptr
            assert s.__cuda_array_interface__["typestr"] == "<f4"
        with pytest.raises(ValueError):
            bv.to_numpy()                           # device columns
        del got, s
    driver.free(p)


def test_lookup_batches_prefetches_in_order(client):
    names = [f"bt/seq/{i}" for i in range(5)]
    for i, n in enumerate(names):
        client.register_batch(n, {"a": np.full(8, i, dtype=np.int32)})
    seen = []
    for bv in client.lookup_batches(names, timeout=5, prefetch=2):
        seen.append(int(bv.to_numpy()["a"][0]))
        bv.release()
    assert seen == [0, 1, 2, 3, 4]
    import gc
    gc.collect()
    assert all(client.stat(n).leases == 0 for n in names)
    # stopping early releases the views looked up ahead
    gen = client.lookup_batches(names, timeout=5, prefetch=2)
    first = next(gen)
    gen.close()
    first.release()
    assert all(client.stat(n).leases == 0 for n in names), [client.stat(n).leases
                                                             for n in names]
    # an error comes at its own batch, after the ones before it
    got = []
    with pytest.raises(gpuipc.NotFound):
        for bv in client.lookup_batches(["bt/seq/0", "bt/seq/none", "bt/seq/1"], timeout=0):
            got.append(bv.id)
            bv.release()
    assert len(got) == 1
    assert all(client.stat(n).leases == 0 for n in names)
    with pytest.raises(ValueError):
        next(client.lookup_batches(names, prefetch=-1))


def test_register_batches_in_order(client):
    items = [(f"bt/many/{i}", {"a": np.full(16, i, dtype=np.int64),
                               "w": [f"r{i}"] * 16}) for i in range(6)]
    ids = client.register_batches(items, meta={"k": "v"})
    assert len(ids) == 6 and ids == sorted(ids)
    for i, (name, _) in enumerate(items):
        with client.lookup_batch(name) as bv:
            assert bv.id == ids[i] and bv.metadata == {"k": "v"}
            assert int(bv.to_numpy()["a"][3]) == i and bv["w"].to_pylist()[0] == f"r{i}"
    # the first error comes after the batches before it are registered
    bad = [("bt/many2/0", {"a": np.arange(4)}), ("bt/many2/1", {}),
           ("bt/many2/2", {"a": np.arange(4)})]
    with pytest.raises(ValueError) as e:
        client.register_batches(bad)
    assert len(e.value.ids) == 1 and client.stat("bt/many2/0").id == e.value.ids[0]
    with pytest.raises(gpuipc.NotFound):
        client.stat("bt/many2/2")
    # a daemon's refusal (the name is taken) the same way
    with pytest.raises(gpuipc.Error) as e:
        client.register_batches([("bt/many3/0", {"a": np.arange(4)}),
                                 ("bt/many/1", {"a": np.arange(4)}),
                                 ("bt/many3/2", {"a": np.arange(4)})])
    assert len(e.value.ids) == 1
    with pytest.raises(gpuipc.NotFound):
        client.stat("bt/many3/2")               # nothing after the failure was sent
