"""Column batches: one registration for a whole table of Arrow columns.

``Client.register_batch`` builds a libgpuipc batch from a dict of columns
(or one record-batch object) and registers it in one request;
``Client.lookup_batch`` maps all of it in one round trip and returns a
:class:`BatchView`, which hands columns out as views and the whole table
through Arrow's PyCapsule interface.
"""
from __future__ import annotations

import ctypes
import weakref
from ctypes import byref, c_char_p, c_int, c_uint64, c_void_p
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple, Union

from . import _lib
from . import arrow as A
from .client import (_cai_layout, _cuda_event_sync, _cuda_pointer_device, _cuda_stream_sync,
                     _get_cai, _torch_layout)
from .errors import error_for
from .view import (DeviceBuffer, HostBuffer, Info, View, _Holder, _Memory, _np, dtype_typestr,
                   itemsize)

Column = Any


class _Batch:
    """A gpuipc_batch being filled, and what its structs point into."""

    def __init__(self) -> None:
        out = c_void_p()
        r = _lib.lib.gpuipc_batch_new(byref(out))
        if r < 0:
            raise error_for(r, _lib.strerror(r), "register_batch")
        self.ptr = out.value
        self.keep: List[Any] = []
        self.events: List[int] = []
        self.synced: Set[int] = set()   # the streams of device columns, synchronized
        self.device = -1                # a device column's ordinal, for the event
        # columns without nulls not added yet: names, formats, lengths,
        # addresses, all on device run_device (flush() adds them in one call)
        self.run: Tuple[List[bytes], List[bytes], List[int], List[int]] = ([], [], [], [])
        self.run_device = -1

    def check(self, r: int, what: str) -> None:
        if r < 0:
            msg = _lib.cstr(_lib.lib.gpuipc_batch_errmsg(self.ptr)) or _lib.strerror(r)
            raise error_for(r, f"{what}: {msg}", "register_batch")

    def free(self) -> None:
        _lib.lib.gpuipc_batch_free(self.ptr)
        self.ptr = None
        self.keep.clear()           # the capsules release their structs

    # ---- columns

    def add(self, name: str, obj: Column) -> None:
        if not isinstance(name, str):
            raise TypeError(f"column names are str, not {type(name).__name__}")
        # A torch tensor first: the common case, and it exports no capsules.
        leaf = _torch_leaf(name, obj, self.synced)
        if leaf is None:
            exp = _exported(obj)
            if exp is not None:
                schema, array, da, caps = exp
                device, event = _device_and_event(da)
                s, keep = A.renamed(schema, name)
                self.keep += caps + keep + [s]
                if event:
                    self.events.append(event)
                self._add_structs(name, ctypes.addressof(s), array, device)
                return
            leaf = _array_leaf(name, obj, self.keep, self.synced)
        if leaf is None:
            built, device = _build(name, obj, self.keep, self.synced)
            self.keep.append(built)
            self._add_structs(name, ctypes.addressof(built.schema),
                              ctypes.addressof(built.array), device)
        elif leaf[3]:
            self._add_leaf(name, leaf)      # a validity bitmap: a call of its own
        else:
            self._queue(name, leaf)

    def _queue(self, name: str, leaf: "Leaf") -> None:
        """A column without a validity bitmap, added with the next ones of its
        device by flush(): one C call for the run, not one per column."""
        fmt, n, _, _, data, device = leaf
        if device != self.run_device:
            self.flush()
            self.run_device = device
        names, fmts, lens, ptrs = self.run
        names.append(name.encode("utf-8"))
        fmts.append(fmt)
        lens.append(n)
        ptrs.append(data)

    def flush(self) -> None:
        """Adds the queued columns (see _queue); the order of columns stays
        the order of add() calls."""
        names, fmts, lens, ptrs = self.run
        n = len(names)
        if not n:
            return
        self.run = ([], [], [], [])
        if self.run_device >= 0:
            self.device = self.run_device
        self.check(_lib.lib.gpuipc_batch_add_buffers(
            self.ptr, n, (c_char_p * n)(*names), (c_char_p * n)(*fmts),
            (ctypes.c_int64 * n)(*lens), (c_void_p * n)(*ptrs), self.run_device), "columns")

    def _add_leaf(self, name: str, leaf: "Leaf") -> None:
        """Fixed-width values and a validity bitmap: no structs to build."""
        self.flush()
        fmt, n, nulls, validity, data, device = leaf
        if device >= 0:
            self.device = device
        r = _lib.lib.gpuipc_batch_add_buffer(self.ptr, name.encode("utf-8"), fmt, n, nulls,
                                             validity or None, data or None, device)
        if r < 0:
            self.check(r, f"column {name!r}")

    def _add_structs(self, name: str, schema: int, array: int, device: int) -> None:
        self.flush()
        if device >= 0:
            self.device = device
        self.check(_lib.lib.gpuipc_batch_add_column(self.ptr, schema, array, device),
                   f"column {name!r}")

    def add_record_batch(self, obj: Any) -> None:
        exp = _exported(obj)
        if exp is None:
            raise TypeError("columns must be a dict of column name -> array, or an object with "
                            "__arrow_c_array__ / __arrow_c_device_array__ (a record batch)")
        schema, array, da, caps = exp
        self.keep += caps
        add = (_lib.lib.gpuipc_batch_add_device_record_batch if da is not None
               else _lib.lib.gpuipc_batch_add_record_batch)
        self.check(add(self.ptr, schema, array), "record batch")

    def set_metadata(self, meta: Mapping[str, str]) -> None:
        keys = [str(k).encode("utf-8") for k in meta]
        vals = [str(v).encode("utf-8") for v in meta.values()]
        ka, va = (c_char_p * len(keys))(*keys), (c_char_p * len(vals))(*vals)
        self.check(_lib.lib.gpuipc_batch_set_metadata(self.ptr, len(keys), ka, va), "metadata")

    def set_event(self, event: int, device: int) -> None:
        self.check(_lib.lib.gpuipc_batch_set_event(self.ptr, c_void_p(int(event)), device),
                   "event")


