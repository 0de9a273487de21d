#!/usr/bin/env python3
"""The consumer side of tests/gpu/java: looks NAME up through libgpuipc
(ctypes, so it needs no Python binding) and checks that its SIZE bytes are
i*7+3 (mod 256), as GpuProducer.java wrote them.

    consumer.py [--host] [--lib PATH/libgpuipc.so.1] NAME SIZE

By default the check runs on the GPU with CuPy, over the consumer's own
mapping of the producer's device memory.  --host reads the memory from the
CPU instead: only valid with the CUDA driver double, whose device pointers
are host addresses (make check-java uses it).  Exit 0: every byte matched;
77: CuPy missing; 1: mismatch or error."""
import argparse
import ctypes
import sys


class Info(ctypes.Structure):
    # The leading fields of gpuipc_info (client/gpuipc.h).
    _fields_ = [("id", ctypes.c_uint64), ("name", ctypes.c_char_p), ("kind", ctypes.c_int),
                ("size", ctypes.c_uint64), ("offset", ctypes.c_uint64),
                ("device", ctypes.c_char_p)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", action="store_true")
    ap.add_argument("--lib", default="libgpuipc.so.1")
    ap.add_argument("name")
    ap.add_argument("size", type=int)
    a = ap.parse_args()

    cp = None
    if not a.host:
        try:
            import cupy as cp
        except ImportError:
            print("consumer: CuPy is not installed", file=sys.stderr)
            return 77

    lib = ctypes.CDLL(a.lib)
    lib.gpuipc_client_connect.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.gpuipc_view_lookup.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint,
                                  ctypes.POINTER(ctypes.c_void_p)]
    lib.gpuipc_view_data.argtypes = [ctypes.c_void_p]
    lib.gpuipc_view_data.restype = ctypes.c_void_p
    lib.gpuipc_view_size.argtypes = [ctypes.c_void_p]
    lib.gpuipc_view_size.restype = ctypes.c_size_t
    lib.gpuipc_view_device.argtypes = [ctypes.c_void_p]
    lib.gpuipc_view_info.argtypes = [ctypes.c_void_p]
    lib.gpuipc_view_info.restype = ctypes.POINTER(Info)
    lib.gpuipc_view_release.argtypes = [ctypes.c_void_p]
    lib.gpuipc_client_free.argtypes = [ctypes.c_void_p]
    lib.gpuipc_errmsg.argtypes = [ctypes.c_void_p]
    lib.gpuipc_errmsg.restype = ctypes.c_char_p

    c = ctypes.c_void_p()
    r = lib.gpuipc_client_connect(None, ctypes.byref(c))
    if r < 0:
        print(f"consumer: connect: {r}", file=sys.stderr)
        return 1
    v = ctypes.c_void_p()
    r = lib.gpuipc_view_lookup(c, a.name.encode(), 10000, 0, ctypes.byref(v))
    if r < 0:
        print(f"consumer: lookup {a.name}: {lib.gpuipc_errmsg(c).decode()} ({r})", file=sys.stderr)
        return 1
    info = lib.gpuipc_view_info(v).contents
    ptr = lib.gpuipc_view_data(v)
    size = lib.gpuipc_view_size(v)
    ordinal = lib.gpuipc_view_device(v)
    print(f"consumer: {a.name} kind {info.kind} device {info.device.decode()} (ordinal {ordinal}) "
          f"size {size} at 0x{ptr:x}")
    ok = info.kind != 0 and size == a.size and info.device.decode().startswith("GPU-")
    if ok and a.host:
        period = bytes((i * 7 + 3) & 0xFF for i in range(256))
        expected = (period * (size // 256 + 1))[:size]
        ok = ctypes.string_at(ptr, size) == expected
    elif ok:
        with cp.cuda.Device(ordinal):
            mem = cp.cuda.UnownedMemory(ptr, size, None, ordinal)
            arr = cp.ndarray((size,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))
            expected = ((cp.arange(size, dtype=cp.uint64) * 7 + 3) & 0xFF).astype(cp.uint8)
            bad = int(cp.count_nonzero(arr != expected))
            cp.cuda.runtime.deviceSynchronize()
            ok = bad == 0
            print(f"consumer: CuPy compared {size} bytes on device {ordinal}: {bad} differ")
    r = lib.gpuipc_view_release(v)
    lib.gpuipc_client_free(c)
    print("consumer: " + ("ok" if ok and r == 0 else "FAILED"))
    return 0 if ok and r == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
