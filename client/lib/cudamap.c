/* cudamap.c: device allocations opened in this process, and device views.
 *
 * Each allocation is opened once per process and shared by refcounted
 * views at their offsets; the last view closes it.  The driver's own
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

#include "cudaint.h"

#ifdef GPUIPC_HAVE_CUDA_H

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

static pthread_mutex_t cumaps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gpuipc__cumap *cumaps;

CUdeviceptr gpuipc__cumap_base(const struct gpuipc__cumap *m)
{
        return m->base;
}

uint64_t gpuipc__cumap_size(const struct gpuipc__cumap *m)
{
        return m->size;
}

static bool key_eq(const struct gpuipc__cumap *a, const struct gpuipc__cumap *b)
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

static void cumap_free(struct gpuipc__cumap *m)
{
        if (!m)
                return;
        free(m->keys);
        free(m->sizes);
        free(m->chunks);
        free(m);
}

/* Opens k's allocation into k (its context current).  Lock held. */
static int cumap_open(gpuipc_client *c, struct cuda *cu, const int *fds, struct gpuipc__cumap *k)
{
        CUipcMemHandle h;
        CUresult res;

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

static void cumap_close(struct cuda *cu, struct gpuipc__cumap *m)
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

/* ---- the cache ---------------------------------------------------------- */

static struct {
        struct gpuipc__cumap *head, *tail;      /* unreferenced entries, oldest first */
        uint64_t bytes, max_bytes;
        unsigned n, max_n;
        bool init;
} cache;

#define CACHE_BYTES_DEFAULT   (16ull << 30)
#define CACHE_ENTRIES_DEFAULT 1024u

/* Lock held. */
static void cache_init(void)
{
        const char *b = getenv("GPUIPC_MAP_CACHE_BYTES"), *n = getenv("GPUIPC_MAP_CACHE_ENTRIES");

        if (cache.init)
                return;
        cache.max_bytes = b && *b ? strtoull(b, NULL, 0) : CACHE_BYTES_DEFAULT;
        cache.max_n = n && *n ? (unsigned)strtoul(n, NULL, 0) : CACHE_ENTRIES_DEFAULT;
        cache.init = true;
}

bool gpuipc__cucache_enabled(void)
{
        bool on;

        pthread_mutex_lock(&cumaps_lock);
        cache_init();
        on = cache.max_bytes > 0 && cache.max_n > 0;
        pthread_mutex_unlock(&cumaps_lock);
        return on;
}

static void lru_remove(struct gpuipc__cumap *m)
{
        if (m->lprev)
                m->lprev->lnext = m->lnext;
        else
                cache.head = m->lnext;
        if (m->lnext)
                m->lnext->lprev = m->lprev;
        else
                cache.tail = m->lprev;
        m->lprev = m->lnext = NULL;
        cache.bytes -= m->size;
        cache.n--;
}

static void lru_append(struct gpuipc__cumap *m)
{
        m->lprev = cache.tail;
        m->lnext = NULL;
        if (cache.tail)
                cache.tail->lnext = m;
        else
                cache.head = m;
        cache.tail = m;
        cache.bytes += m->size;
        cache.n++;
}

static bool holds(const struct gpuipc__cumap *m, const gpuipc_client *c)
{
        for (unsigned i = 0; i < m->n_holders; i++)
                if (m->holders[i] == c)
                        return true;
        return false;
}

/* Queues `unhold` of alloc on c, sent at c's next call; best effort under
 * memory pressure (the hold then lasts until c disconnects). */
static void queue_unhold(gpuipc_client *c, uint64_t alloc)
{
        if (c->n_unholds == c->cap_unholds) {
                unsigned cap = c->cap_unholds ? c->cap_unholds * 2 : 16;
                uint64_t *p = realloc(c->unholds, cap * sizeof(*p));
                if (!p)
                        return;
                c->unholds = p;
                c->cap_unholds = cap;
        }
        c->unholds[c->n_unholds++] = alloc;
}

/* Unlinks, closes and frees m (unreferenced, out of the LRU list), and
 * queues the unholds of its holders.  Lock held: a lookup racing with this
 * must not find the key again before the mapping is gone. */
static void entry_drop(struct cuda *cu, struct gpuipc__cumap *m)
{
        struct gpuipc__cumap **pp;
        CUcontext saved;

        for (pp = &cumaps; *pp; pp = &(*pp)->next)
                if (*pp == m) {
                        *pp = m->next;
                        break;
                }
        if (gpuipc__cu_enter(NULL, cu, m->ordinal, &saved) == 0) {
                cumap_close(cu, m);
                gpuipc__cu_leave(cu, saved);
        }
        for (unsigned i = 0; i < m->n_holders; i++)
                queue_unhold(m->holders[i], m->alloc_id);
        free(m->holders);
        cumap_free(m);
}

/* Lock held.  Closes the oldest unreferenced entries over the limits. */
static void cache_evict(struct cuda *cu)
{
        while (cache.head && (cache.bytes > cache.max_bytes || cache.n > cache.max_n)) {
                struct gpuipc__cumap *m = cache.head;
                lru_remove(m);
                entry_drop(cu, m);
        }
}

static int add_holder(struct gpuipc__cumap *m, gpuipc_client *c)
{
        gpuipc_client **p;

        if (holds(m, c))
                return 0;
        p = realloc(m->holders, (m->n_holders + 1) * sizeof(*p));
        if (!p)
                return -ENOMEM;
        m->holders = p;
        m->holders[m->n_holders++] = c;
        return 0;
}

/* The shared entry for key k (filled in by the caller), opening it on first
 * use.  held: the lookup reply says c holds k's allocation.  The context of
 * k->ordinal is current. */
static int cumap_get(gpuipc_client *c, struct cuda *cu, const int *fds, struct gpuipc__cumap *k,
                     bool held, struct gpuipc__cumap **ret)
{
        struct gpuipc__cumap *m;
        int r = 0;

        pthread_mutex_lock(&cumaps_lock);
        for (m = cumaps; m; m = m->next)
                if (key_eq(m, k))
                        break;
        if (m) {
                if (m->refs++ == 0)
                        lru_remove(m);  /* a warm lookup: out of the cache */
                if (held) {
                        m->doomed = false;      /* registered again and held */
                        m->alloc_id = k->alloc_id;
                        if (add_holder(m, c) < 0)
                                queue_unhold(c, k->alloc_id);
                }
                goto out;
        }
        m = malloc(sizeof(*m));
        if (!m) {
                r = -ENOMEM;
                goto out;
        }
        /* The entry takes k's arrays. */
        *m = *k;
        k->keys = NULL;
        k->sizes = NULL;
        r = cumap_open(c, cu, fds, m);
        if (r < 0) {
                cumap_free(m);
                goto out;
        }
        if (held && add_holder(m, c) < 0)
                queue_unhold(c, k->alloc_id);
        m->refs = 1;
        m->next = cumaps;
        cumaps = m;
out:
        pthread_mutex_unlock(&cumaps_lock);
        if (r < 0)
                return r;
        *ret = m;
        return 0;
}

/* Whether m may stay mapped without views: cuda-vmm memory lives while we
 * hold the import; producer-bound memory only while held. */
static bool cacheable(const struct gpuipc__cumap *m)
{
        return !m->own && !m->doomed && (m->kind == GPUIPC_KIND_CUDA_VMM || m->n_holders > 0) &&
               cache.max_bytes > 0 && cache.max_n > 0 && m->size <= cache.max_bytes;
}

static void cumap_put(struct cuda *cu, struct gpuipc__cumap *m)
{
        pthread_mutex_lock(&cumaps_lock);
        cache_init();
        if (--m->refs == 0) {
                if (cacheable(m)) {
                        lru_append(m);
                        cache_evict(cu);
                } else {
                        entry_drop(cu, m);
                }
        }
        pthread_mutex_unlock(&cumaps_lock);
}

void gpuipc__cucache_uncache(gpuipc_client *c, uint64_t alloc)
{
        struct gpuipc__cumap *m, *next;
        struct cuda *cu;

        if (gpuipc__cu_get(NULL, &cu) < 0)
                return;
        pthread_mutex_lock(&cumaps_lock);
        for (m = cumaps; m; m = next) {
                next = m->next;
                if (m->alloc_id != alloc || !holds(m, c))
                        continue;
                m->doomed = true;
                if (m->refs == 0) {
                        lru_remove(m);
                        entry_drop(cu, m);
                }
        }
        pthread_mutex_unlock(&cumaps_lock);
}

void gpuipc__cucache_conn_lost(gpuipc_client *c)
{
        struct gpuipc__cumap *m, *next;
        struct cuda *cu;

        if (gpuipc__cu_get(NULL, &cu) < 0)
                return;         /* never loaded: nothing is mapped */
        pthread_mutex_lock(&cumaps_lock);
        for (m = cumaps; m; m = next) {
                next = m->next;
                if (!holds(m, c))
                        continue;
                for (unsigned i = 0; i < m->n_holders; i++)
                        if (m->holders[i] == c) {
                                m->holders[i] = m->holders[--m->n_holders];
                                break;
                        }
                /* Producer-bound memory nobody holds may be freed now. */
                if (m->kind == GPUIPC_KIND_CUDA_VMM || m->n_holders > 0)
                        continue;
                m->doomed = true;
                if (m->refs == 0) {
                        lru_remove(m);
                        entry_drop(cu, m);
                }
        }
        free(c->unholds);       /* the daemon dropped them with the connection */
        c->unholds = NULL;
        c->n_unholds = c->cap_unholds = 0;
        pthread_mutex_unlock(&cumaps_lock);
}

unsigned gpuipc__cucache_take_unholds(gpuipc_client *c, uint64_t **ret)
{
        unsigned n;

        pthread_mutex_lock(&cumaps_lock);
        n = c->n_unholds;
        *ret = c->unholds;
        c->unholds = NULL;
        c->n_unholds = c->cap_unholds = 0;
        pthread_mutex_unlock(&cumaps_lock);
        return n;
}

int gpuipc_cache_limits(uint64_t max_bytes, unsigned max_entries)
{
        struct cuda *cu;

        pthread_mutex_lock(&cumaps_lock);
        cache_init();
        cache.max_bytes = max_bytes;
        cache.max_n = max_entries;
        if (cache.head && gpuipc__cu_get(NULL, &cu) == 0)
                cache_evict(cu);
        pthread_mutex_unlock(&cumaps_lock);
        return 0;
}

int gpuipc_cache_trim(gpuipc_client *c)
{
        struct cuda *cu;
        int n = 0;

        pthread_mutex_lock(&cumaps_lock);
        if (cache.head && gpuipc__cu_get(NULL, &cu) == 0)
                while (cache.head) {
                        struct gpuipc__cumap *m = cache.head;
                        lru_remove(m);
                        entry_drop(cu, m);
                        n++;
                }
        pthread_mutex_unlock(&cumaps_lock);
        if (c) {
                int r = gpuipc__begin(c);       /* sends the unholds */
                if (r < 0)
                        return r;
        }
        return n;
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

/* Fills the key of the record's allocation; takes the fds of the reply
 * (one per cuda-vmm chunk, or a cuda-pool's pool) into fds. */
static int view_key(gpuipc_client *c, const msgpack_object *reg, struct gpuipc__reply *rp,
                    const gpuipc_info *info, struct gpuipc__cumap *k, int *fds)
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
        if (rp->nfds != want)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's lookup reply carries %u fds, not %u",
                                    rp->nfds, want);
        memcpy(fds, rp->fds, want * sizeof(int));
        rp->nfds = 0;                   /* ours now */
        return 0;
}

