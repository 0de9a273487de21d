"""The Arrow C Data and C Device Data Interfaces, as ctypes structs, and the
PyCapsules of Arrow's PyCapsule interface.

The structs are the ABI the Arrow specification defines for every project
to declare itself; libgpuipc declares the same ones in gpuipc.h.
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_char_p, c_int32, c_int64, c_void_p
from typing import Any, Dict, List, Optional, Tuple

FLAG_NULLABLE = 2
DEVICE_CPU = 1
DEVICE_CUDA = 2

SCHEMA = b"arrow_schema"
ARRAY = b"arrow_array"
DEVICE_ARRAY = b"arrow_device_array"


class ArrowSchema(Structure):
    pass


class ArrowArray(Structure):
    pass


_schema_release = ctypes.CFUNCTYPE(None, POINTER(ArrowSchema))
_array_release = ctypes.CFUNCTYPE(None, POINTER(ArrowArray))

ArrowSchema._fields_ = [
    ("format", c_char_p),
    ("name", c_char_p),
    ("metadata", c_void_p),
    ("flags", c_int64),
    ("n_children", c_int64),
    ("children", POINTER(POINTER(ArrowSchema))),
    ("dictionary", POINTER(ArrowSchema)),
    ("release", _schema_release),
    ("private_data", c_void_p),
]

ArrowArray._fields_ = [
    ("length", c_int64),
    ("null_count", c_int64),
    ("offset", c_int64),
    ("n_buffers", c_int64),
    ("n_children", c_int64),
    ("buffers", POINTER(c_void_p)),
    ("children", POINTER(POINTER(ArrowArray))),
    ("dictionary", POINTER(ArrowArray)),
    ("release", _array_release),
    ("private_data", c_void_p),
]


class ArrowDeviceArray(Structure):
    _fields_ = [
        ("array", ArrowArray),
        ("device_id", c_int64),
        ("device_type", c_int32),
        ("sync_event", c_void_p),
        ("reserved", c_int64 * 3),
    ]


# Structs that gpuipc builds for libgpuipc to read are never released by it,
# but the library refuses a struct whose release is NULL (a released one).
@_schema_release
def _keep_schema(p: Any) -> None:
    pass


@_array_release
def _keep_array(p: Any) -> None:
    pass


# numpy-style dtype names <-> Arrow format strings of fixed-width types.
DTYPE_FORMATS: Dict[str, str] = {
    "int8": "c", "uint8": "C", "int16": "s", "uint16": "S", "int32": "i", "uint32": "I",
    "int64": "l", "uint64": "L", "float16": "e", "float32": "f", "float64": "g",
}
FORMAT_DTYPES = {v: k for k, v in DTYPE_FORMATS.items()}


# ---- capsules -----------------------------------------------------------------

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [c_void_p, c_char_p, c_void_p]
_api.PyCapsule_GetPointer.restype = c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, c_char_p]
_raw_get = ctypes.PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(("PyCapsule_GetPointer", _api))
_raw_name = ctypes.PYFUNCTYPE(c_char_p, c_void_p)(("PyCapsule_GetName", _api))
_libc = ctypes.CDLL(None)
_libc.malloc.restype = c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [c_void_p]


@ctypes.PYFUNCTYPE(None, c_void_p)
def _capsule_destructor(cap: int) -> None:
    """Releases the struct a capsule still holds (nobody moved it out), then
    frees it.  Runs with the GIL held, while the capsule is being freed."""
    name = _raw_name(cap)
    ptr = _raw_get(cap, name)
    if not ptr:
        return
    if name == SCHEMA:
        s = ArrowSchema.from_address(ptr)
        if s.release:
            s.release(ctypes.cast(ptr, POINTER(ArrowSchema)))
    else:
        a = ArrowArray.from_address(ptr)     # also the head of a device array
        if a.release:
            a.release(ctypes.cast(ptr, POINTER(ArrowArray)))
    _libc.free(ptr)


def new_struct(cls: Any) -> Tuple[int, Any]:
    """A zeroed struct of cls in malloc'd memory, for a capsule to own."""
    size = ctypes.sizeof(cls)
    p = _libc.malloc(size)
    if not p:
        raise MemoryError()
    ctypes.memset(p, 0, size)
    return p, cls.from_address(p)


def free_struct(p: int) -> None:
    _libc.free(p)


def capsule(ptr: int, name: bytes) -> Any:
    """A capsule that owns the malloc'd struct at ptr."""
    return _api.PyCapsule_New(ptr, name, ctypes.cast(_capsule_destructor, c_void_p))


def capsule_pointer(cap: Any, name: bytes) -> int:
    """The struct a capsule of that name holds; TypeError for another kind."""
    try:
        p = _api.PyCapsule_GetPointer(cap, name)
    except ValueError:
        raise TypeError(f"expected a PyCapsule named {name.decode()!r}") from None
    return int(p)


# ---- building structs for libgpuipc to read ------------------------------------


class Built:
    """An ArrowSchema and ArrowArray pair built here, with what they point to."""

    def __init__(self, fmt: str, name: str, length: int, buffers: List[int],
                 null_count: int = 0, children: Optional[List["Built"]] = None,
                 nullable: bool = False) -> None:
        self.keep: List[Any] = []
        self.schema = ArrowSchema()
        self.array = ArrowArray()
        kids = children or []
        f, n = fmt.encode(), name.encode("utf-8")
        self.keep += [f, n, kids]
        self.schema.format = f
        self.schema.name = n
        self.schema.flags = FLAG_NULLABLE if nullable else 0
        self.schema.release = _keep_schema
        self.array.release = _keep_array
        self.array.length = length
        self.array.null_count = null_count
        bufs = (c_void_p * max(1, len(buffers)))(*[b or None for b in buffers])
        self.keep.append(bufs)
        self.array.n_buffers = len(buffers)
        self.array.buffers = ctypes.cast(bufs, POINTER(c_void_p))
        if kids:
            sk = (POINTER(ArrowSchema) * len(kids))(*[ctypes.pointer(k.schema) for k in kids])
            ak = (POINTER(ArrowArray) * len(kids))(*[ctypes.pointer(k.array) for k in kids])
            self.keep += [sk, ak]
            self.schema.n_children = self.array.n_children = len(kids)
            self.schema.children = ctypes.cast(sk, POINTER(POINTER(ArrowSchema)))
            self.array.children = ctypes.cast(ak, POINTER(POINTER(ArrowArray)))


def renamed(schema_ptr: int, name: str) -> Tuple[Any, List[Any]]:
    """A shallow copy of the ArrowSchema at schema_ptr under another name, for
    libgpuipc to read (its children stay the original's)."""
    s = ArrowSchema()
    ctypes.memmove(ctypes.addressof(s), schema_ptr, ctypes.sizeof(ArrowSchema))
    n = name.encode("utf-8")
    s.name = n
    s.release = _keep_schema
    s.private_data = None
    return s, [n]
