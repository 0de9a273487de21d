/* gpuipc.h: client library for gpuipcd, the GPU buffer handoff broker.
 *
 * Conventions
 *  - Every function that can fail returns 0 (or a non-negative value where
 *    stated) on success and a negative errno on failure; gpuipc_strerror()
 *    describes it.  Errors reported by the daemon keep their text:
 *    gpuipc_errmsg() returns it until the next call on the same client.
 *  - Output parameters are named ret_* and come last; they are written only
 *    on success.
 *  - Handles are opaque.  Each *_free() and gpuipc_view_release() accepts
 *    NULL.  Strings and arrays inside a returned object belong to it and
 *    stay valid until it is freed.
 *  - A gpuipc_client is not thread-safe: use one per thread, or serialise.
 *    Calls block; none installs signal handlers, and the library never logs.
 *  - Timeouts are in milliseconds: 0 means do not wait, a negative value
 *    means wait as long as the daemon allows (one hour).
 *  - Names are gpuipc_<object>_<verb>: the object is what the call makes or
 *    acts on (gpuipc_view_lookup() makes a view); a client argument, when
 *    there is one, comes first.
 *  - Structs the caller fills (gpuipc_meta, gpuipc_access) start with their
 *    size: initialise them with GPUIPC_META_INIT / GPUIPC_ACCESS_INIT so
 *    that later versions can append fields.  Structs the library returns
 *    are read through the pointers it hands out, never copied or indexed
 *    as arrays; fields may be appended to them.
 *  - Plain memory the library allocates for the caller is freed with
 *    gpuipc_free(); objects have their own *_free().
 *  - libgpuipc(3) has the longer explanations.
 */
#ifndef GPUIPC_H
#define GPUIPC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define GPUIPC_EXPORT __attribute__((visibility("default")))
#else
#define GPUIPC_EXPORT
#endif

/* The library's version; gpuipc_version() is the one linked at run time. */
#define GPUIPC_VERSION_MAJOR 0
#define GPUIPC_VERSION_MINOR 1
#define GPUIPC_VERSION_PATCH 0
#define GPUIPC_VERSION_HEX \
        ((GPUIPC_VERSION_MAJOR << 16) | (GPUIPC_VERSION_MINOR << 8) | GPUIPC_VERSION_PATCH)

#define GPUIPC_PROTOCOL_VERSION 1
/* Socket used when neither an explicit path nor $GPUIPC_SOCKET is given. */
#define GPUIPC_DEFAULT_SOCKET "/run/gpuipcd/gpuipcd.sock"

typedef struct gpuipc_client gpuipc_client;
typedef struct gpuipc_hostbuf gpuipc_hostbuf;
typedef struct gpuipc_view gpuipc_view;
typedef struct gpuipc_list gpuipc_list;

typedef enum gpuipc_kind {
        GPUIPC_KIND_HOST = 0,       /* memfd shared memory */
        GPUIPC_KIND_CUDA_IPC = 1,   /* legacy CUDA IPC handle, producer-bound */
        GPUIPC_KIND_CUDA_VMM = 2,   /* CUDA VMM memory shared as POSIX fds */
        GPUIPC_KIND_CUDA_POOL = 3,  /* a stream-ordered pool's pointer, producer-bound */
        GPUIPC_KIND_BATCH = 4,      /* a table of Arrow columns: see "batches" below */
} gpuipc_kind;

typedef struct gpuipc_batch_desc gpuipc_batch_desc;

/* What a buffer holds.  Every pointer is borrowed for the duration of the
 * call.  Start from GPUIPC_META_INIT and fill what you know. */
typedef struct gpuipc_meta {
        size_t size;                    /* sizeof(gpuipc_meta) */
        const char *dtype;              /* e.g. "float32"; NULL for none */
        uint32_t ndim;                  /* entries in shape and strides */
        const int64_t *shape;           /* NULL when ndim is 0 */
        const int64_t *strides;         /* in bytes; NULL for C order */
        uint32_t n_user;                /* free-form string pairs */
        const char *const *user_keys;
        const char *const *user_values;
} gpuipc_meta;
#define GPUIPC_META_INIT { .size = sizeof(gpuipc_meta) }

/* Flags of gpuipc_register_*(). */
#define GPUIPC_REGISTER_EPHEMERAL 0x1u  /* unregister when this connection ends */
/* Host buffers only: leave the memfd writable so that a
 * GPUIPC_LOOKUP_WRITABLE lookup (owner's uid, root) may map it read-write.
 * Without it the library seals the memfd with F_SEAL_FUTURE_WRITE: the
 * producer's own mappings stay writable, nothing else can write. */
#define GPUIPC_REGISTER_SHARED_WRITE 0x4u

/* Flags of gpuipc_cuda_register(). */
#define GPUIPC_REGISTER_CUDA_IPC  0x2u  /* use a legacy IPC handle even for VMM memory */
/* Copy memory that cannot be shared in place (the default pool, VMM memory
 * without a POSIX fd handle type, ...) into cuda-vmm memory the daemon
 * holds; gpuipc_info.copied says why. */
#define GPUIPC_REGISTER_COPY      0x8u
/* cuda-ipc, cuda-pool: the producer frees the allocation only after
 * gpuipc_reg_wait_unmapped(), so consumers may keep it mapped after their
 * views (see "The mapping cache" in libgpuipc(3)).  cuda-vmm: consumers
 * keep it mapped over the producer's unregister and register again, until
 * gpuipc_reg_wait_unmapped() or the end of c; freeing it before is safe,
 * but the memory lives on in the consumers until then. */
#define GPUIPC_REGISTER_CACHEABLE 0x10u

/* Flags of gpuipc_view_lookup(). */
#define GPUIPC_LOOKUP_WRITABLE 0x1u     /* map read-write (default read-only); host
                                         * buffers registered with
                                         * GPUIPC_REGISTER_SHARED_WRITE only
                                         * (else -EPERM) */
#define GPUIPC_LOOKUP_NO_SYNC  0x2u     /* do not wait for the producer's event;
                                         * use gpuipc_view_wait_stream() */
#define GPUIPC_LOOKUP_COPY_TO_DEVICE 0x4u /* gpuipc_view_lookup_device(): copy when the
                                         * device cannot reach the buffer */

