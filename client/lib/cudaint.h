/* cudaint.h: private CUDA helpers of libgpuipc (cuda.c, cudareg.c,
 * cudamap.c, cudabuf.c).
 *
 * The driver comes from proto/cuda/driver.h: dlopen()ed on the first CUDA call
 * (never by host-only paths) and kept for the process lifetime.  Every
 * driver call runs with the device's primary context current; the caller's
 * own current context is put back afterwards (gpuipc__cu_enter/leave).
 *
 * Everything below needs <cuda.h>; without it cudastub.c provides the
 * public CUDA functions, failing with -ENOTSUP. */
#ifndef GPUIPC_CUDAINT_H
#define GPUIPC_CUDAINT_H

#include "internal.h"
#include "cuda/driver.h"

/* The driver's handle and UUID sizes are the wire's. */
_Static_assert(CUDA_IPC_HANDLE_LEN == PROTO_IPC_HANDLE_LEN, "IPC handle length");
_Static_assert(CUDA_UUID_LEN == PROTO_UUID_LEN, "UUID length");

#ifdef GPUIPC_HAVE_CUDA_H

#define GPUIPC__CU_MAX_DEVICES 64
/* A cuda-vmm allocation's identity on the wire (alloc_key, alloc.key). */
#define GPUIPC__ALLOC_KEY_LEN PROTO_ALLOC_KEY_LEN

/* The loaded, initialised driver.  -ENOTSUP when there is none; with c,
 * gpuipc_errmsg() then says why ("CUDA driver unavailable: ..."). */
int gpuipc__cu_get(gpuipc_client *c, struct cuda **ret_cu);
/* The driver when a call loaded it already, else NULL: for paths that
 * must not load it (cleanups of host-only clients). */
struct cuda *gpuipc__cu_loaded(void);
/* Why gpuipc__cu_get() failed, once it has; "" before. */
const char *gpuipc__cu_why(void);
/* Sets the error text for a failed driver call and returns its errno
 * (-EIO for an unmapped result).  c may be NULL. */
int gpuipc__cu_fail(gpuipc_client *c, const struct cuda *cu, CUresult res, const char *what);
/* -ENOTSUP for an entry point that the driver does not export. */
int gpuipc__cu_missing(gpuipc_client *c, const char *fn);
#define GPUIPC__CU_NEED(c, cu, fn) ((cu)->fn ? 0 : gpuipc__cu_missing(c, #fn))

/* Makes ordinal's primary context current (retaining it once per process)
 * and saves the caller's context in *ret_saved for gpuipc__cu_leave(). */
int gpuipc__cu_enter(gpuipc_client *c, struct cuda *cu, int ordinal, CUcontext *ret_saved);
/* The primary context of ordinal, retained once per process. */
int gpuipc__cu_primary(gpuipc_client *c, struct cuda *cu, int ordinal, CUcontext *ret);
void gpuipc__cu_leave(struct cuda *cu, CUcontext saved);

/* 1 when device ordinal dev can access memory on device ordinal peer
 * (cuDeviceCanAccessPeer; 1 for dev == peer), 0 when not; -ENOTSUP when
 * the driver lacks the call, -ENODEV/-EIO when it fails. */
int gpuipc__cu_can_peer(struct cuda *cu, int dev, int peer);

/* UUID of device ordinal, binary and as the wire string. */
int gpuipc__cu_uuid(gpuipc_client *c, struct cuda *cu, int ordinal, uint8_t ret[CUDA_UUID_LEN]);
/* This process's ordinal of the device named by the wire string; -ENODEV
 * with a message naming the UUID and CUDA_VISIBLE_DEVICES. */
int gpuipc__cu_ordinal(gpuipc_client *c, struct cuda *cu, const char *uuid,
                       uint8_t ret_uuid[CUDA_UUID_LEN], int *ret_ordinal);

/* ---- cudaexport.c: what a device pointer is, and exporting it ---------- */

