/* cudastub.c: the CUDA entry points of a library built without <cuda.h>
 * (the build lacks -I$(CUDA_HOME)/include).  Every one fails with
 * -ENOTSUP and says why; host buffers are unaffected. */
#include <errno.h>
#include <stdio.h>

#include "batchint.h"
#include "cudaint.h"

#ifndef GPUIPC_HAVE_CUDA_H

#define NO_CUDA "CUDA driver unavailable: libgpuipc was built without <cuda.h>"

int gpuipc_cudabuf_new(int device, size_t size, gpuipc_cudabuf **ret_buf)
{
        return -ENOTSUP;
}

uint64_t gpuipc_cudabuf_ptr(const gpuipc_cudabuf *b)
{
        return 0;
}

size_t gpuipc_cudabuf_size(const gpuipc_cudabuf *b)
{
        return 0;
}

void gpuipc_cudabuf_free(gpuipc_cudabuf *b)
{
}

int gpuipc_cuda_register(gpuipc_client *c, const char *name, uint64_t dptr, uint64_t size,
                         const gpuipc_meta *meta, void *event, unsigned flags, uint64_t *ret_id)
{
        int r;

        r = gpuipc__begin(c);
        if (r < 0)
                return r;
        return gpuipc__fail(c, -ENOTSUP, NO_CUDA);
}

int gpuipc_cuda_explain(uint64_t dptr, uint64_t size, unsigned flags, char *buf, size_t len)
{
        if (buf && len)
                snprintf(buf, len, "none: %s", NO_CUDA);
        return -ENOTSUP;
}

int gpuipc_view_wait_stream(const gpuipc_view *v, void *stream)
{
        return v ? 0 : -EINVAL;         /* only host views exist here */
}

int gpuipc_view_release_after(gpuipc_view *v, void *event)
{
        return gpuipc__view_release(v, NULL);
}

int gpuipc__cuview_open(gpuipc_client *c, const msgpack_object *reg, const int *fds,
                        unsigned nfds, bool held, unsigned flags, int device, gpuipc_view *v)
{
        return gpuipc__fail(c, -ENOTSUP, NO_CUDA);
}

void gpuipc__cuview_close(gpuipc_view *v)
{
}

bool gpuipc__cuview_own(const gpuipc_view *v)
{
        return false;
}

void gpuipc__cuview_extent(const gpuipc_view *v, uint8_t **base, uint64_t *size)
{
}

int gpuipc__cuparts_new(gpuipc_client *c, const struct gpuipc__bbuf *const *bufs, unsigned n,
                        void *event, int event_device, unsigned flags,
                        struct gpuipc__cuparts **ret)
{
        return gpuipc__fail(c, -ENOTSUP, NO_CUDA);
}

unsigned gpuipc__cuparts_fds(const struct gpuipc__cuparts *p, unsigned i, const int **ret_fds)
{
        *ret_fds = NULL;
        return 0;
}

void gpuipc__cuparts_pack(msgpack_packer *pk, const struct gpuipc__cuparts *p, unsigned i,
                          uint64_t size, const uint32_t *fdidx)
{
}

bool gpuipc__cuparts_bound(const struct gpuipc__cuparts *p)
{
        return false;
}

const uint8_t *gpuipc__cuparts_event(const struct gpuipc__cuparts *p)
{
        return NULL;
}

void gpuipc__cuparts_free(struct gpuipc__cuparts *p)
{
}

int gpuipc__cuda_read(uint64_t dptr, int device, void *dst, size_t n, char *why, size_t why_len)
{
        snprintf(why, why_len, "%s", NO_CUDA);
        return -ENOTSUP;
}

int gpuipc__cuda_event_open(gpuipc_client *c, const uint8_t *handle, int device, bool own,
                            unsigned flags, void **ret_event)
{
        return gpuipc__fail(c, -ENOTSUP, NO_CUDA);
}

void gpuipc__cuda_event_close(void *event, int device)
{
}

bool gpuipc__cucache_enabled(void)
{
        return false;
}

void gpuipc__cucache_uncache(gpuipc_client *c, uint64_t alloc)
{
}

void gpuipc__cucache_conn_lost(gpuipc_client *c)
{
}

unsigned gpuipc__cucache_take_unholds(gpuipc_client *c, uint64_t **ret)
{
        *ret = NULL;
        return 0;
}

int gpuipc_cache_set_limits(uint64_t max_bytes, unsigned max_entries)
{
        return 0;
}

int gpuipc_cache_trim(gpuipc_client *c)
{
        return 0;
}

int gpuipc__cuda_wait_events(gpuipc_client *c, const uint8_t *handles, unsigned n)
{
        return gpuipc__fail(c, -ENOTSUP, NO_CUDA);
}

#endif
