/* cudaexport.c: what a device pointer is, and how it can be shared
 * (producer side).
 *
 * Four paths, chosen from what the driver says of the memory:
 *  - a pointer of a stream-ordered pool (cudaMallocAsync,
 *    cuMemAllocFromPoolAsync): cuda-pool, when the pool was created with
 *    the POSIX fd handle type.  The pool is exported once
 *    (cuMemPoolExportToShareableHandle) and each allocation with
 *    cuMemPoolExportPointer at its start; the device's default pool cannot
 *    be exported at all.
 *  - VMM memory (cuMemCreate + cuMemMap) exportable as a POSIX fd:
 *    cuda-vmm, over every chunk the range touches.  PyTorch's expandable
 *    segments map 2 MiB or 20 MiB chunks back to back into one reserved
 *    range, and cuMemGetAddressRange names one chunk only, so the range is
 *    walked chunk by chunk; each is exported once.
 *  - anything else: cuda-ipc, a legacy IPC handle of the allocation's base.
 *  - none of them possible: with GPUIPC_REGISTER_COPY a copy into cuda-vmm
 *    memory; else an error that says what would make sharing possible.
 *
 * Two per-process tables keep what was exported, so that every
 * registration of one allocation sends the same fd and key (the daemon keys
 * its allocation table by the key: an fd cannot name the allocation, since
 * every export is an open of /dev/nvidiactl with one inode):
 *  - chunks: the POSIX fd of each VMM allocation and the random key drawn
 *    for it, kept until gpuipc_cudabuf_free() of that memory or the end of
 *    the process; an entry whose base turns up again with another handle
 *    is replaced;
 *  - pools: the fd and key of each exported pool, kept until the end of the
 *    process (a pool destroyed and another created at the same handle value
 *    would reuse the entry: do not destroy a pool whose pointers were
 *    registered while the process goes on registering).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cudaint.h"

#ifdef GPUIPC_HAVE_CUDA_H

struct chunk_export {
        struct chunk_export *next;
        CUdeviceptr base;
        uint64_t size;                  /* of the chunk's mapping */
        CUmemGenericAllocationHandle h;
        int fd;
        uint8_t key[GPUIPC__ALLOC_KEY_LEN];
        int ordinal;
        uint8_t uuid[CUDA_UUID_LEN];
};

struct pool_export {
        struct pool_export *next;
        CUmemoryPool pool;
        int fd;
        uint8_t key[GPUIPC__ALLOC_KEY_LEN];
};

static pthread_mutex_t exports_lock = PTHREAD_MUTEX_INITIALIZER;
static struct chunk_export *chunk_exports;
static struct pool_export *pool_exports;

