/* cudabatch.c: the device parts of a batch.
 *
 * Each device buffer becomes one part, shared exactly as
 * gpuipc_cuda_register() shares a buffer (cudareg.c's gpuipc__cu_share:
 * cuda-vmm chunks, a pool pointer, or a legacy handle, at the offset of
 * the buffer in its allocation), so buffers of one allocation send one
 * export: the same chunk fds, pool fd and handle, which the frame then
 * carries once.  The batch's event is the registration's; one that
 * cannot be shared (not CU_EVENT_INTERPROCESS) is waited for instead.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchint.h"
#include "cudaint.h"

#ifdef GPUIPC_HAVE_CUDA_H

#define COPIED_MAX 128

struct gpuipc__cuparts {
        unsigned n;
        struct gpuipc__devreg *d;       /* n of them */
        gpuipc_cudabuf **copies;        /* GPUIPC_REGISTER_COPY's, or NULL */
        char (*copied)[COPIED_MAX];     /* why a part was copied, or "" */
        bool bound;
        bool has_event;
        uint8_t event[GPUIPC__EVENT_LEN];
};

void gpuipc__cuparts_free(struct gpuipc__cuparts *p)
{
        if (!p)
                return;
        for (unsigned i = 0; p->copies && i < p->n; i++)
                gpuipc_cudabuf_free(p->copies[i]);
        free(p->copies);
        free(p->copied);
        free(p->d);
        free(p);
}

/* The batch's event: its handle when it is interprocess, else the batch
 * is registered once the event is complete, and without one. */
static int batch_event(gpuipc_client *c, struct cuda *cu, void *event, int device,
                       struct gpuipc__cuparts *p)
{
        CUipcEventHandle h;
        CUcontext saved;
        CUresult res;
        int r;

        r = GPUIPC__CU_NEED(c, cu, cuEventSynchronize);
        if (r == 0)
                r = gpuipc__cu_enter(c, cu, device, &saved);
        if (r < 0)
                return r;
        res = cu->cuIpcGetEventHandle ? cu->cuIpcGetEventHandle(&h, (CUevent)event)
                                      : CUDA_ERROR_NOT_SUPPORTED;
        if (res == CUDA_SUCCESS) {
                memcpy(p->event, h.reserved, GPUIPC__EVENT_LEN);
                p->has_event = true;
        } else {
                res = cu->cuEventSynchronize((CUevent)event);
                if (res != CUDA_SUCCESS)
                        r = gpuipc__cu_fail(c, cu, res, "cuEventSynchronize (the batch's "
                                            "sync_event)");
        }
        gpuipc__cu_leave(cu, saved);
        return r;
}

/* Buffer u into part i: shared in place, or copied (GPUIPC_REGISTER_COPY). */
static int share(gpuipc_client *c, struct cuda *cu, const struct gpuipc__bbuf *u, void *event,
                 unsigned flags, struct gpuipc__cuparts *p, unsigned i,
                 struct gpuipc__devreg *tmp)
{
        struct gpuipc__devreg *d = &p->d[i];
        int r;

        r = gpuipc__cu_share(c, cu, u->ptr, u->size, NULL, flags, d);
        if (r < 0)
                return r;
        if (d->ordinal != u->device)
                return gpuipc__fail(c, -EINVAL, "a buffer at 0x%llx of a column on device %d "
                                    "is memory of device %d", (unsigned long long)u->ptr,
                                    u->device, d->ordinal);
        if (d->path == GPUIPC_PATH_COPY) {
                *tmp = *d;
                snprintf(p->copied[i], COPIED_MAX, "zero-copy impossible: %s", tmp->brief);
                return gpuipc__cu_copy(c, cu, u->ptr, u->size, event, tmp, &p->copies[i], d);
        }
        p->bound |= d->path != GPUIPC_PATH_CUDA_VMM;
        return 0;
}

