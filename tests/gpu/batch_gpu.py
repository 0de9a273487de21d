"""Column batches on a real GPU (issue 19): a CuPy/torch producer's batch read
by a consumer in another process through __arrow_c_device_array__, and as
torch tensors and CuPy arrays (BatchView.to_torch(), to_cupy()), and a
pyarrow RecordBatch handed over and read back with pyarrow.record_batch().

    batch_gpu.py produce-device NAME | consume-device NAME
    batch_gpu.py produce-arrow NAME  | consume-arrow NAME
    batch_gpu.py produce-cacheable NAME | consume-cacheable NAME

Run by tests/gpu/batch.sh, which starts a daemon and pairs the processes.
Each consumer prints one JSON line and exits 1 on a wrong byte.  The
cacheable pair registers the same torch tensors twice, as NAME/1 and then
NAME/2, with cacheable=True, and frees them after wait_unmapped(); batch.sh
runs its consumer through the counting shim, whose cuIpcOpenMemHandle
count shows the second lookup was warm.
"""
import json
import sys
import time

import gpuipc
from gpuipc import arrow as A

N = 1 << 20


def produce_device(name):
    import cupy as cp
    import torch
    cols = {
        "f32": cp.arange(N, dtype=cp.float32) * 0.5,
        "i64": cp.arange(N, dtype=cp.int64) - 7,
        "t_i32": torch.arange(N, dtype=torch.int32, device="cuda") * 3,
    }
    cp.cuda.Device().synchronize()
    torch.cuda.synchronize()
    with gpuipc.connect() as c:
        t0 = time.perf_counter()
        rid = c.register_batch(name, cols, meta={"producer": "cupy+torch"}, ephemeral=True)
        reg_us = (time.perf_counter() - t0) * 1e6
        print(json.dumps({"registered": rid, "register_us": round(reg_us, 1)}), flush=True)
        c.wait_released(rid, timeout=120)


def consume_device(name):
    import cupy as cp
    with gpuipc.connect() as c:
        t0 = time.perf_counter()
        bv = c.lookup_batch(name, timeout=60)
        look_us = (time.perf_counter() - t0) * 1e6
        sc, dc = bv.__arrow_c_device_array__()
        da = A.ArrowDeviceArray.from_address(A.capsule_pointer(dc, A.DEVICE_ARRAY))
        s = A.ArrowSchema.from_address(A.capsule_pointer(sc, A.SCHEMA))
        assert da.device_type == A.DEVICE_CUDA, da.device_type
        want = {"f32": cp.arange(N, dtype=cp.float32) * 0.5,
                "i64": cp.arange(N, dtype=cp.int64) - 7,
                "t_i32": cp.arange(N, dtype=cp.int32) * 3}
        dtypes = {"f": cp.float32, "l": cp.int64, "i": cp.int32}
        bad, zero_copy = 0, True
        for i in range(s.n_children):
            cs, ca = s.children[i].contents, da.array.children[i].contents
            col = cs.name.decode()
            ptr = ca.buffers[1]
            zero_copy &= ptr == bv[col].ptr
            dt = dtypes[cs.format.decode()]
            nbytes = ca.length * cp.dtype(dt).itemsize
            mem = cp.cuda.UnownedMemory(ptr, nbytes, bv)
            got = cp.ndarray((ca.length,), dtype=dt, memptr=cp.cuda.MemoryPointer(mem, 0))
            bad += int((got != want[col]).sum())
        # Every column at once: torch tensors and CuPy arrays over the mapping.
        import torch
        t0 = time.perf_counter()
        ts = bv.to_torch()
        torch_us = (time.perf_counter() - t0) * 1e6
        cps = bv.to_cupy()
        for col in bv.columns:
            zero_copy &= ts[col].data_ptr() == bv[col].ptr == cps[col].data.ptr
            bad += int((cp.asarray(ts[col]) != want[col]).sum())
            bad += int((cps[col] != want[col]).sum())
        out = {"columns": list(bv.columns), "rows": bv.num_rows, "device_id": da.device_id,
               "kinds": sorted({bv[k].kind for k in bv.columns}), "lookup_us": round(look_us, 1),
               "to_torch_us": round(torch_us, 1), "bad": bad, "zero_copy": bool(zero_copy),
               "metadata": bv.metadata}
        del sc, dc
        bv.release()
        # the tensors hold the batch: the producer's wait ends when they go
        del ts, cps
    print(json.dumps(out), flush=True)
    sys.exit(1 if bad or not zero_copy else 0)


