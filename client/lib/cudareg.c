/* cudareg.c: registering device memory.
 *
 * How the memory is shared is cudaexport.c's business; this file packs it
 * into a register request (register.c has the rest of the request).
 * It keeps one per-process table, own: the cuda-ipc and cuda-pool
 * allocations this process exported, keyed by (device UUID, handle or
 * pool export data, buffer_id).  A lookup in this process of one of them
 * must use the producer's pointer: the driver refuses to open a handle in
 * the process that exported it (CUDA_ERROR_INVALID_CONTEXT).  Entries are
 * small and one per distinct allocation; an entry whose base address turns
 * up again with another buffer_id (the address was freed and reused) is
 * replaced.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cudaint.h"
#include "trace.h"

#ifdef GPUIPC_HAVE_CUDA_H

struct own {
        struct own *next;
        uint8_t uuid[CUDA_UUID_LEN];
        uint8_t handle[CUDA_IPC_HANDLE_LEN];
        uint64_t buffer_id;
        CUdeviceptr base;
        uint64_t size;
        /* What register needs again for another block of it: the fast path
         * (known()) then makes one driver call, the buffer-id check. */
        int path, ordinal;
        int pool_fd;                    /* cuda-pool: the pool export table's */
        uint8_t pool_key[GPUIPC__ALLOC_KEY_LEN];
};

static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;
static struct own *owns;

static int own_add(const struct gpuipc__devreg *d)
{
        const uint8_t *handle = d->path == GPUIPC_PATH_CUDA_IPC
                ? (const uint8_t *)d->handle.reserved : (const uint8_t *)d->export_data.reserved;
        const uint8_t *uuid = d->uuid;
        CUdeviceptr base = d->base;
        struct own *o;

        pthread_mutex_lock(&own_lock);
        for (o = owns; o; o = o->next)
                if (o->base == base && !memcmp(o->uuid, uuid, CUDA_UUID_LEN))
                        break;
        if (!o) {
                o = calloc(1, sizeof(*o));
                if (!o) {
                        pthread_mutex_unlock(&own_lock);
                        return -ENOMEM;
                }
                o->next = owns;
                owns = o;
        }
        memcpy(o->uuid, uuid, CUDA_UUID_LEN);
        memcpy(o->handle, handle, CUDA_IPC_HANDLE_LEN);
        o->buffer_id = d->buffer_id;
        o->base = base;
        o->size = d->alloc_size;
        o->path = d->path;
        o->ordinal = d->ordinal;
        o->pool_fd = d->path == GPUIPC_PATH_CUDA_POOL ? d->fds[0] : -1;
        memcpy(o->pool_key, d->keys[0], GPUIPC__ALLOC_KEY_LEN);
        pthread_mutex_unlock(&own_lock);
        return 0;
}

/* The fast path of register: [dptr, dptr + size) lies in an allocation this
 * process registered before, and its buffer id says it is still that one
 * (a freed and reused address has another).  Fills d as describe would,
 * with one driver call instead of about eight. */
static bool known(struct cuda *cu, uint64_t dptr, uint64_t size, struct gpuipc__devreg *d)
{
        unsigned long long id = 0;
        const struct own *o;
        bool hit = false;

        pthread_mutex_lock(&own_lock);
        for (o = owns; o; o = o->next)
                if (dptr >= o->base && dptr - o->base < o->size && size <= o->size - (dptr - o->base))
                        break;
        if (o && cu->cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, o->base) ==
            CUDA_SUCCESS && id == o->buffer_id) {
                memset(d, 0, sizeof(*d));
                d->path = o->path;
                d->ordinal = o->ordinal;
                memcpy(d->uuid, o->uuid, CUDA_UUID_LEN);
                d->base = o->base;
                d->alloc_size = o->size;
                d->offset = dptr - o->base;
                d->n_chunks = 1;
                d->buffer_id = o->buffer_id;
                if (o->path == GPUIPC_PATH_CUDA_IPC) {
                        memcpy(d->handle.reserved, o->handle, CUDA_IPC_HANDLE_LEN);
                } else {
                        memcpy(d->export_data.reserved, o->handle, CUDA_IPC_HANDLE_LEN);
                        d->fds[0] = o->pool_fd;
                        memcpy(d->keys[0], o->pool_key, GPUIPC__ALLOC_KEY_LEN);
                }
                hit = true;
        }
        pthread_mutex_unlock(&own_lock);
        return hit;
}