/* The producer's event: opened, and waited for unless NO_SYNC. */
static int view_event(gpuipc_client *c, struct cuda *cu, const msgpack_object *reg,
                      unsigned flags, gpuipc_view *v)
{
        CUipcEventHandle eh;
        CUevent ev;
        CUresult res;
        const uint8_t *b;
        size_t n;
        int r;

        if (proto_get_bin(reg, "event", &b, &n) < 0)
                return 0;
        if (n != CUDA_IPC_HANDLE_LEN)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's record has a malformed event");
        r = GPUIPC__CU_NEED(c, cu, cuIpcOpenEventHandle);
        if (r == 0)
                r = GPUIPC__CU_NEED(c, cu, cuEventSynchronize);
        if (r < 0)
                return r;
        memcpy(eh.reserved, b, CUDA_IPC_HANDLE_LEN);
        res = cu->cuIpcOpenEventHandle(&ev, eh);
        if (res != CUDA_SUCCESS) {
                /* The producer's own process may not open its own event;
                 * its stream order is the caller's business there. */
                if (v->cumap->own)
                        return 0;
                return gpuipc__cu_fail(c, cu, res, "cuIpcOpenEventHandle");
        }
        v->event = ev;
        if (flags & GPUIPC_LOOKUP_NO_SYNC)
                return 0;
        res = cu->cuEventSynchronize(ev);
        if (res != CUDA_SUCCESS)
                return gpuipc__cu_fail(c, cu, res, "cuEventSynchronize (producer's event)");
        return 0;
}