static int why(struct gpuipc__devreg *d, int err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int why(struct gpuipc__devreg *d, int err, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(d->why, sizeof(d->why), fmt, ap);
        va_end(ap);
        return err;
}

static int cu_why(struct gpuipc__devreg *d, const struct cuda *cu, CUresult res, const char *what)
{
        char text[160];
        int r = cuda_result_errno(res);

        return why(d, r < 0 ? r : -EIO, "%s failed: %s", what,
                   cuda_result_text(cu, res, text, sizeof(text)));
}

void gpuipc__cuexport_forget(CUdeviceptr base)
{
        struct chunk_export **pp, *e;

        pthread_mutex_lock(&exports_lock);
        for (pp = &chunk_exports; *pp; pp = &(*pp)->next)
                if ((*pp)->base == base)
                        break;
        e = *pp;
        if (e)
                *pp = e->next;
        pthread_mutex_unlock(&exports_lock);
        if (e) {
                close(e->fd);
                free(e);
        }
}

/* 16 random bytes for a new export entry (what: "an alloc_key"); blocks only
 * before the kernel's pool is ready.  Drawn before the export, so that no fd
 * is left to close when it fails. */
static int draw_key(struct gpuipc__devreg *d, uint8_t key[GPUIPC__ALLOC_KEY_LEN],
                    const char *what)
{
        ssize_t n;

        do
                n = getrandom(key, GPUIPC__ALLOC_KEY_LEN, 0);
        while (n < 0 && errno == EINTR);
        if (n == GPUIPC__ALLOC_KEY_LEN)
                return 0;
        n = n < 0 ? -errno : -EIO;
        return why(d, (int)n, "cannot draw %s: %s", what, strerror((int)-n));
}

/* Forgets the entries of mappings that [base, base + size) overlaps: what
 * was mapped there is gone, so none may answer for it.  Lock held. */
static void drop_overlaps(CUdeviceptr base, uint64_t size)
{
        struct chunk_export **pp = &chunk_exports, *e;

        while ((e = *pp)) {
                if (e->base < base + size && base < e->base + e->size) {
                        *pp = e->next;
                        close(e->fd);
                        free(e);
                } else {
                        pp = &e->next;
                }
        }
}

/* The exported chunk whose mapping holds addr, or NULL.  Lock held. */
static struct chunk_export *chunk_at(CUdeviceptr addr)
{
        struct chunk_export *e;

        for (e = chunk_exports; e; e = e->next)
                if (addr >= e->base && addr - e->base < e->size)
                        return e;
        return NULL;
}

bool gpuipc__cuexport_known_vmm(struct cuda *cu, uint64_t dptr, uint64_t size,
                                struct gpuipc__devreg *d)
{
        CUmemGenericAllocationHandle h[PROTO_CHUNKS_MAX], now;
        uint64_t end = dptr + size, total = 0;
        struct chunk_export *e;
        CUcontext saved;
        CUdeviceptr cb;
        unsigned n = 0;
        bool same = true;
        size_t cs;

        if (!cu->cuMemRetainAllocationHandle || !cu->cuMemRelease)
                return false;
        pthread_mutex_lock(&exports_lock);
        e = chunk_at(dptr);
        while (e) {
                /* Past what one registration carries, or another device's
                 * chunk: not this path's to judge. */
                if (n == PROTO_CHUNKS_MAX || (n > 0 && (e->ordinal != d->ordinal ||
                                                        memcmp(e->uuid, d->uuid, CUDA_UUID_LEN)))) {
                        e = NULL;
                        break;
                }
                if (n == 0) {
                        memset(d, 0, sizeof(*d));
                        d->base = e->base;
                        d->ordinal = e->ordinal;
                        memcpy(d->uuid, e->uuid, CUDA_UUID_LEN);
                }
                d->cbase[n] = e->base;
                d->csize[n] = e->size;
                d->fds[n] = e->fd;
                memcpy(d->keys[n], e->key, GPUIPC__ALLOC_KEY_LEN);
                h[n++] = e->h;
                total += e->size;
                if (d->base + total >= end)
                        break;
                /* The next chunk starts where this one ends. */
                e = chunk_at(d->base + total);
                if (e && e->base != d->base + total)
                        e = NULL;
        }
        pthread_mutex_unlock(&exports_lock);
        if (!e)
                return false;
        /* Each chunk still the mapping that was exported, of the allocation
         * that was exported: an address unmapped and mapped again holds
         * another, or the same one at another place. */
        if (gpuipc__cu_enter(NULL, cu, d->ordinal, &saved) < 0)
                return false;
        for (unsigned i = 0; i < n && same; i++) {
                same = cu->cuMemGetAddressRange_v2(&cb, &cs, d->cbase[i]) == CUDA_SUCCESS &&
                       cb == d->cbase[i] && cs == d->csize[i] &&
                       cu->cuMemRetainAllocationHandle(&now, (void *)(uintptr_t)cb) ==
                               CUDA_SUCCESS;
                if (same) {
                        (void)cu->cuMemRelease(now);    /* drops the retain's reference only */
                        same = now == h[i];
                }
        }
        gpuipc__cu_leave(cu, saved);
        if (!same)
                return false;
        d->path = GPUIPC_PATH_CUDA_VMM;
        d->n_chunks = n;
        d->alloc_size = total;
        d->offset = dptr - d->base;
        for (unsigned i = n; i < PROTO_CHUNKS_MAX; i++)
                d->fds[i] = -1;
        return true;
}

/* The fd (owned by the table) and key of the VMM chunk mapped at base,
 * exported on first use.  Context current. */
static int chunk_export(struct cuda *cu, CUdeviceptr base, struct gpuipc__devreg *d, unsigned i)
{
        CUmemGenericAllocationHandle h;
        struct chunk_export *e;
        CUresult res;
        int fd = -1, r = 0;

        res = cu->cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)base);
        if (res != CUDA_SUCCESS)
                return cu_why(d, cu, res, "cuMemRetainAllocationHandle");
        pthread_mutex_lock(&exports_lock);
        /* The table's mappings never overlap (each export drops what its
         * own overlaps), so the entry holding base is the only candidate. */
        e = chunk_at(base);
        if (e && e->base == base && e->h == h && e->size == d->csize[i])
                goto out;
        /* Anything else there was freed and mapped again: another
         * allocation, the same one elsewhere, or a handle value the driver
         * reused at another size.  The entry at base goes with the rest. */
        drop_overlaps(base, d->csize[i]);
        e = calloc(1, sizeof(*e));
        if (!e) {
                r = why(d, -ENOMEM, "out of memory");
                goto out;
        }
        r = draw_key(d, e->key, "an alloc_key");
        if (r < 0) {
                free(e);
                e = NULL;
                goto out;
        }
        res = cu->cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (res != CUDA_SUCCESS) {
                free(e);
                e = NULL;
                r = cu_why(d, cu, res, "cuMemExportToShareableHandle");
                goto out;
        }
        e->base = base;
        e->h = h;
        e->fd = fd;
        e->next = chunk_exports;
        chunk_exports = e;
