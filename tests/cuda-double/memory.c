/*
 * CUDA driver test double: device memory.
 *
 * Every cuMemAlloc allocation is a file of its own in the shm directory
 * (default /dev/shm), named gpuipc-double-<pid>-<nonce>-m<bufid>, mapped
 * MAP_SHARED; the CUdeviceptr is the host address of that mapping, so
 * "device memory" can be read and written directly by host code.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "double.h"

struct dbl_region *dbl_regions;

static size_t page_round(size_t n)
{
        size_t pg = (size_t)sysconf(_SC_PAGESIZE);
        return (n + pg - 1) / pg * pg;
}

struct dbl_region *dbl_region_find(uintptr_t addr)
{
        for (struct dbl_region *r = dbl_regions; r != NULL; r = r->next)
                if (addr >= r->base && addr - r->base < r->size)
                        return r;
        return NULL;
}

struct dbl_region *dbl_region_new(enum dbl_region_kind kind)
{
        struct dbl_region *r = calloc(1, sizeof(*r));
        if (r == NULL)
                return NULL;
        r->kind = kind;
        r->next = dbl_regions;
        dbl_regions = r;
        return r;
}

void dbl_region_unlink(struct dbl_region *r)
{
        for (struct dbl_region **pp = &dbl_regions; *pp != NULL; pp = &(*pp)->next) {
                if (*pp == r) {
                        *pp = r->next;
                        return;
                }
        }
}

void dbl_region_release(struct dbl_region *r)
{
        dbl_region_unlink(r);
        munmap((void *)r->base, r->map_len);
        if (r->kind == DBL_R_ALLOC) {
                if (r->path[0] != '\0')
                        unlink(r->path);
                dbl.used[r->phys] -= r->size;
        }
        free(r);
}

bool dbl_range_ok(uintptr_t p, size_t n, int prot)
{
        if (n == 0)
                return true;
        if (p + n < p)
                return false;
        uintptr_t end = p + n;
        while (p < end) {
                struct dbl_region *r = dbl_region_find(p);
                if (r == NULL || (r->prot & prot) != prot)
                        return false;
                p = r->base + r->size;
        }
        return true;
}

void dbl_free_ctx_resources(struct dbl_ctx *c)
{
        dbl_streams_free_ctx(c);
        dbl_events_free_ctx(c);
        struct dbl_region *r = dbl_regions;
        while (r != NULL) {
                struct dbl_region *next = r->next;
                /* VMM and pool memory outlive the context (see README.md). */
                if (r->ctx == c && (r->kind == DBL_R_ALLOC || r->kind == DBL_R_IPC))
                        dbl_region_release(r);
                r = next;
        }
}

