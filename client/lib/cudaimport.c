/* cudaimport.c: importing what other processes exported (consumer side):
 * VMM chunks from POSIX fds, mapped contiguously, and pointers of
 * stream-ordered pools.
 *
 * Each VMM chunk is imported once per process (cuMemImportFromShareableHandle
 * costs about 90 µs on an H200), keyed by (device UUID, alloc.key), and may
 * be mapped into several ranges: a registration that spans chunks 2 to 5 of
 * an expandable segment and another spanning 4 to 6 share the imports of 4
 * and 5, each range reserving its own addresses.  The last range using a
 * chunk releases its import.
 *
 * Each pool is imported once per process, keyed by (device UUID, pool key),
 * and kept until the process ends (a pool import is the expensive part of
 * a pool handoff; its pointers come and go).  Pointers are imported by
 * cudamap.c's table, once per allocation, and freed with cuMemFree when the
 * last view of it goes: before the view's release reaches the daemon, so
 * that the producer, told by its released event, frees after us (CUDA
 * requires the importer to free first).
 *
 * Calls are made with the consumer device's context current; the caller
 * holds cudamap.c's lock, which serialises these tables too.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cudaint.h"

#ifdef GPUIPC_HAVE_CUDA_H

struct gpuipc__cuchunk {
        struct gpuipc__cuchunk *next;
        uint8_t uuid[CUDA_UUID_LEN];
        uint8_t key[GPUIPC__ALLOC_KEY_LEN];
        uint64_t size;
        CUmemGenericAllocationHandle mh;
        unsigned refs;
};

struct pool_import {
        struct pool_import *next;
        uint8_t uuid[CUDA_UUID_LEN];
        uint8_t key[GPUIPC__ALLOC_KEY_LEN];
        CUmemoryPool pool;
        uint32_t access;                /* bit per ordinal granted access */
};

static struct gpuipc__cuchunk *chunks;
static struct pool_import *pools;

/* The import of one chunk, imported from fd on first use. */
static int chunk_get(gpuipc_client *c, struct cuda *cu, const uint8_t uuid[CUDA_UUID_LEN],
                     const uint8_t key[GPUIPC__ALLOC_KEY_LEN], uint64_t size, int fd,
                     struct gpuipc__cuchunk **ret)
{
        struct gpuipc__cuchunk *k;
        CUresult res;

        for (k = chunks; k; k = k->next)
                if (!memcmp(k->key, key, GPUIPC__ALLOC_KEY_LEN) &&
                    !memcmp(k->uuid, uuid, CUDA_UUID_LEN))
                        break;
        if (k) {
                if (k->size != size)
                        return gpuipc__fail(c, -EBADMSG, "gpuipcd's record gives a VMM chunk "
                                            "another size than before");
                k->refs++;
                *ret = k;
                return 0;
        }
        k = calloc(1, sizeof(*k));
        if (!k)
                return gpuipc__fail(c, -ENOMEM, "out of memory");
        res = cu->cuMemImportFromShareableHandle(&k->mh, (void *)(intptr_t)fd,
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (res != CUDA_SUCCESS) {
                free(k);
                return gpuipc__cu_fail(c, cu, res, "cuMemImportFromShareableHandle");
        }
        memcpy(k->uuid, uuid, CUDA_UUID_LEN);
        memcpy(k->key, key, GPUIPC__ALLOC_KEY_LEN);
        k->size = size;
        k->refs = 1;
        k->next = chunks;
        chunks = k;
        *ret = k;
        return 0;
}

static void chunk_put(struct cuda *cu, struct gpuipc__cuchunk *k)
{
        struct gpuipc__cuchunk **pp;

        if (!k || --k->refs > 0)
                return;
        for (pp = &chunks; *pp; pp = &(*pp)->next)
                if (*pp == k) {
                        *pp = k->next;
                        break;
                }
        (void)cu->cuMemRelease(k->mh);
        free(k);
}

int gpuipc__vmm_map(gpuipc_client *c, struct cuda *cu, const uint8_t uuid[CUDA_UUID_LEN],
                    int ordinal, unsigned n, const uint8_t (*keys)[GPUIPC__ALLOC_KEY_LEN],
                    const uint64_t *sizes, const int *fds, CUdeviceptr *ret_base,
                    struct gpuipc__cuchunk **ret_chunks)
{
        CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = ordinal },
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUdeviceptr base = 0;
        uint64_t total = 0, off = 0;
        unsigned got = 0, mapped = 0;
        const char *what;
        CUresult res;
        int r;