out:
        if (e) {
                e->size = d->csize[i];
                e->ordinal = d->ordinal;
                memcpy(e->uuid, d->uuid, CUDA_UUID_LEN);
                d->fds[i] = e->fd;
                memcpy(d->keys[i], e->key, GPUIPC__ALLOC_KEY_LEN);
        }
        pthread_mutex_unlock(&exports_lock);
        (void)cu->cuMemRelease(h);      /* drops the retain's reference only */
        return r;
}

/* The pool's fd (owned by the table) and key into d, exported once. */
static int pool_export(struct cuda *cu, CUmemoryPool pool, struct gpuipc__devreg *d)
{
        struct pool_export *e;
        CUresult res;
        int fd = -1, r = 0;

        pthread_mutex_lock(&exports_lock);
        for (e = pool_exports; e; e = e->next)
                if (e->pool == pool)
                        goto out;
        e = calloc(1, sizeof(*e));
        if (!e) {
                r = why(d, -ENOMEM, "out of memory");
                goto out;
        }
        r = draw_key(d, e->key, "a pool_key");
        if (r < 0) {
                free(e);
                e = NULL;
                goto out;
        }
        res = cu->cuMemPoolExportToShareableHandle(&fd, pool,
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (res != CUDA_SUCCESS) {
                free(e);
                e = NULL;
                r = cu_why(d, cu, res, "cuMemPoolExportToShareableHandle");
                goto out;
        }
        e->pool = pool;
        e->fd = fd;
        e->next = pool_exports;
        pool_exports = e;
out:
        if (e) {
                d->fds[0] = e->fd;
                memcpy(d->keys[0], e->key, GPUIPC__ALLOC_KEY_LEN);
        }
        pthread_mutex_unlock(&exports_lock);
        return r;
}

/* The memory at dptr can be shared without a copy: never; why says why,
 * naming what would make it possible. */
static int not_shareable(struct gpuipc__devreg *d, unsigned flags, int err, const char *brief)
{
        d->brief = brief;
        if (flags & GPUIPC_REGISTER_COPY) {
                d->path = GPUIPC_PATH_COPY;
                return 0;
        }
        d->path = GPUIPC_PATH_NONE;
        return err;
}

static unsigned long long handle_types(struct cuda *cu, CUdeviceptr p)
{
        unsigned long long t = 0;

        if (cu->cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, p) !=
            CUDA_SUCCESS)
                return 0;
        return t;
}

