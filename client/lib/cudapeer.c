/* cudapeer.c: a consumer on another device than the buffer's: peer
 * access, the -EXDEV error, and the copy of GPUIPC_LOOKUP_COPY_TO_DEVICE. */
#include <errno.h>

#include "cudaint.h"

#ifdef GPUIPC_HAVE_CUDA_H

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
int gpuipc__cu_pick_device(gpuipc_client *c, struct cuda *cu, const gpuipc_info *info,
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
int gpuipc__cuview_copy(gpuipc_client *c, struct cuda *cu, int device, gpuipc_view *v)
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
        gpuipc__cumap_put(cu, v->cumap);
        v->cumap = NULL;
        v->copy = dst;
        v->data = (uint8_t *)(uintptr_t)dst;
        v->device = device;
        return 0;
}

#endif