bool gpuipc__cuown_find(const uint8_t uuid[CUDA_UUID_LEN], const uint8_t *handle,
                        uint64_t buffer_id, CUdeviceptr *ret_base, uint64_t *ret_size)
{
        const struct own *o;

        pthread_mutex_lock(&own_lock);
        for (o = owns; o; o = o->next)
                if (o->buffer_id == buffer_id && !memcmp(o->uuid, uuid, CUDA_UUID_LEN) &&
                    !memcmp(o->handle, handle, CUDA_IPC_HANDLE_LEN))
                        break;
        if (o) {
                *ret_base = o->base;
                *ret_size = o->size;
        }
        pthread_mutex_unlock(&own_lock);
        return o != NULL;
}

/* `fds`: a count in a register request, the indexes of the frame's fds
 * (fdidx) in a batch's part. */
static void pack_fds(msgpack_packer *pk, unsigned n, const uint32_t *fdidx)
{
        if (!fdidx) {
                proto_pack_ku64(pk, "fds", n);
                return;
        }
        proto_pack_str(pk, "fds");
        msgpack_pack_array(pk, n);
        for (unsigned i = 0; i < n; i++)
                msgpack_pack_uint32(pk, fdidx[i]);
}

uint32_t gpuipc__cu_devreg_fields(const struct gpuipc__devreg *d, const char *copied)
{
        switch (d->path) {
        case GPUIPC_PATH_CUDA_VMM:      /* chunks or alloc_key, copied */
                return 6 + (copied != NULL) + d->has_event + 2 * d->cacheable;
        case GPUIPC_PATH_CUDA_POOL:     /* pool_key, handle, buffer_id */
                return 8 + d->has_event + 2 * d->cacheable;
        default:                        /* handle, buffer_id */
                return 7 + d->has_event + 2 * d->cacheable;
        }
}

void gpuipc__cu_pack_devreg(msgpack_packer *pk, const struct gpuipc__devreg *d,
                            const char *copied, const uint32_t *fdidx)
{
        char uuid[CUDA_UUID_STR_LEN + 1];

        cuda_uuid_format(d->uuid, uuid);
        proto_pack_kstr(pk, "kind", d->path == GPUIPC_PATH_CUDA_VMM ? "cuda-vmm"
                                    : d->path == GPUIPC_PATH_CUDA_POOL ? "cuda-pool"
                                    : "cuda-ipc");
        proto_pack_ku64(pk, "offset", d->offset);
        proto_pack_kstr(pk, "device", uuid);
        proto_pack_ku64(pk, "alloc_size", d->alloc_size);
        if (d->path == GPUIPC_PATH_CUDA_VMM) {
                pack_fds(pk, d->n_chunks, fdidx);
                if (d->n_chunks > 1) {
                        proto_pack_str(pk, "chunks");
                        msgpack_pack_array(pk, d->n_chunks);
                        for (unsigned i = 0; i < d->n_chunks; i++) {
                                msgpack_pack_map(pk, 2);
                                proto_pack_str(pk, "key");
                                msgpack_pack_bin_with_body(pk, d->keys[i], GPUIPC__ALLOC_KEY_LEN);
                                proto_pack_ku64(pk, "size", d->csize[i]);
                        }
                } else {
                        proto_pack_str(pk, "alloc_key");
                        msgpack_pack_bin_with_body(pk, d->keys[0], GPUIPC__ALLOC_KEY_LEN);
                }
                if (copied)
                        proto_pack_kstr(pk, "copied", copied);
        } else if (d->path == GPUIPC_PATH_CUDA_POOL) {
                pack_fds(pk, 1, fdidx);
                proto_pack_str(pk, "pool_key");
                msgpack_pack_bin_with_body(pk, d->keys[0], GPUIPC__ALLOC_KEY_LEN);
                proto_pack_str(pk, "handle");
                msgpack_pack_bin_with_body(pk, d->export_data.reserved, CUDA_IPC_HANDLE_LEN);
                proto_pack_ku64(pk, "buffer_id", d->buffer_id);
        } else {
                pack_fds(pk, 0, fdidx);
                proto_pack_str(pk, "handle");
                msgpack_pack_bin_with_body(pk, d->handle.reserved, CUDA_IPC_HANDLE_LEN);
                proto_pack_ku64(pk, "buffer_id", d->buffer_id);
        }
        if (d->has_event) {
                proto_pack_str(pk, "event");
                msgpack_pack_bin_with_body(pk, d->event.reserved, CUDA_IPC_HANDLE_LEN);
        }
        /* linger: gpuipc_reg_wait_unmapped() says `unmap` before the
         * producer frees, so consumers keep the mapping until then. */
        if (d->cacheable) {
                proto_pack_kbool(pk, "cacheable", true);
                proto_pack_kbool(pk, "linger", true);
        }
}