/* Flags of gpuipc_info.flags. */
#define GPUIPC_INFO_EPHEMERAL    0x1u
#define GPUIPC_INFO_UNREGISTERED 0x2u   /* gone from the namespace, still leased */
#define GPUIPC_INFO_OWNER_GONE   0x4u   /* the registering connection has ended */

/* One lease on a registration: who holds it (gpuipc_info_holder()). */
typedef struct gpuipc_holder {
        uint64_t lease;                 /* the lease id */
        uint64_t since_ms;              /* Unix time it was taken, ms (a lease kept
                                         * over a daemon restart: the restart's) */
        uint32_t pid, uid;              /* the holding process */
        const char *exe;                /* its executable, or "" when unknown */
} gpuipc_holder;

/* A registration as the daemon describes it.  Owned by the object it was
 * obtained from (a view, a list or gpuipc_name_stat()); never free it directly.
 * Fields may be appended in later versions; the struct is never allocated
 * by callers. */
typedef struct gpuipc_info {
        uint64_t id;                    /* unique for the daemon's lifetime */
        const char *name;
        gpuipc_kind kind;
        uint64_t size;                  /* bytes of the buffer */
        uint64_t offset;                /* where it starts in its allocation */
        const char *device;             /* device UUID; "" for host buffers */
        const char *dtype;              /* "" when unset */
        uint32_t ndim;
        const int64_t *shape;           /* ndim entries, NULL when ndim is 0 */
        const int64_t *strides;         /* ndim entries, or NULL */
        uint32_t n_user;
        const char *const *user_keys;
        const char *const *user_values;
        uint32_t owner_pid, owner_uid, owner_gid;
        uint32_t leases;                /* leases currently held, all clients */
        uint32_t flags;                 /* GPUIPC_INFO_* */
        uint64_t created_ms;            /* Unix time of registration, ms */
        /* CUDA kinds only (0 otherwise): */
        uint64_t alloc_id;              /* the daemon's allocation entry */
        uint64_t alloc_size;            /* bytes of the whole allocation */
        uint32_t alloc_regs;            /* registrations sharing it */
        uint64_t buffer_id;             /* cuda-ipc, cuda-pool: the driver's buffer id */
        int has_event;                  /* the producer attached an IPC event */
        /* The registering process's executable, as the daemon read it when
         * that process connected; "" when it could not. */
        const char *owner_exe;
        /* The access rule (see docs/protocol.md, "Access control"): who
         * besides the owner's uid and root may read it.  Owner only when
         * access_public is 0 and the lists are empty. */
        int access_public;              /* every peer may read it */
        uint32_t n_access_uids;
        const uint32_t *access_uids;    /* n_access_uids entries, or NULL */
        uint32_t n_access_gids;
        const uint32_t *access_gids;    /* n_access_gids entries, or NULL;
                                         * the group's gid is not repeated here */
        const char *access_group;       /* the group named at register time, or "" */
        /* cuda-vmm: the VMM chunks it spans (1 unless it crosses the chunks
         * of, e.g., PyTorch's expandable segments), and alloc_size is theirs
         * in all; 0 for other kinds. */
        uint32_t n_chunks;
        /* Why the producer's library copied the buffer into cuda-vmm
         * memory at register time (GPUIPC_REGISTER_COPY), or "". */
        const char *copied;
        /* Unix time, ms, at which the daemon unregisters it (a TTL, see
         * gpuipc_client_set_ttl()); 0 when it has none. */
        uint64_t expires_ms;
        /* Lease holders listed (gpuipc_info_holder()), newest first: by
         * gpuipc_name_stat() and by gpuipc_list_fetch() with
         * GPUIPC_LIST_HOLDERS, else 0.  At most 32; leases counts them all. */
        uint32_t n_holders;
        /* GPUIPC_KIND_BATCH: its parts and columns, read with the
         * gpuipc_info_batch_*() calls; NULL for the other kinds.  A batch's
         * schema metadata is n_user, user_keys and user_values; size is the
         * sum of its parts' sizes, and copied says when the library copied
         * host memory that lay outside any gpuipc_hostbuf. */
        const gpuipc_batch_desc *batch;
} gpuipc_info;

/* Holder i (< info->n_holders) of info, owned by info; NULL past the end. */
GPUIPC_EXPORT const gpuipc_holder *gpuipc_info_holder(const gpuipc_info *info, size_t i);

/* Daemon-wide counters, from gpuipc_stats_fetch(). */
typedef struct gpuipc_stats {
        const char *server;             /* e.g. "gpuipcd 0.1.0" */
        uint32_t pid;
        uint32_t protocol;
        uint64_t uptime_ms;
        uint64_t connections;
        uint64_t registrations;         /* live and unregistered-but-leased */
        uint64_t leases;
        uint64_t bytes_host;            /* bytes of host buffers held */
        uint64_t requests;              /* requests served since start */
        uint64_t errors;                /* of which answered with an error */
        int cuda_available;             /* the daemon can use a CUDA driver */
        const char *cuda_reason;        /* why not, or "" */
        uint32_t cuda_driver_version;   /* e.g. 13000; 0 when unavailable */
        uint64_t bytes_cuda_ipc;        /* bytes registered, by kind */
        uint64_t bytes_cuda_vmm;
        uint64_t bytes_cuda_pool;
        uint64_t copies;                /* registrations made with GPUIPC_REGISTER_COPY's copy */
        uint64_t copied_bytes;
        uint64_t bytes_batch;           /* bytes of batches (the sums of their parts) */
} gpuipc_stats;

/* ---- errors and versions ----------------------------------------------- */

/* Text for a negative errno returned by this library.  Never NULL. */
GPUIPC_EXPORT const char *gpuipc_strerror(int err);
/* The daemon's message for the last failed call on c, or a generic text
 * when the failure was local.  Valid until the next call on c.  With c
 * NULL: why the last gpuipc_client_connect() of this thread failed (it names the
 * socket), valid until that thread's next gpuipc_client_connect(). */
GPUIPC_EXPORT const char *gpuipc_errmsg(const gpuipc_client *c);
/* The linked library's version: GPUIPC_VERSION_HEX's form, and e.g. "0.1.0". */
GPUIPC_EXPORT unsigned int gpuipc_version(void);
GPUIPC_EXPORT const char *gpuipc_version_string(void);
/* Frees plain memory the library allocated for the caller (the text of
 * gpuipc_metrics_fetch()).  NULL is fine. */
