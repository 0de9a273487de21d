/* cudabuf.c: VMM buffers made by the library, and the stream-order side
 * of device views (events). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cudaint.h"

/* Host views are never on a device; needs no driver. */
int gpuipc_view_device(const gpuipc_view *v)
{
        if (!v)
                return -EINVAL;
        return v->info->kind == GPUIPC_KIND_HOST ? -1 : v->device;
}

#ifdef GPUIPC_HAVE_CUDA_H

struct gpuipc_cudabuf {
        struct cuda *cu;
        int device;
        CUdeviceptr ptr;
        size_t size;
        CUmemGenericAllocationHandle h;
};

int gpuipc_cudabuf_new(int device, size_t size, gpuipc_cudabuf **ret_buf)
{
        CUmemAllocationProp prop = {
                .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device },
        };
        CUmemAccessDesc acc = { .location = prop.location,
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        gpuipc_cudabuf *b;
        struct cuda *cu;
        CUcontext saved;
        CUresult res;
        size_t gran = 0;
        int r;

        if (!ret_buf || size == 0 || device < 0)
                return -EINVAL;
        r = gpuipc__cu_get(NULL, &cu);
        if (r < 0)
                return r;
        b = calloc(1, sizeof(*b));
        if (!b)
                return -ENOMEM;
        b->cu = cu;
        b->device = device;
        r = gpuipc__cu_enter(NULL, cu, device, &saved);
        if (r < 0) {
                free(b);
                return r;
        }
        res = cu->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (res != CUDA_SUCCESS || gran == 0 || size > SIZE_MAX - gran)
                goto fail;
        b->size = (size + gran - 1) / gran * gran;
        res = cu->cuMemCreate(&b->h, b->size, &prop, 0);
        if (res != CUDA_SUCCESS)
                goto fail;
        res = cu->cuMemAddressReserve(&b->ptr, b->size, gran, 0, 0);
        if (res != CUDA_SUCCESS)
                goto release;
        res = cu->cuMemMap(b->ptr, b->size, 0, b->h, 0);
        if (res != CUDA_SUCCESS)
                goto free_va;
        res = cu->cuMemSetAccess(b->ptr, b->size, &acc, 1);
        if (res == CUDA_SUCCESS) {
                gpuipc__cu_leave(cu, saved);
                *ret_buf = b;
                return 0;
        }
        (void)cu->cuMemUnmap(b->ptr, b->size);
free_va:
        (void)cu->cuMemAddressFree(b->ptr, b->size);
release:
        (void)cu->cuMemRelease(b->h);
fail:
        gpuipc__cu_leave(cu, saved);
        free(b);
        r = cuda_result_errno(res);
        return r < 0 ? r : -EINVAL;
}

uint64_t gpuipc_cudabuf_ptr(const gpuipc_cudabuf *b)
{
        return b ? b->ptr : 0;
}

size_t gpuipc_cudabuf_size(const gpuipc_cudabuf *b)
{
        return b ? b->size : 0;
}

void gpuipc_cudabuf_free(gpuipc_cudabuf *b)
{
        struct cuda *cu;
        CUcontext saved;

        if (!b)
                return;
        cu = b->cu;
        gpuipc__cuexport_forget(b->ptr);
        if (gpuipc__cu_enter(NULL, cu, b->device, &saved) == 0) {
                (void)cu->cuMemUnmap(b->ptr, b->size);
                (void)cu->cuMemAddressFree(b->ptr, b->size);
                (void)cu->cuMemRelease(b->h);
                gpuipc__cu_leave(cu, saved);
        }
        free(b);
}

/* A view whose registration was revoked (its cuda-ipc owner went away)
 * may point at freed memory: gpuipc_view_wait_stream() fails with -ESTALE
 * for it, so that no kernel is queued behind it.  The data pointer stays
 * mapped until the view is released. */
