"""ctypes declarations of libgpuipc (client/gpuipc.h), and the loader.

Every function and struct of gpuipc.h is declared here with its exact
prototype; the struct field order matches the header.  Nothing else in the
package calls into the C library except through :data:`lib`.

Lookup order for the shared library:

1. ``$GPUIPC_LIBRARY`` (a path),
2. next to this package: ``libgpuipc.so.1`` in its directory, where the
   platform wheel (``make wheel``) puts it,
3. the build tree: walking up from this package, the first
   ``build/libgpuipc.so.1`` found (never from an installed package),
4. the system: ``ctypes.util.find_library("gpuipc")``, then plain
   ``libgpuipc.so.1`` (the dynamic loader's search path).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, c_char_p, c_int, c_int64, c_size_t, c_uint,
                    c_uint32, c_uint64, c_void_p)
from typing import List, Optional, Tuple

PROTOCOL_VERSION = 1
DEFAULT_SOCKET = "/run/gpuipcd/gpuipcd.sock"

# gpuipc_kind
KIND_HOST = 0
KIND_CUDA_IPC = 1
KIND_CUDA_VMM = 2
KIND_CUDA_POOL = 3
KIND_BATCH = 4
KIND_NAMES = {KIND_HOST: "host", KIND_CUDA_IPC: "cuda-ipc", KIND_CUDA_VMM: "cuda-vmm",
              KIND_CUDA_POOL: "cuda-pool", KIND_BATCH: "batch"}

# flags of gpuipc_register_*()
REGISTER_EPHEMERAL = 0x1
REGISTER_CUDA_IPC = 0x2
REGISTER_SHARED_WRITE = 0x4     # host only: no write seal, writable lookups work
REGISTER_COPY = 0x8             # device: copy into cuda-vmm memory when zero-copy is impossible
REGISTER_CACHEABLE = 0x10       # kept mapped until wait_unmapped (cuda-ipc/pool: freed after it)
# gpuipc_path (gpuipc_cuda_explain)
PATH_NAMES = {0: "none", 1: "cuda-ipc", 2: "cuda-vmm", 3: "cuda-pool", 4: "copy"}
# flags of gpuipc_view_lookup()
LOOKUP_WRITABLE = 0x1
LOOKUP_NO_SYNC = 0x2
LOOKUP_COPY_TO_DEVICE = 0x4     # gpuipc_view_lookup_device()
# gpuipc_info.flags
INFO_EPHEMERAL = 0x1
INFO_UNREGISTERED = 0x2
INFO_OWNER_GONE = 0x4
# gpuipc_list_fetch()
LIST_ALL = 0x1
LIST_HOLDERS = 0x2


class gpuipc_meta(Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),      # sizeof(gpuipc_meta), set by __init__
        ("dtype", c_char_p),
        ("ndim", c_uint32),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("n_user", c_uint32),
        ("user_keys", POINTER(c_char_p)),
        ("user_values", POINTER(c_char_p)),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.size = ctypes.sizeof(gpuipc_meta)


class gpuipc_holder(Structure):
    _fields_ = [
        ("lease", c_uint64),
        ("since_ms", c_uint64),
        ("pid", c_uint32),
        ("uid", c_uint32),
        ("exe", c_char_p),
    ]


class gpuipc_info(Structure):
    _fields_ = [
        ("id", c_uint64),
        ("name", c_char_p),
        ("kind", c_int),                # enum gpuipc_kind
        ("size", c_uint64),
        ("offset", c_uint64),
        ("device", c_char_p),
        ("dtype", c_char_p),
        ("ndim", c_uint32),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("n_user", c_uint32),
        ("user_keys", POINTER(c_char_p)),
        ("user_values", POINTER(c_char_p)),
        ("owner_pid", c_uint32),
        ("owner_uid", c_uint32),
        ("owner_gid", c_uint32),
        ("leases", c_uint32),
        ("flags", c_uint32),
        ("created_ms", c_uint64),
        ("alloc_id", c_uint64),
        ("alloc_size", c_uint64),
        ("alloc_regs", c_uint32),
        ("buffer_id", c_uint64),
        ("has_event", c_int),
        ("owner_exe", c_char_p),
        ("access_public", c_int),
        ("n_access_uids", c_uint32),
        ("access_uids", POINTER(c_uint32)),
        ("n_access_gids", c_uint32),
        ("access_gids", POINTER(c_uint32)),
        ("access_group", c_char_p),
        ("n_chunks", c_uint32),
        ("copied", c_char_p),
        ("expires_ms", c_uint64),
        ("n_holders", c_uint32),         # gpuipc_info_holder()
        ("batch", c_void_p),             # gpuipc_info_batch_*()
    ]


class gpuipc_event(Structure):
    _fields_ = [
        ("type", c_char_p),
        ("id", c_uint64),
        ("name", c_char_p),
        ("kind", c_int),                # enum gpuipc_kind
        ("size", c_uint64),
        ("leases", c_uint32),
        ("lease", c_uint64),
        ("pid", c_uint32),
        ("uid", c_uint32),
        ("time_ms", c_uint64),
        ("dropped", c_uint64),
    ]


class gpuipc_cuda_device(Structure):
    _fields_ = [
        ("ordinal", c_int),
        ("uuid", c_char_p),
        ("vmm_posix_fd", c_int),
        ("legacy_ipc", c_int),
    ]


class gpuipc_cuda_status(Structure):
    _fields_ = [
        ("available", c_int),
        ("reason", c_char_p),
        ("driver_version", c_uint32),
        ("n_devices", c_uint32),         # gpuipc_cuda_status_device()
    ]


class gpuipc_stats(Structure):
    _fields_ = [
        ("server", c_char_p),
        ("pid", c_uint32),
        ("protocol", c_uint32),
        ("uptime_ms", c_uint64),
        ("connections", c_uint64),
        ("registrations", c_uint64),
        ("leases", c_uint64),
        ("bytes_host", c_uint64),
        ("requests", c_uint64),
        ("errors", c_uint64),
        ("cuda_available", c_int),
        ("cuda_reason", c_char_p),
        ("cuda_driver_version", c_uint32),
        ("bytes_cuda_ipc", c_uint64),
        ("bytes_cuda_vmm", c_uint64),
        ("bytes_cuda_pool", c_uint64),
        ("copies", c_uint64),
        ("copied_bytes", c_uint64),
        ("bytes_batch", c_uint64),
    ]


class gpuipc_batch_part(Structure):
    _fields_ = [
        ("kind", c_int),
        ("size", c_uint64),
        ("device", c_char_p),
    ]


class gpuipc_batch_node(Structure):
    _fields_ = [
        ("index", c_uint32),
        ("parent", c_uint32),
        ("name", c_char_p),
        ("format", c_char_p),
        ("flags", c_int64),
        ("length", c_int64),
        ("null_count", c_int64),
        ("offset", c_int64),
        ("n_children", c_uint32),
        ("n_buffers", c_uint32),
        ("buffers", ctypes.c_int32 * 3),
        ("n_meta", c_uint32),
        ("meta_keys", POINTER(c_char_p)),
        ("meta_values", POINTER(c_char_p)),
    ]


class gpuipc_batch_values(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("format", c_char_p),
        ("node", c_uint32),
        ("width", c_uint32),
        ("length", c_int64),
        ("null_count", c_int64),
        ("data", c_void_p),
        ("map", c_void_p),
        ("map_size", c_uint64),
        ("device", ctypes.c_int32),
        ("part", ctypes.c_int32),
    ]


# Opaque handles are plain void pointers (c_void_p); None is NULL.
_client_p = c_void_p
_hostbuf_p = c_void_p
_view_p = c_void_p
_list_p = c_void_p
_cudabuf_p = c_void_p

# name: (restype, argtypes)
_PROTOTYPES = {
    # errors and versions
    "gpuipc_strerror": (c_char_p, [c_int]),
    "gpuipc_errmsg": (c_char_p, [_client_p]),
    "gpuipc_version": (ctypes.c_uint, []),
    "gpuipc_version_string": (c_char_p, []),
    "gpuipc_free": (None, [c_void_p]),
    # connection
    "gpuipc_client_default_socket": (c_char_p, []),
    "gpuipc_client_connect": (c_int, [c_char_p, POINTER(_client_p)]),
    "gpuipc_client_free": (None, [_client_p]),
    "gpuipc_client_set_access": (c_int, [_client_p, c_void_p]),
    "gpuipc_client_ping": (c_int, [_client_p]),
    "gpuipc_client_set_reconnect": (c_int, [_client_p, c_int]),
    "gpuipc_client_set_lookup_owner": (c_int, [_client_p, ctypes.c_longlong]),
    "gpuipc_client_next_lost": (c_int, [_client_p, c_char_p, c_size_t, POINTER(ctypes.c_uint64),
                                 POINTER(c_int)]),
    # host buffers
    "gpuipc_hostbuf_new": (c_int, [c_size_t, POINTER(_hostbuf_p)]),
    "gpuipc_hostbuf_data": (c_void_p, [_hostbuf_p]),
    "gpuipc_hostbuf_size": (c_size_t, [_hostbuf_p]),
    "gpuipc_hostbuf_fd": (c_int, [_hostbuf_p]),
    "gpuipc_hostbuf_free": (None, [_hostbuf_p]),
    # registering
    "gpuipc_hostbuf_register": (c_int, [_client_p, c_char_p, _hostbuf_p, POINTER(gpuipc_meta),
                                     c_uint, POINTER(c_uint64)]),
    "gpuipc_fd_register": (c_int, [_client_p, c_char_p, c_int, c_uint64, c_uint64,
                                   POINTER(gpuipc_meta), c_uint, POINTER(c_uint64)]),
    "gpuipc_name_unregister": (c_int, [_client_p, c_char_p]),
    "gpuipc_prefix_unregister": (c_int, [_client_p, c_char_p, POINTER(c_uint64),
                                         POINTER(c_uint64)]),
    "gpuipc_client_set_ttl": (c_int, [_client_p, c_uint64]),
    "gpuipc_reg_wait_released": (c_int, [_client_p, c_uint64, c_int]),
    # consuming
    "gpuipc_view_lookup": (c_int, [_client_p, c_char_p, c_int, c_uint, POINTER(_view_p)]),
    "gpuipc_view_data": (c_void_p, [_view_p]),
    "gpuipc_view_size": (c_size_t, [_view_p]),
    "gpuipc_view_info": (POINTER(gpuipc_info), [_view_p]),
    "gpuipc_view_release": (c_int, [_view_p]),
    # CUDA buffers
    "gpuipc_cudabuf_new": (c_int, [c_int, c_size_t, POINTER(_cudabuf_p)]),
    "gpuipc_cudabuf_ptr": (c_uint64, [_cudabuf_p]),
    "gpuipc_cudabuf_size": (c_size_t, [_cudabuf_p]),
    "gpuipc_cudabuf_free": (None, [_cudabuf_p]),
    "gpuipc_cuda_register": (c_int, [_client_p, c_char_p, c_uint64, c_uint64,
                                     POINTER(gpuipc_meta), c_void_p, c_uint,
                                     POINTER(c_uint64)]),
    "gpuipc_name_adopt": (c_int, [_client_p, c_char_p, POINTER(c_uint32)]),
    "gpuipc_cuda_explain": (c_int, [c_uint64, c_uint64, c_uint, c_char_p, c_size_t]),
    "gpuipc_cuda_path_name": (c_char_p, [c_int]),
    "gpuipc_reg_wait_unmapped": (c_int, [_client_p, c_uint64, c_int]),
    "gpuipc_cache_set_limits": (c_int, [c_uint64, c_uint]),
    "gpuipc_cache_trim": (c_int, [_client_p]),
    "gpuipc_view_lookup_device": (c_int, [_client_p, c_char_p, c_int, c_uint, c_int,
                                     POINTER(_view_p)]),
    "gpuipc_view_copied": (c_int, [_view_p]),
    "gpuipc_view_device": (c_int, [_view_p]),
    "gpuipc_view_wait_stream": (c_int, [_view_p, c_void_p]),
    "gpuipc_view_release_after": (c_int, [_view_p, c_void_p]),
    "gpuipc_view_dlpack": (c_int, [_view_p, c_void_p, c_void_p, POINTER(c_void_p)]),
    # inspecting
    "gpuipc_list_fetch": (c_int, [_client_p, c_char_p, c_uint, POINTER(_list_p)]),
    "gpuipc_list_count": (c_size_t, [_list_p]),
    "gpuipc_list_get": (POINTER(gpuipc_info), [_list_p, c_size_t]),
    "gpuipc_list_free": (None, [_list_p]),
    "gpuipc_name_stat": (c_int, [_client_p, c_char_p, POINTER(_list_p)]),
    "gpuipc_stats_fetch": (c_int, [_client_p, POINTER(POINTER(gpuipc_stats))]),
    "gpuipc_stats_free": (None, [POINTER(gpuipc_stats)]),
    # operating
    "gpuipc_event_watch": (c_int, [_client_p, c_char_p]),
    "gpuipc_event_next": (c_int, [_client_p, c_int, POINTER(POINTER(gpuipc_event))]),
    "gpuipc_event_free": (None, [POINTER(gpuipc_event)]),
    "gpuipc_name_revoke": (c_int, [_client_p, c_char_p, POINTER(c_uint32)]),
    # char ** that the caller free()s: kept as a void pointer to free it.
    "gpuipc_metrics_fetch": (c_int, [_client_p, POINTER(c_void_p)]),
    "gpuipc_cuda_status_get": (c_int, [POINTER(POINTER(gpuipc_cuda_status))]),
    "gpuipc_cuda_status_free": (None, [POINTER(gpuipc_cuda_status)]),
    "gpuipc_cuda_status_device": (POINTER(gpuipc_cuda_device),
                                  [POINTER(gpuipc_cuda_status), ctypes.c_size_t]),
    "gpuipc_cuda_status_peer": (c_int, [POINTER(gpuipc_cuda_status), ctypes.c_size_t,
                                        ctypes.c_size_t]),
    "gpuipc_info_holder": (POINTER(gpuipc_holder), [POINTER(gpuipc_info), ctypes.c_size_t]),
    # batches: Arrow structs travel as plain pointers
    "gpuipc_batch_new": (c_int, [POINTER(c_void_p)]),
    "gpuipc_batch_free": (None, [c_void_p]),
    "gpuipc_batch_errmsg": (c_char_p, [c_void_p]),
    "gpuipc_batch_add_column": (c_int, [c_void_p, c_void_p, c_void_p, c_int]),
    "gpuipc_batch_add_buffer": (c_int, [c_void_p, c_char_p, c_char_p, ctypes.c_int64,
                                        ctypes.c_int64, c_void_p, c_void_p, c_int]),
    "gpuipc_batch_add_buffers": (c_int, [c_void_p, ctypes.c_size_t, POINTER(c_char_p),
                                         POINTER(c_char_p), POINTER(ctypes.c_int64),
                                         POINTER(c_void_p), c_int]),
    "gpuipc_batch_add_record_batch": (c_int, [c_void_p, c_void_p, c_void_p]),
    "gpuipc_batch_add_device_record_batch": (c_int, [c_void_p, c_void_p, c_void_p]),
    "gpuipc_batch_set_metadata": (c_int, [c_void_p, c_uint32, POINTER(c_char_p),
                                          POINTER(c_char_p)]),
    "gpuipc_batch_set_event": (c_int, [c_void_p, c_void_p, c_int]),
    "gpuipc_batch_register": (c_int, [_client_p, c_char_p, c_void_p, c_uint,
                                      POINTER(c_uint64)]),
    "gpuipc_batch_view_lookup": (c_int, [_client_p, c_char_p, c_int, c_uint,
                                         POINTER(c_void_p)]),
    "gpuipc_batch_view_rows": (c_uint64, [c_void_p]),
    "gpuipc_batch_view_columns": (ctypes.c_size_t, [c_void_p]),
    "gpuipc_batch_view_column_name": (c_char_p, [c_void_p, ctypes.c_size_t]),
    "gpuipc_batch_view_column_index": (c_int, [c_void_p, c_char_p]),
    "gpuipc_batch_view_buffer": (c_int, [c_void_p, ctypes.c_size_t, c_uint, POINTER(c_void_p),
                                         POINTER(c_uint64), POINTER(c_int)]),
    "gpuipc_batch_view_node_buffer": (c_int, [c_void_p, ctypes.c_size_t, c_uint,
                                              POINTER(c_void_p), POINTER(c_uint64),
                                              POINTER(c_int)]),
    "gpuipc_batch_view_part_mapping": (c_int, [c_void_p, ctypes.c_size_t, POINTER(c_void_p),
                                               POINTER(c_uint64)]),
    "gpuipc_batch_view_values": (c_int, [c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                         POINTER(gpuipc_batch_values)]),
    "gpuipc_batch_view_info": (POINTER(gpuipc_info), [c_void_p]),
    "gpuipc_batch_view_export": (c_int, [c_void_p, c_int, c_void_p, c_void_p]),
    "gpuipc_batch_view_export_device": (c_int, [c_void_p, c_int, c_void_p, c_void_p]),
    "gpuipc_batch_view_release": (c_int, [c_void_p]),
    "gpuipc_info_batch_parts": (ctypes.c_size_t, [POINTER(gpuipc_info)]),
    "gpuipc_info_batch_part": (POINTER(gpuipc_batch_part), [POINTER(gpuipc_info),
                                                            ctypes.c_size_t]),
    "gpuipc_info_batch_rows": (c_uint64, [POINTER(gpuipc_info)]),
    "gpuipc_info_batch_nodes": (ctypes.c_size_t, [POINTER(gpuipc_info)]),
    "gpuipc_info_batch_node": (POINTER(gpuipc_batch_node), [POINTER(gpuipc_info),
                                                            ctypes.c_size_t]),
    "gpuipc_info_batch_columns": (ctypes.c_size_t, [POINTER(gpuipc_info)]),
    "gpuipc_info_batch_column": (POINTER(gpuipc_batch_node), [POINTER(gpuipc_info),
                                                              ctypes.c_size_t]),
}


def _candidates() -> List[str]:
    out: List[str] = []
    env = os.environ.get("GPUIPC_LIBRARY")
    if env:
        return [env]
    d = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(d, "libgpuipc.so.1")
    if os.path.exists(bundled):
        out.append(bundled)
    # An installed package uses the installed library, never a build tree
    # that happens to lie above it.
    installed = any(part in ("site-packages", "dist-packages") for part in d.split(os.sep))
    while not installed:
        p = os.path.join(d, "build", "libgpuipc.so.1")
        if os.path.exists(p):
            out.append(p)
            break
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    found = ctypes.util.find_library("gpuipc")
    if found:
        out.append(found)
    out.append("libgpuipc.so.1")
    return out


def _load() -> Tuple[ctypes.CDLL, str]:
    errors = []
    for path in _candidates():
        try:
            dll = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(dll, name)
            fn.restype = restype
            fn.argtypes = argtypes
        return dll, path
    raise ImportError("gpuipc: cannot load libgpuipc.so.1 (set GPUIPC_LIBRARY to its path): "
                      + "; ".join(errors))


lib, library_path = _load()


def strerror(code: int) -> str:
    """Text of a negative errno as libgpuipc describes it."""
    return (lib.gpuipc_strerror(code) or b"").decode("utf-8", "replace")


def version() -> str:
    """libgpuipc's version, e.g. ``"0.1.0"``."""
    return lib.gpuipc_version_string().decode()


def default_socket() -> str:
    """The socket the library uses by default: ``$GPUIPC_SOCKET`` or the system one."""
    return lib.gpuipc_client_default_socket().decode()


def cstr(s: Optional[bytes]) -> str:
    return s.decode("utf-8", "replace") if s else ""