def _exported(obj: Any) -> Optional[Tuple[int, int, Optional[A.ArrowDeviceArray], List[Any]]]:
    """(schema pointer, array pointer, the ArrowDeviceArray or None for a host
    export, the capsules, which must outlive the structs' use) of an object
    that exports itself through Arrow's PyCapsule interface; None for others."""
    if isinstance(obj, _Memory):
        return None
    if hasattr(obj, "__arrow_c_device_array__"):
        sc, dc = obj.__arrow_c_device_array__()
        dp = A.capsule_pointer(dc, A.DEVICE_ARRAY)
        return (A.capsule_pointer(sc, A.SCHEMA), dp, A.ArrowDeviceArray.from_address(dp),
                [sc, dc])
    if hasattr(obj, "__arrow_c_array__"):
        sc, ac = obj.__arrow_c_array__()
        return A.capsule_pointer(sc, A.SCHEMA), A.capsule_pointer(ac, A.ARRAY), None, [sc, ac]
    return None


def _device_and_event(da: Optional[A.ArrowDeviceArray]) -> Tuple[int, int]:
    """A column's device (-1: host) and CUevent (or 0) from its device array."""
    if da is None or da.device_type == A.DEVICE_CPU:
        return -1, 0
    if da.device_type != A.DEVICE_CUDA:
        raise error_for(-95, f"Arrow device type {da.device_type} is neither CPU nor CUDA",
                        "register_batch")
    event = ctypes.c_void_p.from_address(da.sync_event).value if da.sync_event else 0
    return int(da.device_id), event or 0


# A column of fixed-width values: (Arrow format, length, null count, validity
# bitmap address or 0, values address, device ordinal or -1 for host).
Leaf = Tuple[bytes, int, int, int, int, int]
_FORMAT_BYTES = {d: f.encode() for d, f in A.DTYPE_FORMATS.items()}
_FORMAT_DTYPES = {f: d for d, f in _FORMAT_BYTES.items()}