/* Everything register sends for a device pointer. */
struct gpuipc__devreg {
        int ordinal;
        uint8_t uuid[CUDA_UUID_LEN];
        int path;                       /* GPUIPC_PATH_* */
        CUdeviceptr base;               /* of the allocation; cuda-vmm: of its first chunk */
        uint64_t alloc_size;            /* cuda-vmm: of all its chunks */
        uint64_t offset;                /* of the pointer from base */
        unsigned n_chunks;              /* cuda-vmm: the chunks' bases and sizes */
        CUdeviceptr cbase[PROTO_CHUNKS_MAX];
        uint64_t csize[PROTO_CHUNKS_MAX];
        /* cuda-vmm: each chunk's fd and alloc_key; cuda-pool: fds[0] and
         * keys[0] are the pool's.  The fds belong to the export tables. */
        int fds[PROTO_CHUNKS_MAX];
        uint8_t keys[PROTO_CHUNKS_MAX][GPUIPC__ALLOC_KEY_LEN];
        CUmemoryPool pool;              /* cuda-pool */
        CUmemPoolPtrExportData export_data;
        CUipcMemHandle handle;          /* cuda-ipc */
        unsigned long long buffer_id;   /* cuda-ipc, cuda-pool */
        bool has_event;
        CUipcEventHandle event;
        bool cacheable;                 /* GPUIPC_REGISTER_CACHEABLE */
        char why[GPUIPC__ERRMSG_MAX];   /* why it failed, or why a copy is needed */
        const char *brief;              /* GPUIPC_PATH_COPY: what the memory is, briefly */
};

/* Finds how [dptr, dptr + size) can be shared (d->path) and, with
 * do_export, exports it: fds, keys, handles and the producer's event.
 * Sets no client error: on failure returns -errno with d->why set; with
 * GPUIPC_REGISTER_COPY in flags, memory that cannot be shared without a copy
 * gives 0 and GPUIPC_PATH_COPY, d->why saying why. */
int gpuipc__cu_describe(struct cuda *cu, uint64_t dptr, uint64_t size, void *event,
                        unsigned flags, bool do_export, struct gpuipc__devreg *d);

/* ---- cudareg.c: what this process exported ---------------------------- */

/* Finds how [dptr, dptr + size) is shared (with event exported when not
 * NULL) and exports it, as register does: through the fast path for a
 * known allocation, remembering producer-bound ones.  d->path may be
 * GPUIPC_PATH_COPY (with GPUIPC_REGISTER_COPY).  c's error set on failure. */
int gpuipc__cu_share(gpuipc_client *c, struct cuda *cu, uint64_t dptr, uint64_t size,
                     void *event, unsigned flags, struct gpuipc__devreg *d);
/* GPUIPC_REGISTER_COPY: copies the range (after event) into a new
 * cudabuf on src's device, *ret_buf (the caller frees it once the daemon
 * holds it), described into d. */
int gpuipc__cu_copy(gpuipc_client *c, struct cuda *cu, uint64_t dptr, uint64_t size,
                    void *event, const struct gpuipc__devreg *src, gpuipc_cudabuf **ret_buf,
                    struct gpuipc__devreg *d);
/* The register fields of d (kind, offset, device, alloc_size, fds, the
 * kind's own, event, cacheable, copied when not NULL): how many, and
 * packing them.  fdidx NULL: `fds` is their count (a register request);
 * else the indexes of d's fds in the frame (a batch's part). */
uint32_t gpuipc__cu_devreg_fields(const struct gpuipc__devreg *d, const char *copied);
void gpuipc__cu_pack_devreg(msgpack_packer *pk, const struct gpuipc__devreg *d,
                            const char *copied, const uint32_t *fdidx);

/* The base pointer of an allocation this process registered as cuda-ipc
 * with that (device, handle, buffer_id); false when it is not ours. */
bool gpuipc__cuown_find(const uint8_t uuid[CUDA_UUID_LEN], const uint8_t *handle,
                        uint64_t buffer_id, CUdeviceptr *ret_base, uint64_t *ret_size);
/* The producer's fast path for VMM memory: true when every chunk that
 * [dptr, dptr + size) touches was exported before and its address still
 * starts the same mapping of the allocation exported (one
 * cuMemGetAddressRange, cuMemRetainAllocationHandle and cuMemRelease
 * each, in the device's primary context), with d filled as describe and
 * export would fill it; false when a chunk is unknown or changed
 * (describe it then). */
bool gpuipc__cuexport_known_vmm(struct cuda *cu, uint64_t dptr, uint64_t size,
                                struct gpuipc__devreg *d);
/* Forgets the exported fd of the VMM allocation at base (closing it). */
void gpuipc__cuexport_forget(CUdeviceptr base);

/* ---- cudaimport.c: VMM chunks and pools imported in this process ------ */

struct gpuipc__cuchunk;
/* Imports the n chunks (each once per process), reserves one range for all
 * of them and maps them in order, read-write for ordinal (its context
 * current).  *ret_base is the range; ret_chunks gets n imports to pass to
 * gpuipc__vmm_unmap().  The fds stay the caller's. */
