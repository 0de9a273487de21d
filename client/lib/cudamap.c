/* cudamap.c: device allocations opened in this process, and device views.
 *
 * Each allocation is opened once per process and shared by refcounted
 * views at their offsets; the last view closes it, unless the mapping
 * cache keeps it (cudacache.c, which also holds the table).  The driver's own
 * behaviour on a second open of one handle differs between versions (the
 * same pointer on 580, CUDA_ERROR_ALREADY_MAPPED before), so it is never
 * relied on.  Keys, each with the consumer device (the ordinal of the
 * context the allocation is opened in: one allocation mapped for two
 * devices is two entries):
 *  - cuda-ipc: (device UUID, handle bytes, buffer_id).  When this process
 *    exported that allocation itself, the entry holds its own pointer and
 *    nothing is opened or closed (the driver refuses to open one's own
 *    handle).
 *  - cuda-vmm: (device UUID, the alloc.key of each of its chunks), the
 *    random keys the producer drew for the allocations.  Not the fd's
 *    st_dev/st_ino: on the real driver every exported fd, of any
 *    allocation, is an open of /dev/nvidiactl with one inode.  Opened from
 *    the fds the daemon sends (one per chunk) by cudaimport.c: import once
 *    per chunk, reserve one range, map the chunks in order, set access
 *    (read-write for this device); undone with unmap + address free +
 *    release of the imports no other range uses.
 *  - cuda-pool: (device UUID, the pointer's export data, buffer_id);
 *    imported through its pool (imported once per process) and freed with
 *    cuMemFree.  When this process registered it, the producer's pointer.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batchint.h"
#include "cudaint.h"
#include "trace.h"

#ifdef GPUIPC_HAVE_CUDA_H


bool gpuipc__cumap_key_eq(const struct gpuipc__cumap *a, const struct gpuipc__cumap *b)
{
        if (a->kind != b->kind || a->ordinal != b->ordinal ||
            memcmp(a->uuid, b->uuid, CUDA_UUID_LEN))
                return false;
        if (a->kind != GPUIPC_KIND_CUDA_VMM)
                return a->buffer_id == b->buffer_id &&
                       !memcmp(a->handle, b->handle, CUDA_IPC_HANDLE_LEN);
        return a->n_chunks == b->n_chunks &&
               !memcmp(a->keys, b->keys, (size_t)a->n_chunks * GPUIPC__ALLOC_KEY_LEN);
}

void gpuipc__cumap_free(struct gpuipc__cumap *m)
{
        if (!m)
                return;
        free(m->keys);
        free(m->sizes);
        free(m->chunks);
        free(m);
}

/* Opens k's allocation into k (its context current).  Lock held. */
int gpuipc__cumap_open(gpuipc_client *c, struct cuda *cu, const int *fds, struct gpuipc__cumap *k)
{
        CUipcMemHandle h;
        CUresult res;

        TRACE("c.cumap_open", k->kind);

        if (k->kind != GPUIPC_KIND_CUDA_VMM &&
            gpuipc__cuown_find(k->uuid, k->handle, k->buffer_id, &k->base, &k->size)) {
                k->own = true;
                return 0;
        }
        if (k->kind == GPUIPC_KIND_CUDA_POOL)
                return gpuipc__pool_import(c, cu, k->uuid, k->key, fds[0], k->handle, k->ordinal,
                                           k->home, &k->base);
        if (k->kind == GPUIPC_KIND_CUDA_IPC) {
                memcpy(h.reserved, k->handle, CUDA_IPC_HANDLE_LEN);
                res = cu->cuIpcOpenMemHandle_v2(&k->base, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
                /* Not our own handle (that was found above): the usual
                 * cause is another PID namespace that the daemon could not
                 * see to refuse the lookup itself. */
                if (res == CUDA_ERROR_INVALID_CONTEXT)
                        return gpuipc__cu_fail(c, cu, res, "cuIpcOpenMemHandle (legacy CUDA IPC "
                                               "works only within one PID namespace: is the "
                                               "producer in another container? share cuda-vmm "
                                               "memory, adopt it, or register it with "
                                               "GPUIPC_REGISTER_COPY)");
                if (res != CUDA_SUCCESS)
                        return gpuipc__cu_fail(c, cu, res, "cuIpcOpenMemHandle");
                return 0;
        }
        k->chunks = calloc(k->n_chunks, sizeof(*k->chunks));
        if (!k->chunks)
                return gpuipc__fail(c, -ENOMEM, "out of memory");
        return gpuipc__vmm_map(c, cu, k->uuid, k->ordinal, k->n_chunks,
                               (const uint8_t (*)[GPUIPC__ALLOC_KEY_LEN])k->keys, k->sizes, fds,
                               &k->base, k->chunks);
}

void gpuipc__cumap_close(struct cuda *cu, struct gpuipc__cumap *m)
{
        if (m->own)
                return;
        if (m->kind == GPUIPC_KIND_CUDA_IPC)
                (void)cu->cuIpcCloseMemHandle(m->base);
        else if (m->kind == GPUIPC_KIND_CUDA_POOL)
                (void)cu->cuMemFree_v2(m->base);
        else
                gpuipc__vmm_unmap(cu, m->base, m->n_chunks, m->chunks);
}

/* k's chunks from the record: `chunks` when there are several, else the
 * one `alloc`. */
static int vmm_chunks(gpuipc_client *c, const msgpack_object *reg, const msgpack_object *alloc,
                      const gpuipc_info *info, struct gpuipc__cumap *k)
{
        const msgpack_object *list = NULL;
        unsigned n = info->n_chunks ? info->n_chunks : 1;
        const uint8_t *h;
        size_t len;

        if (n > 1 && proto_get_array(reg, "chunks", &list) < 0)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's cuda-vmm record has no chunks");
        k->keys = calloc(n, sizeof(*k->keys));
        k->sizes = calloc(n, sizeof(*k->sizes));
        if (!k->keys || !k->sizes)
                return gpuipc__fail(c, -ENOMEM, "out of memory");
        k->n_chunks = n;
        for (unsigned i = 0; i < n; i++) {
                const msgpack_object *m = list ? &list->via.array.ptr[i] : alloc;
                if (proto_get_bin(m, "key", &h, &len) < 0 || len != GPUIPC__ALLOC_KEY_LEN ||
                    proto_get_u64(m, "size", &k->sizes[i]) < 0 || k->sizes[i] == 0)
                        return gpuipc__fail(c, -EBADMSG, "gpuipcd's cuda-vmm record has a chunk "
                                            "without a key of %d bytes or a size",
                                            GPUIPC__ALLOC_KEY_LEN);
                memcpy(k->keys[i], h, GPUIPC__ALLOC_KEY_LEN);
        }
        memcpy(k->key, k->keys[0], GPUIPC__ALLOC_KEY_LEN);
        return 0;
}

/* Fills the key of the record's allocation, and checks that the fds of
 * the reply (one per cuda-vmm chunk, or a cuda-pool's pool) are there. */
static int view_key(gpuipc_client *c, const msgpack_object *reg, unsigned nfds,
                    const gpuipc_info *info, struct gpuipc__cumap *k)
{
        const msgpack_object *alloc = NULL;
        unsigned want;
        const uint8_t *h;
        size_t n;
        int r;

        k->kind = info->kind;
        k->size = info->alloc_size;
        if (info->kind != GPUIPC_KIND_CUDA_VMM) {
                if (proto_get_bin(reg, "handle", &h, &n) < 0 || n != CUDA_IPC_HANDLE_LEN)
                        return gpuipc__fail(c, -EBADMSG, "gpuipcd's %s record has no handle",
                                            info->kind == GPUIPC_KIND_CUDA_IPC ? "cuda-ipc"
                                                                               : "cuda-pool");
                memcpy(k->handle, h, CUDA_IPC_HANDLE_LEN);
                k->buffer_id = info->buffer_id;
                if (info->kind == GPUIPC_KIND_CUDA_IPC)
                        return 0;
        }
        if (k->size == 0)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's record has no alloc.size");
        if (proto_get_map(reg, "alloc", &alloc) < 0 ||
            proto_get_bin(alloc, "key", &h, &n) < 0 || n != GPUIPC__ALLOC_KEY_LEN)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's record has no alloc.key "
                                    "of %d bytes", GPUIPC__ALLOC_KEY_LEN);
        memcpy(k->key, h, GPUIPC__ALLOC_KEY_LEN);
        if (info->kind == GPUIPC_KIND_CUDA_VMM) {
                r = vmm_chunks(c, reg, alloc, info, k);
                if (r < 0)
                        return r;
        }
        want = info->kind == GPUIPC_KIND_CUDA_VMM ? k->n_chunks : 1;
        if (nfds != want)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's lookup reply carries %u fds, not %u",
                                    nfds, want);
        return 0;
}

