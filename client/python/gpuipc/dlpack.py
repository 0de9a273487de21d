"""DLPack capsules built with ctypes (no compiled extension).

:func:`make_capsule` wraps a pointer, shape and strides in a
``DLManagedTensor`` (capsule name ``"dltensor"``) or, when the consumer asks
for DLPack 1.x, a ``DLManagedTensorVersioned`` (``"dltensor_versioned"``).
The structs and their shape/strides arrays are kept in a module-level table
until the tensor's deleter runs, and the deleter calls the ``on_delete``
callback the exporter passed (gpuipc uses it to drop the export that keeps a
view mapped).  Protocol (DLPack, ``dlpack.h``):

* the consumer renames the capsule (``"used_dltensor"``) and later calls
  ``deleter(managed)`` when its tensor dies;
* a capsule that is garbage-collected unconsumed still carries its original
  name, and its destructor calls the deleter itself.

:data:`stats` counts capsules made and deleters run (tests use it).
"""
from __future__ import annotations

import ctypes
import threading
from ctypes import (POINTER, Structure, c_char_p, c_int, c_int32, c_int64, c_uint8, c_uint16,
                    c_uint32, c_uint64, c_void_p)
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

# DLDeviceType
kDLCPU = 1
kDLCUDA = 2
kDLCUDAHost = 3

# DLDataTypeCode
kDLInt = 0
kDLUInt = 1
kDLFloat = 2
kDLOpaqueHandle = 3
kDLBfloat = 4
kDLComplex = 5
kDLBool = 6

DLPACK_MAJOR = 1
DLPACK_MINOR = 0
DLPACK_FLAG_BITMASK_READ_ONLY = 1

CAPSULE_NAME = b"dltensor"
CAPSULE_NAME_VERSIONED = b"dltensor_versioned"


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),   # in elements; NULL: compact row-major
        ("byte_offset", c_uint64),
    ]


class DLManagedTensor(Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, c_void_p)

DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", c_void_p),
    ("deleter", DELETER),
]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", c_void_p),
        ("deleter", DELETER),
        ("flags", c_uint64),
        ("dl_tensor", DLTensor),
    ]


# numpy-style dtype name -> (DLPack code, bits)
_DL_DTYPES: Dict[str, Tuple[int, int]] = {
    "bool": (kDLBool, 8),
    "int8": (kDLInt, 8), "int16": (kDLInt, 16), "int32": (kDLInt, 32), "int64": (kDLInt, 64),
    "uint8": (kDLUInt, 8), "uint16": (kDLUInt, 16), "uint32": (kDLUInt, 32),
    "uint64": (kDLUInt, 64),
    "float16": (kDLFloat, 16), "float32": (kDLFloat, 32), "float64": (kDLFloat, 64),
    "bfloat16": (kDLBfloat, 16),
    "complex64": (kDLComplex, 64), "complex128": (kDLComplex, 128),
}


def dl_dtype(name: str) -> Tuple[int, int]:
    """(code, bits) of a numpy-style dtype name; ValueError if DLPack has none."""
    try:
        return _DL_DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype {name!r} has no DLPack equivalent") from None


# ---- the Python C API through ctypes.pythonapi ------------------------------

_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, c_void_p)
# Private prototypes (PYFUNCTYPE: called with the GIL held), so that nobody
# else's changes to ctypes.pythonapi's shared function objects affect them.
_PyCapsule_New = ctypes.PYFUNCTYPE(ctypes.py_object, c_void_p, c_char_p, _CAPSULE_DESTRUCTOR)(
    ("PyCapsule_New", ctypes.pythonapi))