int gpuipc__vmm_map(gpuipc_client *c, struct cuda *cu, const uint8_t uuid[CUDA_UUID_LEN],
                    int ordinal, unsigned n, const uint8_t (*keys)[GPUIPC__ALLOC_KEY_LEN],
                    const uint64_t *sizes, const int *fds, CUdeviceptr *ret_base,
                    struct gpuipc__cuchunk **ret_chunks);
void gpuipc__vmm_unmap(struct cuda *cu, CUdeviceptr base, unsigned n,
                       struct gpuipc__cuchunk **chunks);
/* Imports the pool of (uuid, key) from fd once per process (granting
 * ordinal access when it is not home, the pool's device) and the pointer
 * of export data into *ret_ptr, which the caller frees with cuMemFree. */
int gpuipc__pool_import(gpuipc_client *c, struct cuda *cu, const uint8_t uuid[CUDA_UUID_LEN],
                        const uint8_t key[GPUIPC__ALLOC_KEY_LEN], int fd,
                        const uint8_t data[CUDA_IPC_HANDLE_LEN], int ordinal, int home,
                        CUdeviceptr *ret_ptr);

/* ---- cudamap.c: allocations opened in this process -------------------- */

/* One allocation opened in this process (an entry of the open-once table),
 * for a consumer device; see cudamap.c for the keys. */
struct gpuipc__cumap {
        struct gpuipc__cumap *next;
        gpuipc_kind kind;
        uint8_t uuid[CUDA_UUID_LEN];
        uint8_t handle[CUDA_IPC_HANDLE_LEN];
        uint64_t buffer_id;
        uint8_t key[GPUIPC__ALLOC_KEY_LEN];     /* cuda-vmm: chunk 0's; cuda-pool: the pool's */
        int ordinal;                    /* the consumer device: opened in its context */
        int home;                       /* the buffer's own device here */
        bool own;                       /* the producer's pointer, not opened */
        CUdeviceptr base;
        uint64_t size;
        /* cuda-vmm: its chunks, in order (keys[0] is key); one for a
         * registration within one VMM allocation. */
        unsigned n_chunks;
        uint8_t (*keys)[GPUIPC__ALLOC_KEY_LEN];
        uint64_t *sizes;
        struct gpuipc__cuchunk **chunks;
        unsigned refs;
        /* The cache (cudacache.c): an entry whose last view went stays
         * mapped, in the LRU list, when it is cuda-vmm or its allocation is
         * held (the daemon granted `held`: the producer promised to wait for
         * `unmapped` before freeing).  holders are the clients whose
         * connections hold it; doomed: `uncache` came, close it with its last
         * view. */
        bool doomed;
        uint64_t alloc_id;
        gpuipc_client **holders;
        unsigned n_holders;
        struct gpuipc__cumap *lprev, *lnext;
};

/* cudamap.c: the key comparison, opening, closing and freeing of an entry. */
bool gpuipc__cumap_key_eq(const struct gpuipc__cumap *a, const struct gpuipc__cumap *b);
int gpuipc__cumap_open(gpuipc_client *c, struct cuda *cu, const int *fds,
                       struct gpuipc__cumap *k);
void gpuipc__cumap_close(struct cuda *cu, struct gpuipc__cumap *m);
void gpuipc__cumap_free(struct gpuipc__cumap *m);

/* ---- cudacache.c: the open-once table and the mapping cache ----------- */

/* The shared entry for key k (filled in by the caller; it takes k's
 * arrays when it creates one), opening it on first use; held: the lookup
 * reply says c holds k's allocation.  The context of k->ordinal is current. */
int gpuipc__cumap_get(gpuipc_client *c, struct cuda *cu, const int *fds,
                      struct gpuipc__cumap *k, bool held, struct gpuipc__cumap **ret);
/* The same when the entry is there already (a warm lookup), with no driver
 * call and no context needed: it, referenced, or NULL. */
struct gpuipc__cumap *gpuipc__cumap_take(gpuipc_client *c, const struct gpuipc__cumap *k,
                                         bool held);
/* Drops a view's reference: the last one keeps the entry in the cache, or
 * closes it. */
void gpuipc__cumap_put(struct cuda *cu, struct gpuipc__cumap *m);

/* ---- cudapeer.c: a consumer on another device ------------------------- */

/* Which device to open the allocation on for a consumer on device
 * (-1: home), and whether the view must be a copy. */
int gpuipc__cu_pick_device(gpuipc_client *c, struct cuda *cu, const gpuipc_info *info,
                           unsigned flags, int device, int home, int *ret_open, bool *ret_copy);
/* Replaces v's mapping by a copy in memory allocated on device. */
int gpuipc__cuview_copy(gpuipc_client *c, struct cuda *cu, int device, gpuipc_view *v);

#endif

#endif
