/*
 * CUDA driver test double: sharing stream-ordered pools between processes
 * (cuMemPoolExportToShareableHandle and friends).  See pool.c for the
 * layout of an exportable pool's file.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "double.h"

static const char ptr_magic[8] = { 'G', 'P', 'U', 'I', 'P', 'C', 'P', 'X' };

struct ptr_data {               /* what CUmemPoolPtrExportData holds */
        char magic[8];
        uint32_t pid;           /* exporter, in its pid namespace */
        uint32_t phys;
        uint64_t nonce;
        uint64_t pidns;         /* informational: imports work across namespaces */
        uint64_t pool_id;
        uint64_t alloc_id;
        uint64_t offset;        /* in the pool's file */
        uint64_t size;
};
_Static_assert(sizeof(struct ptr_data) == sizeof(CUmemPoolPtrExportData),
               "pool export data is 64 bytes");

CUresult CUDAAPI cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                                  CUmemAllocationHandleType handleType,
                                                  unsigned long long flags)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_pool *p = dbl_pool_lookup(pool);
        /* Measured: the default pool (no handle types) gives INVALID_VALUE. */
        if (handle_out == NULL || p == NULL || p->imported || flags != 0 ||
            !(p->handle_types & handleType) ||
            handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else {
                char path[64];
                snprintf(path, sizeof(path), "/proc/self/fd/%d", p->fd);
                int fd = open(path, O_RDWR | O_CLOEXEC);        /* not the locked one */
                if (fd < 0)
                        rc = CUDA_ERROR_OPERATING_SYSTEM;
                else
                        *(int *)handle_out = fd;
        }
        dbl_unlock();
        return rc;
}

/* Is fd some process's pool file?  Its header, or -1. */
static int read_pool_file(int fd, struct dbl_pool_hdr *h)
{
        char link[64], target[256];
        static const char name[] = "/memfd:" DBL_POOL_MEMFD;
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0)
                return -1;
        target[n] = '\0';
        if (strncmp(target, name, sizeof(name) - 1) != 0 ||
            (target[sizeof(name) - 1] != '\0' && target[sizeof(name) - 1] != ' '))
                return -1;
        if (pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h) || h->magic != DBL_POOL_MAGIC ||
            h->phys < 0 || h->phys >= DBL_MAX_DEVICES)
                return -1;
        return 0;
}

CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                    CUmemAllocationHandleType handleType,
                                                    unsigned long long flags)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        int fd = (int)(intptr_t)handle;
        struct dbl_pool_hdr h;
        if (pool_out == NULL || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
            read_pool_file(fd, &h) != 0 ||
            (h.pid == (int32_t)getpid() && h.nonce == dbl.nonce)) {     /* its own pool */
                dbl_unlock();
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (dbl_phys_to_ordinal(h.phys) < 0) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_DEVICE;
        }
        int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);        /* the caller keeps its fd */
        struct dbl_pool *p = own >= 0 ? dbl_pool_new(h.phys, h.handle_types) : NULL;
        if (p == NULL) {
                if (own >= 0)
                        close(own);
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        p->imported = true;
        p->fd = own;
        p->src_pid = h.pid;
        p->src_nonce = h.nonce;
        p->src_pool_id = h.pool_id;
        *pool_out = (CUmemoryPool)p;
        dbl_unlock();
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_region *r = dbl_region_find((uintptr_t)ptr);
        /* Measured: only the exact start of an allocation of an exportable pool. */
        if (shareData_out == NULL || r == NULL || r->kind != DBL_R_POOL || r->pool_imported ||
            r->base != (uintptr_t)ptr || r->pool->fd < 0) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else {
                struct ptr_data d;
                memset(&d, 0, sizeof(d));
                memcpy(d.magic, ptr_magic, sizeof(d.magic));
                d.pid = (uint32_t)getpid();
                d.phys = (uint32_t)r->phys;
                d.nonce = dbl.nonce;
                d.pidns = dbl.pidns;
                d.pool_id = r->pool->id;
                d.alloc_id = r->bufid;
                d.offset = (uint64_t)r->pool_off;
                d.size = r->size;
                memcpy(shareData_out->reserved, &d, sizeof(d));
        }
        dbl_unlock();
        return rc;
}

