"""Views of registered buffers, and the buffers this process allocates.

Lifetime model (the same for :class:`View`, :class:`HostBuffer` and
:class:`DeviceBuffer`): the C object is freed when the Python object has been
released (``release()``/``close()``, ``with`` exit, or garbage collection)
*and* every export made from it is gone.  Exports are

* the NumPy arrays of ``.array`` / ``numpy.asarray(obj)`` and the
  memoryviews of ``.buffer`` (tracked through the ctypes array they are
  built on),
* DLPack capsules (tracked until the consumer's deleter runs), and the
  tensors of :meth:`View.to_torch` (likewise: they are DLPack imports),
* ``__cuda_array_interface__``: its consumers (CuPy, PyTorch, Numba) keep a
  reference to the object itself, so once it has been read the memory stays
  mapped until that object is garbage-collected, even after ``release()``.

So releasing early never leaves an array pointing at unmapped memory.
"""
from __future__ import annotations

import ctypes
import errno
import itertools
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, cast

from . import _lib
from . import dlpack as _dlpack
from .errors import error_for

try:  # optional
    import numpy as _np
except ImportError:  # pragma: no cover - exercised by the no-numpy test
    _np = None  # type: ignore[assignment]

# ---- dtypes ---------------------------------------------------------------

_KIND_NAMES = {
    ("f", 2): "float16", ("f", 4): "float32", ("f", 8): "float64",
    ("i", 1): "int8", ("i", 2): "int16", ("i", 4): "int32", ("i", 8): "int64",
    ("u", 1): "uint8", ("u", 2): "uint16", ("u", 4): "uint32", ("u", 8): "uint64",
    ("b", 1): "bool", ("c", 8): "complex64", ("c", 16): "complex128",
}
_NAME_TYPESTR = {name: ("|" if size == 1 else "<") + kind + str(size)
                 for (kind, size), name in _KIND_NAMES.items()}
_ITEMSIZE = {name: size for (kind, size), name in _KIND_NAMES.items()}
_ITEMSIZE["bfloat16"] = 2
# struct-module format characters (memoryview.format), native little-endian x86-64/arm64
_FORMAT_NAMES = {
    "b": "int8", "B": "uint8", "h": "int16", "H": "uint16", "i": "int32", "I": "uint32",
    "l": "int64", "L": "uint64", "q": "int64", "Q": "uint64", "n": "int64", "N": "uint64",
    "e": "float16", "f": "float32", "d": "float64", "?": "bool", "c": "uint8",
    "Zf": "complex64", "Zd": "complex128",
}


def typestr_to_dtype(typestr: str) -> str:
    """A numpy typestr (``"<f4"``) as a dtype name (``"float32"``).

    Big-endian and unknown typestrs are returned unchanged."""
    if len(typestr) >= 3 and typestr[0] in "<|=":
        try:
            return _KIND_NAMES[(typestr[1], int(typestr[2:]))]
        except (KeyError, ValueError):
            pass
    return typestr


def dtype_name(dtype: Any) -> str:
    """Normalise a dtype given as a name, a typestr or a numpy dtype to a name."""
    if _np is not None and not isinstance(dtype, str):
        dtype = _np.dtype(dtype).str
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a str, not {type(dtype).__name__}")
    if dtype in _ITEMSIZE:
        return dtype
    if dtype[:1] in "<>|=":
        return typestr_to_dtype(dtype)
    if _np is not None:
        try:
            return typestr_to_dtype(_np.dtype(dtype).str)
        except TypeError:
            pass
    raise ValueError(f"unknown dtype {dtype!r}")