def _leaf(name: str, obj: Column, keep: List[Any], synced: Set[int]) -> Optional[Leaf]:
    """obj as fixed-width values when it is an array of them (keeping what
    the addresses point into alive in keep); None for strings, structs and
    anything else that takes Arrow structs."""
    leaf = _torch_leaf(name, obj, synced)
    return leaf if leaf is not None else _array_leaf(name, obj, keep, synced)


def _torch_leaf(name: str, obj: Column, synced: Set[int]) -> Optional[Leaf]:
    """_leaf() of a plain torch CUDA tensor; None for anything else."""
    lay = _torch_layout(obj)
    # A torch tensor knows its device: no driver call for it.
    return _device_leaf(name, lay, obj.get_device(), synced) if lay is not None else None


def _array_leaf(name: str, obj: Column, keep: List[Any], synced: Set[int]) -> Optional[Leaf]:
    """_leaf() of anything but a torch tensor."""
    if isinstance(obj, HostBuffer) or isinstance(obj, DeviceBuffer):
        obj._check_open()
        d = obj.dtype if obj.dtype in A.DTYPE_FORMATS else "uint8"
        return _FORMAT_BYTES[d], obj.nbytes // itemsize(d), 0, 0, obj.ptr, obj.device
    cai = _get_cai(obj)
    lay = _cai_layout(cai) if cai is not None else None
    if lay is not None:
        return _device_leaf(name, lay, _cuda_pointer_device(lay[0]), synced)
    if isinstance(obj, (dict, list, tuple, str, bytes)) or isinstance(obj, Mapping):
        return None
    return _host_leaf(name, obj, keep)


def _device_leaf(name: str, lay: Any, device: int, synced: Set[int]) -> Leaf:
    """A device array's leaf; its stream (the interface's) is synchronized
    once per batch: synced holds those done."""
    ptr, nbytes, d, sh, st, stream = lay
    if d == "bool":
        raise TypeError(f"column {name!r}: device booleans are bytes and Arrow's are bits; "
                        "register them as uint8, or pack them (cupy.packbits, "
                        "bitorder='little')")
    if d not in A.DTYPE_FORMATS:
        raise TypeError(f"column {name!r}: dtype {d} has no Arrow type here")
    if len(sh) != 1 or (st is not None and st != (itemsize(d),)):
        raise ValueError(f"column {name!r}: a column is a contiguous 1-D array")
    if stream is not None and int(stream) not in synced:
        _cuda_stream_sync(int(stream))
        synced.add(int(stream))
    return _FORMAT_BYTES[d], sh[0], 0, 0, ptr, device


def _build(name: str, obj: Column, keep: List[Any], synced: Set[int]) -> Tuple[A.Built, int]:
    """An Arrow column built here from a Python object: (struct pair, device)."""
    if isinstance(obj, Mapping):
        kids = [(_build(str(k), v, keep, synced)) for k, v in obj.items()]
        if not kids:
            raise ValueError(f"struct column {name!r} has no fields")
        devs = {d for _, d in kids}
        lens = {k.array.length for k, _ in kids}
        if len(devs) > 1 or len(lens) > 1:
            raise ValueError(f"the fields of struct column {name!r} must share one device "
                             "and one length")
        return A.Built("+s", name, lens.pop(), [0], children=[k for k, _ in kids]), devs.pop()
    if isinstance(obj, (list, tuple)):
        return _strings(name, obj, keep), -1
    leaf = _leaf(name, obj, keep, synced)
    if leaf is None:
        raise TypeError(f"column {name!r}: {type(obj).__name__} is not a column")
    fmt, n, nulls, validity, data, device = leaf
    return (A.Built(fmt.decode(), name, n, [validity, data], null_count=nulls,
                    nullable=validity != 0), device)