GPUIPC_EXPORT void gpuipc_free(void *p);

/* ---- connection -------------------------------------------------------- */

/* The socket path the library would use: $GPUIPC_SOCKET when set and not
 * empty, else GPUIPC_DEFAULT_SOCKET.  Static storage. */
GPUIPC_EXPORT const char *gpuipc_client_default_socket(void);

/* Connects to the daemon at path (NULL: gpuipc_client_default_socket())
 * after checking who listens (SO_PEERCRED), and performs the hello.
 * -ENOENT/-ECONNREFUSED: no daemon there; -EPERM: an unexpected listener.
 * Free *ret_client with gpuipc_client_free(). */
GPUIPC_EXPORT int gpuipc_client_connect(const char *path, gpuipc_client **ret_client);

/* Closes the connection: the daemon drops its leases and ephemeral
 * registrations.  Open views stay mapped until gpuipc_view_release(). */
GPUIPC_EXPORT void gpuipc_client_free(gpuipc_client *c);

/* How long (ms) c tries to reconnect by itself when the daemon goes away
 * (default 10000 or $GPUIPC_RECONNECT_MS; 0: never, calls then fail with
 * -ENOTCONN).  It resumes its session or registers its buffers again. */
GPUIPC_EXPORT int gpuipc_client_set_reconnect(gpuipc_client *c, int timeout_ms);

/* After a reconnect to a daemon that kept no state: 1 and the oldest
 * registration c could not make again (its name in buf, truncated to len;
 * the id the caller knew; -EEXIST when another process took the name), or
 * 0 when none is left.  buf, ret_id and ret_err may be NULL. */
GPUIPC_EXPORT int gpuipc_client_next_lost(gpuipc_client *c, char *buf, size_t len, uint64_t *ret_id,
                                   int *ret_err);

/* One round trip; 0 when the daemon answered. */
GPUIPC_EXPORT int gpuipc_client_ping(gpuipc_client *c);

/* ---- host buffers (producer side) -------------------------------------- */

/* Creates a size-byte shared-memory buffer (a memfd sealed against
 * shrinking and growing), mapped read-write, zero-filled.  The caller
 * frees it with gpuipc_hostbuf_free(). */
GPUIPC_EXPORT int gpuipc_hostbuf_new(size_t size, gpuipc_hostbuf **ret_buf);
GPUIPC_EXPORT void *gpuipc_hostbuf_data(const gpuipc_hostbuf *b);
GPUIPC_EXPORT size_t gpuipc_hostbuf_size(const gpuipc_hostbuf *b);
/* The memfd; owned by b, closed by gpuipc_hostbuf_free(). */
GPUIPC_EXPORT int gpuipc_hostbuf_fd(const gpuipc_hostbuf *b);
/* Unmaps and closes the producer's copy.  A registered buffer lives on in
 * the daemon until it is unregistered and its last lease is released. */
GPUIPC_EXPORT void gpuipc_hostbuf_free(gpuipc_hostbuf *b);

/* ---- registering -------------------------------------------------------- */

/* Registers all of b under name ("ns/sub/name").  meta may be NULL.  The
 * daemon keeps its own reference to the memory.  Unless flags has
 * GPUIPC_REGISTER_SHARED_WRITE the buffer is sealed against new writers:
 * b's own mapping stays writable, consumers can only read.  On success *ret_id (may be
 * NULL) is the registration id, used by gpuipc_reg_wait_released(). */
GPUIPC_EXPORT int gpuipc_hostbuf_register(gpuipc_client *c, const char *name,
                                       const gpuipc_hostbuf *b, const gpuipc_meta *meta,
                                       unsigned flags, uint64_t *ret_id);

/* Registers size bytes at offset of an existing memfd, which stays the
 * caller's.  The library seals it first (size fixed, no new writers unless
 * GPUIPC_REGISTER_SHARED_WRITE, no further seals).  -EBADF: not a memfd;
 * -EINVAL: the range exceeds it; -EPERM: it cannot take a seal it needs. */
GPUIPC_EXPORT int gpuipc_fd_register(gpuipc_client *c, const char *name, int fd,
                                     uint64_t offset, uint64_t size, const gpuipc_meta *meta,
                                     unsigned flags, uint64_t *ret_id);

/* Removes name from the namespace.  Consumers that hold a lease keep their
 * mapping; the memory is freed when the last lease is released.  Allowed to
 * the registering connection and to processes of the owner's uid or root. */
GPUIPC_EXPORT int gpuipc_name_unregister(gpuipc_client *c, const char *name);

/* Removes every live registration in namespace prefix (not empty) that
 * this client may unregister, as gpuipc_name_unregister() would, in one
 * request.  *ret_removed (may be NULL) is how many went; *ret_skipped (may
 * be NULL) how many it could see but was not allowed to remove. */
GPUIPC_EXPORT int gpuipc_prefix_unregister(gpuipc_client *c, const char *prefix,
                                           uint64_t *ret_removed, uint64_t *ret_skipped);

/* A lifetime for c's later registrations: the daemon unregisters each
 * ttl_ms after registering it (0, the default: none; -EINVAL above ten
 * years).  Leases keep their buffers until released. */
GPUIPC_EXPORT int gpuipc_client_set_ttl(gpuipc_client *c, uint64_t ttl_ms);

/* Waits until registration id (registered on this connection) has had a
 * lease and its last lease was released: the consumers are done with it.
 * For CUDA buffers it also waits for the events that the consumers released
 * with (gpuipc_view_release_after).  -ETIMEDOUT after timeout_ms.  A
 * release that happened before this call counts. */
GPUIPC_EXPORT int gpuipc_reg_wait_released(gpuipc_client *c, uint64_t id, int timeout_ms);

/* ---- consuming ---------------------------------------------------------- */

/* Looks name up and maps it, taking a lease that keeps the buffer alive.
 * With timeout_ms != 0, waits for name to be registered.  -ENOENT when it
 * does not exist (and timeout_ms is 0), -ETIMEDOUT when the wait expired.
 * Within one process a buffer is mapped once and shared by its views.  The
 * caller frees *ret_view with gpuipc_view_release(). */
GPUIPC_EXPORT int gpuipc_view_lookup(gpuipc_client *c, const char *name, int timeout_ms,
                                unsigned flags, gpuipc_view **ret_view);