/* Fails with -EXDEV naming both devices: consumer cannot reach home. */
static int peer_fail(gpuipc_client *c, struct cuda *cu, const gpuipc_info *info, int consumer,
                     int home)
{
        uint8_t u[CUDA_UUID_LEN];
        char us[CUDA_UUID_STR_LEN + 1] = "?";

        if (gpuipc__cu_uuid(NULL, cu, consumer, u) == 0)
                cuda_uuid_format(u, us);
        return gpuipc__fail(c, -EXDEV, "%s lives on device %s (ordinal %d here), which device "
                            "%s (ordinal %d here) cannot access: cuDeviceCanAccessPeer says "
                            "no peer access between them; look it up with "
                            "GPUIPC_LOOKUP_COPY_TO_DEVICE (copy_to_device) for a copy",
                            info->name, info->device, home, us, consumer);
}

/* Which device to open the allocation on for a consumer on device
 * (-1: home), and whether the view must be a copy. */
static int pick_device(gpuipc_client *c, struct cuda *cu, const gpuipc_info *info,
                       unsigned flags, int device, int home, int *ret_open, bool *ret_copy)
{
        int n = 0, can;

        *ret_copy = false;
        *ret_open = home;
        if (device < 0 || device == home)
                return 0;
        if (cu->cuDeviceGetCount(&n) != CUDA_SUCCESS || device >= n)
                return gpuipc__fail(c, -ENODEV, "no CUDA device %d in this process (%d devices)",
                                    device, n);
        can = gpuipc__cu_can_peer(cu, device, home);
        if (can < 0)
                return gpuipc__fail(c, can, "cannot tell whether device %d can access device %d "
                                    "(cuDeviceCanAccessPeer): %s", device, home,
                                    gpuipc_strerror(can));
        if (can == 0 && !(flags & GPUIPC_LOOKUP_COPY_TO_DEVICE))
                return peer_fail(c, cu, info, device, home);
        *ret_copy = can == 0;
        if (can)
                *ret_open = device;
        return 0;
}