def record_batch():
    import pyarrow as pa
    return pa.record_batch({
        "x": pa.array(range(1000), type=pa.int64()),
        "s": pa.array([None if i % 7 == 0 else f"s{i}" for i in range(1000)]),
        "b": pa.array([i % 3 == 0 for i in range(1000)]),
        "st": pa.array([{"p": i, "q": float(i) / 2} for i in range(1000)]),
    })


def produce_arrow(name):
    with gpuipc.connect() as c:
        rid = c.register_batch(name, record_batch(), meta={"from": "pyarrow"})
        print(json.dumps({"registered": rid}), flush=True)
        c.wait_released(rid, timeout=120)


def consume_arrow(name):
    import pyarrow as pa
    with gpuipc.connect() as c:
        bv = c.lookup_batch(name, timeout=60)
        rb = pa.record_batch(bv)
        same = rb.equals(record_batch())
        x_addr = rb.column(0).buffers()[1].address
        zero_copy = x_addr == bv["x"].ptr
        out = {"pyarrow": pa.__version__, "schema": str(rb.schema).splitlines()[:4],
               "equal": bool(same), "zero_copy": bool(zero_copy)}
        del rb
        bv.release()
    print(json.dumps(out), flush=True)
    sys.exit(0 if same and zero_copy else 1)


# The cacheable pair's columns: 32 MiB each, so that torch's caching
# allocator gives each a segment of its own (two allocations).
M = 8 << 20


def produce_cacheable(name):
    import torch
    cols = {"a": torch.arange(M, dtype=torch.int32, device="cuda"),
            "b": torch.arange(M, dtype=torch.float32, device="cuda") / 4}
    torch.cuda.synchronize()
    with gpuipc.connect() as c:
        for rnd in (1, 2):
            rid = c.register_batch(f"{name}/{rnd}", cols, cacheable=True)
            c.wait_released(rid, timeout=120)
            c.unregister(f"{name}/{rnd}")
            cols["a"] += 1                      # the same blocks, rewritten
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        c.wait_unmapped(rid, timeout=120)
        out = {"registered": rid, "wait_unmapped_us": round((time.perf_counter() - t0) * 1e6)}
    del cols
    torch.cuda.empty_cache()                    # only now may the memory go
    print(json.dumps(out), flush=True)


def consume_cacheable(name):
    import torch
    bad, out = 0, {}
    with gpuipc.connect() as c:
        for rnd in (1, 2):
            t0 = time.perf_counter()
            bv = c.lookup_batch(f"{name}/{rnd}", timeout=60)
            out[f"lookup_{rnd}_us"] = round((time.perf_counter() - t0) * 1e6, 1)
            ts = bv.to_torch()
            want_a = torch.arange(M, dtype=torch.int32, device="cuda") + (rnd - 1)
            bad += int((ts["a"] != want_a).sum())
            bad += int((ts["b"] != torch.arange(M, dtype=torch.float32, device="cuda") / 4).sum())
            out["kinds"] = sorted({bv[k].kind for k in bv.columns})
            del ts
            bv.release()
    out["bad"] = bad
    print(json.dumps(out), flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    {"produce-device": produce_device, "consume-device": consume_device,
     "produce-arrow": produce_arrow, "consume-arrow": consume_arrow,
     "produce-cacheable": produce_cacheable,
     "consume-cacheable": consume_cacheable}[sys.argv[1]](sys.argv[2])