/* Later lookups on c accept only a registration whose owner has this uid;
 * another is treated as absent.  -1 (the default) accepts any owner;
 * -EINVAL for other negative values and uids of 2^32-1 and above. */
GPUIPC_EXPORT int gpuipc_client_set_lookup_owner(gpuipc_client *c, long long uid);
/* Start of the buffer in this process, and its size in bytes. */
GPUIPC_EXPORT void *gpuipc_view_data(const gpuipc_view *v);
GPUIPC_EXPORT size_t gpuipc_view_size(const gpuipc_view *v);
/* The registration, as it was at lookup time.  Owned by v. */
GPUIPC_EXPORT const gpuipc_info *gpuipc_view_info(const gpuipc_view *v);
/* Releases the lease and frees v; the mapping goes with the last view that
 * uses it.  Returns the release's result (the view is freed either way). */
GPUIPC_EXPORT int gpuipc_view_release(gpuipc_view *v);

/* ---- CUDA buffers -------------------------------------------------------
 *
 * libcuda.so.1 (or $GPUIPC_LIBCUDA) is loaded at run time; without it these
 * calls return -ENOTSUP.  Device pointers are CUdeviceptr values as
 * uint64_t, streams and events CUstream / CUevent as void *.  Devices travel
 * by UUID; the library works in each device's primary context.
 */
typedef struct gpuipc_cudabuf gpuipc_cudabuf;

/* Allocates at least size bytes of VMM memory on device ordinal `device`
 * (rounded up to the allocation granularity), exportable as a POSIX fd and
 * mapped read-write for that device.  Registered with gpuipc_cuda_register()
 * it becomes a cuda-vmm buffer that outlives this process.  The caller frees
 * *ret_buf with gpuipc_cudabuf_free(). */
GPUIPC_EXPORT int gpuipc_cudabuf_new(int device, size_t size, gpuipc_cudabuf **ret_buf);
GPUIPC_EXPORT uint64_t gpuipc_cudabuf_ptr(const gpuipc_cudabuf *b);
GPUIPC_EXPORT size_t gpuipc_cudabuf_size(const gpuipc_cudabuf *b);
/* Unmaps the producer's mapping.  A registered buffer lives on in the
 * daemon (and its consumers) until unregistered and released. */
GPUIPC_EXPORT void gpuipc_cudabuf_free(gpuipc_cudabuf *b);

/* Registers size bytes of device memory at dptr, which may lie inside a
 * larger allocation (a pool's block): as cuda-vmm when it is VMM memory
 * exportable as a POSIX fd (durable), else as cuda-ipc or cuda-pool, which
 * stay the caller's until gpuipc_reg_wait_released().  event, if not NULL,
 * is an interprocess CUevent recorded after the writes. */
GPUIPC_EXPORT int gpuipc_cuda_register(gpuipc_client *c, const char *name, uint64_t dptr,
                                       uint64_t size, const gpuipc_meta *meta, void *event,
                                       unsigned flags, uint64_t *ret_id);

/* After the last registration of a GPUIPC_REGISTER_CACHEABLE allocation
 * (id: one of c's registrations of it) is gone: tells the daemon that the
 * memory is about to be freed, then waits until no consumer maps it.
 * Until then, consumers keep it mapped, so registering the same block again
 * costs them a warm lookup.  For a batch, id covers every allocation of its
 * device parts shared in place (not copied ones).  c remembers the allocations of its newest
 * 256 cacheable ones (a batch counts each).  -ETIMEDOUT; -ENOENT: not
 * known, or forgotten; -EEXIST: the allocation (one of them) is registered
 * again. */
GPUIPC_EXPORT int gpuipc_reg_wait_unmapped(gpuipc_client *c, uint64_t id, int timeout_ms);

/* Bounds of this process's mapping cache: device allocations kept mapped
 * after their last view, least recently used closed first (defaults 16 GiB
 * and 1024, or $GPUIPC_MAP_CACHE_BYTES / _ENTRIES; 0 turns it off). */
GPUIPC_EXPORT int gpuipc_cache_set_limits(uint64_t max_bytes, unsigned max_entries);
/* Closes every cached mapping no view uses, and (with c) tells the daemon
 * now what c no longer holds.  Returns how many were closed. */
GPUIPC_EXPORT int gpuipc_cache_trim(gpuipc_client *c);

/* How gpuipc_cuda_register() would share [dptr, dptr + size) with these
 * flags, without registering anything: returns a gpuipc_path, or a
 * negative errno (-EINVAL: not device memory, -ENOTSUP: no driver here),
 * and writes a sentence on the path and why into buf (len bytes, NUL
 * terminated, truncated to fit; buf may be NULL when len is 0). */
typedef enum gpuipc_path {
        GPUIPC_PATH_NONE = 0,       /* cannot be shared (buf says what would help) */
        GPUIPC_PATH_CUDA_IPC = 1,   /* legacy IPC handle at an offset */
        GPUIPC_PATH_CUDA_VMM = 2,   /* VMM chunks exported as POSIX fds */
        GPUIPC_PATH_CUDA_POOL = 3,  /* exportable stream-ordered pool */
        GPUIPC_PATH_COPY = 4,       /* GPUIPC_REGISTER_COPY: copied into cuda-vmm memory */
} gpuipc_path;
GPUIPC_EXPORT int gpuipc_cuda_explain(uint64_t dptr, uint64_t size, unsigned flags, char *buf,
                                 size_t len);
/* "none", "cuda-ipc", "cuda-vmm", "cuda-pool", "copy"; "unknown" otherwise. */
GPUIPC_EXPORT const char *gpuipc_cuda_path_name(int path);

/* Hands a cuda-ipc registration of this connection to the daemon, which
 * copies it into memory of its own; the name then refers to that durable
 * copy.  On success the caller may free its memory once the *ret_leases
 * leases (may be NULL) that still map it are released (gpuipc_reg_wait_released
 * tells when; at once when 0); memory registered GPUIPC_REGISTER_CACHEABLE
 * only after gpuipc_reg_wait_unmapped(), as after an unregister. */
GPUIPC_EXPORT int gpuipc_name_adopt(gpuipc_client *c, const char *name, uint32_t *ret_leases);

