/*
 * CUDA driver test double: stream-ordered memory pools (cuMemAllocAsync,
 * cuMemPoolCreate and friends) and their sharing between processes.
 *
 * Allocation is synchronous whatever the stream; a free drains every
 * stream of the process first, as cuMemFree does, so queued work never
 * touches unmapped memory.  Every allocation is a mapping of its own, so
 * cuMemGetAddressRange gives exactly the allocation.
 *
 * Pools without a handle type (each device's default pool among them) use
 * private anonymous memory.  A pool created with the POSIX fd handle type
 * owns one sparse memfd, "gpuipc-double-pool": page 0 is a header (struct
 * pool_hdr) and each allocation is a page-aligned range after a header page
 * of its own (struct dbl_alloc_hdr), mapped MAP_SHARED.  Ranges are never
 * reused.  The exported fd is a new open of that memfd; the export data
 * (64 bytes, struct ptr_data) names the pool, the allocation, its offset
 * and its size, so the importer maps the same pages from the fd.
 *
 * The exporter's free sets alloc_hdr.freed, so later imports of that data
 * fail while existing imports stay mapped and readable.  The exporter holds
 * an open-file-description lock on byte 0 of the memfd for as long as the
 * pool lives; the lock goes with the process, however it ends, and an
 * importer tests it (F_OFD_GETLK) to know whether the exporter is still
 * there.  Neither depends on pids, so imports work across pid namespaces.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "double.h"

static struct dbl_pool *pools;
static struct dbl_pool *default_pools[DBL_MAX_DEVICES];
static struct dbl_pool *current_pools[DBL_MAX_DEVICES];  /* NULL: the default pool */
static unsigned long long next_pool_id = 1;

size_t dbl_page_size(void)
{
        return (size_t)sysconf(_SC_PAGESIZE);
}

size_t dbl_page_round(size_t n)
{
        size_t pg = dbl_page_size();
        return (n + pg - 1) / pg * pg;
}

struct dbl_pool *dbl_pool_lookup(CUmemoryPool h)
{
        for (struct dbl_pool *p = pools; p != NULL; p = p->next)
                if ((CUmemoryPool)p == h)
                        return p->destroyed ? NULL : p;
        return NULL;
}

struct dbl_pool *dbl_pool_new(int phys, unsigned long long types)
{
        struct dbl_pool *p = calloc(1, sizeof(*p));
        if (p == NULL)
                return NULL;
        p->id = next_pool_id++;
        p->phys = phys;
        p->handle_types = types;
        p->fd = -1;
        p->access[phys] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        for (int i = 0; i < DBL_NREUSE; i++)
                p->reuse[i] = 1;
        p->next = pools;
        pools = p;
        return p;
}

void dbl_pool_maybe_free(struct dbl_pool *p)
{
        if (!p->destroyed || p->live > 0)
                return;
        for (struct dbl_pool **pp = &pools; *pp != NULL; pp = &(*pp)->next) {
                if (*pp == p) {
                        *pp = p->next;
                        break;
                }
        }
        if (p->fd >= 0)
                close(p->fd);   /* the exporter's lock goes with it */
        free(p);
}

static struct dbl_pool *default_pool(int phys)
{
        if (default_pools[phys] == NULL) {
                default_pools[phys] = dbl_pool_new(phys, 0);
                if (default_pools[phys] != NULL)
                        default_pools[phys]->is_default = true;
        }
        return default_pools[phys];
}

static struct dbl_pool *current_pool(int phys)
{
        return current_pools[phys] != NULL ? current_pools[phys] : default_pool(phys);
}

void dbl_pool_region_info(struct dbl_region *r, unsigned long long *handle_types,
                          CUmemoryPool *pool)
{
        *handle_types = r->pool->handle_types;
        *pool = (CUmemoryPool)r->pool;
}

/* ---- allocation and free ---- */

/* Exportable pools: a new range of the pool's file after its header page. */
static void *carve(struct dbl_pool *p, size_t size, size_t map_len,
                   unsigned long long alloc_id, off_t *ret_off)
{
        off_t off = p->end + (off_t)dbl_page_size();
        struct dbl_alloc_hdr h = { .magic = DBL_ALLOC_MAGIC, .alloc_id = alloc_id, .size = size };
        if (ftruncate(p->fd, off + (off_t)map_len) != 0 ||
            pwrite(p->fd, &h, sizeof(h), off - (off_t)dbl_page_size()) != (ssize_t)sizeof(h))
                return MAP_FAILED;
        void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, off);
        if (m != MAP_FAILED) {
                p->end = off + (off_t)map_len;
                *ret_off = off;
        }
        return m;
}

