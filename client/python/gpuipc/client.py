"""The connection to gpuipcd: registering, looking up, inspecting."""
from __future__ import annotations

import ctypes
import math
import os
import threading
import weakref
from ctypes import POINTER, byref, c_char_p, c_int, c_int64, c_uint32, c_uint64, c_void_p
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence,
                    Tuple, Union)

from . import _lib
from .errors import Error, Unreachable, error_for
from .view import (DeviceBuffer, HostBuffer, Info, View, _Memory, _np, _stream_ptr,
                   c_strides, dtype_name, extent, format_to_dtype, itemsize,
                   typestr_to_dtype)

ShapeLike = Union[int, Sequence[int]]


@dataclass(frozen=True)
class Stats:
    """Daemon-wide counters (a copy of ``gpuipc_stats``)."""

    server: str
    pid: int
    protocol: int
    uptime_ms: int
    connections: int
    registrations: int
    leases: int
    bytes_host: int
    requests: int
    errors: int
    cuda_available: bool
    cuda_reason: str
    cuda_driver_version: int
    bytes_cuda_ipc: int
    bytes_cuda_vmm: int
    bytes_cuda_pool: int = 0
    copies: int = 0                    # registrations copied by GPUIPC_REGISTER_COPY
    copied_bytes: int = 0
    bytes_batch: int = 0               # bytes of column batches (their parts' sums)


class _Conn:
    """The C client and the lock that serialises every call on it (a
    gpuipc_client is not thread-safe; views release through it from
    finalizers, which may run on any thread)."""

    def __init__(self, ptr: int) -> None:
        self.ptr: Optional[int] = ptr
        self.lock = threading.RLock()

    def call(self, fn: Callable[[int], int], closed_ok: bool = False) -> int:
        with self.lock:
            if self.ptr is None and not closed_ok:
                raise Error(-107, "the client is closed")  # ENOTCONN
            return fn(0 if self.ptr is None else self.ptr)

    def run(self, op: str, fn: Callable[..., int], *args: Any) -> int:
        """fn(client, *args) under the lock, as call_checked() runs a
        closure, without building one: for the calls made right at a
        handoff, where each layer of Python costs more with cold caches."""
        with self.lock:
            if self.ptr is None:
                raise Unreachable(-107, "the client is closed", op)
            r = fn(self.ptr, *args)
            if r < 0:
                raise self.error(r, op)
            return r

    def call_checked(self, fn: Callable[[int], int], op: str) -> int:
        """Runs fn; on a negative result raises the matching Error with the
        daemon's message (read under the same lock, before any other call)."""
        return self.run(op, fn)

    def error(self, code: int, op: str) -> Error:
        msg = ""
        if self.ptr is not None:
            msg = _lib.cstr(_lib.lib.gpuipc_errmsg(self.ptr))
        return error_for(code, msg or _lib.strerror(code), op)

    def close(self) -> None:
        with self.lock:
            p, self.ptr = self.ptr, None
            if p is not None:
                _lib.lib.gpuipc_client_free(p)


def _timeout_ms(timeout: Optional[float], none_means: int) -> int:
    if timeout is None:
        return none_means
    if timeout < 0 or math.isinf(timeout):
        return -1
    ms = int(math.ceil(timeout * 1000.0))
    return min(ms, 2**31 - 1)


_DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000}


def parse_duration(d: Union[int, float, str]) -> int:
    """A duration in milliseconds: a number of seconds, or a str with a unit,
    ``"500ms"``, ``"30s"``, ``"5m"``, ``"2h"``, ``"1d"`` (a bare number in a
    str is seconds)."""
    if isinstance(d, bool):
        raise TypeError("a duration must be a number of seconds or a str such as '30s'")
    if isinstance(d, (int, float)):
        if d < 0 or math.isnan(d) or math.isinf(d):
            raise ValueError(f"bad duration {d!r}")
        return int(math.ceil(d * 1000))
    if not isinstance(d, str):
        raise TypeError("a duration must be a number of seconds or a str such as '30s'")
    s = d.strip()
    num = s.rstrip("smhd")
    unit = s[len(num):] or "s"
    if unit not in _DURATION_UNITS or not num:
        raise ValueError(f"bad duration {d!r}: expected e.g. 500ms, 30s, 5m, 2h")
    try:
        v = float(num)
    except ValueError:
        raise ValueError(f"bad duration {d!r}: expected e.g. 500ms, 30s, 5m, 2h") from None
    if v < 0 or math.isnan(v) or math.isinf(v):
        raise ValueError(f"bad duration {d!r}")
    return int(math.ceil(v * _DURATION_UNITS[unit]))


def _ttl_ms(ttl: Union[None, int, float, str]) -> int:
    if ttl is None:
        return 0
    ms = parse_duration(ttl)
    if ms <= 0:
        raise ValueError("ttl must be positive")
    return ms


def _name(name: str) -> bytes:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    return name.encode("utf-8")


class _Meta:
    """A gpuipc_meta and the ctypes objects it points into."""

    def __init__(self, dtype: Optional[str], shape: Optional[Sequence[int]],
                 strides: Optional[Sequence[int]], user: Optional[Mapping[str, str]]) -> None:
        m = _lib.gpuipc_meta()
        self._keep: List[Any] = []
        if dtype:
            b = dtype.encode()
            self._keep.append(b)
            m.dtype = b
        if shape is not None:
            nd = len(shape)
            if strides is not None and len(strides) != nd:
                raise ValueError("strides and shape differ in length")
            m.ndim = nd
            if nd:
                sh = (c_int64 * nd)(*[int(x) for x in shape])
                self._keep.append(sh)
                m.shape = ctypes.cast(sh, POINTER(c_int64))
                if strides is not None:
                    st = (c_int64 * nd)(*[int(x) for x in strides])
                    self._keep.append(st)
                    m.strides = ctypes.cast(st, POINTER(c_int64))
        if user:
            n = len(user)
            keys = (c_char_p * n)(*[str(k).encode() for k in user.keys()])
            vals = (c_char_p * n)(*[str(v).encode() for v in user.values()])
            self._keep += [keys, vals]
            m.n_user = n
            m.user_keys = ctypes.cast(keys, POINTER(c_char_p))
            m.user_values = ctypes.cast(vals, POINTER(c_char_p))
        self.meta = m
        self._ref = byref(m)

    def ref(self):
        return self._ref