/* gpuipc_view_lookup() for a consumer on device ordinal `device` of this
 * process (-1: the buffer's own), mapped with peer access when that is
 * another GPU.  -EXDEV when it cannot reach the buffer's device (unless
 * GPUIPC_LOOKUP_COPY_TO_DEVICE: a private copy), -ENODEV when not visible. */
GPUIPC_EXPORT int gpuipc_view_lookup_device(gpuipc_client *c, const char *name, int timeout_ms,
                                       unsigned flags, int device, gpuipc_view **ret_view);
/* 1 when v is a private copy made by GPUIPC_LOOKUP_COPY_TO_DEVICE (a
 * snapshot taken at lookup time), 0 when it maps the shared buffer or v
 * is NULL. */
GPUIPC_EXPORT int gpuipc_view_copied(const gpuipc_view *v);

/* For a device view: the device ordinal in this process (or -1 for host
 * memory), and making stream wait for the producer's event (a no-op when
 * there is none).  gpuipc_view_data() is then the CUdeviceptr. */
GPUIPC_EXPORT int gpuipc_view_device(const gpuipc_view *v);
GPUIPC_EXPORT int gpuipc_view_wait_stream(const gpuipc_view *v, void *stream);
/* Like gpuipc_view_release(), handing the producer event (a CUevent with
 * CU_EVENT_INTERPROCESS, recorded after this consumer's last use) to wait on
 * before it reuses the memory. */
GPUIPC_EXPORT int gpuipc_view_release_after(gpuipc_view *v, void *event);

/* Device view v as a DLPack DLManagedTensor (dlpack.h before 1.0: what a
 * "dltensor" capsule carries), for handing to an array library without
 * building one: data, kDLCUDA and v's ordinal here, and the registration's
 * dtype (a name such as "float32" or a little-endian typestr such as
 * "<f4"; uint8 when unset), shape and strides (bytes in the metadata,
 * elements here); without a shape, one dimension of the view's size in
 * items.  The consumer calls its deleter once, which frees it and then
 * calls on_delete(ctx) (may be NULL), from whichever thread drops the
 * consumer's last tensor.  v must stay unreleased until on_delete ran:
 * release it there or after.  -EINVAL: v or ret_managed NULL, not a device
 * view, a dtype DLPack has no type for, a size that is not a whole number
 * of items (no shape), negative shape entries, strides that are negative
 * or not a multiple of the item size, or a layout beyond v's size;
 * -EOVERFLOW: a layout whose extent does not fit 64 bits; -ENOMEM. */
GPUIPC_EXPORT int gpuipc_view_dlpack(const gpuipc_view *v, void (*on_delete)(void *ctx),
                                     void *ctx, void **ret_managed);

/* ---- inspecting --------------------------------------------------------- */

/* Flags of gpuipc_list_fetch(). */
#define GPUIPC_LIST_ALL     0x1u        /* also registrations unregistered while
                                         * leases still hold them */
#define GPUIPC_LIST_HOLDERS 0x2u        /* list their lease holders */
/* Registrations whose name lies in namespace prefix (NULL or "" for all),
 * ordered by id; flags GPUIPC_LIST_* (-EINVAL for others).  The caller
 * frees *ret_list with gpuipc_list_free(). */
GPUIPC_EXPORT int gpuipc_list_fetch(gpuipc_client *c, const char *prefix, unsigned flags,
                                    gpuipc_list **ret_list);
GPUIPC_EXPORT size_t gpuipc_list_count(const gpuipc_list *l);
/* Entry i (< count), owned by l. */
GPUIPC_EXPORT const gpuipc_info *gpuipc_list_get(const gpuipc_list *l, size_t i);
GPUIPC_EXPORT void gpuipc_list_free(gpuipc_list *l);

/* One registration by name, as a one-entry list. */
GPUIPC_EXPORT int gpuipc_name_stat(gpuipc_client *c, const char *name, gpuipc_list **ret_list);

/* Daemon-wide counters.  The caller frees *ret_stats with
 * gpuipc_stats_free(). */
GPUIPC_EXPORT int gpuipc_stats_fetch(gpuipc_client *c, gpuipc_stats **ret_stats);
GPUIPC_EXPORT void gpuipc_stats_free(gpuipc_stats *s);

/* ---- operating ---------------------------------------------------------- */

/* One registry event from gpuipc_event_next().  Library-allocated; fields
 * may be appended in later versions. */
typedef struct gpuipc_event {
        const char *type;               /* "registered", "unregistered", "leased",
                                         * "released" or "revoked" */
        uint64_t id;                    /* the registration */
        const char *name;
        gpuipc_kind kind;
        uint64_t size;
        uint32_t leases;                /* its lease count after the event */
        uint64_t lease;                 /* leased, released: the lease id; else 0 */
        uint32_t pid, uid;              /* the process that caused it */
        uint64_t time_ms;               /* Unix time, ms, at the daemon */
        uint64_t dropped;               /* events lost just before this one, because
                                         * the caller did not read them in time */
} gpuipc_event;

/* Subscribes c to registry events of names in namespace prefix (NULL or ""
 * for all); a second call replaces the prefix.  Events queue in c (up to
 * 4096; older ones are then dropped and counted) until read with
 * gpuipc_event_next().  -ENOBUFS when the daemon has too many watchers. */
GPUIPC_EXPORT int gpuipc_event_watch(gpuipc_client *c, const char *prefix);
/* The next event, waiting up to timeout_ms.  -ETIMEDOUT when none came.
 * The caller frees *ret_event with gpuipc_event_free(). */
GPUIPC_EXPORT int gpuipc_event_next(gpuipc_client *c, int timeout_ms,
                                    gpuipc_event **ret_event);
GPUIPC_EXPORT void gpuipc_event_free(gpuipc_event *e);

/* Removes name from the namespace and takes every lease on it away: the
 * holders get a `revoked` event.  Needs root or the daemon's admin-group
 * (-EPERM otherwise).  *ret_leases (may be NULL) is how many were revoked. */
GPUIPC_EXPORT int gpuipc_name_revoke(gpuipc_client *c, const char *name, uint32_t *ret_leases);

/* The daemon's metrics in the Prometheus text format; the caller frees
 * *ret_text with gpuipc_free(). */
GPUIPC_EXPORT int gpuipc_metrics_fetch(gpuipc_client *c, char **ret_text);