static CUresult pool_alloc(struct dbl_pool *p, size_t size, CUdeviceptr *dptr)
{
        if (dptr == NULL || size == 0)
                return CUDA_ERROR_INVALID_VALUE;
        if (size > DBL_TOTAL_MEM - dbl.used[p->phys] ||
            (p->max_size != 0 && size > p->max_size - p->used))
                return CUDA_ERROR_OUT_OF_MEMORY;
        struct dbl_region *r = dbl_region_new(DBL_R_POOL);
        if (r == NULL)
                return CUDA_ERROR_OUT_OF_MEMORY;
        r->bufid = dbl.next_bufid++;
        r->map_len = dbl_page_round(size);
        void *m = p->fd >= 0 ? carve(p, size, r->map_len, r->bufid, &r->pool_off)
                             : mmap(NULL, r->map_len, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
                dbl_region_unlink(r);
                free(r);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        r->base = (uintptr_t)m;
        r->size = size;
        r->phys = p->phys;
        r->ctx = dbl_current();
        r->prot = PROT_READ | PROT_WRITE;
        r->pool = p;
        p->live++;
        p->used += size;
        if (p->used > p->used_high)
                p->used_high = p->used;
        dbl.used[p->phys] += size;
        *dptr = (CUdeviceptr)r->base;
        return CUDA_SUCCESS;
}

static void region_free(struct dbl_region *r)
{
        struct dbl_pool *p = r->pool;
        if (!r->pool_imported) {
                if (p->fd >= 0) {       /* later imports of it fail */
                        uint64_t one = 1;
                        off_t at = r->pool_off - (off_t)dbl_page_size() +
                                   (off_t)offsetof(struct dbl_alloc_hdr, freed);
                        if (pwrite(p->fd, &one, sizeof(one), at) != (ssize_t)sizeof(one))
                                fprintf(stderr, "gpuipc CUDA double: pool header write failed\n");
                }
                p->used -= r->size;
                dbl.used[r->phys] -= r->size;
        }
        dbl_region_unlink(r);
        munmap((void *)r->base, r->map_len);
        free(r);
        p->live--;
        dbl_pool_maybe_free(p);
}

CUresult dbl_pool_free_at(uintptr_t addr)
{
        struct dbl_region *r = dbl_region_find(addr);
        if (r == NULL || r->kind != DBL_R_POOL || r->base != addr)
                return CUDA_ERROR_INVALID_VALUE;
        if (r->pool_imported && r->refs > 1) {
                r->refs--;
                return CUDA_SUCCESS;
        }
        dbl_streams_drain_all();        /* drops the lock meanwhile */
        r = dbl_region_find(addr);
        if (r != NULL && r->kind == DBL_R_POOL && r->base == addr)
                region_free(r);
        return CUDA_SUCCESS;
}

/* The device whose current pool cuMemAllocAsync uses: the stream's. */
static CUresult stream_phys(CUstream h, int *ret_phys)
{
        struct dbl_stream *s;
        if (!dbl_stream_lookup(h, &s))
                return CUDA_ERROR_INVALID_HANDLE;
        *ret_phys = s != NULL ? dbl_stream_ctx(s)->phys : dbl_current()->phys;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        int phys = 0;
        rc = stream_phys(hStream, &phys);
        if (rc == CUDA_SUCCESS) {
                struct dbl_pool *p = current_pool(phys);
                rc = p != NULL ? pool_alloc(p, bytesize, dptr) : CUDA_ERROR_OUT_OF_MEMORY;
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_pool *p = dbl_pool_lookup(pool);
        int phys = 0;
        if (p == NULL || p->imported)   /* imported pools cannot allocate */
                rc = CUDA_ERROR_INVALID_VALUE;
        else if ((rc = stream_phys(hStream, &phys)) == CUDA_SUCCESS)
                rc = pool_alloc(p, bytesize, dptr);
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        int phys = 0;
        rc = stream_phys(hStream, &phys);
        if (rc == CUDA_SUCCESS)
                rc = dbl_pool_free_at((uintptr_t)dptr);
        dbl_unlock();
        return rc;
}

/* ---- pools of a device ---- */

static CUresult enter_dev(CUdevice dev, const void *out)
{
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (out == NULL)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (!dbl_ordinal_ok(dev))
                rc = CUDA_ERROR_INVALID_DEVICE;
        if (rc != CUDA_SUCCESS)
                dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, pool_out);
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_pool *p = default_pool(dbl.visible[dev]);
        if (p == NULL)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
                *pool_out = (CUmemoryPool)p;
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, pool);
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_pool *p = current_pool(dbl.visible[dev]);
        if (p == NULL)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
                *pool = (CUmemoryPool)p;
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, pool);
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_pool *p = dbl_pool_lookup(pool);
        int phys = dbl.visible[dev];
        if (p == NULL || p->imported || p->phys != phys)
                rc = CUDA_ERROR_INVALID_VALUE;
        else
                current_pools[phys] = p->is_default ? NULL : p;
        dbl_unlock();
        return rc;
}