void dbl_unlink_all_names(void)
{
        for (struct dbl_region *r = dbl_regions; r != NULL; r = r->next)
                if (r->kind == DBL_R_ALLOC && r->path[0] != '\0')
                        unlink(r->path);
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *c = dbl_current();
        if (dptr == NULL || bytesize == 0) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (bytesize > DBL_TOTAL_MEM - dbl.used[c->phys]) {
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        struct dbl_region *r = dbl_region_new(DBL_R_ALLOC);
        if (r == NULL) {
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        r->bufid = dbl.next_bufid++;
        r->size = bytesize;
        r->map_len = page_round(bytesize);
        r->phys = c->phys;
        r->ctx = c;
        r->prot = PROT_READ | PROT_WRITE;
        dbl_shm_path(r->path, sizeof(r->path), getpid(), dbl.pidns, dbl.nonce, 'm', r->bufid);

        void *p = MAP_FAILED;
        int fd = open(r->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0 && ftruncate(fd, (off_t)r->map_len) == 0)
                p = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (fd >= 0)
                close(fd);
        if (p == MAP_FAILED) {
                if (fd >= 0)
                        unlink(r->path);
                dbl_region_unlink(r);
                free(r);
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        r->base = (uintptr_t)p;
        dbl.used[r->phys] += bytesize;
        *dptr = (CUdeviceptr)r->base;
        dbl_unlock();
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_region *r = dbl_region_find((uintptr_t)dptr);
        if (r != NULL && r->kind == DBL_R_POOL) {
                rc = dbl_pool_free_at((uintptr_t)dptr);
        } else if (r == NULL || r->kind != DBL_R_ALLOC || r->base != (uintptr_t)dptr) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else {
                dbl_streams_drain_all();        /* cuMemFree synchronizes */
                r = dbl_region_find((uintptr_t)dptr);
                if (r != NULL && r->kind == DBL_R_ALLOC)
                        dbl_region_release(r);
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_region *r = dbl_region_find((uintptr_t)dptr);
        if (r == NULL) {
                rc = CUDA_ERROR_NOT_FOUND;
        } else {
                if (pbase != NULL)
                        *pbase = (CUdeviceptr)r->base;
                if (psize != NULL)
                        *psize = r->size;
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (free_bytes != NULL)
                *free_bytes = DBL_TOTAL_MEM - dbl.used[dbl_current()->phys];
        if (total != NULL)
                *total = DBL_TOTAL_MEM;
        dbl_unlock();
        return CUDA_SUCCESS;
}

/* ---- pointer attributes ---- */

static size_t attr_size(CUpointer_attribute a)
{
        switch (a) {
        case CU_POINTER_ATTRIBUTE_CONTEXT: return sizeof(CUcontext);
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: return sizeof(unsigned int);
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: return sizeof(CUdeviceptr);
        case CU_POINTER_ATTRIBUTE_HOST_POINTER: return sizeof(void *);
        case CU_POINTER_ATTRIBUTE_BUFFER_ID: return sizeof(unsigned long long);
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return sizeof(CUdeviceptr);
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return sizeof(size_t);
        case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: return sizeof(unsigned long long);
        case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return sizeof(CUmemoryPool);
        case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: return sizeof(size_t);
        case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: return sizeof(void *);
        case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: return sizeof(unsigned long long);
        case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        case CU_POINTER_ATTRIBUTE_MAPPED:
        case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
                return sizeof(int);
        default:
                return 0;
        }
}

static CUresult attr_get(struct dbl_region *r, CUpointer_attribute a, void *data,
                         CUdeviceptr ptr)
{
        uintptr_t rbase = r->base;
        size_t rsize = r->size;
        unsigned long long types = 0, block = r->bufid;
        CUmemoryPool pool = NULL;
        if (r->kind == DBL_R_VMM)
                dbl_vmm_region_info(r, &rbase, &rsize, &types, &block);
        else if (r->kind == DBL_R_POOL)
                dbl_pool_region_info(r, &types, &pool);
        int ival;
        switch (a) {
        case CU_POINTER_ATTRIBUTE_CONTEXT:
                *(CUcontext *)data = (CUcontext)r->ctx;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
                *(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
                *(CUdeviceptr *)data = ptr;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_BUFFER_ID:
                *(unsigned long long *)data = r->bufid;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
                *(unsigned long long *)data = block;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
                *(CUdeviceptr *)data = (CUdeviceptr)rbase;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
                *(size_t *)data = rsize;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
                *(void **)data = (void *)r->base;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
                *(size_t *)data = r->size;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
                *(unsigned long long *)data = types;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
                *(CUmemoryPool *)data = pool;
                return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
                ival = dbl_phys_to_ordinal(r->phys);
                break;
        case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
                ival = r->kind == DBL_R_ALLOC;
                break;
        case CU_POINTER_ATTRIBUTE_MAPPED:
                ival = 1;
                break;
        case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
                ival = (r->prot & PROT_WRITE) ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE :
                       (r->prot & PROT_READ) ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ :
                       CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
                break;
        case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
                ival = 0;
                break;
        case CU_POINTER_ATTRIBUTE_HOST_POINTER:         /* device memory: none */
                return CUDA_ERROR_INVALID_VALUE;
        case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
                return CUDA_ERROR_NOT_SUPPORTED;
        default:
                return CUDA_ERROR_INVALID_VALUE;
        }
        *(int *)data = ival;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                       CUdeviceptr ptr)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_region *r = dbl_region_find((uintptr_t)ptr);
        if (data == NULL || r == NULL)
                rc = CUDA_ERROR_INVALID_VALUE;
        else
                rc = attr_get(r, attribute, data, ptr);
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes,
                                        CUpointer_attribute *attributes, void **data,
                                        CUdeviceptr ptr)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (attributes == NULL || data == NULL) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_VALUE;
        }
        struct dbl_region *r = dbl_region_find((uintptr_t)ptr);
        for (unsigned int i = 0; i < numAttributes && rc == CUDA_SUCCESS; i++) {
                size_t sz = attr_size(attributes[i]);
                if (sz == 0 || data[i] == NULL) {
                        rc = CUDA_ERROR_INVALID_VALUE;
                } else if (r == NULL) {
                        /* Not a CUDA pointer: defaults, no error. */
                        memset(data[i], 0, sz);
                        if (attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
                                *(int *)data[i] = -2;
                } else if (attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER) {
                        *(void **)data[i] = NULL;
                } else {
                        rc = attr_get(r, attributes[i], data[i], ptr);
                }
        }
        dbl_unlock();
        return rc;
}

/* ---- copies and memsets (synchronous; the Async forms go through streams) ---- */

/*
 * Validate and run one memory operation.  dst_dev/src_dev say which sides
 * must be device memory; -1 means "either" (cuMemcpy with UVA).
 */
/* VMM memory is reachable only from the devices cuMemSetAccess named: the
 * real driver fails a cuMemcpyDtoD whose current device is not one of them
 * with CUDA_ERROR_INVALID_VALUE, peer capable or not (seen on two H200s). */
static bool vmm_reachable(uintptr_t p, int phys)
{
        struct dbl_region *r = dbl_region_find(p);

        return !r || r->kind != DBL_R_VMM || (r->access_phys & (1u << phys));
}

static CUresult mem_op_ex(struct dbl_op *op, int dst_dev, int src_dev, CUstream hstream,
                          bool async, bool any_device)
{
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS) {
                free(op);
                return rc;
        }
        size_t span = op->kind == DBL_OP_SET32 ? op->n * 4 : op->n;
        uintptr_t d = (uintptr_t)op->dst, s = (uintptr_t)op->src;
        if (dst_dev < 0)
                dst_dev = dbl_region_find(d) != NULL;
        if (src_dev < 0)
                src_dev = dbl_region_find(s) != NULL;
        struct dbl_stream *stream = NULL;
        if (async && !dbl_stream_lookup(hstream, &stream))
                rc = CUDA_ERROR_INVALID_HANDLE;
        else if (span > 0 && d == 0)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (op->kind == DBL_OP_COPY && span > 0 && s == 0)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (dst_dev && !dbl_range_ok(d, span, PROT_READ | PROT_WRITE))
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (op->kind == DBL_OP_COPY && src_dev && !dbl_range_ok(s, span, PROT_READ))
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (!any_device && op->kind == DBL_OP_COPY && dst_dev && src_dev &&
                 (!vmm_reachable(d, dbl_current()->phys) || !vmm_reachable(s, dbl_current()->phys)))
                rc = CUDA_ERROR_INVALID_VALUE;
        if (rc != CUDA_SUCCESS || span == 0) {
                free(op);
                dbl_unlock();
                return rc;
        }
        op->host_src = op->kind == DBL_OP_COPY && !src_dev;
        dbl_stream_submit(stream, op);
        dbl_unlock();
        return CUDA_SUCCESS;
}

static struct dbl_op *op_new(enum dbl_op_kind kind, CUdeviceptr dst, const void *src,
                             size_t n, uint32_t value)
{
        struct dbl_op *op = calloc(1, sizeof(*op));
        if (op != NULL) {
                op->kind = kind;
                op->dst = (void *)(uintptr_t)dst;
                op->src = src;
                op->n = n;
                op->value = value;
        }
        return op;
}

static CUresult mem_op(struct dbl_op *op, int dst_dev, int src_dev, CUstream hstream,
                       bool async)
{
        return mem_op_ex(op, dst_dev, src_dev, hstream, async, false);
}

#define MEM_OP(kind, dst, src, n, value, dst_dev, src_dev, stream, async)             \
        do {                                                                          \
                struct dbl_op *op_ = op_new(kind, dst, src, n, value);                \
                if (op_ == NULL)                                                      \
                        return CUDA_ERROR_OUT_OF_MEMORY;                              \
                return mem_op(op_, dst_dev, src_dev, stream, async);                  \
        } while (0)

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
        DBL_ENTER();
        MEM_OP(DBL_OP_COPY, dstDevice, srcHost, ByteCount, 0, 1, 0, NULL, false);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
        DBL_ENTER();
        MEM_OP(DBL_OP_COPY, (CUdeviceptr)(uintptr_t)dstHost, (const void *)(uintptr_t)srcDevice,
               ByteCount, 0, 0, 1, NULL, false);
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
        DBL_ENTER();
        MEM_OP(DBL_OP_COPY, dstDevice, (const void *)(uintptr_t)srcDevice, ByteCount, 0, 1, 1,
               NULL, false);
}

/* Between two contexts' memory: the driver stages it when the devices have
 * no peer path, so neither peer access nor the current device matters;
 * each side must be reachable from its own context's device. */
CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                              CUcontext srcContext, size_t ByteCount)
{
        DBL_ENTER();
        struct dbl_ctx *dc = (struct dbl_ctx *)dstContext, *sc = (struct dbl_ctx *)srcContext;
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (!dc || !sc || !dbl_ctx_valid(dc) || !dbl_ctx_valid(sc))
                rc = CUDA_ERROR_INVALID_CONTEXT;
        else if (!vmm_reachable((uintptr_t)dstDevice, dc->phys) ||
                 !vmm_reachable((uintptr_t)srcDevice, sc->phys))
                rc = CUDA_ERROR_INVALID_VALUE;
        dbl_unlock();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_op *op = op_new(DBL_OP_COPY, dstDevice, (const void *)(uintptr_t)srcDevice,
                                   ByteCount, 0);
        if (op == NULL)
                return CUDA_ERROR_OUT_OF_MEMORY;
        return mem_op_ex(op, 1, 1, NULL, false, true);
}

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
        DBL_ENTER();
        MEM_OP(DBL_OP_COPY, dst, (const void *)(uintptr_t)src, ByteCount, 0, -1, -1, NULL,
               false);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                      size_t ByteCount, CUstream hStream)
{
        DBL_ENTER();
        MEM_OP(DBL_OP_COPY, dstDevice, srcHost, ByteCount, 0, 1, 0, hStream, true);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{
        DBL_ENTER();
        MEM_OP(DBL_OP_COPY, (CUdeviceptr)(uintptr_t)dstHost, (const void *)(uintptr_t)srcDevice,
               ByteCount, 0, 0, 1, hStream, true);
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                      size_t ByteCount, CUstream hStream)
{
        DBL_ENTER();
        MEM_OP(DBL_OP_COPY, dstDevice, (const void *)(uintptr_t)srcDevice, ByteCount, 0, 1, 1,
               hStream, true);
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                               CUstream hStream)
{
        DBL_ENTER();
        MEM_OP(DBL_OP_COPY, dst, (const void *)(uintptr_t)src, ByteCount, 0, -1, -1, hStream,
               true);
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
        DBL_ENTER();
        MEM_OP(DBL_OP_SET8, dstDevice, NULL, N, uc, 1, 0, NULL, false);
}

CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
        DBL_ENTER();
        if (dstDevice % 4 != 0)
                return CUDA_ERROR_INVALID_VALUE;
        MEM_OP(DBL_OP_SET32, dstDevice, NULL, N, ui, 1, 0, NULL, false);
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream)
{
        DBL_ENTER();
        MEM_OP(DBL_OP_SET8, dstDevice, NULL, N, uc, 1, 0, hStream, true);
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                  CUstream hStream)
{
        DBL_ENTER();
        if (dstDevice % 4 != 0)
                return CUDA_ERROR_INVALID_VALUE;
        MEM_OP(DBL_OP_SET32, dstDevice, NULL, N, ui, 1, 0, hStream, true);
}

/* ---- pinned host memory: plain host memory here ---- */

struct pinned {
        struct pinned *next;
        max_align_t data[];
};

static struct pinned *pinned_blocks;    /* under dbl_mutex */

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct pinned *b = NULL;
        if (pp == NULL || bytesize == 0 || bytesize > SIZE_MAX - sizeof(*b))
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (!(b = malloc(sizeof(*b) + bytesize)))
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        else {
                b->next = pinned_blocks;
                pinned_blocks = b;
                *pp = b->data;
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        rc = CUDA_ERROR_INVALID_VALUE;
        for (struct pinned **at = &pinned_blocks; *at != NULL; at = &(*at)->next) {
                if ((void *)(*at)->data == p) {
                        struct pinned *b = *at;
                        *at = b->next;
                        dbl_streams_drain_all();        /* it synchronizes, as cuMemFree */
                        free(b);
                        rc = CUDA_SUCCESS;
                        break;
                }
        }
        dbl_unlock();
        return rc;
}