int gpuipc__cuparts_new(gpuipc_client *c, const struct gpuipc__bbuf *const *bufs, unsigned n,
                        void *event, int event_device, unsigned flags,
                        struct gpuipc__cuparts **ret)
{
        struct gpuipc__devreg *tmp = NULL;
        struct gpuipc__cuparts *p;
        struct cuda *cu;
        int r;

        r = gpuipc__cu_get(c, &cu);
        if (r < 0)
                return r;
        p = calloc(1, sizeof(*p));
        if (!p)
                return gpuipc__fail(c, -ENOMEM, "out of memory");
        p->n = n;
        p->d = calloc(n ? n : 1, sizeof(*p->d));
        p->copies = calloc(n ? n : 1, sizeof(*p->copies));
        p->copied = calloc(n ? n : 1, sizeof(*p->copied));
        tmp = malloc(sizeof(*tmp));
        if (!p->d || !p->copies || !p->copied || !tmp) {
                r = gpuipc__fail(c, -ENOMEM, "out of memory");
                goto fail;
        }
        if (event) {
                r = batch_event(c, cu, event, event_device, p);
                if (r < 0)
                        goto fail;
        }
        for (unsigned i = 0; i < n; i++) {
                r = share(c, cu, bufs[i], event, flags, p, i, tmp);
                if (r < 0)
                        goto fail;
        }
        free(tmp);
        *ret = p;
        return 0;
fail:
        free(tmp);
        gpuipc__cuparts_free(p);
        return r;
}

unsigned gpuipc__cuparts_fds(const struct gpuipc__cuparts *p, unsigned i, const int **ret_fds)
{
        const struct gpuipc__devreg *d = &p->d[i];

        *ret_fds = d->fds;
        switch (d->path) {
        case GPUIPC_PATH_CUDA_VMM:
                return d->n_chunks;
        case GPUIPC_PATH_CUDA_POOL:
                return 1;
        default:
                return 0;
        }
}

void gpuipc__cuparts_pack(msgpack_packer *pk, const struct gpuipc__cuparts *p, unsigned i,
                          uint64_t size, const uint32_t *fdidx)
{
        const struct gpuipc__devreg *d = &p->d[i];
        const char *copied = p->copied[i][0] ? p->copied[i] : NULL;

        /* No per-part event (the batch has one), so the fields are those
         * of a register less name and size. */
        msgpack_pack_map(pk, 1 + gpuipc__cu_devreg_fields(d, copied));
        proto_pack_ku64(pk, "size", size);
        gpuipc__cu_pack_devreg(pk, d, copied, fdidx);
}

bool gpuipc__cuparts_bound(const struct gpuipc__cuparts *p)
{
        return p->bound;
}

const uint8_t *gpuipc__cuparts_event(const struct gpuipc__cuparts *p)
{
        return p->has_event ? p->event : NULL;
}

int gpuipc__cuda_read(uint64_t dptr, int device, void *dst, size_t n, char *why, size_t why_len)
{
        struct cuda *cu;
        CUcontext saved;
        CUresult res;
        int r;

        r = gpuipc__cu_get(NULL, &cu);
        if (r < 0) {
                snprintf(why, why_len, "CUDA driver unavailable: %s", gpuipc__cu_why());
                return r;
        }
        if (!cu->cuMemcpyDtoH_v2) {
                snprintf(why, why_len, "the driver lacks cuMemcpyDtoH");
                return -ENOTSUP;
        }
        r = gpuipc__cu_enter(NULL, cu, device, &saved);
        if (r < 0) {
                snprintf(why, why_len, "cannot make device %d's context current", device);
                return r;
        }
        res = cu->cuMemcpyDtoH_v2(dst, (CUdeviceptr)dptr, n);
        gpuipc__cu_leave(cu, saved);
        if (res != CUDA_SUCCESS) {
                char text[128];
                snprintf(why, why_len, "cuMemcpyDtoH of 0x%llx: %s (is it device memory?)",
                         (unsigned long long)dptr, cuda_result_text(cu, res, text,
                                                                   sizeof(text)));
                r = cuda_result_errno(res);
                return r < 0 ? r : -EIO;
        }
        return 0;
}

#endif