/* Replaces v's mapping (current context: its home device's) by a copy in
 * memory allocated on device; the producer's event was waited for. */
static int view_copy(gpuipc_client *c, struct cuda *cu, int device, gpuipc_view *v)
{
        CUdeviceptr dst = 0, src = (CUdeviceptr)(uintptr_t)v->data;
        size_t size = (size_t)v->info->size;
        const char *what = "cuMemAlloc (copy to device)";
        CUcontext saved, home_ctx, dst_ctx;
        CUresult res;
        int r;

        r = GPUIPC__CU_NEED(c, cu, cuMemAlloc_v2);
        if (r == 0)
                r = GPUIPC__CU_NEED(c, cu, cuMemFree_v2);
        if (r == 0)
                r = GPUIPC__CU_NEED(c, cu, cuMemcpyPeer);
        if (r == 0)
                r = gpuipc__cu_primary(c, cu, v->device, &home_ctx);
        if (r == 0)
                r = gpuipc__cu_primary(c, cu, device, &dst_ctx);
        if (r == 0)
                r = gpuipc__cu_enter(c, cu, device, &saved);
        if (r < 0)
                return r;
        res = cu->cuMemAlloc_v2(&dst, size ? size : 1);
        if (res == CUDA_SUCCESS) {
                /* Context to context: the driver stages the copy when the
                 * devices have no peer path.  (cuMemcpyDtoD from the
                 * consumer's context fails for cuda-vmm memory, which is
                 * mapped for its home device only.) */
                what = "cuMemcpyPeer (copy to device)";
                res = cu->cuMemcpyPeer(dst, dst_ctx, src, home_ctx, size);
        }
        if (res == CUDA_SUCCESS) {
                what = "cuCtxSynchronize (copy to device)";
                res = cu->cuCtxSynchronize();
        }
        if (res != CUDA_SUCCESS) {
                r = gpuipc__cu_fail(c, cu, res, what);
                if (dst)
                        (void)cu->cuMemFree_v2(dst);
        }
        gpuipc__cu_leave(cu, saved);
        if (r < 0)
                return r;
        /* The snapshot needs neither the producer's event nor the mapping. */
        if (v->event && cu->cuEventDestroy_v2)
                (void)cu->cuEventDestroy_v2((CUevent)v->event);
        v->event = NULL;
        cumap_put(cu, v->cumap);
        v->cumap = NULL;
        v->copy = dst;
        v->data = (uint8_t *)(uintptr_t)dst;
        v->device = device;
        return 0;
}

