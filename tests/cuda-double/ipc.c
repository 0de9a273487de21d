/*
 * CUDA driver test double: legacy CUDA IPC memory handles, and the sweep of
 * names left behind by processes that died without running atexit.
 *
 * A handle names the allocation that contains the pointer (so base and
 * base + offset give identical bytes, as on driver 580): exporter pid and
 * nonce, buffer id, physical device and size.  Opening it maps the
 * exporter's named file.  Once the exporter frees the allocation the name
 * is gone and later opens fail with CUDA_ERROR_INVALID_VALUE; existing
 * mappings stay readable (on real hardware that is undefined).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "double.h"

static const char handle_magic[8] = { 'G', 'P', 'U', 'I', 'P', 'C', 'M', 'H' };

struct mem_handle {
        char magic[8];
        uint32_t pid;
        uint32_t phys;
        uint64_t nonce;
        uint64_t bufid;
        uint64_t size;
        uint64_t pidns;         /* the exporter's pid namespace */
};
_Static_assert(sizeof(struct mem_handle) <= CU_IPC_HANDLE_SIZE, "IPC mem handle too big");

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_region *r = dbl_region_find((uintptr_t)dptr);
        if (pHandle == NULL || r == NULL || r->kind != DBL_R_ALLOC) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else {
                struct mem_handle h;
                memset(&h, 0, sizeof(h));
                memcpy(h.magic, handle_magic, sizeof(h.magic));
                h.pid = (uint32_t)getpid();
                h.phys = (uint32_t)r->phys;
                h.nonce = dbl.nonce;
                h.bufid = r->bufid;
                h.size = r->size;
                h.pidns = dbl.pidns;
                memset(pHandle, 0, sizeof(*pHandle));
                memcpy(pHandle->reserved, &h, sizeof(h));
        }
        dbl_unlock();
        return rc;
}

static struct dbl_region *find_opened(const struct mem_handle *h)
{
        for (struct dbl_region *r = dbl_regions; r != NULL; r = r->next)
                if (r->kind == DBL_R_IPC && r->src_pid == (int)h->pid &&
                    r->src_nonce == h->nonce && r->src_bufid == h->bufid)
                        return r;
        return NULL;
}

static CUresult open_locked(CUdeviceptr *pdptr, const struct mem_handle *h, unsigned int flags)
{
        struct dbl_ctx *cur = dbl_current();
        if (pdptr == NULL || memcmp(h->magic, handle_magic, sizeof(h->magic)) != 0 ||
            h->phys >= DBL_MAX_DEVICES || h->size == 0)
                return CUDA_ERROR_INVALID_VALUE;
        if ((flags & ~(unsigned int)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0)
                return CUDA_ERROR_INVALID_VALUE;
        /* Measured on driver 580: neither the exporting process nor a process
         * of another pid namespace can open a handle. */
        if ((h->pid == (uint32_t)getpid() && h->nonce == dbl.nonce) || h->pidns != dbl.pidns)
                return CUDA_ERROR_INVALID_CONTEXT;

        struct dbl_region *r = find_opened(h);
        if (r != NULL) {
                if (dbl.already_mapped_error)
                        return CUDA_ERROR_ALREADY_MAPPED;       /* older drivers */
                r->refs++;                                      /* driver 580 */
                *pdptr = (CUdeviceptr)r->base;
                return CUDA_SUCCESS;
        }

        int phys = (int)h->phys;
        if (dbl_phys_to_ordinal(phys) < 0)
                return CUDA_ERROR_INVALID_DEVICE;       /* hidden by CUDA_VISIBLE_DEVICES */
        /* Memory of another device needs peer access, with or without the
         * lazy flag (which only enables it). */
        if (phys != cur->phys) {
                if (!dbl_peer_ok(cur->phys, phys))
                        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
                if (flags & CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
                        cur->peer_mask |= 1u << phys;
        }

        char path[320];
        dbl_shm_path(path, sizeof(path), (int)h->pid, h->pidns, h->nonce, 'm',
                     (unsigned long long)h->bufid);
        if (dbl_pid_dead((int)h->pid, h->pidns)) {
                unlink(path);                           /* SIGKILLed exporter */
                return CUDA_ERROR_INVALID_VALUE;
        }
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
                return CUDA_ERROR_INVALID_VALUE;        /* freed, or never existed */
        struct stat st;
        size_t pg = (size_t)sysconf(_SC_PAGESIZE);
        size_t map_len = (h->size + pg - 1) / pg * pg;
        void *p = MAP_FAILED;
        if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= map_len)
                p = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED)
                return CUDA_ERROR_INVALID_VALUE;
        r = dbl_region_new(DBL_R_IPC);
        if (r == NULL) {
                munmap(p, map_len);
                return CUDA_ERROR_OUT_OF_MEMORY;
        }
        r->base = (uintptr_t)p;
        r->size = h->size;
        r->map_len = map_len;
        r->bufid = dbl.next_bufid++;
        r->phys = phys;
        r->ctx = cur;
        r->prot = PROT_READ | PROT_WRITE;
        r->src_pid = (int)h->pid;
        r->src_nonce = h->nonce;
        r->src_bufid = h->bufid;
        r->refs = 1;
        *pdptr = (CUdeviceptr)r->base;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                       unsigned int Flags)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct mem_handle h;
        memcpy(&h, handle.reserved, sizeof(h));
        rc = open_locked(pdptr, &h, Flags);
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_region *r = dbl_region_find((uintptr_t)dptr);
        if (r == NULL || r->kind != DBL_R_IPC || r->base != (uintptr_t)dptr) {
                rc = CUDA_ERROR_INVALID_VALUE;
        } else if (--r->refs == 0) {
                dbl_streams_drain_all();
                dbl_region_release(r);
        }
        dbl_unlock();
        return rc;
}

/*
 * Names are gpuipc-double-<pid>-n<pidns>-...; a process killed by SIGKILL
 * leaves its names behind.  cuInit removes those whose pid no longer
 * exists.  A pid means something only in its own pid namespace, so names
 * of another namespace (and names without one) are left alone: a process
 * there may be alive, whatever kill() says here.
 */
uint64_t dbl_read_pidns(void)
{
        struct stat st;
        return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

bool dbl_pid_dead(int pid, uint64_t pidns)
{
        if (pidns != dbl.pidns)
                return false;
        return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

void dbl_sweep_stale(void)
{
        static const char prefix[] = "gpuipc-double-";
        DIR *d = opendir(dbl.shm_dir);
        if (d == NULL)
                return;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
                if (strncmp(de->d_name, prefix, sizeof(prefix) - 1) != 0)
                        continue;
                const char *s = de->d_name + sizeof(prefix) - 1;
                char *end, *end2;
                long pid = strtol(s, &end, 10);
                if (end == s || end[0] != '-' || end[1] != 'n' || pid <= 0)
                        continue;
                unsigned long long ns = strtoull(end + 2, &end2, 10);
                if (end2 == end + 2 || *end2 != '-')
                        continue;
                if (ns == dbl.pidns && pid == (long)getpid())
                        continue;
                if (dbl_pid_dead((int)pid, ns))
                        unlinkat(dirfd(d), de->d_name, 0);
        }
        closedir(d);
}