/* Sends the register request of a described pointer. */
static int send_register(gpuipc_client *c, const char *name, uint64_t size,
                         const gpuipc_meta *meta, unsigned flags,
                         const struct gpuipc__devreg *d, const char *copied, uint64_t *ret_id)
{
        bool bound = d->path != GPUIPC_PATH_CUDA_VMM;   /* the memory stays ours */
        unsigned nfds = d->path == GPUIPC_PATH_CUDA_IPC ? 0 : d->n_chunks;
        struct gpuipc__regargs a = {
                .name = name, .meta = meta, .cacheable = d->cacheable,
                .ephemeral = bound || (flags & GPUIPC_REGISTER_EPHEMERAL),
        };
        struct gpuipc__req rq;

        gpuipc__register_start(c, &rq, &a, 1 + gpuipc__cu_devreg_fields(d, copied));
        proto_pack_ku64(&rq.o.pk, "size", size);
        gpuipc__cu_pack_devreg(&rq.o.pk, d, copied, NULL);
        return gpuipc__register_finish(c, &rq, &a, nfds ? d->fds : NULL, nfds, ret_id);
}

int gpuipc__cu_copy(gpuipc_client *c, struct cuda *cu, uint64_t dptr, uint64_t size,
                    void *event, const struct gpuipc__devreg *src, gpuipc_cudabuf **ret_buf,
                    struct gpuipc__devreg *d)
{
        const char *what = "cuEventSynchronize (producer's event)";
        gpuipc_cudabuf *b = NULL;
        CUcontext saved;
        CUresult res = CUDA_SUCCESS;
        int r;

        r = gpuipc_cudabuf_new(src->ordinal, size, &b);
        if (r < 0)
                return gpuipc__fail(c, r, "cannot allocate %llu bytes of cuda-vmm memory on "
                                    "device %d for the copy: %s", (unsigned long long)size,
                                    src->ordinal, gpuipc_strerror(r));
        r = gpuipc__cu_enter(c, cu, src->ordinal, &saved);
        if (r < 0)
                goto fail;
        if (event && cu->cuEventSynchronize)
                res = cu->cuEventSynchronize((CUevent)event);
        if (res == CUDA_SUCCESS) {
                what = "cuMemcpyDtoD (register with copy)";
                res = cu->cuMemcpyDtoD_v2(gpuipc_cudabuf_ptr(b), dptr, size);
        }
        if (res == CUDA_SUCCESS) {
                what = "cuCtxSynchronize (register with copy)";
                res = cu->cuCtxSynchronize();
        }
        gpuipc__cu_leave(cu, saved);
        if (res != CUDA_SUCCESS) {
                r = gpuipc__cu_fail(c, cu, res, what);
                goto fail;
        }
        r = gpuipc__cu_describe(cu, gpuipc_cudabuf_ptr(b), size, NULL, 0, true, d);
        if (r == 0 && d->path != GPUIPC_PATH_CUDA_VMM)
                r = -EIO;
        if (r < 0) {
                r = gpuipc__fail(c, r, "the copy cannot be shared: %s", d->why);
                goto fail;
        }
        *ret_buf = b;
        return 0;
fail:
        gpuipc_cudabuf_free(b);
        return r;
}