# The same with no destructor (NULL), for capsules a consumer takes at once.
_PyCapsule_New_bare = ctypes.PYFUNCTYPE(ctypes.py_object, c_void_p, c_char_p, c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
# The destructor sees a dying object: pass it as a raw pointer, never as
# py_object (that would take and drop a reference to it).
_PyCapsule_IsValid = ctypes.PYFUNCTYPE(c_int, c_void_p, c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

# Capsule names must outlive every capsule: static buffers, and pointers to
# them made once (a cast is a foreign call).
_NAME = ctypes.create_string_buffer(CAPSULE_NAME)
_NAME_V = ctypes.create_string_buffer(CAPSULE_NAME_VERSIONED)
_NAME_P = ctypes.cast(_NAME, c_char_p)
_NAME_V_P = ctypes.cast(_NAME_V, c_char_p)


class _Entry:
    __slots__ = ("managed", "shape", "strides", "on_delete")

    def __init__(self, managed, shape, strides, on_delete):
        self.managed = managed
        self.shape = shape
        self.strides = strides
        self.on_delete = on_delete


_lock = threading.Lock()
_live: Dict[int, _Entry] = {}
stats = {"created": 0, "deleted": 0}


def _run_deleter(addr: Optional[int]) -> None:
    if not addr:
        return
    with _lock:
        entry = _live.pop(addr, None)
        if entry is not None:
            stats["deleted"] += 1
    if entry is not None and entry.on_delete is not None:
        try:
            entry.on_delete()
        except Exception:  # a deleter must not raise into C
            pass


@DELETER
def _deleter(addr):  # void deleter(DLManagedTensor *self)
    _run_deleter(addr)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # Unconsumed capsules still have their original name: free the tensor.
    for name in (_NAME_P, _NAME_V_P):
        if _PyCapsule_IsValid(capsule, name):
            _run_deleter(_PyCapsule_GetPointer(capsule, name))
            return


def live_count() -> int:
    """Exported DLPack tensors whose deleter has not run yet."""
    with _lock:
        return len(_live)


def capsule_of(managed: int):
    """A legacy ``"dltensor"`` capsule over a DLManagedTensor made in C
    (gpuipc_view_dlpack), with no destructor: hand it to a consumer at
    once; if the consumer fails without taking it (:func:`capsule_unused`),
    free it with :func:`run_deleter`."""
    return _PyCapsule_New_bare(managed, _NAME_P, None)


def capsule_unused(capsule) -> bool:
    """True while no consumer took a capsule of :func:`capsule_of` (a
    consumer renames the capsules it takes)."""
    return bool(_PyCapsule_IsValid(id(capsule), _NAME_P))


def run_deleter(managed: int) -> None:
    """Runs a DLManagedTensor's own deleter (once: it frees the struct)."""
    DLManagedTensor.from_address(managed).deleter(managed)


def make_capsule(ptr: int, shape: Sequence[int], strides_bytes: Optional[Sequence[int]],
                 dtype: str, device_type: int, device_id: int,
                 on_delete: Optional[Callable[[], None]], *, versioned: bool = False,
                 readonly: bool = False):
    """A DLPack capsule over ``ptr``; ``on_delete()`` runs when its tensor dies.

    ``strides_bytes`` are byte strides (gpuipc's metadata); DLPack wants
    elements, so each must be a multiple of the item size.
    """
    code, bits = dl_dtype(dtype)
    itemsize = bits // 8
    ndim = len(shape)
    c_shape = (c_int64 * max(ndim, 1))(*shape)
    c_strides = None
    if strides_bytes is not None:
        el = []
        for s in strides_bytes:
            if s % itemsize:
                raise ValueError(f"stride {s} is not a multiple of the item size {itemsize}")
            el.append(s // itemsize)
        c_strides = (c_int64 * max(ndim, 1))(*el)
    # Built by the constructors, which set every field in one call each
    # (arrays convert to the pointer fields); the struct keeps no
    # reference to them, _live does.
    t = DLTensor(ptr, DLDevice(device_type, device_id), ndim, DLDataType(code, bits, 1),
                 c_shape, c_strides, 0)
    m: Union[DLManagedTensorVersioned, DLManagedTensor]
    if versioned:
        m = DLManagedTensorVersioned(
            DLPackVersion(DLPACK_MAJOR, DLPACK_MINOR), None, _deleter,
            DLPACK_FLAG_BITMASK_READ_ONLY if readonly else 0, t)
        name = _NAME_V_P
    else:
        m = DLManagedTensor(t, None, _deleter)
        name = _NAME_P
    addr = ctypes.addressof(m)
    with _lock:
        _live[addr] = _Entry(m, c_shape, c_strides, on_delete)
        stats["created"] += 1
    try:
        return _PyCapsule_New(addr, name, _capsule_destructor)
    except BaseException:
        _run_deleter(addr)
        raise