/* The exporter still holds its lock on byte 0 (it lives, and so does its pool). */
static bool exporter_alive(int fd)
{
        struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
        if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
                return true;            /* cannot tell */
        return fl.l_type != F_UNLCK;
}

static struct dbl_region *find_import(const struct ptr_data *d)
{
        for (struct dbl_region *r = dbl_regions; r != NULL; r = r->next)
                if (r->kind == DBL_R_POOL && r->pool_imported && r->src_pid == (int)d->pid &&
                    r->src_nonce == d->nonce && r->src_pool == d->pool_id &&
                    r->src_bufid == d->alloc_id)
                        return r;
        return NULL;
}

/* Does d name a live allocation of p's file?  Asked before every import,
 * a repeated one too: once the exporter freed it, new imports fail. */
static bool import_ok(struct dbl_pool *p, const struct ptr_data *d)
{
        size_t pg = dbl_page_size();
        struct dbl_alloc_hdr h;
        struct stat st;
        if (d->size == 0 || d->offset < 2 * pg || d->offset % pg != 0 ||
            fstat(p->fd, &st) != 0 || d->offset > (uint64_t)st.st_size ||
            dbl_page_round(d->size) > (uint64_t)st.st_size - d->offset)
                return false;
        return pread(p->fd, &h, sizeof(h), (off_t)(d->offset - pg)) == (ssize_t)sizeof(h) &&
               h.magic == DBL_ALLOC_MAGIC && h.alloc_id == d->alloc_id && h.size == d->size &&
               h.freed == 0 && exporter_alive(p->fd);
}

/* A new mapping of the allocation d names, from p's file. */
static CUresult import_map(struct dbl_pool *p, const struct ptr_data *d, CUdeviceptr *ptr_out)
{
        size_t map_len = dbl_page_round(d->size);
        void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd,
                       (off_t)d->offset);
        if (m == MAP_FAILED)
                return CUDA_ERROR_OUT_OF_MEMORY;
        struct dbl_region *r = dbl_region_new(DBL_R_POOL);
        if (r == NULL) {
                munmap(m, map_len);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        r->base = (uintptr_t)m;
        r->size = d->size;
        r->map_len = map_len;
        r->bufid = dbl.next_bufid++;
        r->phys = p->phys;
        r->ctx = dbl_current();
        r->prot = PROT_READ | PROT_WRITE;
        r->pool = p;
        r->pool_imported = true;
        r->refs = 1;
        r->src_pid = (int)d->pid;
        r->src_nonce = d->nonce;
        r->src_pool = d->pool_id;
        r->src_bufid = d->alloc_id;
        p->live++;
        *ptr_out = (CUdeviceptr)r->base;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                        CUmemPoolPtrExportData *shareData)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_pool *p = dbl_pool_lookup(pool);
        struct ptr_data d;
        if (shareData != NULL)
                memcpy(&d, shareData->reserved, sizeof(d));
        if (ptr_out == NULL || shareData == NULL || p == NULL || !p->imported ||
            memcmp(d.magic, ptr_magic, sizeof(d.magic)) != 0 || (int)d.pid != p->src_pid ||
            d.nonce != p->src_nonce || d.pool_id != p->src_pool_id) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_VALUE;
        }
        struct dbl_region *r = find_import(&d);
        if (!import_ok(p, &d)) {
                rc = CUDA_ERROR_INVALID_VALUE;  /* freed, or its exporter is gone */
        } else if (r != NULL) {         /* measured: the same data gives the same address */
                r->refs++;
                *ptr_out = (CUdeviceptr)r->base;
        } else {
                rc = import_map(p, &d, ptr_out);
        }
        dbl_unlock();
        return rc;
}
