/* cuda_ctx.c: the driver, lazily initialised device contexts, and the
 * device-to-device copy behind adopt. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ctx.h"
#include "cuda/driver.h"
#include "log.h"

#define GPU_MAX_DEVICES 64

#ifdef GPUIPC_HAVE_CUDA_H

struct gpu_dev {
        uint8_t uuid[CUDA_UUID_LEN];
        CUdevice dev;
        CUcontext ctx;                  /* retained primary context */
};

struct gpu {
        struct cuda *cu;                /* NULL: no usable driver */
        char why[CUDA_WHY_MAX];
        struct gpu_dev devs[GPU_MAX_DEVICES];
        unsigned ndevs;
};

int gpu_new(struct gpu **ret)
{
        struct gpu *g = calloc(1, sizeof(*g));
        int r;

        if (!g)
                return -ENOMEM;
        r = cuda_load(&g->cu, g->why, sizeof(g->why));
        if (r == -ENOMEM) {
                free(g);
                return r;
        }
        if (r < 0)
                log_info("CUDA driver not found (%s): host and cuda-vmm buffers work, "
                         "adopt does not", g->why);
        else
                log_info("CUDA driver found: %s, driver version %d (not initialised until "
                         "an adopt needs it)", cuda_path(g->cu), cuda_driver_version(g->cu));
        *ret = g;
        return 0;
}

struct gpu *gpu_free(struct gpu *g)
{
        if (!g)
                return NULL;
        for (unsigned i = 0; i < g->ndevs; i++)
                (void)g->cu->cuDevicePrimaryCtxRelease_v2(g->devs[i].dev);
        cuda_unload(g->cu);
        free(g);
        return NULL;
}

bool gpu_available(const struct gpu *g, const char **ret_reason, int *ret_driver_version)
{
        const struct cuda *cu = g->cu;
        bool ok = cu && (!cu->init_done || cu->init_res == CUDA_SUCCESS);

        *ret_reason = !cu ? g->why : cuda_reason(cu);
        *ret_driver_version = cuda_driver_version(cu);
        return ok;
}

/* The retained primary context of the device with that UUID, made current;
 * created on first use. */
static int device_ctx(struct gpu *g, const uint8_t uuid[CUDA_UUID_LEN], struct gpu_dev **ret,
                      char *why, size_t why_len)
{
        char text[160], name[CUDA_UUID_STR_LEN + 1];
        struct cuda *cu = g->cu;
        struct gpu_dev *d = NULL;
        CUresult res;
        int r;

        if (!cu) {
                snprintf(why, why_len, "no usable CUDA driver in gpuipcd: %s", g->why);
                return -ENOTSUP;
        }
        r = cuda_init(cu);
        if (r < 0) {
                snprintf(why, why_len, "no usable CUDA driver in gpuipcd: %s", cuda_reason(cu));
                return -ENOTSUP;
        }
        for (unsigned i = 0; i < g->ndevs && !d; i++)
                if (memcmp(g->devs[i].uuid, uuid, CUDA_UUID_LEN) == 0)
                        d = &g->devs[i];
        if (!d) {
                CUdevice dev;
                cuda_uuid_format(uuid, name);
                if (cuda_device_by_uuid(cu, uuid, &dev) < 0 || g->ndevs == GPU_MAX_DEVICES) {
                        snprintf(why, why_len, "device %s is not visible to gpuipcd", name);
                        return -ENOTSUP;
                }
                d = &g->devs[g->ndevs];
                res = cu->cuDevicePrimaryCtxRetain(&d->ctx, dev);
                if (res != CUDA_SUCCESS) {
                        snprintf(why, why_len, "cuDevicePrimaryCtxRetain on %s: %s", name,
                                 cuda_result_text(cu, res, text, sizeof(text)));
                        return cuda_result_errno(res);
                }
                memcpy(d->uuid, uuid, CUDA_UUID_LEN);
                d->dev = dev;
                g->ndevs++;
                log_info("CUDA context created on %s (ordinal %d in gpuipcd)", name, (int)dev);
        }
        res = cu->cuCtxSetCurrent(d->ctx);
        if (res != CUDA_SUCCESS) {
                snprintf(why, why_len, "cuCtxSetCurrent: %s",
                         cuda_result_text(cu, res, text, sizeof(text)));
                return cuda_result_errno(res);
        }
        *ret = d;
        return 0;
}

/* Records the failed call in why and returns its errno. */
static int fail(struct cuda *cu, CUresult res, const char *call, char *why, size_t why_len)
{
        char text[160];

        snprintf(why, why_len, "%s: %s", call, cuda_result_text(cu, res, text, sizeof(text)));
        return cuda_result_errno(res);
}