/* A pointer of a stream-ordered pool.  Context current. */
static int classify_pool(struct cuda *cu, uint64_t dptr, uint64_t size, unsigned flags,
                         struct gpuipc__devreg *d)
{
        if (size > d->alloc_size - d->offset)
                return why(d, -EINVAL, "%llu bytes at offset %llu exceed the pool allocation "
                           "(%llu bytes) at 0x%llx", (unsigned long long)size,
                           (unsigned long long)d->offset, (unsigned long long)d->alloc_size,
                           (unsigned long long)d->base);
        if (!(handle_types(cu, dptr) & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
                why(d, -ENOTSUP, "0x%llx comes from a stream-ordered memory pool created "
                    "without an export handle type (the device's default pool is one: torch's "
                    "cudaMallocAsync backend and CuPy's MemoryAsyncPool use it), which CUDA "
                    "cannot share: allocate from a pool created with "
                    "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (RMM's "
                    "cuda_async_memory_resource with an export handle type, cuda.core's "
                    "IPC-enabled memory resource), or register with GPUIPC_REGISTER_COPY",
                    (unsigned long long)dptr);
                return not_shareable(d, flags, -ENOTSUP, "a stream-ordered pool without an "
                                     "export handle type (such as the device's default pool)");
        }
        if (!cu->cuMemPoolExportPointer || !cu->cuMemPoolExportToShareableHandle) {
                why(d, -ENOTSUP, "the CUDA driver lacks the memory pool export calls (driver "
                    "too old?)");
                return not_shareable(d, flags, -ENOTSUP, "a driver without pool export");
        }
        d->path = GPUIPC_PATH_CUDA_POOL;
        d->n_chunks = 1;
        return 0;
}

/* VMM memory: walks the chunks that [dptr, dptr + size) touches, from the
 * one holding dptr (d->base).  Context current. */
static int classify_vmm(struct cuda *cu, uint64_t dptr, uint64_t size, unsigned flags,
                        struct gpuipc__devreg *d)
{
        CUdeviceptr addr = d->base, cb;
        uint64_t end = dptr + size, total = 0;
        size_t cs;
        CUresult res;

        d->n_chunks = 0;
        while (d->base + total < end) {
                if (d->n_chunks == PROTO_CHUNKS_MAX) {
                        why(d, -E2BIG, "%llu bytes at 0x%llx span more than %u VMM chunks, the "
                            "most one registration may carry (PyTorch's expandable segments "
                            "use 20 MiB chunks): register it in parts, or with "
                            "GPUIPC_REGISTER_COPY", (unsigned long long)size,
                            (unsigned long long)dptr, PROTO_CHUNKS_MAX);
                        return not_shareable(d, flags, -E2BIG, "more VMM chunks than one "
                                             "registration carries");
                }
                res = cu->cuMemGetAddressRange_v2(&cb, &cs, addr);
                if (res != CUDA_SUCCESS || cb != addr || cs == 0)
                        return why(d, -EINVAL, "%llu bytes at 0x%llx are not mapped contiguously: "
                                   "nothing is mapped at 0x%llx", (unsigned long long)size,
                                   (unsigned long long)dptr, (unsigned long long)addr);
                if (!(handle_types(cu, addr) & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
                        why(d, -ENOTSUP, "the VMM chunk at 0x%llx (%zu bytes) was created "
                            "without an exportable handle type (its requestedHandleTypes is "
                            "none): create it with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR "
                            "(PyTorch's expandable segments do on Linux), or register with "
                            "GPUIPC_REGISTER_COPY", (unsigned long long)addr, cs);
                        return not_shareable(d, flags, -ENOTSUP, "a VMM chunk without an "
                                             "exportable handle type");
                }
                d->cbase[d->n_chunks] = cb;
                d->csize[d->n_chunks] = cs;
                d->n_chunks++;
                total += cs;
                addr = cb + cs;
        }
        d->alloc_size = total;
        d->path = GPUIPC_PATH_CUDA_VMM;
        return 0;
}

/* Legacy IPC: a handle of the allocation's base.  Context current. */
static int classify_ipc(struct cuda *cu, uint64_t size, unsigned flags,
                        struct gpuipc__devreg *d)
{
        CUresult res;