/* One CUDA device as this process sees it. */
typedef struct gpuipc_cuda_device {
        int ordinal;
        const char *uuid;               /* "GPU-..." */
        int vmm_posix_fd;               /* POSIX-fd VMM handles: 1, 0, -1 unknown */
        int legacy_ipc;                 /* cuIpc* memory handles: 1, 0, -1 unknown */
} gpuipc_cuda_device;

/* The CUDA driver in this process (loading it if need be). */
typedef struct gpuipc_cuda_status {
        int available;                  /* the driver loaded and initialised */
        const char *reason;             /* why not; "" when available */
        uint32_t driver_version;        /* e.g. 13000; 0 when unknown */
        uint32_t n_devices;             /* see gpuipc_cuda_status_device() */
} gpuipc_cuda_status;

/* Device i (< n_devices) of s, owned by s; NULL past the end. */
GPUIPC_EXPORT const gpuipc_cuda_device *gpuipc_cuda_status_device(const gpuipc_cuda_status *s,
                                                                  size_t i);
/* Whether device i can access device j's memory (cuDeviceCanAccessPeer; 1
 * for i == j): 1, 0, or -1 when the driver cannot say or i, j are out of
 * range. */
GPUIPC_EXPORT int gpuipc_cuda_status_peer(const gpuipc_cuda_status *s, size_t i, size_t j);

/* Fills *ret_status; fails only for lack of memory.  Free it with
 * gpuipc_cuda_status_free(). */
GPUIPC_EXPORT int gpuipc_cuda_status_get(gpuipc_cuda_status **ret_status);
GPUIPC_EXPORT void gpuipc_cuda_status_free(gpuipc_cuda_status *s);

/* ---- access rules ------------------------------------------------------ */

#define GPUIPC_ACCESS_IDS_MAX 32        /* uids, and gids, one rule may list */

/* Who besides the owner's uid (and root) may look a registration up, list,
 * stat and watch it.  group is a group name (NULL: none), resolved to a gid
 * by gpuipc_client_set_access() in the calling process (the daemon is told both);
 * public_ nonzero allows every peer that can reach the socket. */
typedef struct gpuipc_access {
        size_t size;                    /* sizeof(gpuipc_access) */
        const uint32_t *uids;
        uint32_t n_uids;                /* at most GPUIPC_ACCESS_IDS_MAX */
        const uint32_t *gids;
        uint32_t n_gids;                /* at most GPUIPC_ACCESS_IDS_MAX */
        const char *group;              /* at most 32 bytes */
        int public_;
} gpuipc_access;
#define GPUIPC_ACCESS_INIT { .size = sizeof(gpuipc_access) }

/* Sets the access rule of this client's later registrations (all kinds);
 * the library copies a.  NULL restores the default, owner only.  -EINVAL
 * for more than GPUIPC_ACCESS_IDS_MAX ids or a bad group name, -ENOENT when
 * this process knows no group of that name. */
GPUIPC_EXPORT int gpuipc_client_set_access(gpuipc_client *c, const gpuipc_access *a);

/* ---- the Arrow C Data Interface and C Device Data Interface -------------
 *
 * Declared here from the Arrow specifications (format/CDataInterface and
 * format/CDeviceDataInterface), which define them as an ABI that each
 * project declares itself.  The standard guards let them coexist with
 * another project's copy included before or after this header. */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
        const char *format;             /* the type, e.g. "i", "u", "+s" */
        const char *name;               /* may be NULL */
        const char *metadata;           /* binary key/value pairs, or NULL */
        int64_t flags;                  /* ARROW_FLAG_* */
        int64_t n_children;
        struct ArrowSchema **children;
        struct ArrowSchema *dictionary;
        void (*release)(struct ArrowSchema *);  /* NULL: released */
        void *private_data;
};