int gpuipc__cuview_open(gpuipc_client *c, const msgpack_object *reg, struct gpuipc__reply *rp,
                        unsigned flags, int device, gpuipc_view *v)
{
        struct gpuipc__cumap k = {};
        const gpuipc_info *info = v->info;
        int fds[PROTO_MAX_FDS];
        unsigned nfds = 0;
        struct cuda *cu;
        CUcontext saved;
        bool copy, held;
        int home, r;

        r = gpuipc__cu_get(c, &cu);
        if (r < 0)
                return r;
        if (info->kind == GPUIPC_KIND_CUDA_IPC) {
                r = GPUIPC__CU_NEED(c, cu, cuIpcOpenMemHandle_v2);
                if (r < 0)
                        return r;
        }
        r = gpuipc__cu_ordinal(c, cu, info->device, k.uuid, &home);
        if (r < 0)
                return r;
        r = pick_device(c, cu, info, flags, device, home, &k.ordinal, &copy);
        if (r < 0)
                return r;
        k.home = home;
        r = view_key(c, reg, rp, info, &k, fds);
        if (r < 0)
                goto out;
        nfds = k.kind == GPUIPC_KIND_CUDA_IPC ? 0 : k.kind == GPUIPC_KIND_CUDA_POOL ? 1
                                                                                    : k.n_chunks;
        r = gpuipc__cu_enter(c, cu, k.ordinal, &saved);
        if (r < 0)
                goto out;
        k.alloc_id = info->alloc_id;
        held = false;
        (void)proto_get_bool(rp->msg.root, "held", &held);
        r = cumap_get(c, cu, fds, &k, held, &v->cumap);
        if (r < 0)
                goto leave;
        v->device = k.ordinal;
        if (info->size > gpuipc__cumap_size(v->cumap) ||
            info->offset > gpuipc__cumap_size(v->cumap) - info->size) {
                r = gpuipc__fail(c, -EBADMSG, "the record's range exceeds its allocation");
                goto leave;
        }
        v->data = (uint8_t *)(uintptr_t)(gpuipc__cumap_base(v->cumap) + info->offset);
        /* A copy is taken after the producer's writes, whatever NO_SYNC says. */
        r = view_event(c, cu, reg, copy ? flags & ~GPUIPC_LOOKUP_NO_SYNC : flags, v);
        if (r == 0 && copy)
                r = view_copy(c, cu, device, v);
leave:
        gpuipc__cu_leave(cu, saved);
out:
        for (unsigned i = 0; i < nfds; i++)
                close(fds[i]);
        free(k.keys);
        free(k.sizes);
        return r;
}

void gpuipc__cuview_close(gpuipc_view *v)
{
        struct cuda *cu;
        CUcontext saved;

        if (!v->cumap && !v->event && !v->copy)
                return;
        if (gpuipc__cu_get(NULL, &cu) < 0)
                return;         /* cannot happen: the view was opened */
        if (v->event && gpuipc__cu_enter(NULL, cu, v->device, &saved) == 0) {
                if (cu->cuEventDestroy_v2)
                        (void)cu->cuEventDestroy_v2((CUevent)v->event);
                gpuipc__cu_leave(cu, saved);
        }
        v->event = NULL;
        if (v->copy && gpuipc__cu_enter(NULL, cu, v->device, &saved) == 0) {
                (void)cu->cuMemFree_v2((CUdeviceptr)v->copy);
                gpuipc__cu_leave(cu, saved);
        }
        v->copy = 0;
        if (v->cumap)
                cumap_put(cu, v->cumap);
        v->cumap = NULL;
}

#endif