int gpu_copy_to_vmm(struct gpu *g, const uint8_t uuid[PROTO_UUID_LEN],
                    const uint8_t handle[PROTO_IPC_HANDLE_LEN], uint64_t offset,
                    uint64_t size, int *ret_fd, uint64_t *ret_alloc_size, char *why,
                    size_t why_len)
{
        CUmemAllocationProp prop = { 0 };
        CUmemAccessDesc access = { 0 };
        CUmemGenericAllocationHandle mem = 0;
        CUdeviceptr src = 0, va = 0;
        CUipcMemHandle ipc;
        struct gpu_dev *d = NULL;
        struct cuda *cu;
        size_t gran = 0, len = 0;
        CUresult res;
        int fd = -1, r;

        r = device_ctx(g, uuid, &d, why, why_len);
        if (r < 0)
                return r;
        cu = g->cu;
        memcpy(ipc.reserved, handle, sizeof(ipc.reserved));
        res = cu->cuIpcOpenMemHandle_v2(&src, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (res != CUDA_SUCCESS)
                return fail(cu, res, "cuIpcOpenMemHandle", why, why_len);

        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = (int)d->dev;
        res = cu->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (res != CUDA_SUCCESS) {
                r = fail(cu, res, "cuMemGetAllocationGranularity", why, why_len);
                goto out_ipc;
        }
        if (gran == 0 || size > SIZE_MAX - gran) {
                snprintf(why, why_len, "size %llu cannot be rounded to the granularity",
                         (unsigned long long)size);
                r = -EINVAL;
                goto out_ipc;
        }
        len = (size + gran - 1) / gran * gran;
        res = cu->cuMemCreate(&mem, len, &prop, 0);
        if (res != CUDA_SUCCESS) {
                r = fail(cu, res, "cuMemCreate", why, why_len);
                goto out_ipc;
        }
        res = cu->cuMemAddressReserve(&va, len, 0, 0, 0);
        if (res != CUDA_SUCCESS) {
                r = fail(cu, res, "cuMemAddressReserve", why, why_len);
                goto out_mem;
        }
        res = cu->cuMemMap(va, len, 0, mem, 0);
        if (res != CUDA_SUCCESS) {
                r = fail(cu, res, "cuMemMap", why, why_len);
                goto out_va;
        }
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        res = cu->cuMemSetAccess(va, len, &access, 1);
        if (res != CUDA_SUCCESS) {
                r = fail(cu, res, "cuMemSetAccess", why, why_len);
                goto out_map;
        }
        /* Synchronous: the loop waits for the copy.  It is short (a 1 GiB
         * device-to-device copy takes a few ms on an H200) next to the
         * producer's alternative of keeping its memory until every
         * consumer lets go. */
        res = cu->cuMemcpyDtoD_v2(va, src + offset, size);
        if (res == CUDA_SUCCESS)
                res = cu->cuCtxSynchronize();
        if (res != CUDA_SUCCESS) {
                r = fail(cu, res, "cuMemcpyDtoD", why, why_len);
                goto out_map;
        }
        r = 0;
out_map:
        res = cu->cuMemUnmap(va, len);
        if (res != CUDA_SUCCESS && r == 0)
                r = fail(cu, res, "cuMemUnmap", why, why_len);
out_va:
        res = cu->cuMemAddressFree(va, len);
        if (res != CUDA_SUCCESS && r == 0)
                r = fail(cu, res, "cuMemAddressFree", why, why_len);
        if (r == 0) {
                res = cu->cuMemExportToShareableHandle(&fd, mem,
                                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
                if (res != CUDA_SUCCESS)
                        r = fail(cu, res, "cuMemExportToShareableHandle", why, why_len);
        }
out_mem:
        /* The exported fd keeps the memory alive without the handle
         * (measured on driver 580). */
        (void)cu->cuMemRelease(mem);
out_ipc:
        res = cu->cuIpcCloseMemHandle(src);
        if (res != CUDA_SUCCESS) {
                char text[160];
                log_warn("cuIpcCloseMemHandle: %s", cuda_result_text(cu, res, text, sizeof(text)));
        }
        if (r < 0)
                return r;
        *ret_fd = fd;
        *ret_alloc_size = len;
        return 0;
}

#else /* !GPUIPC_HAVE_CUDA_H */

struct gpu {
        char why[CUDA_WHY_MAX];
};

int gpu_new(struct gpu **ret)
{
        struct gpu *g = calloc(1, sizeof(*g));

        if (!g)
                return -ENOMEM;
        snprintf(g->why, sizeof(g->why), "gpuipcd was built without <cuda.h>");
        log_info("CUDA driver not used (%s): host and cuda-vmm buffers work, adopt does not",
                 g->why);
        *ret = g;
        return 0;
}

struct gpu *gpu_free(struct gpu *g)
{
        free(g);
        return NULL;
}

bool gpu_available(const struct gpu *g, const char **ret_reason, int *ret_driver_version)
{
        *ret_reason = g->why;
        *ret_driver_version = 0;
        return false;
}

int gpu_copy_to_vmm(struct gpu *g, const uint8_t uuid[PROTO_UUID_LEN],
                    const uint8_t handle[PROTO_IPC_HANDLE_LEN], uint64_t offset,
                    uint64_t size, int *ret_fd, uint64_t *ret_alloc_size, char *why,
                    size_t why_len)
{
        snprintf(why, why_len, "no usable CUDA driver in gpuipcd: %s", g->why);
        return -ENOTSUP;
}

#endif