/* GPUIPC_REGISTER_COPY: copies the range into new cuda-vmm memory, after
 * the producer's event, and registers that; the daemon keeps it. */
static int register_copy(gpuipc_client *c, struct cuda *cu, const char *name, uint64_t dptr,
                         uint64_t size, const gpuipc_meta *meta, void *event, unsigned flags,
                         const struct gpuipc__devreg *src, uint64_t *ret_id)
{
        struct gpuipc__devreg *d = malloc(sizeof(*d));
        gpuipc_cudabuf *b = NULL;
        char copied[128];
        int r;

        if (!d)
                return gpuipc__end(c, -ENOMEM);
        snprintf(copied, sizeof(copied), "zero-copy impossible: %s", src->brief);
        r = gpuipc__cu_copy(c, cu, dptr, size, event, src, &b, d);
        /* Durable unless asked otherwise, as any cuda-vmm buffer. */
        if (r == 0)
                r = send_register(c, name, size, meta, flags, d, copied, ret_id);
        /* The daemon holds the memory now through its own fds. */
        gpuipc_cudabuf_free(b);
        free(d);
        return r;
}

int gpuipc__cu_share(gpuipc_client *c, struct cuda *cu, uint64_t dptr, uint64_t size,
                     void *event, unsigned flags, struct gpuipc__devreg *d)
{
        bool fast;
        int r;

        /* Another block of a known allocation, no event to export: the
         * fast path.  A legacy handle is wanted for cuda-ipc memory only,
         * so GPUIPC_REGISTER_CUDA_IPC takes none of VMM memory. */
        fast = !event && (known(cu, dptr, size, d) ||
                          (!(flags & GPUIPC_REGISTER_CUDA_IPC) &&
                           gpuipc__cuexport_known_vmm(cu, dptr, size, d)));
        if (!fast) {
                r = gpuipc__cu_describe(cu, dptr, size, event, flags, true, d);
                if (r < 0)
                        return gpuipc__fail(c, r, "%s", d->why);
        }
        if (d->path == GPUIPC_PATH_COPY)
                return 0;
        d->cacheable = flags & GPUIPC_REGISTER_CACHEABLE;
        /* Producer-bound memory looked up in this process is our pointer. */
        if (d->path == GPUIPC_PATH_CUDA_IPC || d->path == GPUIPC_PATH_CUDA_POOL) {
                r = own_add(d);
                if (r < 0)
                        return gpuipc__end(c, r);
        }
        return 0;
}

int gpuipc_cuda_register(gpuipc_client *c, const char *name, uint64_t dptr, uint64_t size,
                         const gpuipc_meta *meta, void *event, unsigned flags, uint64_t *ret_id)
{
        bool args_ok = dptr != 0 && size != 0 && dptr <= UINT64_MAX - size &&
                       !(flags & ~(GPUIPC_REGISTER_EPHEMERAL | GPUIPC_REGISTER_CUDA_IPC |
                                   GPUIPC_REGISTER_COPY | GPUIPC_REGISTER_CACHEABLE));
        struct gpuipc__devreg *d;
        struct cuda *cu;
        int r;

        TRACE("c.cureg", size);
        r = gpuipc__register_begin(c, name, meta, args_ok, "invalid pointer, size or flags");
        if (r < 0)
                return r;
        r = gpuipc__cu_get(c, &cu);
        if (r < 0)
                return gpuipc__end(c, r);
        d = malloc(sizeof(*d));
        if (!d)
                return gpuipc__end(c, -ENOMEM);
        TRACE("c.cureg_begun", 0);
        r = gpuipc__cu_share(c, cu, dptr, size, event, flags, d);
        if (r < 0)
                goto out;
        if (d->path == GPUIPC_PATH_COPY) {
                r = register_copy(c, cu, name, dptr, size, meta, event, flags, d, ret_id);
                goto out;
        }
        TRACE("c.cureg_shared", d->path);
        r = send_register(c, name, size, meta, flags, d, NULL, ret_id);
out:
        free(d);
        return r;
}

#endif