struct ArrowArray {
        int64_t length;
        int64_t null_count;             /* -1: not computed */
        int64_t offset;                 /* in elements, into every buffer */
        int64_t n_buffers;
        int64_t n_children;
        const void **buffers;
        struct ArrowArray **children;
        struct ArrowArray *dictionary;
        void (*release)(struct ArrowArray *);   /* NULL: released */
        void *private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_DEVICE_DATA_INTERFACE
#define ARROW_C_DEVICE_DATA_INTERFACE

typedef int32_t ArrowDeviceType;

#define ARROW_DEVICE_CPU 1
#define ARROW_DEVICE_CUDA 2
#define ARROW_DEVICE_CUDA_HOST 3
#define ARROW_DEVICE_OPENCL 4
#define ARROW_DEVICE_VULKAN 7
#define ARROW_DEVICE_METAL 8
#define ARROW_DEVICE_VPI 9
#define ARROW_DEVICE_ROCM 10
#define ARROW_DEVICE_ROCM_HOST 11
#define ARROW_DEVICE_EXT_DEV 12
#define ARROW_DEVICE_CUDA_MANAGED 13
#define ARROW_DEVICE_ONEAPI 14
#define ARROW_DEVICE_WEBGPU 15
#define ARROW_DEVICE_HEXAGON 16

struct ArrowDeviceArray {
        struct ArrowArray array;
        int64_t device_id;              /* CUDA: the ordinal; CPU: -1 */
        ArrowDeviceType device_type;
        void *sync_event;               /* CUDA: a CUevent *, or NULL */
        int64_t reserved[3];            /* zero */
};

#endif /* ARROW_C_DEVICE_DATA_INTERFACE */

/* ---- batches: one registration for a table of Arrow columns -------------
 *
 * One name for a table: columns of Arrow arrays (nested ones too), a row
 * count, the schema's metadata; one lease, one access rule, one `released`
 * event, its memory a list of parts.  Built from Arrow C Data Interface
 * structs, looked up in one round trip, exported as Arrow structs over the
 * mapped memory.  Types, limits and lifetimes: libgpuipc(3), "Batches". */

#define GPUIPC_BATCH_PARTS_MAX 256
#define GPUIPC_BATCH_NODES_MAX 1024

typedef struct gpuipc_batch gpuipc_batch;
typedef struct gpuipc_batch_view gpuipc_batch_view;

/* A new, empty batch.  The caller frees it with gpuipc_batch_free(). */
GPUIPC_EXPORT int gpuipc_batch_new(gpuipc_batch **ret_batch);
GPUIPC_EXPORT void gpuipc_batch_free(gpuipc_batch *b);
/* Why the last failed gpuipc_batch_add_*() or gpuipc_batch_set_metadata()
 * on b failed; "" when none did.  Valid until the next call on b. */
GPUIPC_EXPORT const char *gpuipc_batch_errmsg(const gpuipc_batch *b);

/* Appends one column (its name is schema->name); device -1 for host
 * buffers, else their CUDA ordinal.  The structs are read, never released;
 * the buffers must stay valid until gpuipc_batch_register() returns.
 * -EINVAL (row counts differ, released or inconsistent structs), -ENOTSUP
 * (dictionary, union, run-end, view types), -E2BIG (limits); b unchanged. */
GPUIPC_EXPORT int gpuipc_batch_add_column(gpuipc_batch *b, const struct ArrowSchema *schema,
                                          const struct ArrowArray *array, int device);
/* The same for an array of two buffers (validity, values: a fixed-width
 * type or booleans, e.g. "i", "g", "b", "w:16") without building its
 * structs: length values at data (host memory, or device memory of
 * ordinal `device`), and a validity bitmap (NULL: none) with null_count
 * nulls (-1: unknown).  -EINVAL for a format with other buffers (strings,
 * lists, structs: gpuipc_batch_add_column()). */
GPUIPC_EXPORT int gpuipc_batch_add_buffer(gpuipc_batch *b, const char *name, const char *format,
                                          int64_t length, int64_t null_count,
                                          const void *validity, const void *data, int device);
/* The same for n columns without nulls, all on one device (-1: host), in
 * one call: column i is names[i], of formats[i], lengths[i] values at
 * data[i].  All are added or, on an error, none (b unchanged). */
GPUIPC_EXPORT int gpuipc_batch_add_buffers(gpuipc_batch *b, size_t n, const char *const *names,
                                           const char *const *formats, const int64_t *lengths,
                                           const void *const *data, int device);
/* Appends the children of a struct array ("+s", e.g. an exported record
 * batch) as columns, host memory, with the struct's offset applied, and
 * takes the schema's metadata as the batch's (unless set already).  The
 * struct itself must have no nulls. */
GPUIPC_EXPORT int gpuipc_batch_add_record_batch(gpuipc_batch *b, const struct ArrowSchema *schema,
                                                const struct ArrowArray *array);
/* The same for an ArrowDeviceArray (CPU or CUDA): its sync_event becomes
 * the registration's event (an interprocess one is shared; another is
 * waited for at register).  -EINVAL for a second, different event. */
GPUIPC_EXPORT int gpuipc_batch_add_device_record_batch(gpuipc_batch *b,
                                                       const struct ArrowSchema *schema,
                                                       const struct ArrowDeviceArray *array);
/* Sets the batch's event: a CUevent recorded on device ordinal `device`
 * after the writes of its device columns (as an ArrowDeviceArray's
 * sync_event), shared with consumers as by gpuipc_batch_add_device_record_batch();
 * NULL clears it.  For columns added one by one. */
GPUIPC_EXPORT int gpuipc_batch_set_event(gpuipc_batch *b, void *event, int device);
/* Sets the batch's (the schema's) metadata, replacing any: n pairs of
 * UTF-8 strings (at most 32; keys at most 64 bytes, values 1024), copied.
 * n == 0 clears it. */
GPUIPC_EXPORT int gpuipc_batch_set_metadata(gpuipc_batch *b, uint32_t n,
                                            const char *const *keys,
                                            const char *const *values);

/* Registers b under name in one request (b stays the caller's).  Host
 * buffers inside a gpuipc_hostbuf are shared in place, others copied into
 * one sealed memfd (`copied` says so); device buffers are shared as
 * gpuipc_cuda_register() shares them.  flags: GPUIPC_REGISTER_EPHEMERAL,
 * _CUDA_IPC, _COPY, _CACHEABLE (for its cuda-ipc and cuda-pool parts, as
 * for one registration: free that memory only after
 * gpuipc_reg_wait_unmapped() of the batch's id).  -EINVAL: empty; -E2BIG:
 * more than 64 fds. */
GPUIPC_EXPORT int gpuipc_batch_register(gpuipc_client *c, const char *name, gpuipc_batch *b,
                                        unsigned flags, uint64_t *ret_id);

/* Looks a batch up in one round trip and maps every part: host parts
 * with one mmap per memfd, device parts as gpuipc_view_lookup() maps them (on
 * their own devices, through the mapping cache), waiting for the batch's
 * event unless flags has GPUIPC_LOOKUP_NO_SYNC.  One lease holds it all.
 * -EMEDIUMTYPE when name is not a batch (and gpuipc_view_lookup() of a batch
 * fails so too).  The caller frees *ret_view with
 * gpuipc_batch_view_release(). */
GPUIPC_EXPORT int gpuipc_batch_view_lookup(gpuipc_client *c, const char *name, int timeout_ms,
                                      unsigned flags, gpuipc_batch_view **ret_view);
GPUIPC_EXPORT uint64_t gpuipc_batch_view_rows(const gpuipc_batch_view *v);
/* The top-level columns: how many, the name of column i ("" for a column
 * without one, NULL when i is out of range), and the index of the first
 * column called name (-ENOENT when none is). */
GPUIPC_EXPORT size_t gpuipc_batch_view_columns(const gpuipc_batch_view *v);
GPUIPC_EXPORT const char *gpuipc_batch_view_column_name(const gpuipc_batch_view *v, size_t i);
GPUIPC_EXPORT int gpuipc_batch_view_column_index(const gpuipc_batch_view *v, const char *name);
/* Buffer `buffer` (Arrow's order: validity first) of top-level column
 * `column`, or of array `node` in pre-order (see gpuipc_info_batch_node):
 * its start in this process (a CUdeviceptr for device parts; NULL for an
 * absent buffer), its size in bytes and its device ordinal here (-1:
 * host).  Any ret_ may be NULL.  -EINVAL when there is no such buffer.
 * Valid until the view is released. */
GPUIPC_EXPORT int gpuipc_batch_view_buffer(const gpuipc_batch_view *v, size_t column,
                                           unsigned buffer, void **ret_data,
                                           uint64_t *ret_size, int *ret_device);
GPUIPC_EXPORT int gpuipc_batch_view_node_buffer(const gpuipc_batch_view *v, size_t node,
                                                unsigned buffer, void **ret_data,
                                                uint64_t *ret_size, int *ret_device);
/* The mapping that part `part` (gpuipc_info_batch_part) lies in, in this
 * process: its start and size (a device part: its opened allocation; a
 * host part: its memfd, mapped from the start; a device copy: itself).
 * Buffers in one mapping can be addressed from its start, e.g. as slices
 * of one array.  Either ret_ may be NULL.  -EINVAL: no such part. */
GPUIPC_EXPORT int gpuipc_batch_view_part_mapping(const gpuipc_batch_view *v, size_t part,
                                                 void **ret_base, uint64_t *ret_size);
/* Top-level column i at a glance, for reading many columns in one call. */
typedef struct gpuipc_batch_values {
        const char *name;               /* "" when it has none; owned by the view */
        const char *format;             /* the Arrow format string */
        uint32_t node;                  /* its node (gpuipc_info_batch_node()) */
        uint32_t width;                 /* bytes per value when the column is a validity
                                         * bitmap and one buffer of fixed-width values
                                         * ("i", "g", "w:16"...); 0 for any other */
        int64_t length, null_count;
        void *data;                     /* width > 0: its first value here, the array's
                                         * offset applied; else (or absent) NULL */
        void *map;                      /* and the mapping data lies in, as
                                         * gpuipc_batch_view_part_mapping() gives it */
        uint64_t map_size;
        int32_t device;                 /* data's ordinal here; -1: host or none */
        int32_t part;                   /* data's part; -1: none */
} gpuipc_batch_values;

/* Fills ret[0], ..., ret[n - 1] with columns first, ..., first + n - 1 in
 * one call (a table of a thousand columns is one call, not several per
 * column).  The pointers are valid until the view is released.  -EINVAL
 * when the range is out of bounds.  The struct keeps this layout in
 * GPUIPC_1 (another would come with another call). */
GPUIPC_EXPORT int gpuipc_batch_view_values(const gpuipc_batch_view *v, size_t first, size_t n,
                                           gpuipc_batch_values *ret);
/* The registration, as at lookup time (kind GPUIPC_KIND_BATCH).  Owned by v. */
GPUIPC_EXPORT const gpuipc_info *gpuipc_batch_view_info(const gpuipc_batch_view *v);

/* Exports the batch (column -1: a "+s" struct array of the columns) or one
 * column as Arrow structs over the mapped memory (zero copy); either ret_
 * may be NULL, not both.  The caller calls each release callback (any
 * order, any thread); the lease goes back after gpuipc_batch_view_release()
 * and the last exported array's release.  -EINVAL for device parts (use
 * gpuipc_batch_view_export_device()) or a bad column. */
GPUIPC_EXPORT int gpuipc_batch_view_export(gpuipc_batch_view *v, int column,
                                           struct ArrowSchema *ret_schema,
                                           struct ArrowArray *ret_array);
/* The same as an ArrowDeviceArray: ARROW_DEVICE_CUDA with device_id the
 * ordinal in this process, and sync_event pointing to the opened event of
 * the batch (a CUevent, owned by v, valid while the array lives) or NULL
 * when it has none; all parts must be on that one device (-EINVAL
 * otherwise).  A batch of host parts only exports as ARROW_DEVICE_CPU,
 * device_id -1. */
GPUIPC_EXPORT int gpuipc_batch_view_export_device(gpuipc_batch_view *v, int column,
                                                  struct ArrowSchema *ret_schema,
                                                  struct ArrowDeviceArray *ret_array);
/* Drops the caller's hold on v and frees it; the lease goes back now,
 * or with the release of the last exported array still alive.  A batch's
 * release is sent without waiting for its reply (the daemon serves a
 * connection's requests in order, so the next call sees the lease gone):
 * returns 0, or why it could not be sent.  NULL is fine. */
GPUIPC_EXPORT int gpuipc_batch_view_release(gpuipc_batch_view *v);

/* A batch's description in a gpuipc_info (from a batch view, gpuipc_name_stat()
 * or gpuipc_list_fetch()), owned by the info.  Each array of the table is
 * a node, in pre-order (a node's n_children children follow it, each with
 * its descendants).  Fields may be appended in later versions: take
 * pointers from the accessors, never index arrays of these structs. */
typedef struct gpuipc_batch_part {
        gpuipc_kind kind;               /* host, cuda-ipc, cuda-vmm or cuda-pool */
        uint64_t size;                  /* bytes */
        const char *device;             /* device UUID; "" for host parts */
} gpuipc_batch_part;

typedef struct gpuipc_batch_node {
        uint32_t index;                 /* its own place in pre-order */
        uint32_t parent;                /* a node index, UINT32_MAX for a column */
        const char *name;               /* "" when it has none */
        const char *format;             /* the Arrow format string */
        int64_t flags;                  /* ARROW_FLAG_* */
        int64_t length, null_count, offset;
        uint32_t n_children;
        uint32_t n_buffers;             /* at most 3 */
        int32_t buffers[3];             /* part indexes; -1: absent (NULL) */
        uint32_t n_meta;                /* the field's metadata */
        const char *const *meta_keys;
        const char *const *meta_values;
} gpuipc_batch_node;

/* 0 when info is NULL or not a batch.  Part count: from list, stat and
 * lookups; parts and nodes: from stat and lookups only (0 and NULL in a
 * list's records). */
GPUIPC_EXPORT size_t gpuipc_info_batch_parts(const gpuipc_info *info);
GPUIPC_EXPORT const gpuipc_batch_part *gpuipc_info_batch_part(const gpuipc_info *info, size_t i);
GPUIPC_EXPORT uint64_t gpuipc_info_batch_rows(const gpuipc_info *info);
GPUIPC_EXPORT size_t gpuipc_info_batch_nodes(const gpuipc_info *info);
GPUIPC_EXPORT const gpuipc_batch_node *gpuipc_info_batch_node(const gpuipc_info *info, size_t i);
/* The top-level columns, in order: how many, and column i's node. */
GPUIPC_EXPORT size_t gpuipc_info_batch_columns(const gpuipc_info *info);
GPUIPC_EXPORT const gpuipc_batch_node *gpuipc_info_batch_column(const gpuipc_info *info,
                                                               size_t i);

#ifdef __cplusplus
}
#endif

#endif