static CUresult check_props(const CUmemPoolProps *props)
{
        static const unsigned char zero[sizeof(props->reserved)];
        if (props == NULL || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
            props->win32SecurityAttributes != NULL ||
            memcmp(props->reserved, zero, sizeof(zero)) != 0)
                return CUDA_ERROR_INVALID_VALUE;
        if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
                return CUDA_ERROR_NOT_SUPPORTED;        /* host pools: not modelled */
        if (!dbl_ordinal_ok(props->location.id))
                return CUDA_ERROR_INVALID_DEVICE;
        if ((props->handleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0 ||
            props->usage != 0)
                return CUDA_ERROR_NOT_SUPPORTED;
        return CUDA_SUCCESS;
}

/* The exportable pool's file: header page, and the exporter's lock. */
static int pool_file(struct dbl_pool *p)
{
        int fd = memfd_create(DBL_POOL_MEMFD, MFD_CLOEXEC);
        if (fd < 0)
                return -1;
        struct dbl_pool_hdr h = { .magic = DBL_POOL_MAGIC, .pool_id = p->id, .nonce = dbl.nonce,
                              .pid = (int32_t)getpid(), .phys = p->phys,
                              .handle_types = p->handle_types };
        struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
        if (ftruncate(fd, (off_t)dbl_page_size()) != 0 ||
            pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
            fcntl(fd, F_OFD_SETLK, &fl) != 0) {
                close(fd);
                return -1;
        }
        p->fd = fd;
        p->end = (off_t)dbl_page_size();
        return 0;
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        rc = pool == NULL ? CUDA_ERROR_INVALID_VALUE : check_props(poolProps);
        if (rc != CUDA_SUCCESS) {
                dbl_unlock();
                return rc;
        }
        struct dbl_pool *p = dbl_pool_new(dbl.visible[poolProps->location.id],
                                      poolProps->handleTypes);
        if (p != NULL) {
                p->max_size = poolProps->maxSize;
                if (p->handle_types != 0 && pool_file(p) != 0) {
                        p->destroyed = true;
                        dbl_pool_maybe_free(p);
                        p = NULL;
                }
        }
        if (p == NULL)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
                *pool = (CUmemoryPool)p;
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_pool *p = dbl_pool_lookup(pool);
        if (p == NULL || p->is_default) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else {
                if (current_pools[p->phys] == p)
                        current_pools[p->phys] = NULL;  /* back to the default pool */
                p->destroyed = true;                    /* outstanding memory stays */
                dbl_pool_maybe_free(p);
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
        DBL_ENTER();
        (void)minBytesToKeep;   /* the double keeps nothing in reserve */
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (dbl_pool_lookup(pool) == NULL)
                rc = CUDA_ERROR_INVALID_VALUE;
        dbl_unlock();
        return rc;
}

/* ---- attributes and access ---- */

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_pool *p = dbl_pool_lookup(pool);
        if (p == NULL || value == NULL) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else if (attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
                   attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES) {
                p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] =
                        *(int *)value != 0;
        } else if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
                p->release_threshold = *(cuuint64_t *)value;
        } else if ((attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH ||
                    attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) && *(cuuint64_t *)value == 0) {
                p->used_high = p->used;         /* reserved is used here: one mark */
        } else {
                rc = CUDA_ERROR_INVALID_VALUE;
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_pool *p = dbl_pool_lookup(pool);
        if (p == NULL || value == NULL) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else if (attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
                   attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES) {
                *(int *)value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        } else if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
                *(cuuint64_t *)value = p->release_threshold;
        } else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ||
                   attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT) {
                *(cuuint64_t *)value = p->used;
        } else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH ||
                   attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) {
                *(cuuint64_t *)value = p->used_high;
        } else {
                rc = CUDA_ERROR_INVALID_VALUE;
        }
        dbl_unlock();
        return rc;
}

static CUresult check_access(const struct dbl_pool *p, const CUmemAccessDesc *d)
{
        if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
                return CUDA_ERROR_INVALID_VALUE;
        if (!dbl_ordinal_ok(d->location.id))
                return CUDA_ERROR_INVALID_DEVICE;
        if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                return CUDA_ERROR_INVALID_VALUE;
        int phys = dbl.visible[d->location.id];
        if (phys == p->phys)    /* the pool's own device keeps read-write access */
                return d->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? CUDA_SUCCESS :
                       CUDA_ERROR_INVALID_VALUE;
        if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && !dbl_peer_ok(phys, p->phys))
                return CUDA_ERROR_INVALID_DEVICE;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_pool *p = dbl_pool_lookup(pool);
        if (p == NULL || map == NULL || count == 0)
                rc = CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; rc == CUDA_SUCCESS && i < count; i++)
                rc = check_access(p, &map[i]);
        for (size_t i = 0; rc == CUDA_SUCCESS && i < count; i++)
                p->access[dbl.visible[map[i].location.id]] = (uint8_t)map[i].flags;
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool,
                                    CUmemLocation *location)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_pool *p = dbl_pool_lookup(memPool);
        if (p == NULL || flags == NULL || location == NULL ||
            location->type != CU_MEM_LOCATION_TYPE_DEVICE)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (!dbl_ordinal_ok(location->id))
                rc = CUDA_ERROR_INVALID_DEVICE;
        else
                *flags = (CUmemAccess_flags)p->access[dbl.visible[location->id]];
        dbl_unlock();
        return rc;
}