/* Opens an IPC event handle (a record's, or a batch's), waiting for it
 * unless NO_SYNC.  own: the memory is this process's, which may not open
 * its own event: then *ret is NULL and the stream order the caller's
 * business.  The consumer device's context is current. */
static int event_open(gpuipc_client *c, struct cuda *cu, const uint8_t *b, bool own,
                      unsigned flags, CUevent *ret)
{
        CUipcEventHandle eh;
        CUevent ev;
        CUresult res;
        int r;

        *ret = NULL;
        r = GPUIPC__CU_NEED(c, cu, cuIpcOpenEventHandle);
        if (r == 0)
                r = GPUIPC__CU_NEED(c, cu, cuEventSynchronize);
        if (r < 0)
                return r;
        memcpy(eh.reserved, b, CUDA_IPC_HANDLE_LEN);
        res = cu->cuIpcOpenEventHandle(&ev, eh);
        if (res != CUDA_SUCCESS)
                return own ? 0 : gpuipc__cu_fail(c, cu, res, "cuIpcOpenEventHandle");
        *ret = ev;
        if (flags & GPUIPC_LOOKUP_NO_SYNC)
                return 0;
        res = cu->cuEventSynchronize(ev);
        if (res != CUDA_SUCCESS)
                return gpuipc__cu_fail(c, cu, res, "cuEventSynchronize (producer's event)");
        return 0;
}