int gpuipc_view_wait_stream(const gpuipc_view *v, void *stream)
{
        gpuipc_client *c;
        struct cuda *cu;
        CUcontext saved;
        CUresult res;
        int r;

        if (!v)
                return -EINVAL;
        c = v->c;
        if (v->info->kind == GPUIPC_KIND_HOST)
                return 0;
        /* Pick up a `revoked` event that is already waiting. */
        if (gpuipc__client_usable(c))
                (void)gpuipc__pump(c, 0);
        if (gpuipc__revoked(c, v->info->id))
                return gpuipc__fail(c, -ESTALE, "registration %s was revoked: its owner is gone",
                                    v->info->name);
        if (!v->event)
                return 0;
        r = gpuipc__cu_get(c, &cu);
        if (r == 0)
                r = GPUIPC__CU_NEED(c, cu, cuStreamWaitEvent);
        if (r == 0)
                r = gpuipc__cu_enter(c, cu, v->device, &saved);
        if (r < 0)
                return r;
        res = cu->cuStreamWaitEvent((CUstream)stream, (CUevent)v->event, 0);
        gpuipc__cu_leave(cu, saved);
        if (res != CUDA_SUCCESS)
                return gpuipc__cu_fail(c, cu, res, "cuStreamWaitEvent");
        return 0;
}

int gpuipc_view_release_after(gpuipc_view *v, void *event)
{
        CUipcEventHandle eh;
        struct cuda *cu;
        CUcontext saved;
        CUresult res;
        int r;

        if (!v)
                return 0;
        if (!event || v->info->kind == GPUIPC_KIND_HOST)
                return gpuipc__view_release(v, NULL);
        r = gpuipc__cu_get(v->c, &cu);
        if (r == 0)
                r = GPUIPC__CU_NEED(v->c, cu, cuIpcGetEventHandle);
        if (r == 0)
                r = gpuipc__cu_enter(v->c, cu, v->device, &saved);
        if (r < 0) {
                (void)gpuipc__view_release(v, NULL);
                return r;
        }
        res = cu->cuIpcGetEventHandle(&eh, (CUevent)event);
        gpuipc__cu_leave(cu, saved);
        if (res != CUDA_SUCCESS) {
                /* Release anyway: the view is freed either way. */
                r = gpuipc__cu_fail(v->c, cu, res, "cuIpcGetEventHandle");
                (void)gpuipc__view_release(v, NULL);
                return r;
        }
        return gpuipc__view_release(v, (const uint8_t *)eh.reserved);
}

/* Which device's context opens the events: the caller's current one if
 * any, else device 0's primary context (IPC events wait across devices). */
int gpuipc__cuda_wait_events(gpuipc_client *c, const uint8_t *handles, unsigned n)
{
        CUipcEventHandle eh;
        CUcontext cur = NULL, saved = NULL;
        struct cuda *cu;
        CUevent ev;
        CUresult res;
        bool entered = false;
        int r;

        r = gpuipc__cu_get(c, &cu);
        if (r == 0)
                r = GPUIPC__CU_NEED(c, cu, cuIpcOpenEventHandle);
        if (r == 0)
                r = GPUIPC__CU_NEED(c, cu, cuEventSynchronize);
        if (r < 0)
                return r;
        if (cu->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || !cur) {
                r = gpuipc__cu_enter(c, cu, 0, &saved);
                if (r < 0)
                        return r;
                entered = true;
        }
        for (unsigned i = 0; i < n && r == 0; i++) {
                memcpy(eh.reserved, handles + (size_t)i * GPUIPC__EVENT_LEN, GPUIPC__EVENT_LEN);
                res = cu->cuIpcOpenEventHandle(&ev, eh);
                if (res != CUDA_SUCCESS) {
                        r = gpuipc__cu_fail(c, cu, res, "cuIpcOpenEventHandle (consumer's event)");
                        break;
                }
                res = cu->cuEventSynchronize(ev);
                if (res != CUDA_SUCCESS)
                        r = gpuipc__cu_fail(c, cu, res, "cuEventSynchronize (consumer's event)");
                if (cu->cuEventDestroy_v2)
                        (void)cu->cuEventDestroy_v2(ev);
        }
        if (entered)
                gpuipc__cu_leave(cu, saved);
        return r;
}

#endif
