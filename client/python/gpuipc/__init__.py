"""gpuipc: zero-copy buffer handoff between processes through gpuipcd.

A pure-Python (ctypes) binding of libgpuipc.  A producer registers a buffer
under a name; a consumer in another process looks it up and gets the same
memory mapped::

    import gpuipc, numpy as np

    with gpuipc.connect() as c:                  # $GPUIPC_SOCKET or the default
        buf = c.alloc_host((1024, 3), "float32")  # shared memory to fill
        buf.array[:] = 1.0
        rid = c.register("demo/batch-1", buf)     # zero-copy
        c.wait_released(rid)                      # a consumer took it and let go

    with gpuipc.connect() as c, c.lookup("demo/batch-1", timeout=5) as v:
        a = np.asarray(v)                         # float32 (1024, 3), no copy

Device buffers work the same with CuPy/PyTorch arrays
(``__cuda_array_interface__`` / ``__dlpack__``).  See docs/python.md.
"""
from __future__ import annotations

from ._lib import default_socket, library_path, version
from .client import Client, Stats, connect, explain, parse_duration
from .errors import (Error, Exists, LimitReached, NotFound, PermissionDenied, Timeout,
                     Unreachable, Unsupported)
from .batch import BatchColumn, BatchView
from .view import DeviceBuffer, Holder, HostBuffer, Info, View

__version__ = "0.1.0"

__all__ = [
    "BatchColumn", "BatchView", "Client", "DeviceBuffer", "Error", "Exists", "Holder", "HostBuffer", "Info", "LimitReached",
    "NotFound", "PermissionDenied", "Stats", "Timeout", "Unreachable", "Unsupported", "View",
    "connect", "default_socket", "explain", "library_path", "parse_duration", "version",
]