/* The producer's event of a record (its bin b of n bytes; NULL: none),
 * into v->event. */
static int view_event(gpuipc_client *c, struct cuda *cu, const uint8_t *b, size_t n,
                      unsigned flags, gpuipc_view *v)
{
        CUevent ev;
        int r;

        if (!b)
                return 0;
        if (n != CUDA_IPC_HANDLE_LEN)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's record has a malformed event");
        r = event_open(c, cu, b, v->cumap->own, flags, &ev);
        v->event = ev;
        return r;
}

int gpuipc__cuda_event_open(gpuipc_client *c, const uint8_t *handle, int device, bool own,
                            unsigned flags, void **ret_event)
{
        struct cuda *cu;
        CUcontext saved;
        CUevent ev = NULL;
        int r;

        r = gpuipc__cu_get(c, &cu);
        if (r == 0)
                r = gpuipc__cu_enter(c, cu, device, &saved);
        if (r < 0)
                return r;
        r = event_open(c, cu, handle, own, flags, &ev);
        if (r < 0 && ev && cu->cuEventDestroy_v2) {
                (void)cu->cuEventDestroy_v2(ev);
                ev = NULL;
        }
        gpuipc__cu_leave(cu, saved);
        *ret_event = ev;
        return r;
}

void gpuipc__cuda_event_close(void *event, int device)
{
        struct cuda *cu;
        CUcontext saved;

        if (!event || gpuipc__cu_get(NULL, &cu) < 0)
                return;
        if (cu->cuEventDestroy_v2 && gpuipc__cu_enter(NULL, cu, device, &saved) == 0) {
                (void)cu->cuEventDestroy_v2((CUevent)event);
                gpuipc__cu_leave(cu, saved);
        }
}

