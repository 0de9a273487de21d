/*
 * CUDA driver test double: virtual memory management (cuMemCreate and
 * friends) with POSIX file descriptor handles.
 *
 * On the real driver (580 on an H200, measured) every fd that
 * cuMemExportToShareableHandle returns is a new open of /dev/nvidiactl: all
 * of them, of one allocation or of different ones, have the same
 * st_dev/st_ino, and only the open file description tells allocations
 * apart.  The double models exactly that, so code that names allocations by
 * the fd's inode fails here as it would on hardware:
 *  - every exportable allocation of a process (requested with the POSIX fd
 *    handle type) lives in that process's one "export file", a sparse memfd
 *    named "gpuipc-double-vmm-export", at its own DBL_GRANULARITY-aligned
 *    offset, right after a header granule that records its size and
 *    physical device (only the header's first page is ever touched);
 *  - export opens the memfd anew through /proc/self/fd and sets the new
 *    file description's position to the allocation's offset;
 *  - import reads that position (lseek SEEK_CUR, never moving it) and the
 *    header before it.  Fds passed over SCM_RIGHTS share the description,
 *    so the position travels with them.
 * Ranges of the export file are never freed while the process lives: any
 * other process may still hold an fd to them.  The memory lives while
 * anyone holds an fd or a mapping, even after the exporter exited.
 * Allocations without the POSIX fd handle type get a memfd of their own,
 * named "gpuipc-double-vmm-d<physical device>".
 * Reservations are PROT_NONE anonymous mappings; cuMemMap maps the memfd
 * over them PROT_NONE and cuMemSetAccess opens it up, so touching mapped
 * memory before cuMemSetAccess faults, as on the real thing.
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

#define HANDLE_TAG (0xdb1ULL << 48)
#define MEMFD_PREFIX "gpuipc-double-vmm-d"
#define EXPORT_NAME "gpuipc-double-vmm-export"
#define EXPORT_MAGIC 0x6470697075706778ULL     /* "xgpupipd" */
#define GRAN_OFF ((off_t)DBL_GRANULARITY)

struct dbl_vmm_alloc {
        struct dbl_vmm_alloc *next;
        unsigned long long id;          /* the CUmemGenericAllocationHandle */
        int fd;
        off_t off;                      /* where the memory starts in fd's file */
        size_t size;
        int phys;
        bool imported;
        unsigned long long handle_types;
        unsigned int handle_refs;       /* create/import/retain minus release */
        unsigned int map_refs;          /* live cuMemMap ranges */
};

/* The header granule before each range of the export file starts with this. */
struct export_hdr {
        uint64_t magic;
        uint64_t size;
        int32_t phys;
        uint32_t pad;
};

struct dbl_resv {
        struct dbl_resv *next;
        uintptr_t base;
        size_t size;
};

static struct dbl_vmm_alloc *allocs;
static struct dbl_resv *resvs;
static int export_fd = -1;              /* this process's export file */
static off_t export_end;                /* its size: ranges are carved here */

static struct dbl_vmm_alloc *alloc_find(CUmemGenericAllocationHandle h)
{
        for (struct dbl_vmm_alloc *a = allocs; a != NULL; a = a->next)
                if (a->id == h && a->handle_refs > 0)
                        return a;
        return NULL;
}

static struct dbl_vmm_alloc *alloc_new(int fd, off_t off, size_t size, int phys,
                                       unsigned long long types)
{
        struct dbl_vmm_alloc *a = calloc(1, sizeof(*a));
        if (a == NULL)
                return NULL;
        a->id = HANDLE_TAG | dbl.next_vmm_id++;
        a->fd = fd;
        a->off = off;
        a->size = size;
        a->phys = phys;
        a->handle_types = types;
        a->handle_refs = 1;
        a->next = allocs;
        allocs = a;
        return a;
}

static void alloc_maybe_free(struct dbl_vmm_alloc *a)
{
        if (a->handle_refs > 0 || a->map_refs > 0)
                return;
        for (struct dbl_vmm_alloc **pp = &allocs; *pp != NULL; pp = &(*pp)->next) {
                if (*pp == a) {
                        *pp = a->next;
                        break;
                }
        }
        if (!a->imported)
                dbl.used[a->phys] -= a->size;
        close(a->fd);
        free(a);
}

void dbl_vmm_region_info(struct dbl_region *r, uintptr_t *resv_base, size_t *resv_size,
                         unsigned long long *handle_types, unsigned long long *block_id)
{
        *resv_base = r->resv->base;
        *resv_size = r->resv->size;
        *handle_types = r->alloc->handle_types;
        *block_id = r->alloc->id;
}