def _host_leaf(name: str, obj: Any, keep: List[Any]) -> Leaf:
    if _np is None:
        raise TypeError(f"column {name!r}: host columns need numpy")
    mask = None
    if isinstance(obj, _np.ma.MaskedArray):
        mask = _np.ma.getmaskarray(obj)
        obj = obj.data
    arr = _np.ascontiguousarray(_np.asarray(obj))
    if arr.ndim != 1:
        raise ValueError(f"column {name!r}: a column is 1-D, not of shape {arr.shape}")
    n = int(arr.shape[0])
    if arr.dtype == _np.bool_:
        arr = _np.packbits(arr, bitorder="little")
        fmt = b"b"
    else:
        d = arr.dtype.name
        if d not in A.DTYPE_FORMATS or arr.dtype.byteorder == ">":
            raise TypeError(f"column {name!r}: dtype {arr.dtype} has no Arrow type here")
        fmt = _FORMAT_BYTES[d]
    keep.append(arr)
    validity, nulls = _validity(mask, keep)
    return fmt, n, nulls, validity, arr.ctypes.data, -1


def _validity(mask: Any, keep: List[Any]) -> Tuple[int, int]:
    """A validity bitmap (1 = valid) for a null mask, and the null count; no
    bitmap (0) without a mask.  A masked array keeps its bitmap even without
    nulls, so the column stays nullable."""
    if mask is None:
        return 0, 0
    nulls = int(mask.sum())
    bits = _np.packbits(~mask, bitorder="little")
    keep.append(bits)
    return bits.ctypes.data, nulls


def _strings(name: str, items: Union[list, tuple], keep: List[Any]) -> A.Built:
    """utf8 (str items) or binary (bytes items) with int32 offsets; None is null."""
    kinds = {type(x).__name__ for x in items if x is not None}
    if kinds and not (kinds <= {"str"} or kinds <= {"bytes", "bytearray"}):
        raise TypeError(f"column {name!r}: a list column holds str or bytes (and None)")
    text = kinds <= {"str"}
    raw = [b"" if x is None else (x.encode("utf-8") if text else bytes(x)) for x in items]
    data = b"".join(raw)
    offs = [0]
    for r in raw:
        offs.append(offs[-1] + len(r))
    if offs[-1] >= 2**31:
        raise ValueError(f"column {name!r}: more than 2 GiB of strings")
    off = (ctypes.c_int32 * len(offs))(*offs)
    dat = ctypes.create_string_buffer(data, max(1, len(data)))
    keep += [off, dat]
    validity, nulls = 0, 0
    if any(x is None for x in items):
        if _np is None:
            raise TypeError(f"column {name!r}: nulls in a list column need numpy")
        validity, nulls = _validity(_np.array([x is None for x in items]), keep)
    return A.Built("u" if text else "z", name, len(items),
                   [validity, ctypes.addressof(off), ctypes.addressof(dat)],
                   null_count=nulls, nullable=validity != 0)


def build(columns: Any, meta: Optional[Mapping[str, str]], event: Optional[int]) -> _Batch:
    """A filled gpuipc_batch of columns (see Client.register_batch); the
    caller sends it with send(), which frees it."""
    b = _Batch()
    try:
        if isinstance(columns, Mapping):
            if not columns:
                raise ValueError("a batch needs at least one column")
            for cname, obj in columns.items():
                b.add(cname, obj)
            b.flush()
        else:
            b.add_record_batch(columns)
        if meta:
            b.set_metadata(meta)
        ev = int(event) if event is not None else None
        if ev is None and len(set(b.events)) == 1:
            ev = b.events[0]
        elif ev is None and b.events:
            for e in set(b.events):
                _cuda_event_sync(e)
        if ev is not None:
            if b.device < 0:
                raise ValueError("an event goes with device columns, and there are none")
            b.set_event(ev, b.device)
        return b
    except BaseException:
        b.free()
        raise


def send(conn: Any, name: bytes, b: _Batch, flags: int) -> int:
    """Registers built batch b under name (one request) and frees b."""
    try:
        rid = c_uint64()
        conn.call_checked(lambda c: _lib.lib.gpuipc_batch_register(c, name, b.ptr, flags,
                                                                   byref(rid)), "register_batch")
        return rid.value
    finally:
        b.free()


# ---- the consumer's side --------------------------------------------------------