        if (size > d->alloc_size - d->offset)
                return why(d, -EINVAL, "%llu bytes at offset %llu exceed the allocation (%llu "
                           "bytes)", (unsigned long long)size, (unsigned long long)d->offset,
                           (unsigned long long)d->alloc_size);
        res = cu->cuIpcGetMemHandle(&d->handle, d->base);
        if (res != CUDA_SUCCESS) {
                cu_why(d, cu, res, "cuIpcGetMemHandle");
                return not_shareable(d, flags, cuda_result_errno(res) < 0
                                     ? cuda_result_errno(res) : -EIO,
                                     "memory that cuIpcGetMemHandle refuses");
        }
        d->path = GPUIPC_PATH_CUDA_IPC;
        d->n_chunks = 1;
        return 0;
}

/* The pool of dptr, whether legacy IPC can share it and, if so, its buffer
 * id, in one driver call where the driver has cuPointerGetAttributes.
 * Asking whether memory is VMM (cuMemRetainAllocationHandle) fails, and
 * costs 13 to 35 us on an H200, for every cuMemAlloc allocation: memory the
 * driver calls legacy-IPC capable skips that question. */
static void probe(struct cuda *cu, uint64_t dptr, CUmemoryPool *ret_pool, int *ret_legacy,
                  unsigned long long *ret_buffer_id)
{
        CUpointer_attribute a[] = { CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                                    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                    CU_POINTER_ATTRIBUTE_BUFFER_ID };
        unsigned long long id = 0;
        void *v[] = { ret_pool, ret_legacy, &id };

        *ret_pool = NULL;
        *ret_legacy = 0;
        *ret_buffer_id = 0;
        if (cu->cuPointerGetAttributes &&
            cu->cuPointerGetAttributes(3, a, v, dptr) == CUDA_SUCCESS) {
                if (*ret_legacy)
                        *ret_buffer_id = id;
                return;
        }
        *ret_pool = NULL;       /* an old driver: ask for the pool alone */
        *ret_legacy = 0;
        if (cu->cuPointerGetAttribute(ret_pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, dptr) !=
            CUDA_SUCCESS)
                *ret_pool = NULL;
}

/* Context current. */
static int classify(struct cuda *cu, uint64_t dptr, uint64_t size, unsigned flags,
                    struct gpuipc__devreg *d)
{
        CUmemGenericAllocationHandle h;
        CUmemoryPool pool;
        size_t asz = 0;
        CUresult res;
        int legacy;

        res = cu->cuMemGetAddressRange_v2(&d->base, &asz, dptr);
        if (res != CUDA_SUCCESS)
                return cu_why(d, cu, res, "cuMemGetAddressRange");
        d->alloc_size = asz;
        d->offset = dptr - d->base;
        probe(cu, dptr, &pool, &legacy, &d->buffer_id);
        if (pool) {
                d->pool = pool;
                return classify_pool(cu, dptr, size, flags, d);
        }
        if (!legacy && !(flags & GPUIPC_REGISTER_CUDA_IPC) && cu->cuMemRetainAllocationHandle &&
            cu->cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)dptr) == CUDA_SUCCESS) {
                (void)cu->cuMemRelease(h);
                return classify_vmm(cu, dptr, size, flags, d);
        }
        return classify_ipc(cu, size, flags, d);
}

/* The fds, keys or pool export data of a classified pointer. */
static int export(struct cuda *cu, struct gpuipc__devreg *d)
{
        CUresult res;
        int r = 0;

        if (d->path == GPUIPC_PATH_CUDA_VMM) {
                for (unsigned i = 0; i < d->n_chunks && r == 0; i++)
                        r = chunk_export(cu, d->cbase[i], d, i);
                return r;
        }
        if (d->path != GPUIPC_PATH_CUDA_POOL)
                return 0;
        r = pool_export(cu, d->pool, d);
        if (r < 0)
                return r;
        res = cu->cuMemPoolExportPointer(&d->export_data, d->base);
        return res == CUDA_SUCCESS ? 0 : cu_why(d, cu, res, "cuMemPoolExportPointer");
}

int gpuipc__cu_describe(struct cuda *cu, uint64_t dptr, uint64_t size, void *event,
                        unsigned flags, bool do_export, struct gpuipc__devreg *d)
{
        CUcontext saved;
        CUresult res;
        int r;

        memset(d, 0, sizeof(*d));
        for (unsigned i = 0; i < PROTO_CHUNKS_MAX; i++)
                d->fds[i] = -1;
        if (!cu->cuPointerGetAttribute || !cu->cuMemGetAddressRange_v2 || !cu->cuIpcGetMemHandle)
                return why(d, -ENOTSUP, "the CUDA driver lacks cuPointerGetAttribute, "
                           "cuMemGetAddressRange or cuIpcGetMemHandle (driver too old?)");
        res = cu->cuPointerGetAttribute(&d->ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr);
        if (res != CUDA_SUCCESS)
                return why(d, -EINVAL, "0x%llx is not device memory of a CUDA device",
                           (unsigned long long)dptr);
        r = gpuipc__cu_uuid(NULL, cu, d->ordinal, d->uuid);
        if (r < 0)
                return why(d, r, "cannot read the UUID of device %d", d->ordinal);
        r = gpuipc__cu_enter(NULL, cu, d->ordinal, &saved);
        if (r < 0)
                return why(d, r, "cannot make device %d's primary context current",
                           d->ordinal);
        r = classify(cu, dptr, size, flags, d);
        if (r < 0 || !do_export || d->path == GPUIPC_PATH_COPY)
                goto out;
        if (event) {
                res = cu->cuIpcGetEventHandle ? cu->cuIpcGetEventHandle(&d->event, (CUevent)event)
                                              : CUDA_ERROR_NOT_SUPPORTED;
                if (res != CUDA_SUCCESS) {
                        r = cu_why(d, cu, res, "cuIpcGetEventHandle (was the event created "
                                   "with CU_EVENT_INTERPROCESS?)");
                        goto out;
                }
                d->has_event = true;
        }
        r = export(cu, d);
        /* probe() read a legacy allocation's id (one id covers it all). */
        if (r == 0 && d->path != GPUIPC_PATH_CUDA_VMM &&
            !(d->path == GPUIPC_PATH_CUDA_IPC && d->buffer_id)) {
                res = cu->cuPointerGetAttribute(&d->buffer_id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                                d->base);
                if (res != CUDA_SUCCESS)
                        r = cu_why(d, cu, res, "cuPointerGetAttribute(BUFFER_ID)");
        }
out:
        gpuipc__cu_leave(cu, saved);
        return r;
}