static CUresult check_prop(const CUmemAllocationProp *prop)
{
        if (prop == NULL || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
            prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
                return CUDA_ERROR_INVALID_VALUE;
        if (!dbl_ordinal_ok(prop->location.id))
                return CUDA_ERROR_INVALID_DEVICE;
        if ((prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0)
                return CUDA_ERROR_NOT_SUPPORTED;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity,
                                               const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (granularity == NULL || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                    option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
                rc = CUDA_ERROR_INVALID_VALUE;
        else if ((rc = check_prop(prop)) == CUDA_SUCCESS)
                *granularity = DBL_GRANULARITY;
        dbl_unlock();
        return rc;
}

/* A memfd of its own for memory that is never exported: 0 or -1. */
static int carve_private(size_t size, int phys, int *ret_fd, off_t *ret_off)
{
        char name[64];
        snprintf(name, sizeof(name), MEMFD_PREFIX "%d", phys);
        int fd = memfd_create(name, MFD_CLOEXEC);
        if (fd < 0)
                return -1;
        if (ftruncate(fd, (off_t)size) != 0) {
                close(fd);
                return -1;
        }
        *ret_fd = fd;
        *ret_off = 0;
        return 0;
}

/* A new range of the export file (created on first use), after its header
 * granule; *ret_fd is a descriptor of the file for the allocation to own.
 * The file only grows: see the comment at the top.  0 or -1. */
static int carve_export(size_t size, int phys, int *ret_fd, off_t *ret_off)
{
        if (export_fd < 0) {
                export_fd = memfd_create(EXPORT_NAME, MFD_CLOEXEC);
                if (export_fd < 0)
                        return -1;
                export_end = 0;
        }
        off_t off = export_end + GRAN_OFF;
        struct export_hdr h = { .magic = EXPORT_MAGIC, .size = size, .phys = phys };
        if (ftruncate(export_fd, off + (off_t)size) != 0)
                return -1;
        if (pwrite(export_fd, &h, sizeof(h), off - GRAN_OFF) != (ssize_t)sizeof(h))
                return -1;
        int fd = fcntl(export_fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        export_end = off + (off_t)size;
        *ret_fd = fd;
        *ret_off = off;
        return 0;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (handle == NULL || flags != 0 || size == 0 || size % DBL_GRANULARITY != 0)
                rc = CUDA_ERROR_INVALID_VALUE;
        else
                rc = check_prop(prop);
        if (rc != CUDA_SUCCESS) {
                dbl_unlock();
                return rc;
        }
        int phys = dbl.visible[prop->location.id];
        if (size > DBL_TOTAL_MEM - dbl.used[phys]) {
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        bool exportable = prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        int fd = -1;
        off_t off = 0;
        int k = exportable ? carve_export(size, phys, &fd, &off)
                           : carve_private(size, phys, &fd, &off);
        struct dbl_vmm_alloc *a = NULL;
        if (k == 0)
                a = alloc_new(fd, off, size, phys, prop->requestedHandleTypes);
        if (a == NULL) {
                if (fd >= 0)
                        close(fd);
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        dbl.used[phys] += size;
        *handle = a->id;
        dbl_unlock();
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_vmm_alloc *a = alloc_find(handle);
        if (a == NULL) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else {
                a->handle_refs--;
                alloc_maybe_free(a);
        }
        dbl_unlock();
        return rc;
}

/* A new open file description of a's file, positioned at a's range: the
 * position is all that names the allocation, as on the real driver. */
static int export_open(const struct dbl_vmm_alloc *a)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", a->fd);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
                return -1;
        if (lseek(fd, a->off, SEEK_SET) != a->off) {
                close(fd);
                return -1;
        }
        return fd;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_vmm_alloc *a = alloc_find(handle);
        if (shareableHandle == NULL || a == NULL || flags != 0) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
                rc = CUDA_ERROR_NOT_SUPPORTED;
        } else if (!(a->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
                rc = CUDA_ERROR_INVALID_VALUE;  /* not requested at cuMemCreate */
        } else {
                int fd = export_open(a);
                if (fd < 0)
                        rc = CUDA_ERROR_OPERATING_SYSTEM;
                else
                        *(int *)shareableHandle = fd;
        }
        dbl_unlock();
        return rc;
}

/* Is fd a descriptor of some process's export file? */
static bool is_export_file(int fd)
{
        char link[64], target[256];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0)
                return false;
        target[n] = '\0';
        static const char name[] = "/memfd:" EXPORT_NAME;
        return strncmp(target, name, sizeof(name) - 1) == 0 &&
               (target[sizeof(name) - 1] == '\0' || target[sizeof(name) - 1] == ' ');
}

/* The range that fd's position names: its offset, size and physical
 * device.  Reads the position without moving it (it is shared with every
 * holder of the description).  0 or -1. */
static int export_range(int fd, off_t *ret_off, size_t *ret_size, int *ret_phys)
{
        struct export_hdr h;
        struct stat st;

        if (!is_export_file(fd) || fstat(fd, &st) != 0)
                return -1;
        off_t off = lseek(fd, 0, SEEK_CUR);
        if (off < GRAN_OFF || off % GRAN_OFF != 0 || off > st.st_size)
                return -1;
        if (pread(fd, &h, sizeof(h), off - GRAN_OFF) != (ssize_t)sizeof(h) ||
            h.magic != EXPORT_MAGIC || h.size == 0 || h.size % DBL_GRANULARITY != 0 ||
            h.size > (uint64_t)(st.st_size - off) || h.phys < 0 || h.phys >= DBL_MAX_DEVICES)
                return -1;
        *ret_off = off;
        *ret_size = (size_t)h.size;
        *ret_phys = h.phys;
        return 0;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
                dbl_unlock();
                return handle == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
        }
        int fd = (int)(intptr_t)osHandle;
        off_t off;
        size_t size;
        int phys;
        if (handle == NULL || export_range(fd, &off, &size, &phys) != 0) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (dbl_phys_to_ordinal(phys) < 0) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_DEVICE;
        }
        /* The caller keeps its fd; importing the same fd again is fine.
         * Our duplicate shares its description, but only mmap() at an
         * explicit offset ever uses it, so the position is left alone. */
        int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        struct dbl_vmm_alloc *a = NULL;
        if (own >= 0)
                a = alloc_new(own, off, size, phys, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (a == NULL) {
                if (own >= 0)
                        close(own);
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        a->imported = true;
        *handle = a->id;
        dbl_unlock();
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_vmm_alloc *a = alloc_find(handle);
        if (prop == NULL || a == NULL) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else {
                memset(prop, 0, sizeof(*prop));
                prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
                prop->requestedHandleTypes = (CUmemAllocationHandleType)a->handle_types;
                prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
                prop->location.id = dbl_phys_to_ordinal(a->phys);
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_region *r = dbl_region_find((uintptr_t)addr);
        if (handle == NULL || r == NULL || r->kind != DBL_R_VMM) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else {
                r->alloc->handle_refs++;
                *handle = r->alloc->id;
        }
        dbl_unlock();
        return rc;
}

/* ---- address reservations and mappings ---- */

static struct dbl_resv *resv_containing(uintptr_t p, size_t n)
{
        for (struct dbl_resv *v = resvs; v != NULL; v = v->next)
                if (p >= v->base && n <= v->size && p - v->base <= v->size - n)
                        return v;
        return NULL;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        (void)addr;     /* a hint only; the double ignores it */
        (void)flags;
        if (alignment == 0)
                alignment = DBL_GRANULARITY;
        if (ptr == NULL || size == 0 || size % DBL_GRANULARITY != 0 ||
            (alignment & (alignment - 1)) != 0) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_VALUE;
        }
        size_t len = size + alignment;
        void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        struct dbl_resv *v = p != MAP_FAILED ? calloc(1, sizeof(*v)) : NULL;
        if (v == NULL) {
                if (p != MAP_FAILED)
                        munmap(p, len);
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        uintptr_t start = (uintptr_t)p;
        uintptr_t base = (start + alignment - 1) & ~(uintptr_t)(alignment - 1);
        if (base > start)
                munmap(p, base - start);
        if (start + len > base + size)
                munmap((void *)(base + size), start + len - (base + size));
        v->base = base;
        v->size = size;
        v->next = resvs;
        resvs = v;
        *ptr = (CUdeviceptr)base;
        dbl_unlock();
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        rc = CUDA_ERROR_INVALID_VALUE;
        for (struct dbl_resv **pp = &resvs; *pp != NULL; pp = &(*pp)->next) {
                struct dbl_resv *v = *pp;
                if (v->base != (uintptr_t)ptr || v->size != size)
                        continue;
                /* The double insists on cuMemUnmap first. */
                bool mapped = false;
                for (struct dbl_region *r = dbl_regions; r != NULL; r = r->next)
                        if (r->kind == DBL_R_VMM && r->resv == v)
                                mapped = true;
                if (!mapped) {
                        *pp = v->next;
                        munmap((void *)v->base, v->size);
                        free(v);
                        rc = CUDA_SUCCESS;
                }
                break;
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        uintptr_t p = (uintptr_t)ptr;
        struct dbl_vmm_alloc *a = alloc_find(handle);
        struct dbl_resv *v = resv_containing(p, size);
        bool ok = a != NULL && v != NULL && flags == 0 && size > 0 &&
                  p % DBL_GRANULARITY == 0 && size % DBL_GRANULARITY == 0 &&
                  offset % DBL_GRANULARITY == 0 && offset <= a->size &&
                  size <= a->size - offset;
        for (struct dbl_region *r = dbl_regions; ok && r != NULL; r = r->next)
                if (r->base < p + size && p < r->base + r->size)
                        ok = false;     /* already mapped */
        struct dbl_region *r = ok ? dbl_region_new(DBL_R_VMM) : NULL;
        if (r == NULL) {
                dbl_unlock();
                return ok ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
        }
        void *m = mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd,
                        a->off + (off_t)offset);
        if (m == MAP_FAILED) {
                dbl_region_unlink(r);
                free(r);
                mmap((void *)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED |
                     MAP_NORESERVE, -1, 0);
                dbl_unlock();
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        r->base = p;
        r->size = size;
        r->map_len = size;
        r->bufid = dbl.next_bufid++;
        r->phys = a->phys;
        r->prot = PROT_NONE;
        r->alloc = a;
        r->offset = offset;
        r->resv = v;
        a->map_refs++;
        dbl_unlock();
        return CUDA_SUCCESS;
}

/* Is [p, p+n) exactly a run of whole VMM mappings? */
static bool whole_mappings(uintptr_t p, size_t n)
{
        uintptr_t end = p + n;
        if (n == 0 || end < p)
                return false;
        while (p < end) {
                struct dbl_region *r = dbl_region_find(p);
                if (r == NULL || r->kind != DBL_R_VMM || r->base != p || r->size > end - p)
                        return false;
                p += r->size;
        }
        return true;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        uintptr_t p = (uintptr_t)ptr;
        if (!whole_mappings(p, size)) {
                dbl_unlock();
                return CUDA_ERROR_INVALID_VALUE;
        }
        dbl_streams_drain_all();
        while (p < (uintptr_t)ptr + size) {
                struct dbl_region *r = dbl_region_find(p);
                if (r == NULL)
                        break;          /* unmapped by another thread meanwhile */
                p += r->size;
                mmap((void *)r->base, r->size, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
                dbl_region_unlink(r);
                r->alloc->map_refs--;
                alloc_maybe_free(r->alloc);
                free(r);
        }
        dbl_unlock();
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        int prot = PROT_NONE;
        if (desc == NULL || count == 0)
                rc = CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; rc == CUDA_SUCCESS && i < count; i++) {
                if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
                        rc = CUDA_ERROR_INVALID_VALUE;
                else if (!dbl_ordinal_ok(desc[i].location.id))
                        rc = CUDA_ERROR_INVALID_DEVICE;
                else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                        prot |= PROT_READ | PROT_WRITE;
                else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ)
                        prot |= PROT_READ;
                else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
                        rc = CUDA_ERROR_INVALID_VALUE;
        }
        if (rc == CUDA_SUCCESS && !whole_mappings((uintptr_t)ptr, size))
                rc = CUDA_ERROR_INVALID_VALUE;
        /* Access for a device other than the memory's needs peer capability. */
        for (uintptr_t p = (uintptr_t)ptr; rc == CUDA_SUCCESS && p < (uintptr_t)ptr + size;) {
                struct dbl_region *r = dbl_region_find(p);
                for (size_t i = 0; i < count; i++) {
                        int phys = dbl.visible[desc[i].location.id];
                        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && phys != r->phys &&
                            !dbl_peer_ok(phys, r->phys))
                                rc = CUDA_ERROR_INVALID_DEVICE;
                }
                p += r->size;
        }
        uint32_t granted = 0;
        for (size_t i = 0; rc == CUDA_SUCCESS && i < count; i++)
                if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
                        granted |= 1u << dbl.visible[desc[i].location.id];
        for (uintptr_t p = (uintptr_t)ptr; rc == CUDA_SUCCESS && p < (uintptr_t)ptr + size;) {
                struct dbl_region *r = dbl_region_find(p);
                if (mprotect((void *)r->base, r->size, prot) != 0) {
                        rc = CUDA_ERROR_OPERATING_SYSTEM;
                } else {
                        r->prot = prot;
                        r->access_phys = granted;
                }
                p += r->size;
        }
        dbl_unlock();
        return rc;
}