def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype name or typestr."""
    if dtype in _ITEMSIZE:
        return _ITEMSIZE[dtype]
    if dtype[:1] in "<>|=":
        try:
            return int(dtype[2:])
        except ValueError:
            pass
    if _np is not None:
        try:
            return _np.dtype(dtype).itemsize
        except TypeError:
            pass
    raise ValueError(f"unknown dtype {dtype!r}")


def dtype_typestr(dtype: str) -> str:
    """The ``__cuda_array_interface__`` typestr of a dtype name."""
    if dtype in _NAME_TYPESTR:
        return _NAME_TYPESTR[dtype]
    if dtype[:1] in "<>|=":
        return dtype
    if _np is not None:
        try:
            return _np.dtype(dtype).str
        except TypeError:
            pass
    raise ValueError(f"dtype {dtype!r} has no array-interface typestr")


def format_to_dtype(fmt: str) -> str:
    """A memoryview format (``"<f"``, ``"B"``) as a dtype name."""
    f = fmt.lstrip("@=<")
    if f in _FORMAT_NAMES:
        return _FORMAT_NAMES[f]
    raise ValueError(f"buffer format {fmt!r} is not supported without numpy")


def c_strides(shape: Tuple[int, ...], isize: int) -> Tuple[int, ...]:
    out = []
    acc = isize
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def extent(shape: Tuple[int, ...], strides: Optional[Tuple[int, ...]], isize: int) -> int:
    """Bytes spanned by an array (0 when it has no elements).  Negative strides
    are refused."""
    # Plain loops: this runs in a lookup's export and in register, right
    # at a handoff, where generators cost more.
    if 0 in shape:
        return 0
    n = isize
    if strides is None:
        for d in shape:
            n *= d
        return n
    if len(strides) != len(shape):
        raise ValueError("strides and shape differ in length")
    for d, s in zip(shape, strides):
        if s < 0:
            raise ValueError("negative strides are not supported")
        n += (d - 1) * s
    return n


# ---- registration records --------------------------------------------------


@dataclass(frozen=True)
class Holder:
    """One lease on a registration: who holds it (a copy of ``gpuipc_holder``)."""

    lease: int
    pid: int
    uid: int
    exe: str                           # "" when the daemon could not read it
    since_ms: int                      # Unix time it was taken, ms

    @property
    def age_ms(self) -> int:
        return max(0, int(time.time() * 1000) - self.since_ms)


@dataclass(frozen=True)
class Info:
    """A registration as the daemon describes it (a copy of ``gpuipc_info``)."""

    id: int
    name: str
    kind: str                          # "host", "cuda-ipc", "cuda-vmm" or "cuda-pool"
    size: int                          # bytes of the buffer
    offset: int                        # where it starts in its allocation / memfd
    device: str                        # device UUID, "" for host buffers
    dtype: Optional[str]               # None when unset
    shape: Optional[Tuple[int, ...]]   # None when unset
    strides: Optional[Tuple[int, ...]]  # bytes; None for C order / unset
    user: Dict[str, str]
    owner_pid: int
    owner_uid: int
    owner_gid: int
    leases: int
    flags: int
    created_ms: int
    alloc_id: int = 0
    alloc_size: int = 0
    alloc_regs: int = 0
    buffer_id: int = 0
    has_event: bool = False
    owner_exe: str = ""                # the registering process's executable
    # The access rule: {"public": bool, "uids": [int], "gids": [int],
    # "group": str or None}; owner only when nothing is set.
    access: Dict[str, Any] = field(default_factory=lambda: {
        "public": False, "uids": [], "gids": [], "group": None})
    n_chunks: int = 0                  # cuda-vmm: VMM allocations it spans
    copied: Optional[str] = None       # why the producer's library copied it, or None
    # Unix ms at which the daemon unregisters it (its TTL), None without one.
    expires_ms: Optional[int] = None
    # Who holds its leases, newest first (at most 32): filled by stat() and
    # list(all=True); empty otherwise.
    holders: Tuple[Holder, ...] = ()

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & _lib.INFO_EPHEMERAL)

    @property
    def unregistered(self) -> bool:
        """Gone from the namespace, still leased."""
        return bool(self.flags & _lib.INFO_UNREGISTERED)

    @property
    def owner_gone(self) -> bool:
        """The registering connection has ended."""
        return bool(self.flags & _lib.INFO_OWNER_GONE)

    @property
    def is_device(self) -> bool:
        return self.kind != "host"

    @classmethod
    def from_c(cls, p: "ctypes._Pointer[_lib.gpuipc_info]") -> "Info":
        i = p.contents
        nd = int(i.ndim)
        shape = tuple(int(i.shape[k]) for k in range(nd)) if nd and i.shape else None
        strides = tuple(int(i.strides[k]) for k in range(nd)) if nd and i.strides else None
        if shape is None and nd == 0 and i.dtype:
            shape = None
        user = {}
        for k in range(int(i.n_user)):
            user[_lib.cstr(i.user_keys[k])] = _lib.cstr(i.user_values[k])
        access = {
            "public": bool(i.access_public),
            "uids": [int(i.access_uids[k]) for k in range(int(i.n_access_uids))],
            "gids": [int(i.access_gids[k]) for k in range(int(i.n_access_gids))],
            "group": _lib.cstr(i.access_group) or None,
        }
        return cls(
            id=int(i.id), name=_lib.cstr(i.name),
            kind=_lib.KIND_NAMES.get(int(i.kind), str(int(i.kind))),
            size=int(i.size), offset=int(i.offset), device=_lib.cstr(i.device),
            dtype=_lib.cstr(i.dtype) or None, shape=shape, strides=strides, user=user,
            owner_pid=int(i.owner_pid), owner_uid=int(i.owner_uid),
            owner_gid=int(i.owner_gid), leases=int(i.leases), flags=int(i.flags),
            created_ms=int(i.created_ms), alloc_id=int(i.alloc_id),
            alloc_size=int(i.alloc_size), alloc_regs=int(i.alloc_regs),
            buffer_id=int(i.buffer_id), has_event=bool(i.has_event),
            owner_exe=_lib.cstr(i.owner_exe), access=access, n_chunks=int(i.n_chunks),
            copied=_lib.cstr(i.copied) or None,
            expires_ms=int(i.expires_ms) or None,
            holders=tuple(Holder(lease=int(h.lease), pid=int(h.pid), uid=int(h.uid),
                                 exe=_lib.cstr(h.exe), since_ms=int(h.since_ms))
                          for h in (_lib.lib.gpuipc_info_holder(p, k).contents
                                    for k in range(int(i.n_holders)))))


# ---- lifetime ---------------------------------------------------------------


class _Holder:
    """Frees a C object once it is closed and its last export is gone."""

    __slots__ = ("_free", "_lock", "exports", "closed", "done", "cai", "__weakref__")

    def __init__(self, free: Optional[Callable[[], Any]]) -> None:
        # None until there is something to free (a view before its lookup
        # returned).
        self._free: Optional[Callable[[], Any]] = free
        self._lock = threading.Lock()
        self.exports = 0
        self.closed = False
        self.done = False
        self.cai = False        # a __cuda_array_interface__ export is alive

    def acquire(self) -> None:
        with self._lock:
            if self.closed or self.done:
                raise ValueError("the buffer has been released")
            self.exports += 1

    def pin(self) -> bool:
        """Takes an export even after close(), unless it was freed: True
        when taken (drop() gives it back), False once freed."""
        with self._lock:
            if self.done:
                return False
            self.exports += 1
            return True

    def acquire_cai(self) -> None:
        """acquire() for the __cuda_array_interface__ export, once."""
        with self._lock:
            if self.cai:
                return
            if self.closed or self.done:
                raise ValueError("the buffer has been released")
            self.exports += 1
            self.cai = True

    def drop(self) -> None:
        with self._lock:
            self.exports -= 1
            fire = self.closed and self.exports == 0 and not self.done
            if fire:
                self.done = True
        if fire:
            self._run()

    def close(self) -> bool:
        """Marks it closed; True when it was freed now (no export left)."""
        with self._lock:
            if self.closed:
                return self.done
            self.closed = True
            fire = self.exports == 0 and not self.done
            if fire:
                self.done = True
        if fire:
            self._run()
        return fire

    def collected(self) -> None:
        """Its object was garbage-collected: that closes it, and ends the
        __cuda_array_interface__ export, whose consumers keep a reference
        to the object itself."""
        self.close()
        if self.cai:
            self.cai = False
            self.drop()

    def _run(self) -> None:
        free, self._free = self._free, None
        if free is not None:
            try:
                free()
            except Exception:
                pass


class _Collected(weakref.ref):
    """A weak reference to a buffer object that tells its holder when the
    object is garbage-collected.  Lighter than weakref.finalize, which a
    lookup's view would otherwise pay for right after a wake, with cold
    caches: no registry, no exit hook (a process that exits lets go of its
    leases and mappings anyway)."""

    __slots__ = ("holder",)
    holder: _Holder


_LIVE: "set[_Collected]" = set()       # keeps each _Collected until it fires


def _on_collected(ref: "weakref.ReferenceType[Any]") -> None:
    _LIVE.discard(cast(_Collected, ref))
    cast(_Collected, ref).holder.collected()


class _Memory:
    """Common base: a pointer, a size, a dtype/shape and tracked exports."""

    _holder: _Holder
    # The __cuda_array_interface__ dict, once it was read.
    _cai_d: Optional[Dict[str, Any]] = None

    def _setup(self, ptr: int, nbytes: int, dtype: Optional[str],
               shape: Optional[Tuple[int, ...]], strides: Optional[Tuple[int, ...]],
               device: int, readonly: bool, free: Callable[[], Any]) -> None:
        self._holder = _Holder(free)
        self._fill(ptr, nbytes, dtype, shape, strides, device, readonly)

    def _fill(self, ptr: int, nbytes: int, dtype: Optional[str],
              shape: Optional[Tuple[int, ...]], strides: Optional[Tuple[int, ...]],
              device: int, readonly: bool) -> None:
        """The fields, once self._holder has the C object's free function."""
        self._ptr = int(ptr or 0)
        self._nbytes = int(nbytes)
        self._dtype = dtype
        self._shape = shape
        self._strides = strides
        self._device = device
        self._readonly = readonly
        self._track()

    def _track(self) -> None:
        """Garbage collection of this object counts as release()/close(), and
        ends its __cuda_array_interface__ export."""
        ref = _Collected(self, _on_collected)
        ref.holder = self._holder
        _LIVE.add(ref)

    # ---- basic attributes

    @property
    def ptr(self) -> int:
        """Address of the first byte: a host address, or a CUdeviceptr for device memory."""
        return self._ptr

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self._nbytes

    def __len__(self) -> int:
        return self._nbytes

    @property
    def device(self) -> int:
        """CUDA device ordinal in this process, or -1 for host memory."""
        return self._device

    @property
    def is_device(self) -> bool:
        return self._device >= 0

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def released(self) -> bool:
        """True once release()/close() was called (exports may still keep it mapped)."""
        return self._holder.closed

    @property
    def freed(self) -> bool:
        """True once the memory was actually released/unmapped in this process."""
        return self._holder.done

    @property
    def dtype(self) -> Optional[str]:
        """The dtype name from the metadata (``"float32"``), or None."""
        return self._dtype

    @property
    def shape(self) -> Optional[Tuple[int, ...]]:
        return self._shape

    @property
    def strides(self) -> Optional[Tuple[int, ...]]:
        """Byte strides from the metadata, or None (C order)."""
        return self._strides

    def _check_open(self) -> None:
        if self._holder.closed:
            raise ValueError(f"{type(self).__name__} has been released")

    def _layout(self) -> Tuple[str, Tuple[int, ...], Optional[Tuple[int, ...]]]:
        """(dtype, shape, strides) to export: the metadata when it fits the
        buffer, else bytes."""
        dt = self._dtype or "uint8"
        isz = itemsize(dt)
        shape = self._shape
        if shape is None:
            if self._nbytes % isz:
                raise ValueError(f"{self._nbytes} bytes are not a whole number of {dt}")
            shape = (self._nbytes // isz,)
        strides = self._strides
        if extent(shape, strides, isz) > self._nbytes:
            raise ValueError(f"shape {shape} of {dt} (strides {strides}) exceeds the "
                             f"buffer's {self._nbytes} bytes")
        return dt, tuple(shape), (tuple(strides) if strides is not None else None)

    # ---- host exports

    def _ctypes_export(self) -> "ctypes.Array[ctypes.c_ubyte]":
        if self.is_device:
            raise TypeError("device memory has no host buffer; use __cuda_array_interface__ "
                            "or __dlpack__")
        self._holder.acquire()
        try:
            n = self._nbytes
            arr = (ctypes.c_ubyte * n).from_address(self._ptr) if n else (ctypes.c_ubyte * 0)()
            weakref.finalize(arr, self._holder.drop)
        except BaseException:
            self._holder.drop()
            raise
        return arr

    @property
    def buffer(self) -> memoryview:
        """A 1-D ``memoryview`` of the bytes (zero-copy; read-only for read-only views).

        The memory stays mapped while this memoryview (or anything made from
        it) lives."""
        if self.is_device:
            raise TypeError("device memory has no host buffer")
        mv = memoryview(self._ctypes_export()).cast("B")
        return mv.toreadonly() if self._readonly else mv

    def memoryview(self) -> memoryview:
        """Same as :attr:`buffer`."""
        return self.buffer

    def _numpy(self, raw: bool = False):
        if _np is None:
            raise ImportError("numpy is not installed; use .buffer for a memoryview")
        if self.is_device:
            raise TypeError("device memory cannot be a numpy array; use cupy/torch "
                            "(__cuda_array_interface__ or __dlpack__)")
        shape: Tuple[int, ...]
        if raw:
            dt, shape, strides = "uint8", (self._nbytes,), None
        else:
            dt, shape, strides = self._layout()
        a: Any = _np.ndarray(shape, dtype=_np.dtype(dt), buffer=cast(Any, self._ctypes_export()),
                        offset=0, strides=strides)
        if self._readonly:
            a.flags.writeable = False
        return a

    @property
    def array(self):
        """A NumPy array over the memory (zero-copy), with the metadata's
        dtype, shape and strides when present, else 1-D uint8.  Read-only
        unless the buffer is writable.  Requires numpy."""
        return self._numpy()

    def __array__(self, dtype=None, copy=None):
        if copy:
            a = self._numpy().copy()
        else:
            a = self._numpy()
        if dtype is not None and _np.dtype(dtype) != a.dtype:
            if copy is False:
                raise ValueError("a dtype change needs a copy")
            a = a.astype(dtype)
        return a

    def tobytes(self) -> bytes:
        """A copy of the bytes (host memory only)."""
        return bytes(self.buffer)

    # ---- device exports

    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """CUDA Array Interface v3 (device memory only; AttributeError otherwise).

        No ``stream`` key: the data is ready (libgpuipc waited for the
        producer's event at lookup).  Reading this ties the memory's lifetime
        to this object: it stays mapped until this object is garbage-
        collected, since consumers keep a reference to it, not to an export.
        Every read after the first returns the same dict (do not change it):
        torch.as_tensor reads it twice, right after a lookup's wake."""
        d = self._cai_d
        if d is not None and self._holder.cai:
            return d
        if not self.is_device:
            raise AttributeError("__cuda_array_interface__ (host memory)")
        self._holder.acquire_cai()      # dropped when self is collected
        dt, shape, strides = self._layout()
        d = self._cai_d = {
            "shape": shape,
            "typestr": dtype_typestr(dt),
            "data": (self._ptr, False),
            "strides": strides,
            "version": 3,
        }
        return d

    def _dlpack_device_type(self) -> int:
        return _dlpack.kDLCUDA if self.is_device else _dlpack.kDLCPU

    def __dlpack_device__(self) -> Tuple[int, int]:
        """(kDLCUDA, ordinal) for device memory, (kDLCPU, 0) for host memory."""
        if self.is_device:
            return (_dlpack.kDLCUDA, self._device)
        return (_dlpack.kDLCPU, 0)

    def _sync_for_stream(self, stream: Any) -> None:
        """Hook for views looked up without synchronisation."""

    def __dlpack__(self, *, stream: Any = None, max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None, copy: Optional[bool] = None):
        """A DLPack capsule over the memory (zero-copy).

        The memory stays mapped until the consumer's tensor is deleted.
        ``max_version`` >= (1, 0) yields a versioned capsule (with the
        read-only flag for read-only views); otherwise a legacy
        ``"dltensor"`` capsule.  ``copy=True`` is refused (BufferError)."""
        if copy:
            raise BufferError("gpuipc exports without copying; copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"cannot export to device {tuple(dl_device)}")
        if stream is not None and self.is_device:
            self._sync_for_stream(stream)
        dt, shape, strides = self._layout()
        versioned = max_version is not None and int(max_version[0]) >= 1
        self._holder.acquire()
        try:
            dev_type, dev_id = self.__dlpack_device__()
            return _dlpack.make_capsule(self._ptr, shape, strides, dt, dev_type, dev_id,
                                        self._holder.drop, versioned=versioned,
                                        readonly=self._readonly)
        except BaseException:
            self._holder.drop()
            raise

    # ---- context manager

    def _close(self) -> None:
        # The collection still ends a __cuda_array_interface__ export.
        self._holder.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._close()


# ---- View.to_torch(): a DLPack struct filled by libgpuipc -------------------

_DL_ON_DELETE_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# ctx -> the holder whose export a to_torch() tensor is, until its deleter.
_DL_EXPORTS: Dict[int, "_Holder"] = {}
_DL_KEYS = itertools.count(1)
_TORCH: List[Any] = []          # the torch module, once imported


@_DL_ON_DELETE_T
def _dl_on_delete(ctx: Optional[int]) -> None:
    # From whichever thread freed the tensor's storage (ctypes takes the
    # GIL); a callback must not raise into C.
    h = _DL_EXPORTS.pop(ctx or 0, None)
    if h is not None:
        try:
            h.drop()
        except Exception:
            pass


_DL_ON_DELETE = ctypes.cast(_dl_on_delete, ctypes.c_void_p).value


def _torch() -> Any:
    if not _TORCH:
        import torch  # type: ignore[import]
        _TORCH.append(torch)
    return _TORCH[0]


class _Lazy:
    """A View field read from the C record on first use: the first read
    sets every layout field on the instance, which then shadows this."""

    __slots__ = ("name",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Optional[type] = None) -> Any:
        if obj is None:
            return self
        obj._read_layout()
        return obj.__dict__[self.name]


class View(_Memory):
    """A looked-up registration mapped into this process (a lease).

    Host views export the buffer zero-copy through ``numpy.asarray(view)`` /
    ``.array`` (dtype and shape from the metadata) and ``.buffer``
    (memoryview); device views through ``__cuda_array_interface__`` and
    ``__dlpack__`` (``cupy.asarray(view)``, ``torch.as_tensor(view,
    device="cuda")``, ``torch.from_dlpack(view)``).  ``release()`` gives the
    lease back once no export remains.
    """

    def __init__(self, conn: Any, synced: bool) -> None:
        """A view with no C view yet, for _attach() once the lookup
        returns: Client.lookup() builds it before the lookup's wait, so
        that less is left to do after the wake, with cold caches."""
        self._conn = conn
        self._synced = synced
        # [Info, _view_layout()]: each decoded on first use, or by the
        # release before it frees the C record.
        self._box: List[Any] = [None, None]
        self._holder = _Holder(None)
        self._release = _ViewRelease(conn, 0, box=self._box)

    def _attach(self, handle: int, writable: bool) -> None:
        """Takes over the C view handle (a lookup's result, writable if it
        was asked to be)."""
        # This runs right after a lookup's wait, with cold caches, where
        # each Python step costs several times its warm time: only the
        # device is read now (to_torch() needs no more; libgpuipc reads the
        # layout itself).  The pointer, size, dtype, shape, strides and kind
        # are read from the C record when first used (_Lazy), and the whole
        # Info on first use too.
        self._handle = handle
        self._release.handle = handle
        self._device = _lib.lib.gpuipc_view_device(handle)     # -1: a host view
        # Device mappings are read-write for the device whatever was asked.
        self._readonly = not writable and self._device < 0
        self._track()
        self._holder._free = self._release      # last: a failed attach frees nothing

    if not TYPE_CHECKING:   # (the fields' types are _Memory._fill's)
        # Read on first use (_Lazy), then plain instance attributes.
        _ptr = _Lazy()
        _nbytes = _Lazy()
        _dtype = _Lazy()
        _shape = _Lazy()
        _strides = _Lazy()
        _kind = _Lazy()

    def _read_layout(self) -> None:
        """Sets the layout fields from the C record, or from the copy the
        release took before it freed the record.  An export is held while
        the record is read, so that no release (another thread's, or a
        tensor's deleter run by a garbage collection in between) frees it
        meanwhile."""
        h = self._holder
        lay = self._box[1]
        if lay is None:
            held = h.pin()
            try:
                lay = self._box[1]
                if lay is None:
                    if not held:    # another thread's release is taking its copy
                        raise ValueError("the view was released while its fields were read")
                    lay = self._box[1] = _view_layout(self._handle)
            finally:
                if held:
                    h.drop()
        (self._ptr, self._nbytes, self._dtype, self._shape, self._strides,
         self._kind) = lay

    @property
    def info(self) -> Info:
        """The registration as it was at lookup time."""
        info = self._box[0]
        if info is None:
            info = self._box[0] = Info.from_c(_lib.lib.gpuipc_view_info(self._handle))
        return info

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def id(self) -> int:
        return self.info.id

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def user(self) -> Dict[str, str]:
        """The registration's free-form metadata."""
        return self.info.user

    def wait_stream(self, stream: Any) -> None:
        """Makes ``stream`` (a CUstream as int, or an object with ``.ptr`` /
        ``.cuda_stream``) wait for the producer's event.  Only needed for
        views looked up with ``sync=False``."""
        self._check_open()
        s = _stream_ptr(stream)
        r = self._conn.call(lambda c: _lib.lib.gpuipc_view_wait_stream(self._handle, s))
        if r < 0:
            raise self._conn.error(r, "view_wait_stream")

    def _sync_for_stream(self, stream: Any) -> None:
        if not self._synced and stream != -1 and not self._holder.closed:
            self.wait_stream(stream)

    def to_torch(self) -> Any:
        """A torch tensor over this device view (zero copy): what
        ``torch.as_tensor(view)`` gives, made from a DLPack struct that
        libgpuipc fills in one call (``gpuipc_view_dlpack``), which costs
        less right after a lookup than the interfaces the other exports
        build in Python.  The layout is the exports' (dtype, shape and
        strides from the metadata; without a shape, one dimension of the
        dtype, uint8 without one).  Like every export the tensor keeps the
        view's lease: ``release()`` gives it back once the tensor, and
        every tensor made from it, is freed.  The data is ready unless the
        view was looked up with ``sync=False`` (see :meth:`wait_stream`).
        A layout the struct cannot carry (a dtype DLPack has no type for,
        such as a big-endian one, or strides it cannot express) goes
        through ``torch.as_tensor(view)``, which takes it or says what is
        wrong; host views are a TypeError (use
        ``torch.from_numpy(view.array)``)."""
        if self._device < 0:
            raise TypeError("to_torch() takes device views; a host view's array is "
                            "torch.from_numpy(view.array)")
        torch = _TORCH[0] if _TORCH else _torch()
        h = self._holder
        h.acquire()             # raises once released
        key = next(_DL_KEYS)
        _DL_EXPORTS[key] = h
        out = ctypes.c_void_p()
        r = _lib.lib.gpuipc_view_dlpack(self._handle, _DL_ON_DELETE, key, ctypes.byref(out))
        if r < 0:
            del _DL_EXPORTS[key]
            h.drop()
            if r in (-errno.EINVAL, -errno.EOVERFLOW):
                # A layout the struct cannot carry: the interface checks
                # it and says what is wrong, or torch takes what it can.
                return torch.as_tensor(self, device=f"cuda:{self._device}")
            raise error_for(r, _lib.strerror(r), "view_dlpack")
        managed = out.value or 0        # not NULL on success
        cap = None
        try:
            cap = _dlpack.capsule_of(managed)
            return torch.from_dlpack(cap)
        except BaseException:
            # Free it once, through its deleter (which drops the export),
            # unless the deleter ran already (the key is gone) or torch
            # took the struct (renamed the capsule) and will run it.
            if key in _DL_EXPORTS and (cap is None or _dlpack.capsule_unused(cap)):
                _dlpack.run_deleter(managed)
            raise

    def release(self) -> None:
        """Gives the lease back: now if nothing exported from the view is
        alive, else when the last export goes.  Idempotent."""
        self._close()

    def release_after(self, event: Any) -> None:
        """Like :meth:`release`, handing the producer ``event`` (a CUevent
        created with CU_EVENT_INTERPROCESS, recorded after this consumer's
        last use, as int) to wait on before it reuses the memory."""
        if self._holder.closed:
            return
        self._holder._free = _ViewRelease(self._conn, self._handle, int(event), box=self._box)
        self._close()

    close = release

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        return (f"<gpuipc.View {self.name!r} {self.kind} {self.nbytes} bytes "
                f"at 0x{self.ptr:x} device {self.device}{state}>")


def _view_layout(handle: int) -> Tuple[int, int, Optional[str], Optional[Tuple[int, ...]],
                                       Optional[Tuple[int, ...]], str]:
    """A C view's (pointer, size, dtype, shape, byte strides, kind name),
    read from its record: each field once, the arrays sliced in one ctypes
    call each, the size from the record (not gpuipc_view_size())."""
    lib = _lib.lib
    i = lib.gpuipc_view_info(handle).contents
    nd = i.ndim
    sp, tp = (i.shape, i.strides) if nd else (None, None)
    kind = i.kind
    return (lib.gpuipc_view_data(handle) or 0, int(i.size), _lib.cstr(i.dtype) or None,
            tuple(sp[:nd]) if sp else None, tuple(tp[:nd]) if tp else None,
            _lib.KIND_NAMES.get(kind) or str(kind))


class _ViewRelease:
    def __init__(self, conn: Any, handle: int, event: Optional[int] = None,
                 box: Optional[List[Any]] = None) -> None:
        self.conn = conn
        self.handle = handle
        self.event = event
        self.box = box         # the view's lazily decoded [Info, layout], shared

    def __call__(self) -> None:
        lib = _lib.lib
        try:
            if self.box is not None:
                # The C record goes with the view: decode what is still
                # needed while it exists.
                if self.box[0] is None:
                    self.box[0] = Info.from_c(lib.gpuipc_view_info(self.handle))
                if self.box[1] is None:
                    self.box[1] = _view_layout(self.handle)
        finally:        # a failed decode (at exit, say) still frees the view
            if self.event is None:
                self.conn.call(lambda c: lib.gpuipc_view_release(self.handle), closed_ok=True)
            else:
                self.conn.call(lambda c: lib.gpuipc_view_release_after(self.handle, self.event),
                               closed_ok=True)


def _stream_ptr(stream: Any) -> int:
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    raise TypeError(f"cannot get a CUstream from {stream!r}")


class HostBuffer(_Memory):
    """Shared memory allocated by :meth:`Client.alloc_host` for this process to
    fill.  ``client.register(name, buf)`` registers it without copying;
    writes made afterwards are visible to consumers.  ``close()`` unmaps this
    process's copy (once no export is left); a registered buffer lives on in
    the daemon."""

    def __init__(self, handle: int, nbytes: int, dtype: str,
                 shape: Optional[Tuple[int, ...]]) -> None:
        lib = _lib.lib
        self._handle = handle
        self._setup(lib.gpuipc_hostbuf_data(handle) or 0, nbytes, dtype, shape, None, -1,
                    False, lambda: lib.gpuipc_hostbuf_free(handle))

    @property
    def fd(self) -> int:
        """The memfd (owned by the buffer, closed with it)."""
        self._check_open()
        return _lib.lib.gpuipc_hostbuf_fd(self._handle)

    def close(self) -> None:
        """Frees this process's mapping once no export is left.  Idempotent."""
        self._close()

    release = close

    def __repr__(self) -> str:
        return (f"<gpuipc.HostBuffer {self.nbytes} bytes {self.dtype} {self.shape} "
                f"at 0x{self.ptr:x}>")


class DeviceBuffer(_Memory):
    """CUDA VMM memory allocated by :meth:`Client.alloc_device`, exportable as
    a POSIX fd: registered, it becomes a durable ``cuda-vmm`` buffer that
    outlives this process.  Exposes ``__cuda_array_interface__`` and
    ``__dlpack__`` for filling it with CuPy/PyTorch/Numba."""

    def __init__(self, handle: int, nbytes: int, device: int, dtype: str,
                 shape: Optional[Tuple[int, ...]]) -> None:
        lib = _lib.lib
        self._handle = handle
        self.alloc_size = int(lib.gpuipc_cudabuf_size(handle))
        self._setup(lib.gpuipc_cudabuf_ptr(handle), nbytes, dtype, shape, None, device,
                    False, lambda: lib.gpuipc_cudabuf_free(handle))

    def close(self) -> None:
        """Unmaps this process's mapping once no export is left.  Idempotent."""
        self._close()

    release = close

    def __repr__(self) -> str:
        return (f"<gpuipc.DeviceBuffer {self.nbytes} bytes {self.dtype} {self.shape} "
                f"at 0x{self.ptr:x} device {self.device}>")