def _data_buffer(fmt: str, n_buffers: int) -> Optional[int]:
    """Which buffer holds a node's values: None for a struct."""
    if fmt.startswith("+"):
        return None
    return n_buffers - 1 if n_buffers > 0 else None


class BatchColumn(View):
    """One column of a :class:`BatchView`: a view of its values (the data
    buffer, ``length`` elements from the array's ``offset``, typed when the
    column is of a fixed-width type, else its bytes), with ``validity``,
    ``offsets`` and struct ``children`` beside.  Holds the batch mapped."""

    def __init__(self, bv: "BatchView", node: int) -> None:
        lib = _lib.lib
        nd = lib.gpuipc_info_batch_node(bv._info_p, node).contents
        self._bv = bv
        self._node = node
        self.column_name = _lib.cstr(nd.name)
        self.format = _lib.cstr(nd.format)
        self.length = int(nd.length)
        self.null_count = int(nd.null_count)
        self.offset = int(nd.offset)
        self.nullable = bool(nd.flags & A.FLAG_NULLABLE)
        self._n_buffers = int(nd.n_buffers)
        kids, at = [], node + 1
        for _ in range(int(nd.n_children)):
            kids.append(at)
            at = _subtree_end(bv._info_p, at)
        self._child_nodes = kids
        self._box = [None]
        self._synced = True
        self._conn = bv._conn
        self._handle = 0
        which = _data_buffer(self.format, self._n_buffers)
        ptr, size, device = bv._buffer(node, which) if which is not None else (0, 0, -1)
        if device < 0 and kids:
            device = bv._buffer(kids[0], None)[2]
        self._kind = bv._part_kind(node, which)
        dtype = A.FORMAT_DTYPES.get(self.format)
        shape: Optional[Tuple[int, ...]]
        if dtype is not None and ptr:
            isz = itemsize(dtype)
            ptr += self.offset * isz
            size = self.length * isz
            shape = (self.length,)
        else:
            dtype, shape = "uint8", (size,)
        bv._holder.acquire()
        self._setup(ptr, size, dtype, shape, None, device, device < 0, bv._holder.drop)

    def _buffer_view(self, which: int) -> Optional["_BatchBuffer"]:
        if which >= self._n_buffers:
            return None
        ptr, size, device = self._bv._buffer(self._node, which)
        if not ptr:
            return None
        return _BatchBuffer(self._bv, ptr, size, device)

    @property
    def validity(self) -> Optional["_BatchBuffer"]:
        """The validity bitmap (bit i set: row i valid), or None without nulls."""
        return self._buffer_view(0) if self._n_buffers > 1 or self.format == "+s" else None

    @property
    def offsets(self) -> Optional["_BatchBuffer"]:
        """The offsets buffer of string, binary and list columns, else None."""
        if self.format in ("u", "z", "+l"):
            v = self._buffer_view(1)
            if v is not None:
                return v._typed("int32", self.offset + self.length + 1)
        if self.format in ("U", "Z", "+L"):
            v = self._buffer_view(1)
            if v is not None:
                return v._typed("int64", self.offset + self.length + 1)
        return None

    @property
    def children(self) -> Dict[str, "BatchColumn"]:
        """A struct's or list's child columns, by name."""
        out = {}
        for k in self._child_nodes:
            c = BatchColumn(self._bv, k)
            out[c.column_name] = c
        return out

    def to_pylist(self) -> List[Any]:
        """The column's values as Python objects (None for nulls): a copy, for
        host columns of fixed-width, boolean, string and binary types."""
        if self.is_device:
            raise ValueError("to_pylist() reads host columns only")
        valid = self.validity
        bits = valid.tobytes() if valid is not None else None

        def ok(i: int) -> bool:
            j = self.offset + i
            return bits is None or bool(bits[j >> 3] >> (j & 7) & 1)
        if self.format in ("u", "z", "U", "Z"):
            offs = list(self.offsets.array) if self.offsets is not None else []
            raw = self._bv._buffer(self._node, 2)
            data = ctypes.string_at(raw[0], raw[1]) if raw[0] else b""
            vals: List[Any] = []
            for i in range(self.length):
                s = data[offs[self.offset + i]:offs[self.offset + i + 1]]
                vals.append((s.decode("utf-8") if self.format in ("u", "U") else s)
                            if ok(i) else None)
            return vals
        if self.format == "b":
            raw = self._bv._buffer(self._node, 1)
            data = ctypes.string_at(raw[0], raw[1])
            return [bool(data[(self.offset + i) >> 3] >> ((self.offset + i) & 7) & 1)
                    if ok(i) else None for i in range(self.length)]
        if self.format not in A.FORMAT_DTYPES:
            raise ValueError(f"to_pylist() does not read format {self.format!r}")
        if _np is None:
            raise ImportError("to_pylist() of a numeric column needs numpy")
        vals = self.array.tolist()
        return [v if ok(i) else None for i, v in enumerate(vals)]

    @property
    def info(self) -> Info:
        return self._bv.info

    @property
    def name(self) -> str:
        return f"{self._bv.name}[{self.column_name!r}]"

    def wait_stream(self, stream: Any) -> None:
        """A batch lookup waits for the producer's event: nothing to do."""

    def release_after(self, event: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return (f"<gpuipc.BatchColumn {self.name} {self.format!r} {self.length} rows "
                f"device {self.device}>")


class _BatchBuffer(_Memory):
    """One Arrow buffer of a batch column, as bytes (or typed, for offsets)."""

    def __init__(self, bv: "BatchView", ptr: int, size: int, device: int,
                 dtype: str = "uint8", shape: Optional[Tuple[int, ...]] = None) -> None:
        self._bv = bv
        bv._holder.acquire()
        self._setup(ptr, size, dtype, shape or (size // itemsize(dtype),), None, device,
                    device < 0, bv._holder.drop)

    def _typed(self, dtype: str, n: int) -> "_BatchBuffer":
        n = min(n, self.nbytes // itemsize(dtype))
        t = _BatchBuffer(self._bv, self.ptr, n * itemsize(dtype), self.device, dtype, (n,))
        self._close()
        return t

    def release(self) -> None:
        self._close()

    close = release


class _Span:
    """One mapping of a batch as a 1-D array of one dtype, as the array
    interface describes it (CUDA's for device memory, NumPy's for host), so
    that torch, CuPy or NumPy can wrap it without a copy; it holds the batch
    mapped while it lives (arrays made from it keep it)."""

    def __init__(self, bv: "BatchView", ptr: int, n: int, dtype: str, device: int) -> None:
        bv._holder.acquire()
        weakref.finalize(self, bv._holder.drop)
        self.device = device
        iface = {"shape": (n,), "typestr": dtype_typestr(dtype), "data": (ptr, device < 0),
                 "strides": None, "version": 3}
        if device >= 0:
            self.__cuda_array_interface__ = iface
        else:
            self.__array_interface__ = iface


def _subtree_end(info_p: Any, node: int) -> int:
    """The index after node's last descendant (pre-order)."""
    lib = _lib.lib
    todo, at = 1, node
    while todo:
        todo += int(lib.gpuipc_info_batch_node(info_p, at).contents.n_children) - 1
        at += 1
    return at


class BatchView:
    """A looked-up batch, every buffer mapped, under one lease.

    ``bv["col"]`` (or ``bv[i]``) is a :class:`BatchColumn`; ``bv.columns``
    the column names in order; ``bv.num_rows``; ``bv.metadata`` the
    schema's metadata.  ``__arrow_c_schema__``, ``__arrow_c_array__`` (host
    batches) and ``__arrow_c_device_array__`` export the table as one struct
    array without a copy, so ``pyarrow.record_batch(bv)`` takes it.
    ``release()`` gives the lease back once no column view and no exported
    Arrow array is left."""

    def __init__(self, conn: Any, handle: int) -> None:
        lib = _lib.lib
        self._conn = conn
        self._handle = handle
        self._info_p = lib.gpuipc_batch_view_info(handle)
        self._info: Optional[Info] = None
        self.num_rows = int(lib.gpuipc_batch_view_rows(handle))
        n = int(lib.gpuipc_batch_view_columns(handle))
        # every column in one call: a batch can have a thousand
        self._values = (_lib.gpuipc_batch_values * n)()
        if n and lib.gpuipc_batch_view_values(handle, 0, n, self._values) < 0:
            raise error_for(-22, "cannot read the batch's columns", "lookup_batch")
        cstr = _lib.cstr
        names = [cstr(v.name) for v in self._values]
        self._column_nodes: List[int] = [v.node for v in self._values]
        self.columns = tuple(names)
        # by name: the first column of each name, as columns.index() finds
        self._by_name: Dict[str, int] = {}
        for i, cname in enumerate(names):
            self._by_name.setdefault(cname, i)
        self._holder = _Holder(self._free)

    def _free(self) -> None:
        if self._info is None:
            self._info = Info.from_c(self._info_p)
        h, self._handle = self._handle, 0
        self._conn.call(lambda c: _lib.lib.gpuipc_batch_view_release(h), closed_ok=True)

    def _check_open(self) -> None:
        if self._holder.closed or not self._handle:
            raise ValueError("the batch has been released")

    def _buffer(self, node: int, which: Optional[int]) -> Tuple[int, int, int]:
        if which is None:
            which = 0
        data, size, dev = c_void_p(), c_uint64(), c_int()
        r = _lib.lib.gpuipc_batch_view_node_buffer(self._handle, node, which, byref(data),
                                                   byref(size), byref(dev))
        if r < 0:
            return 0, 0, -1
        return int(data.value or 0), int(size.value), int(dev.value)

    def _part_kind(self, node: int, which: Optional[int]) -> str:
        nd = _lib.lib.gpuipc_info_batch_node(self._info_p, node).contents
        if which is None or which >= int(nd.n_buffers) or nd.buffers[which] < 0:
            return "host"
        part = _lib.lib.gpuipc_info_batch_part(self._info_p, int(nd.buffers[which])).contents
        return _lib.KIND_NAMES.get(int(part.kind), str(int(part.kind)))

    @property
    def info(self) -> Info:
        if self._info is None:
            self._check_open()
            self._info = Info.from_c(self._info_p)
        return self._info

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def id(self) -> int:
        return self.info.id

    @property
    def metadata(self) -> Dict[str, str]:
        return self.info.user

    def __getitem__(self, key: Union[str, int]) -> BatchColumn:
        self._check_open()
        if isinstance(key, int):
            if not -len(self.columns) <= key < len(self.columns):
                raise IndexError(f"column {key} out of range ({len(self.columns)} columns)")
            i = key % len(self.columns)
        else:
            if key not in self._by_name:
                raise KeyError(key)
            i = self._by_name[key]
        return BatchColumn(self, self._column_nodes[i])

    def __contains__(self, key: object) -> bool:
        return key in self.columns

    # ---- every column at once

    def to_torch(self) -> Dict[str, Any]:
        """Every column as a torch tensor over the mapped memory (zero copy),
        by name: a column of a fixed-width type is a 1-D tensor of its values,
        any other is what ``torch.as_tensor(bv[name])`` makes of it.  The
        columns of one mapping (one opened allocation, e.g. the blocks of a
        caching allocator's segment) are slices of one tensor, made once,
        which is much cheaper than a tensor per column.  Validity bitmaps are
        not applied (``bv[name].null_count`` says whether there are nulls).
        The tensors keep the batch mapped until the last is freed, after
        ``release()`` too."""
        import torch  # type: ignore[import]

        def whole(span: "_Span") -> Any:
            return torch.as_tensor(span, device=f"cuda:{span.device}")

        def one(col: BatchColumn) -> Any:
            return torch.as_tensor(col, device=f"cuda:{col.device}" if col.is_device else None)
        return self._arrays(True, whole, lambda t, at, n: t.as_strided((n,), (1,), at), one)

    def to_cupy(self) -> Dict[str, Any]:
        """The same as :meth:`to_torch`, with CuPy arrays: device columns only
        (a host column is a ValueError)."""
        import cupy  # type: ignore[import]

        def one(col: BatchColumn) -> Any:
            if not col.is_device:
                raise ValueError(f"column {col.column_name!r} is host memory: use to_numpy()")
            return cupy.asarray(col)
        return self._arrays(True, cupy.asarray, lambda a, at, n: a[at:at + n], one)

    def to_numpy(self) -> Dict[str, Any]:
        """The same as :meth:`to_torch`, with read-only NumPy arrays: host
        columns only (a device column is a ValueError)."""
        if _np is None:
            raise ImportError("to_numpy() needs numpy")

        def one(col: BatchColumn) -> Any:
            if col.is_device:
                raise ValueError(f"column {col.column_name!r} is device memory: use to_torch() "
                                 "or to_cupy()")
            return _np.asarray(col)
        return self._arrays(False, _np.asarray, lambda a, at, n: a[at:at + n], one)

    def _arrays(self, device: bool, whole: Any, part: Any, one: Any) -> Dict[str, Any]:
        """{name: array}: fixed-width columns on the wanted side (device or
        host) as part(whole(span), element offset, length) of one span per
        mapping and dtype; every other column as one(BatchColumn)."""
        self._check_open()
        out: Dict[str, Any] = {}
        spans: Dict[Tuple[int, str], Any] = {}
        dtypes = _FORMAT_DTYPES
        for name, v in zip(self.columns, self._values):
            # one gpuipc_batch_values each, read in __init__: no C call here
            dtype = dtypes.get(v.format) if v.width else None
            mb, data = v.map, v.data
            if dtype is None or not mb or not data or (v.device >= 0) != device:
                out[name] = one(BatchColumn(self, v.node))
                continue
            isz = v.width
            off = data - mb
            if off % isz or mb % isz or isz != itemsize(dtype):
                out[name] = one(BatchColumn(self, v.node))
                continue
            span = spans.get((mb, dtype))
            if span is None:
                span = spans[(mb, dtype)] = whole(_Span(self, mb, v.map_size // isz, dtype,
                                                        v.device))
            out[name] = part(span, off // isz, v.length)
        return out

    def keys(self) -> Tuple[str, ...]:
        return self.columns

    # ---- Arrow PyCapsule interface

    def _export(self, device: bool) -> Tuple[Any, Any]:
        self._check_open()
        sp, _ = A.new_struct(A.ArrowSchema)
        ap, _ = A.new_struct(A.ArrowDeviceArray if device else A.ArrowArray)
        fn = (_lib.lib.gpuipc_batch_view_export_device if device
              else _lib.lib.gpuipc_batch_view_export)
        r = fn(self._handle, -1, sp, ap)
        if r < 0:
            A.free_struct(sp)
            A.free_struct(ap)
            raise error_for(r, "cannot export the batch as Arrow " +
                            ("device arrays" if device else
                             "host arrays (is it on a device? use __arrow_c_device_array__)"),
                            "export")
        return (A.capsule(sp, A.SCHEMA),
                A.capsule(ap, A.DEVICE_ARRAY if device else A.ARRAY))

    def __arrow_c_schema__(self) -> Any:
        self._check_open()
        sp, _ = A.new_struct(A.ArrowSchema)
        r = _lib.lib.gpuipc_batch_view_export(self._handle, -1, sp, None)
        if r < 0:
            A.free_struct(sp)
            raise error_for(r, "cannot export the batch's schema", "export")
        return A.capsule(sp, A.SCHEMA)

    def __arrow_c_array__(self, requested_schema: Any = None) -> Tuple[Any, Any]:
        return self._export(False)

    def __arrow_c_device_array__(self, requested_schema: Any = None,
                                 **kwargs: Any) -> Tuple[Any, Any]:
        return self._export(True)

    def release(self) -> None:
        """Gives the lease back once no column view or Arrow export is left."""
        self._holder.close()

    close = release

    def __enter__(self) -> "BatchView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self._holder.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = " released" if self._holder.closed else ""
        return (f"<gpuipc.BatchView {len(self.columns)} columns, {self.num_rows} rows"
                f"{state}>")