int gpuipc__cuview_open(gpuipc_client *c, const msgpack_object *reg, const int *fds,
                        unsigned nfds, bool held, unsigned flags, int device, gpuipc_view *v)
{
        struct gpuipc__cumap k = {};
        const gpuipc_info *info = v->info;
        struct cuda *cu;
        CUcontext saved = NULL;
        bool copy, entered = false;
        const uint8_t *ev = NULL;
        size_t ev_len = 0;
        int home, r;

        r = gpuipc__cu_get(c, &cu);
        if (r < 0)
                return r;
        if (info->kind == GPUIPC_KIND_CUDA_IPC) {
                r = GPUIPC__CU_NEED(c, cu, cuIpcOpenMemHandle_v2);
                if (r < 0)
                        return r;
        }
        TRACE("c.cv_begin", 0);
        r = gpuipc__cu_ordinal(c, cu, info->device, k.uuid, &home);
        if (r < 0)
                return r;
        r = gpuipc__cu_pick_device(c, cu, info, flags, device, home, &k.ordinal, &copy);
        if (r < 0)
                return r;
        k.home = home;
        r = view_key(c, reg, nfds, info, &k);
        if (r < 0)
                goto out;
        TRACE("c.cv_keyed", 0);
        k.alloc_id = info->alloc_id;
        /* A warm lookup with no event to open and nothing to copy makes no
         * driver call: the context is entered only to map, open or copy. */
        if (proto_get_bin(reg, "event", &ev, &ev_len) < 0)
                ev = NULL;
        v->cumap = copy || ev ? NULL : gpuipc__cumap_take(c, &k, held);
        entered = !v->cumap;
        if (entered) {
                r = gpuipc__cu_enter(c, cu, k.ordinal, &saved);
                TRACE("c.cv_entered", 0);
                if (r < 0)
                        goto out;
                r = gpuipc__cumap_get(c, cu, fds, &k, held, &v->cumap);
        }
        TRACE("c.cv_mapped", entered);
        if (r < 0)
                goto leave;
        v->device = k.ordinal;
        if (info->size > v->cumap->size ||
            info->offset > v->cumap->size - info->size) {
                r = gpuipc__fail(c, -EBADMSG, "the record's range exceeds its allocation");
                goto leave;
        }
        v->data = (uint8_t *)(uintptr_t)(v->cumap->base + info->offset);
        /* A copy is taken after the producer's writes, whatever NO_SYNC says. */
        r = view_event(c, cu, ev, ev_len, copy ? flags & ~GPUIPC_LOOKUP_NO_SYNC : flags, v);
        if (r == 0 && copy)
                r = gpuipc__cuview_copy(c, cu, device, v);
leave:
        if (entered)
                gpuipc__cu_leave(cu, saved);
        TRACE("c.cv_left", 0);
out:
        free(k.keys);
        free(k.sizes);
        return r;
}

bool gpuipc__cuview_own(const gpuipc_view *v)
{
        return v->cumap && v->cumap->own;
}

void gpuipc__cuview_extent(const gpuipc_view *v, uint8_t **base, uint64_t *size)
{
        if (!v->cumap)
                return;
        *base = (uint8_t *)(uintptr_t)v->cumap->base;
        *size = v->cumap->size;
}

void gpuipc__cuview_close(gpuipc_view *v)
{
        struct cuda *cu;
        CUcontext saved;

        if (!v->cumap && !v->event && !v->copy)
                return;
        if (gpuipc__cu_get(NULL, &cu) < 0)
                return;         /* cannot happen: the view was opened */
        gpuipc__cuda_event_close(v->event, v->device);
        v->event = NULL;
        if (v->copy && gpuipc__cu_enter(NULL, cu, v->device, &saved) == 0) {
                (void)cu->cuMemFree_v2((CUdeviceptr)v->copy);
                gpuipc__cu_leave(cu, saved);
        }
        v->copy = 0;
        if (v->cumap)
                gpuipc__cumap_put(cu, v->cumap);
        v->cumap = NULL;
}

#endif