def _parse_shape(shape_or_nbytes: ShapeLike, dtype: str) -> Tuple[int, Optional[Tuple[int, ...]]]:
    isz = itemsize(dtype)
    if isinstance(shape_or_nbytes, int):
        n = int(shape_or_nbytes)
        if n <= 0:
            raise ValueError("size must be at least 1 byte")
        if n % isz:
            raise ValueError(f"{n} bytes are not a whole number of {dtype}")
        return n, (n // isz,)
    shape = tuple(int(x) for x in shape_or_nbytes)
    if any(x < 0 for x in shape):
        raise ValueError("negative dimension")
    n = extent(shape, None, isz)
    if n <= 0:
        raise ValueError("an empty buffer cannot be shared")
    return n, shape


class Client:
    """A connection to gpuipcd (use :func:`connect`).

    One client may be used from several threads: calls are serialised.
    Closing it (``close()``, ``with`` exit, garbage collection) ends the
    connection: the daemon drops its leases and its ephemeral (and all
    ``cuda-ipc``) registrations; views already looked up stay mapped until
    released.
    """

    def __init__(self, socket: Optional[Union[str, "os.PathLike[str]"]] = None) -> None:
        path = os.fsencode(socket) if socket is not None else None
        out = c_void_p()
        r = _lib.lib.gpuipc_client_connect(path, byref(out))
        where = os.fsdecode(path) if path is not None else _lib.default_socket()
        if r < 0:
            # The library's message names the socket and the likely cause.
            msg = _lib.cstr(_lib.lib.gpuipc_errmsg(None))
            raise Unreachable(r, msg or f"cannot connect to gpuipcd at {where}: "
                              f"{_lib.strerror(r)}", "connect")
        self.socket = where
        self._conn = _Conn(out.value or 0)
        self._finalizer = weakref.finalize(self, self._conn.close)

    # ---- connection

    def close(self) -> None:
        """Ends the connection.  Idempotent."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._conn.ptr is None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<gpuipc.Client {self.socket!r}{' closed' if self.closed else ''}>"

    def ping(self) -> None:
        """One round trip to the daemon."""
        self._conn.call_checked(lambda c: _lib.lib.gpuipc_client_ping(c), "ping")

    def lost_registrations(self) -> List[Tuple[str, int, int]]:
        """Registrations a reconnect to a daemon that kept no state could not
        make again, oldest first, each reported once: (name, id, errno),
        errno -17 (EEXIST) when another process registered the name first,
        so that consumers of the name now read its buffer."""
        out: List[Tuple[str, int, int]] = []
        buf = ctypes.create_string_buffer(256)
        rid = c_uint64()
        err = c_int()
        while self._conn.call(lambda c: _lib.lib.gpuipc_client_next_lost(
                c, buf, len(buf), byref(rid), byref(err)), True) == 1:
            out.append((buf.value.decode(), rid.value, err.value))
        return out

    def set_reconnect(self, timeout_ms: int) -> None:
        """How long to keep trying to reconnect when the daemon restarts
        (default 10000 ms or $GPUIPC_RECONNECT_MS; 0: never, and calls then
        raise Unreachable).  See docs/restart.md."""
        self._conn.call_checked(
            lambda c: _lib.lib.gpuipc_client_set_reconnect(c, int(timeout_ms)), "set_reconnect")

    # ---- producing

    def alloc_host(self, shape_or_nbytes: ShapeLike, dtype: Any = "uint8") -> HostBuffer:
        """Allocates shared memory (a sealed memfd, zero-filled) to fill and
        then register without copying.

        ``shape_or_nbytes`` is a shape tuple, or an int: a size in *bytes*
        (the shape is then ``(nbytes // itemsize,)``).  The buffer's dtype and
        shape become the registration's metadata."""
        dt = dtype_name(dtype)
        nbytes, shape = _parse_shape(shape_or_nbytes, dt)
        out = c_void_p()
        r = _lib.lib.gpuipc_hostbuf_new(nbytes, byref(out))
        if r < 0:
            raise error_for(r, _lib.strerror(r), "hostbuf_new")
        return HostBuffer(out.value or 0, nbytes, dt, shape)

    def alloc_device(self, shape_or_nbytes: ShapeLike, dtype: Any = "uint8", *,
                     device: int = 0) -> DeviceBuffer:
        """Allocates CUDA VMM memory on device ordinal ``device`` (exportable
        as a POSIX fd; the allocation is rounded up to its granularity).
        Registered, it becomes a durable ``cuda-vmm`` buffer.  Arguments as
        for :meth:`alloc_host`.  Raises Unsupported without a CUDA driver."""
        dt = dtype_name(dtype)
        nbytes, shape = _parse_shape(shape_or_nbytes, dt)
        out = c_void_p()
        r = self._conn.call(lambda c: _lib.lib.gpuipc_cudabuf_new(int(device), nbytes,
                                                                     byref(out)))
        if r < 0:
            raise error_for(r, _lib.strerror(r), "cudabuf_new")
        return DeviceBuffer(out.value or 0, nbytes, int(device), dt, shape)

    def register(self, name: str, obj: Any, meta: Optional[Mapping[str, str]] = None, *,
                 ephemeral: bool = False, event: Optional[int] = None,
                 dtype: Any = None, shape: Optional[Sequence[int]] = None,
                 strides: Optional[Sequence[int]] = None, cuda_ipc: bool = False,
                 shared_write: bool = False, copy: bool = False,
                 cacheable: bool = False,
                 ttl: Union[None, int, float, str] = None) -> int:
        """Registers ``obj`` under ``name`` ("ns/sub/name"); returns the
        registration id (for :meth:`wait_released`).

        ``obj`` may be:

        * a :class:`HostBuffer` (from :meth:`alloc_host`): registered
          zero-copy as ``host``;
        * a :class:`DeviceBuffer` (from :meth:`alloc_device`): zero-copy,
          ``cuda-vmm`` (durable);
        * any object with ``__cuda_array_interface__`` (CuPy, PyTorch CUDA
          tensors, Numba): its memory, zero-copy; ``cuda-vmm`` when it is VMM
          memory exportable as a POSIX fd, else ``cuda-ipc``, which stays the
          caller's: keep the array alive and this client open until
          :meth:`wait_released` returns (or :meth:`adopt` it).  ``cuda-ipc``
          registrations are always ephemeral.  If the interface carries a
          ``stream`` and no ``event`` is given, that stream is synchronised
          first (``cuStreamSynchronize``), so consumers see finished data;
        * anything else with the buffer protocol or ``__array__`` (NumPy,
          bytes, bytearray, memoryview): **copied once** into a new host
          buffer, which the daemon then holds.  For zero-copy host
          registration fill an :meth:`alloc_host` buffer instead.

        The metadata records the dtype (as a name like ``"float32"``), shape
        and byte strides of ``obj``; ``dtype``/``shape``/``strides`` override
        them.  ``meta`` is free-form string metadata (user keys).
        ``ephemeral`` ends the registration with this connection.  ``event``
        is a CUevent (int) created with CU_EVENT_INTERPROCESS and recorded
        after the writes; consumers wait on it.  ``cuda_ipc`` forces a legacy
        IPC handle even for VMM memory.  ``copy=True`` lets the library copy
        device memory that cannot be shared zero-copy (the device's default
        stream-ordered pool, as torch's ``cudaMallocAsync`` backend and
        CuPy's ``MemoryAsyncPool`` use; VMM memory without an exportable
        handle type) into a durable ``cuda-vmm`` buffer; the record's
        ``copied`` says why.  Without it such memory raises
        :class:`Unsupported` with what would make it shareable.  See
        :func:`gpuipc.explain`.  ``cacheable=True`` (``cuda-ipc`` and
        ``cuda-pool``) promises not to free the memory before
        :meth:`wait_unmapped` returns for it, after its last registration is
        gone, so consumers keep it mapped and a reused block costs them a warm
        lookup (torch's caching allocator reuses blocks; only freeing them
        early is unsafe).  For ``cuda-vmm`` memory (expandable segments)
        it makes consumers keep the mapping over an unregister and a
        register again, until :meth:`wait_unmapped` or the end of this
        client; freeing earlier is safe, but consumers keep the memory
        alive until then.

        Host buffers are sealed against new writers (``F_SEAL_FUTURE_WRITE``):
        an :meth:`alloc_host` buffer stays writable through its own mapping,
        but consumers can only read, even with ``lookup(writable=True)``.
        ``shared_write=True`` leaves them writable for writable lookups (by
        the owner's uid or root); it does not apply to device buffers.

        ``ttl`` (seconds, or a str such as ``"30s"``, ``"500ms"``, ``"5m"``,
        ``"2h"``) has the daemon unregister it that long after registering;
        readers that hold it keep their mapping.  Without ``ttl`` or
        ``ephemeral`` a registration outlives this process: remove it with
        :meth:`unregister` (or ``gpuipcctl rm``).
        """
        args = (name, obj, meta, ephemeral, event, dtype, shape, strides, cuda_ipc,
                shared_write, copy, cacheable)
        if ttl is None:     # the common case, one layer less
            return self._register(*args)
        return self._with_ttl(_ttl_ms(ttl), "register", self._register, *args)

    def _with_ttl(self, ttl_ms: int, op: str, fn: Callable[..., int], *args: Any) -> int:
        """fn(*args), a register call, with the C client's TTL set to ttl_ms
        for it and back to 0 after (it is 0 between calls); without a TTL,
        fn(*args) alone."""
        if not ttl_ms:
            return fn(*args)
        with self._conn.lock:
            self._conn.call_checked(lambda c: _lib.lib.gpuipc_client_set_ttl(c, ttl_ms), op)
            try:
                return fn(*args)
            finally:
                self._conn.call(lambda c: _lib.lib.gpuipc_client_set_ttl(c, 0), closed_ok=True)

    def _register(self, name: str, obj: Any, meta: Optional[Mapping[str, str]],
                  ephemeral: bool, event: Optional[int], dtype: Any,
                  shape: Optional[Sequence[int]], strides: Optional[Sequence[int]],
                  cuda_ipc: bool, shared_write: bool, copy: bool, cacheable: bool) -> int:
        flags = _lib.REGISTER_EPHEMERAL if ephemeral else 0
        hflags = flags | (_lib.REGISTER_SHARED_WRITE if shared_write else 0)
        if copy:
            flags |= _lib.REGISTER_COPY
        if cacheable:
            flags |= _lib.REGISTER_CACHEABLE
        if cuda_ipc:
            flags |= _lib.REGISTER_CUDA_IPC
        bname = _name(name)
        rid = c_uint64()
        over = (dtype, shape, strides, meta)     # the caller's, over what obj says

        # A plain torch tensor first: it is the common case, and this runs
        # right at a handoff, after the producer's idle, when each call costs
        # several times its warm time.
        dev: Optional[Tuple[Any, ...]] = _torch_layout(obj)
        if dev is None:
            if isinstance(obj, HostBuffer):
                obj._check_open()
                m = _meta_over(over, obj.dtype, obj.shape, None)
                self._conn.call_checked(lambda c: _lib.lib.gpuipc_hostbuf_register(
                    c, bname, obj._handle, m.ref(), hflags, byref(rid)), "register")
                return rid.value
            if isinstance(obj, DeviceBuffer):
                obj._check_open()
                dev = (obj.ptr, obj.nbytes, obj.dtype, obj.shape, None, None)
            else:
                cai = _get_cai(obj)
                dev = _cai_layout(cai) if cai is not None else None
        if dev is not None:
            ptr, nbytes, d, sh, st, stream = dev
            if nbytes <= 0 or not ptr:
                raise ValueError("an empty array cannot be shared")
            if event is None and stream is not None:
                _cuda_stream_sync(int(stream))
            m = _meta_over(over, d, sh, st)
            self._conn.run("register", _lib.lib.gpuipc_cuda_register, bname, ptr, nbytes,
                           m.ref(), None if event is None else int(event), flags, byref(rid))
            return rid.value

        # Host data: copy once into a new shared buffer.
        src, d, sh = _host_source(obj)
        nbytes = src.nbytes
        if nbytes <= 0:
            raise ValueError("an empty buffer cannot be shared")
        out = c_void_p()
        r = _lib.lib.gpuipc_hostbuf_new(nbytes, byref(out))
        if r < 0:
            raise error_for(r, _lib.strerror(r), "hostbuf_new")
        hb = out.value
        try:
            dst = (ctypes.c_ubyte * nbytes).from_address(_lib.lib.gpuipc_hostbuf_data(hb))
            memoryview(dst).cast("B")[:] = src
            m = _meta_over(over, d, sh, None)
            self._conn.call_checked(lambda c: _lib.lib.gpuipc_hostbuf_register(
                c, bname, hb, m.ref(), hflags, byref(rid)), "register")
        finally:
            # The daemon holds its own reference to the memfd.
            _lib.lib.gpuipc_hostbuf_free(hb)
        return rid.value

    def register_batch(self, name: str, columns: Any, *,
                       meta: Optional[Mapping[str, str]] = None, ephemeral: bool = False,
                       event: Optional[int] = None, copy: bool = False,
                       cacheable: bool = False,
                       ttl: Union[None, int, float, str] = None) -> int:
        """Registers a table under one name in one request; returns the id.

        ``columns`` is a dict from column name to a column: a NumPy array
        (1-D; ``bool`` becomes Arrow's bit-packed booleans; a masked array is
        a nullable column), a list of ``str`` or ``bytes`` (``None`` for
        nulls: an Arrow utf8 or binary column), a dict of columns (a struct
        column), a CuPy array or torch tensor on a GPU, a :class:`HostBuffer`
        or :class:`DeviceBuffer`, or any object with ``__arrow_c_array__`` /
        ``__arrow_c_device_array__`` (a pyarrow array, another
        :class:`BatchView`'s column export).  ``columns`` may also be one
        object with those methods whose struct array's children are the
        columns (a pyarrow ``RecordBatch``).  Host memory that is not a
        :class:`HostBuffer` is copied once into shared memory; device memory
        is shared in place as :meth:`register` shares it.  ``meta`` is the
        schema's metadata; ``event`` a CUevent (interprocess) recorded after
        the writes, which consumers wait on; ``ephemeral``, ``copy`` and
        ``ttl`` as for :meth:`register`.  ``cacheable=True`` makes the
        promise of :meth:`register`'s for every ``cuda-ipc`` and
        ``cuda-pool`` column: consumers keep that memory mapped after their
        views, and it may be freed once :meth:`wait_unmapped` of the
        returned id returns, after the batch is unregistered (``cuda-vmm``
        columns: as for :meth:`register`).
        """
        from . import batch
        flags = _batch_flags(ephemeral, copy, cacheable)
        ttl_ms = _ttl_ms(ttl)
        bname = _name(name)
        # Built outside the connection's lock: host copies and stream syncs
        # need no connection.
        built = batch.build(columns, meta, event)
        try:
            return self._with_ttl(ttl_ms, "register_batch", batch.send, self._conn, bname,
                                  built, flags)
        finally:
            built.free()        # send() has freed it, unless it never ran

    def register_batches(self, batches: Iterable[Tuple[str, Any]], *,
                         meta: Optional[Mapping[str, str]] = None, ephemeral: bool = False,
                         copy: bool = False, cacheable: bool = False) -> List[int]:
        """Registers each ``(name, columns)`` of ``batches`` in order, as
        :meth:`register_batch` would, and returns their ids: the next batch
        is built here while the request of the one before it goes out in a
        background thread (the C call runs without the GIL).  ``meta``,
        ``ephemeral``, ``copy`` and ``cacheable`` apply to every batch.  The first error is
        raised once the batches before it are registered, and none after it
        is sent; those before stay registered (their ids are in the
        exception's ``ids``)."""
        from concurrent.futures import Future, ThreadPoolExecutor

        from . import batch
        flags = _batch_flags(ephemeral, copy, cacheable)
        sent: "List[Future[int]]" = []
        failed: Optional[BaseException] = None
        stop: List[bool] = []           # a request failed: send no later one

        def send(bname: bytes, built: Any) -> int:
            if stop:
                built.free()
                return 0
            try:
                return batch.send(self._conn, bname, built, flags)
            except BaseException:
                stop.append(True)
                raise
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuipc-register") as ex:
            # the thread starts now, while the first batch is built
            ex.submit(lambda: None)
            try:
                for name, columns in batches:
                    if stop:
                        break
                    bname = _name(name)
                    built = batch.build(columns, meta, None)
                    sent.append(ex.submit(send, bname, built))
            except BaseException as e:
                failed = e              # after the requests already sent, in order
        ids: List[int] = []
        for f in sent:
            err = f.exception()
            if err is not None:
                failed = err
                break
            ids.append(f.result())
        if failed is not None:
            failed.ids = ids  # type: ignore[attr-defined]
            raise failed
        return ids

    def lookup_batch(self, name: str, timeout: Optional[float] = None) -> "Any":
        """Looks a batch up in one round trip, mapping every buffer under one
        lease, and returns a :class:`gpuipc.BatchView`.  ``timeout`` as for
        :meth:`lookup`.  Waits for the producer's event, if any."""
        from . import batch
        b = _name(name)
        ms = _timeout_ms(timeout, 0)
        out = c_void_p()
        with self._conn.lock:
            self._conn.call_checked(lambda c: _lib.lib.gpuipc_batch_view_lookup(
                c, b, ms, 0, byref(out)), "lookup_batch")
            try:
                return batch.BatchView(self._conn, out.value or 0)
            except BaseException:
                _lib.lib.gpuipc_batch_view_release(out.value)
                raise

    def lookup_batches(self, names: Iterable[str], timeout: Optional[float] = None,
                       prefetch: int = 1) -> Iterator["Any"]:
        """Looks up each batch of ``names`` in turn, yielding its
        :class:`gpuipc.BatchView`, with up to ``prefetch`` lookups of the next
        names under way in a background thread while the caller works on
        the current one (the C lookup runs without the GIL).  ``timeout``
        applies to each lookup; the first error is raised in the caller at
        its batch, in order.  Views looked up ahead and never yielded (the
        caller stopped early) are released."""
        import collections
        from concurrent.futures import Future, ThreadPoolExecutor
        if prefetch < 0:
            raise ValueError("prefetch is 0 or more")
        ahead: "collections.deque[Future[Any]]" = collections.deque()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuipc-lookup") as ex:
            try:
                for n in names:
                    ahead.append(ex.submit(self.lookup_batch, n, timeout))
                    if len(ahead) > prefetch:
                        yield ahead.popleft().result()
                while ahead:
                    yield ahead.popleft().result()
            finally:
                for f in ahead:
                    try:
                        f.result().release()
                    except Exception:
                        pass

    def register_fd(self, name: str, fd: int, size: int, offset: int = 0,
                    meta: Optional[Mapping[str, str]] = None, *, ephemeral: bool = False,
                    dtype: Any = None, shape: Optional[Sequence[int]] = None,
                    strides: Optional[Sequence[int]] = None, shared_write: bool = False,
                    ttl: Union[None, int, float, str] = None) -> int:
        """Registers ``size`` bytes at ``offset`` of an existing memfd (which
        stays the caller's; F_SEAL_SHRINK and F_SEAL_GROW are added to it,
        unless ``shared_write`` F_SEAL_FUTURE_WRITE (map it writable first),
        then F_SEAL_SEAL: its size is fixed and it takes no further seals).
        Returns the id.  ``ttl`` as for :meth:`register`."""
        ttl_ms = _ttl_ms(ttl)
        m = _Meta(dtype_name(dtype) if dtype is not None else None,
                  tuple(shape) if shape is not None else None,
                  tuple(strides) if strides is not None else None, meta)
        rid = c_uint64()
        flags = ((_lib.REGISTER_EPHEMERAL if ephemeral else 0) |
                 (_lib.REGISTER_SHARED_WRITE if shared_write else 0))
        bname = _name(name)

        def reg() -> int:
            self._conn.call_checked(lambda c: _lib.lib.gpuipc_fd_register(
                c, bname, int(fd), int(offset), int(size), m.ref(), flags, byref(rid)),
                "register")
            return rid.value
        return self._with_ttl(ttl_ms, "register", reg)

    def unregister(self, name: str) -> None:
        """Removes ``name`` from the namespace; readers keep their mapping
        until they release it."""
        b = _name(name)
        self._conn.call_checked(lambda c: _lib.lib.gpuipc_name_unregister(c, b), "unregister")

    def unregister_prefix(self, prefix: str) -> Tuple[int, int]:
        """Removes every registration in namespace ``prefix`` that this
        client may remove; returns (removed, skipped): skipped ones are
        visible but belong to other users."""
        if not prefix:
            raise ValueError("unregister_prefix needs a namespace prefix")
        b = _name(prefix)
        removed, skipped = c_uint64(), c_uint64()
        self._conn.call_checked(lambda c: _lib.lib.gpuipc_prefix_unregister(
            c, b, byref(removed), byref(skipped)), "unregister")
        return int(removed.value), int(skipped.value)

    def wait_released(self, id: int, timeout: Optional[float] = None) -> None:
        """Waits until registration ``id`` (registered on this client) has
        had a lease and its last lease was released.  ``timeout`` in seconds;
        None waits as long as the daemon allows (one hour).  A release before
        the call counts.  Raises Timeout."""
        ms = _timeout_ms(timeout, -1)
        self._conn.call_checked(lambda c: _lib.lib.gpuipc_reg_wait_released(c, int(id), ms),
                                "wait_released")

    def wait_unmapped(self, id: int, timeout: Optional[float] = None) -> None:
        """After unregistering the last registration of an allocation
        registered ``cacheable=True`` (``id`` one of them; a batch's id
        stands for all its device columns shared in place): tells
        consumers to let go of it (until now they kept it mapped), then
        waits until no consumer keeps it mapped, so that the memory may be
        freed.  Raises Timeout, or NotFound when ``id`` was not registered
        cacheable here (or among the newest 256 cacheable allocations)."""
        ms = _timeout_ms(timeout, -1)
        self._conn.call_checked(lambda c: _lib.lib.gpuipc_reg_wait_unmapped(c, int(id), ms),
                                "wait_unmapped")

    def cache_trim(self) -> int:
        """Closes the device mappings this process keeps after their views
        (the mapping cache) and tells the daemon; returns how many."""
        r = self._conn.call(lambda c: _lib.lib.gpuipc_cache_trim(c))
        if r < 0:
            raise error_for(r, _lib.strerror(r), "cache_trim")
        return r

    def adopt(self, name: str) -> int:
        """Hands a ``cuda-ipc`` registration of this client to the daemon,
        which copies it into memory of its own (a durable ``cuda-vmm``
        buffer).  Returns the number of leases still mapping the caller's
        memory: free it once :meth:`wait_released` says they are gone (at
        once when 0); memory registered ``cacheable=True`` only once
        :meth:`wait_unmapped` returns, as after an unregister."""
        b = _name(name)
        n = c_uint32()
        self._conn.call_checked(lambda c: _lib.lib.gpuipc_name_adopt(c, b, byref(n)), "adopt")
        return int(n.value)

    # ---- consuming

    def lookup(self, name: str, timeout: Optional[float] = None, *, writable: bool = False,
               sync: bool = True, owner_uid: Optional[int] = None) -> View:
        """Looks ``name`` up and maps it, taking a lease.

        ``timeout`` in seconds: None or 0 does not wait (NotFound when the
        name is not registered); a positive number waits that long for it to
        be registered (Timeout after); a negative number or ``math.inf``
        waits as long as the daemon allows (one hour).  ``writable`` maps host
        buffers read-write (default read-only).  With ``sync=False`` the
        library does not wait for the producer's CUDA event: pass your stream
        to :meth:`View.wait_stream` (or ``__dlpack__(stream=...)``).
        ``owner_uid`` accepts only a registration owned by that uid: another
        one under the name counts as absent (NotFound, or the wait goes on),
        so an impostor that registered the name first is not read."""
        b = _name(name)
        ms = _timeout_ms(timeout, 0)
        flags = (_lib.LOOKUP_WRITABLE if writable else 0) | (0 if sync else _lib.LOOKUP_NO_SYNC)
        owner = -1 if owner_uid is None else int(owner_uid)
        if owner_uid is not None and not 0 <= owner < 0xffffffff:
            raise ValueError(f"owner_uid {owner_uid} is not a uid")
        out = c_void_p()
        conn = self._conn
        v = View(conn, sync)
        look = _lib.lib.gpuipc_view_lookup
        with conn.lock:
            if owner < 0:   # the C client's lookup owner is -1 between calls
                conn.run("lookup", look, b, ms, flags, byref(out))
            else:
                conn.call_checked(lambda c: _lib.lib.gpuipc_client_set_lookup_owner(c, owner),
                                  "lookup")
                try:
                    conn.run("lookup", look, b, ms, flags, byref(out))
                finally:
                    conn.call(lambda c: _lib.lib.gpuipc_client_set_lookup_owner(c, -1), True)
            try:
                v._attach(out.value or 0, writable)
            except BaseException:
                _lib.lib.gpuipc_view_release(out.value)
                raise
            return v

    # ---- inspecting

    def _fetch(self, fn: Callable[[int, Any], int], op: str) -> List[Info]:
        lst = c_void_p()
        self._conn.call_checked(lambda c: fn(c, byref(lst)), op)
        try:
            n = _lib.lib.gpuipc_list_count(lst)
            return [Info.from_c(_lib.lib.gpuipc_list_get(lst, i)) for i in range(n)]
        finally:
            _lib.lib.gpuipc_list_free(lst)

    def list(self, prefix: Optional[str] = None, *, all: bool = False) -> List[Info]:
        """Registrations in namespace ``prefix`` (all when None), by id.
        ``all=True`` adds those unregistered while readers still hold them
        (``Info.unregistered``), and fills ``Info.holders``."""
        p = _name(prefix) if prefix else None
        flags = _lib.LIST_ALL | _lib.LIST_HOLDERS if all else 0
        return self._fetch(lambda c, out: _lib.lib.gpuipc_list_fetch(c, p, flags, out),
                           "list")

    def stat(self, name: str) -> Info:
        """One registration by name (NotFound if there is none), with its
        lease holders in ``Info.holders``."""
        b = _name(name)
        infos = self._fetch(lambda c, out: _lib.lib.gpuipc_name_stat(c, b, out), "stat")
        if not infos:
            raise error_for(-2, f"no registration named {name}", "stat")
        return infos[0]

    def stats(self) -> Stats:
        """Daemon-wide counters."""
        out = POINTER(_lib.gpuipc_stats)()
        self._conn.call_checked(lambda c: _lib.lib.gpuipc_stats_fetch(c, byref(out)), "stats")
        try:
            s = out.contents
            return Stats(
                server=_lib.cstr(s.server), pid=int(s.pid), protocol=int(s.protocol),
                uptime_ms=int(s.uptime_ms), connections=int(s.connections),
                registrations=int(s.registrations), leases=int(s.leases),
                bytes_host=int(s.bytes_host), requests=int(s.requests), errors=int(s.errors),
                cuda_available=bool(s.cuda_available), cuda_reason=_lib.cstr(s.cuda_reason),
                cuda_driver_version=int(s.cuda_driver_version),
                bytes_cuda_ipc=int(s.bytes_cuda_ipc), bytes_cuda_vmm=int(s.bytes_cuda_vmm),
                bytes_cuda_pool=int(s.bytes_cuda_pool), copies=int(s.copies),
                copied_bytes=int(s.copied_bytes), bytes_batch=int(s.bytes_batch))
        finally:
            _lib.lib.gpuipc_stats_free(out)


def connect(socket: Optional[Union[str, "os.PathLike[str]"]] = None) -> Client:
    """Connects to gpuipcd at ``socket`` (default ``$GPUIPC_SOCKET``, else
    ``/run/gpuipcd/gpuipcd.sock``).  Raises Unreachable when no daemon
    answers.  The client is a context manager."""
    return Client(socket)


# ---- helpers -----------------------------------------------------------------


def explain(obj: Any, *, copy: bool = False, cuda_ipc: bool = False) -> Tuple[str, str]:
    """How :meth:`Client.register` would share the device memory of ``obj``
    (an object with ``__cuda_array_interface__``, a :class:`DeviceBuffer`,
    or an ``(address, nbytes)`` pair), without registering it.

    Returns ``(path, why)``: path is ``"cuda-ipc"`` (a legacy handle at an
    offset), ``"cuda-vmm"`` (VMM chunks exported as POSIX fds),
    ``"cuda-pool"`` (an exportable stream-ordered pool), ``"copy"`` (with
    ``copy=True``, when zero-copy is impossible) or ``"none"``; why is a
    sentence saying why, and what would help.  Needs no daemon.
    """
    if isinstance(obj, DeviceBuffer):
        ptr, nbytes = obj.ptr, obj.nbytes
    elif isinstance(obj, tuple) and len(obj) == 2:
        ptr, nbytes = int(obj[0]), int(obj[1])
    else:
        cai = _get_cai(obj)
        if cai is None:
            raise TypeError("explain() takes device memory: an object with "
                            "__cuda_array_interface__, a DeviceBuffer or (address, nbytes)")
        sh = tuple(int(x) for x in cai["shape"])
        st = cai.get("strides")
        st = tuple(int(x) for x in st) if st is not None else None
        ptr = int(cai["data"][0] or 0)
        nbytes = extent(sh, st, int(cai["typestr"][2:]))
    if nbytes <= 0 or not ptr:
        raise ValueError("empty memory cannot be shared")
    flags = (_lib.REGISTER_COPY if copy else 0) | (_lib.REGISTER_CUDA_IPC if cuda_ipc else 0)
    buf = ctypes.create_string_buffer(1024)
    r = _lib.lib.gpuipc_cuda_explain(ptr, nbytes, flags, buf, len(buf))
    text = buf.value.decode("utf-8", "replace")
    if r < 0:
        return "none", text.split(": ", 1)[-1] if text else _lib.strerror(r)
    path = _lib.PATH_NAMES.get(r, str(r))
    return path, text.split(": ", 1)[1] if ": " in text else text


# Registering many arrays of one layout builds its gpuipc_meta once: the C
# library copies the meta into the request, so one struct serves every call.
_META_CACHE: Dict[Any, _Meta] = {}
_META_CACHE_MAX = 64


def _meta_over(over: Tuple[Any, Optional[Sequence[int]], Optional[Sequence[int]],
                           Optional[Mapping[str, str]]],
               d: Optional[str], sh: Optional[Sequence[int]],
               st: Optional[Sequence[int]]) -> _Meta:
    """The metadata register() sends: the dtype, shape and strides read
    from the object (d, sh, st), each replaced by the caller's (over:
    dtype, shape, strides and user metadata) where given.  A shape given
    without strides means C order."""
    dtype, shape, strides, user = over
    if dtype is not None:
        d = dtype_name(dtype)
    if shape is not None:
        sh = tuple(shape)
        st = None
    if strides is not None:
        st = tuple(strides)
    return _meta_for(d, sh, st, user)


def _meta_for(d: Optional[str], sh: Optional[Sequence[int]], st: Optional[Sequence[int]],
              user: Optional[Mapping[str, str]]) -> _Meta:
    if user:
        return _Meta(d, sh, st, user)
    key = (d, None if sh is None else tuple(sh), None if st is None else tuple(st))
    m = _META_CACHE.get(key)
    if m is None:
        m = _Meta(d, sh, st, None)
        if len(_META_CACHE) >= _META_CACHE_MAX:
            _META_CACHE.clear()
        _META_CACHE[key] = m
    return m


# (ptr, nbytes, dtype name, shape, byte strides or None, stream or None)
_DeviceLayout = Tuple[int, int, str, Tuple[int, ...], Optional[Tuple[int, ...]], Optional[int]]


def _cai_layout(cai: Dict[str, Any]) -> _DeviceLayout:
    """The layout a __cuda_array_interface__ dict describes."""
    if cai.get("mask") is not None:
        raise ValueError("masked arrays cannot be registered")
    typestr = cai["typestr"]
    sh = tuple(int(x) for x in cai["shape"])
    st = cai.get("strides")
    st = tuple(int(x) for x in st) if st is not None else None
    ptr = int(cai["data"][0] or 0)
    return (ptr, extent(sh, st, int(typestr[2:])), typestr_to_dtype(typestr), sh, st,
            cai.get("stream"))


def _batch_flags(ephemeral: bool, copy: bool, cacheable: bool) -> int:
    """register_batch()'s and register_batches()'s flags."""
    return ((_lib.REGISTER_EPHEMERAL if ephemeral else 0) | (_lib.REGISTER_COPY if copy else 0)
            | (_lib.REGISTER_CACHEABLE if cacheable else 0))


def _torch_layout(obj: Any) -> Optional[_DeviceLayout]:
    """The layout of a plain torch CUDA tensor, read from the tensor itself:
    what its __cuda_array_interface__ says (version 2, no stream), without
    building that dict.  None for anything else, which then takes the
    interface path (and its errors)."""
    t = type(obj)
    if t is not _TORCH_TENSOR[0]:
        if t.__name__ != "Tensor" or t.__module__ != "torch":
            return None
        _TORCH_TENSOR[0] = t        # the next tensors' check is one comparison
    if not obj.is_cuda or obj.requires_grad or obj.is_sparse:
        return None
    # Lazily conjugated or negated views are not their memory's values.
    if getattr(obj, "is_conj", bool)() or getattr(obj, "is_neg", bool)():
        return None
    dt = obj.dtype
    known = _TORCH_DTYPES.get(dt)
    if known is None:
        name = str(dt)[6:]          # "torch.float32" -> "float32"
        if name not in _CAI_DTYPES:
            return None
        known = (name, obj.element_size())
        if len(_TORCH_DTYPES) < 64:     # torch's dtypes are a few singletons
            _TORCH_DTYPES[dt] = known
    d, isz = known
    sh = tuple(obj.shape)
    st = None if obj.is_contiguous() else tuple(s * isz for s in obj.stride())
    ptr = obj.data_ptr() if 0 not in sh else 0
    return ptr, extent(sh, st, isz), d, sh, st, None


# [torch.Tensor] once _torch_layout has seen one.
_TORCH_TENSOR: List[Any] = [None]
# The torch dtypes whose __cuda_array_interface__ torch can give.
_CAI_DTYPES = frozenset(("float16", "float32", "float64", "complex64", "complex128",
                         "uint8", "int8", "int16", "int32", "int64", "bool"))
# torch.dtype -> (name, itemsize), filled as _torch_layout meets them: a
# dict lookup instead of str() and element_size() at each register.
_TORCH_DTYPES: Dict[Any, Tuple[str, int]] = {}


def _get_cai(obj: Any) -> Optional[Dict[str, Any]]:
    if isinstance(obj, _Memory) and not obj.is_device:
        return None
    try:
        return obj.__cuda_array_interface__
    except AttributeError:
        return None


def _host_source(obj: Any) -> Tuple[memoryview, str, Tuple[int, ...]]:
    """A C-contiguous byte memoryview of obj's data, its dtype name and shape."""
    if isinstance(obj, _Memory):
        if _np is not None:
            obj = obj.array
        else:
            return obj.buffer, obj.dtype or "uint8", (obj.nbytes,)
    try:
        mv = memoryview(obj)
    except TypeError:
        if _np is None:
            raise TypeError(f"cannot register {type(obj).__name__}: no buffer protocol, "
                            "no __cuda_array_interface__ (and numpy is not installed)") from None
        mv = None
    if _np is not None:
        arr = _np.ascontiguousarray(_np.asarray(mv if mv is not None else obj))
        if arr.dtype.hasobject:
            raise TypeError("object arrays cannot be shared")
        shape = tuple(arr.shape)
        d = typestr_to_dtype(arr.dtype.str)
        return arr.reshape(-1).view(_np.uint8).data, d, shape
    d = format_to_dtype(mv.format)
    shape = tuple(mv.shape or ())
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    return mv.cast("B"), d, shape


_libcuda = None


def _cuda() -> Any:
    """The CUDA driver libgpuipc uses ($GPUIPC_LIBCUDA, else libcuda.so.1)."""
    global _libcuda
    if _libcuda is None:
        path = os.environ.get("GPUIPC_LIBCUDA") or "libcuda.so.1"
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise error_for(-95, f"cannot load the CUDA driver ({path}): {e}",
                            "register") from None
        for fn in ("cuStreamSynchronize", "cuEventSynchronize"):
            getattr(lib, fn).argtypes = [c_void_p]
            getattr(lib, fn).restype = ctypes.c_int
        lib.cuPointerGetAttribute.argtypes = [c_void_p, ctypes.c_int, ctypes.c_uint64]
        lib.cuPointerGetAttribute.restype = ctypes.c_int
        _libcuda = lib
    return _libcuda


def _cuda_stream_sync(stream: int) -> None:
    """cuStreamSynchronize(stream) through the driver libgpuipc uses."""
    res = _cuda().cuStreamSynchronize(c_void_p(stream) if stream else None)
    if res != 0:
        raise error_for(-5, f"cuStreamSynchronize(0x{stream:x}) failed with CUresult {res}",
                        "register")


def _cuda_event_sync(event: int) -> None:
    """cuEventSynchronize(event) through the driver libgpuipc uses."""
    res = _cuda().cuEventSynchronize(c_void_p(event))
    if res != 0:
        raise error_for(-5, f"cuEventSynchronize(0x{event:x}) failed with CUresult {res}",
                        "register")


def _cuda_pointer_device(ptr: int) -> int:
    """The device ordinal that device pointer ptr belongs to."""
    ordinal = c_int(-1)
    res = _cuda().cuPointerGetAttribute(ctypes.addressof(ordinal), 9, int(ptr))
    if res != 0:    # 9: CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        raise error_for(-22, f"0x{ptr:x} is not device memory the CUDA driver knows "
                        f"(CUresult {res})", "register")
    return ordinal.value