int gpuipc_cuda_explain(uint64_t dptr, uint64_t size, unsigned flags, char *buf, size_t len)
{
        struct gpuipc__devreg *d;
        struct cuda *cu;
        int r;

        if (dptr == 0 || size == 0 || dptr > UINT64_MAX - size || (buf == NULL && len > 0))
                return -EINVAL;
        r = gpuipc__cu_get(NULL, &cu);
        if (r < 0) {
                if (len)
                        snprintf(buf, len, "none: CUDA driver unavailable here: %s",
                                 gpuipc__cu_why());
                return r;
        }
        d = malloc(sizeof(*d));
        if (!d)
                return -ENOMEM;
        r = gpuipc__cu_describe(cu, dptr, size, NULL, flags, false, d);
        if (r < 0 && d->brief)
                r = 0;          /* device memory that cannot be shared: GPUIPC_PATH_NONE */
        if (len == 0)
                goto out;
        if (r < 0 || d->path == GPUIPC_PATH_NONE)
                snprintf(buf, len, "none: %s", d->why);
        else if (d->path == GPUIPC_PATH_COPY)
                snprintf(buf, len, "copy: into cuda-vmm memory held by gpuipcd, since zero-copy "
                         "sharing is impossible: %s", d->why);
        else if (d->path == GPUIPC_PATH_CUDA_VMM)
                snprintf(buf, len, "cuda-vmm: VMM memory exportable as POSIX fds, %u chunk%s "
                         "(%llu bytes) from 0x%llx, at offset %llu; the daemon holds the fds, "
                         "so the buffer outlives this process", d->n_chunks,
                         d->n_chunks == 1 ? "" : "s", (unsigned long long)d->alloc_size,
                         (unsigned long long)d->base, (unsigned long long)d->offset);
        else if (d->path == GPUIPC_PATH_CUDA_POOL)
                snprintf(buf, len, "cuda-pool: a pointer of an exportable stream-ordered pool "
                         "(allocation of %llu bytes at 0x%llx, at offset %llu); the memory "
                         "stays this process's: consumers free their imports before it frees",
                         (unsigned long long)d->alloc_size, (unsigned long long)d->base,
                         (unsigned long long)d->offset);
        else
                snprintf(buf, len, "cuda-ipc: a legacy IPC handle of the allocation of %llu "
                         "bytes at 0x%llx, at offset %llu; the memory stays this process's "
                         "and consumers must share its PID namespace",
                         (unsigned long long)d->alloc_size, (unsigned long long)d->base,
                         (unsigned long long)d->offset);
out:
        if (r == 0)
                r = d->path;
        free(d);
        return r;
}

#endif

/* Needs no driver. */
static const char *const path_names[] = {
        [GPUIPC_PATH_NONE] = "none",
        [GPUIPC_PATH_CUDA_IPC] = "cuda-ipc",
        [GPUIPC_PATH_CUDA_VMM] = "cuda-vmm",
        [GPUIPC_PATH_CUDA_POOL] = "cuda-pool",
        [GPUIPC_PATH_COPY] = "copy",
};

const char *gpuipc_cuda_path_name(int path)
{
        if (path < 0 || (size_t)path >= sizeof(path_names) / sizeof(path_names[0]))
                return "unknown";
        return path_names[path];
}