        r = GPUIPC__CU_NEED(c, cu, cuMemImportFromShareableHandle);
        if (r < 0)
                return r;
        for (; got < n; got++) {
                r = chunk_get(c, cu, uuid, keys[got], sizes[got], fds[got], &ret_chunks[got]);
                if (r < 0)
                        goto undo;
                total += sizes[got];
        }
        what = "cuMemAddressReserve";
        res = cu->cuMemAddressReserve(&base, total, 0, 0, 0);
        if (res != CUDA_SUCCESS)
                goto fail;
        what = "cuMemMap";
        for (; mapped < n; mapped++) {
                res = cu->cuMemMap(base + off, sizes[mapped], 0, ret_chunks[mapped]->mh, 0);
                if (res != CUDA_SUCCESS)
                        goto fail;
                off += sizes[mapped];
        }
        what = "cuMemSetAccess";
        res = cu->cuMemSetAccess(base, total, &acc, 1);
        if (res == CUDA_SUCCESS) {
                *ret_base = base;
                return 0;
        }
fail:
        r = gpuipc__cu_fail(c, cu, res, what);
        for (unsigned i = 0, o = 0; i < mapped; o += sizes[i], i++)
                (void)cu->cuMemUnmap(base + o, sizes[i]);
        if (base)
                (void)cu->cuMemAddressFree(base, total);
undo:
        for (unsigned i = 0; i < got; i++)
                chunk_put(cu, ret_chunks[i]);
        return r;
}

void gpuipc__vmm_unmap(struct cuda *cu, CUdeviceptr base, unsigned n,
                       struct gpuipc__cuchunk **chunks_of)
{
        uint64_t off = 0;

        for (unsigned i = 0; i < n; i++) {
                (void)cu->cuMemUnmap(base + off, chunks_of[i]->size);
                off += chunks_of[i]->size;
        }
        (void)cu->cuMemAddressFree(base, off);
        for (unsigned i = 0; i < n; i++)
                chunk_put(cu, chunks_of[i]);
}

/* The pool of (uuid, key), imported from fd on first use, with access
 * granted to device ordinal when it is not the pool's own (home). */
static int pool_get(gpuipc_client *c, struct cuda *cu, const uint8_t uuid[CUDA_UUID_LEN],
                    const uint8_t key[GPUIPC__ALLOC_KEY_LEN], int fd, int ordinal, int home,
                    CUmemoryPool *ret)
{
        CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = ordinal },
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        struct pool_import *p;
        CUresult res;

        for (p = pools; p; p = p->next)
                if (!memcmp(p->key, key, GPUIPC__ALLOC_KEY_LEN) &&
                    !memcmp(p->uuid, uuid, CUDA_UUID_LEN))
                        break;
        if (!p) {
                p = calloc(1, sizeof(*p));
                if (!p)
                        return gpuipc__fail(c, -ENOMEM, "out of memory");
                res = cu->cuMemPoolImportFromShareableHandle(&p->pool, (void *)(intptr_t)fd,
                                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                             0);
                if (res != CUDA_SUCCESS) {
                        free(p);
                        return gpuipc__cu_fail(c, cu, res, "cuMemPoolImportFromShareableHandle");
                }
                memcpy(p->uuid, uuid, CUDA_UUID_LEN);
                memcpy(p->key, key, GPUIPC__ALLOC_KEY_LEN);
                p->next = pools;
                pools = p;
        }
        if (ordinal != home && ordinal < 32 && !(p->access & (1u << ordinal))) {
                if (!cu->cuMemPoolSetAccess)
                        return gpuipc__cu_missing(c, "cuMemPoolSetAccess");
                res = cu->cuMemPoolSetAccess(p->pool, &acc, 1);
                if (res != CUDA_SUCCESS)
                        return gpuipc__cu_fail(c, cu, res, "cuMemPoolSetAccess");
                p->access |= 1u << ordinal;
        }
        *ret = p->pool;
        return 0;
}

int gpuipc__pool_import(gpuipc_client *c, struct cuda *cu, const uint8_t uuid[CUDA_UUID_LEN],
                        const uint8_t key[GPUIPC__ALLOC_KEY_LEN], int fd,
                        const uint8_t data[CUDA_IPC_HANDLE_LEN], int ordinal, int home,
                        CUdeviceptr *ret_ptr)
{
        CUmemPoolPtrExportData ed;
        CUmemoryPool pool = NULL;
        CUresult res;
        int r;

        r = GPUIPC__CU_NEED(c, cu, cuMemPoolImportFromShareableHandle);
        if (r == 0)
                r = GPUIPC__CU_NEED(c, cu, cuMemPoolImportPointer);
        if (r == 0)
                r = GPUIPC__CU_NEED(c, cu, cuMemFree_v2);
        if (r == 0)
                r = pool_get(c, cu, uuid, key, fd, ordinal, home, &pool);
        if (r < 0)
                return r;
        memcpy(ed.reserved, data, CUDA_IPC_HANDLE_LEN);
        res = cu->cuMemPoolImportPointer(ret_ptr, pool, &ed);
        if (res != CUDA_SUCCESS)
                return gpuipc__cu_fail(c, cu, res, "cuMemPoolImportPointer (did the producer "
                                       "free the memory?)");
        return 0;
}

#endif
