/* dlpack.c: a device view as a DLPack DLManagedTensor
 * (gpuipc_view_dlpack), so that a binding hands a consumer's array library
 * one struct made by one call instead of building it field by field.
 *
 * The layout is the registration's metadata read as the Python package
 * reads it (view.py's _layout): a dtype name ("float32") or a little-endian
 * typestr ("<f4"), the shape, and byte strides that must be multiples of
 * the item size and may not be negative; without a shape, one dimension
 * of the view's size in items (uint8 without a dtype).  The extent must fit
 * the view. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "internal.h"

/* dlpack.h's ABI before 1.0 ("dltensor" capsules), which every consumer
 * takes; the library does not need the header. */
struct dl_tensor {
        void *data;
        int32_t device_type, device_id;
        int32_t ndim;
        uint8_t code, bits;
        uint16_t lanes;
        int64_t *shape;
        int64_t *strides;               /* elements; NULL: compact, row-major */
        uint64_t byte_offset;
};

struct dl_managed {
        struct dl_tensor t;
        void *manager_ctx;
        void (*deleter)(struct dl_managed *self);
};

enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_COMPLEX = 5, DL_BOOL = 6 };
enum { DL_CUDA = 2 };

/* One allocation per export: the struct first, then what it points to. */
struct dl_export {
        struct dl_managed m;
        void (*on_delete)(void *ctx);
        void *ctx;
        int64_t shape[PROTO_NDIM_MAX];
        int64_t strides[PROTO_NDIM_MAX];
};

int gpuipc__dl_dtype(const char *dtype, uint8_t *ret_code, uint8_t *ret_bits)
{
        static const uint8_t dl_code[] = {
                [PROTO_DTYPE_BOOL] = DL_BOOL,     [PROTO_DTYPE_INT] = DL_INT,
                [PROTO_DTYPE_UINT] = DL_UINT,     [PROTO_DTYPE_FLOAT] = DL_FLOAT,
                [PROTO_DTYPE_BFLOAT] = DL_BFLOAT, [PROTO_DTYPE_COMPLEX] = DL_COMPLEX,
        };
        struct proto_dtype t;

        if (!dtype || !*dtype) {
                *ret_code = DL_UINT;
                *ret_bits = 8;
                return 0;
        }
        /* DLPack has no byte order: the items must be in the host's. */
        if (proto_dtype_parse(dtype, &t) < 0 || t.order == '>')
                return -EINVAL;
        *ret_code = dl_code[t.kind];
        *ret_bits = (uint8_t)(t.size * 8);
        return 0;
}

int gpuipc__dl_layout(const gpuipc_info *info, uint32_t isize, int64_t *shape, int64_t *strides,
                      uint32_t *ret_ndim, bool *ret_strided)
{
        uint64_t size = info->size, span = isize, n;
        bool empty = false;

        assert(isize > 0);
        if (info->ndim == 0) {
                if (size % isize)
                        return -EINVAL;
                if (size / isize > INT64_MAX)
                        return -EOVERFLOW;
                shape[0] = (int64_t)(size / isize);
                *ret_ndim = 1;
                *ret_strided = false;
                return 0;
        }
        if (info->ndim > PROTO_NDIM_MAX || !info->shape)
                return -EINVAL;
        for (uint32_t i = 0; i < info->ndim; i++) {
                if (info->shape[i] < 0)
                        return -EINVAL;
                empty |= info->shape[i] == 0;
                shape[i] = info->shape[i];
        }
        for (uint32_t i = 0; info->strides && i < info->ndim; i++) {
                if (info->strides[i] < 0 || info->strides[i] % isize)
                        return -EINVAL;
                strides[i] = info->strides[i] / isize;
        }
        /* The bytes it spans: view.py's extent(). */
        for (uint32_t i = 0; !empty && i < info->ndim; i++) {
                if (!info->strides) {
                        if (__builtin_mul_overflow(span, (uint64_t)shape[i], &span))
                                return -EOVERFLOW;
                } else if (__builtin_mul_overflow((uint64_t)shape[i] - 1,
                                                  (uint64_t)info->strides[i], &n) ||
                           __builtin_add_overflow(span, n, &span)) {
                        return -EOVERFLOW;
                }
        }
        if (!empty && span > size)
                return -EINVAL;
        *ret_ndim = info->ndim;
        *ret_strided = info->strides != NULL;
        return 0;
}

static void dl_delete(struct dl_managed *m)
{
        struct dl_export *e = (struct dl_export *)m;    /* m is its first member */
        void (*fn)(void *ctx);
        void *ctx;

        if (!m)
                return;
        fn = e->on_delete;
        ctx = e->ctx;
        free(e);
        if (fn)
                fn(ctx);
}

int gpuipc_view_dlpack(const gpuipc_view *v, void (*on_delete)(void *ctx), void *ctx,
                       void **ret_managed)
{
        struct dl_export *e;
        uint8_t code, bits;
        uint32_t ndim;
        bool strided;
        int r;

        if (!v || !ret_managed || v->device < 0 || !v->data)
                return -EINVAL;
        r = gpuipc__dl_dtype(v->info->dtype, &code, &bits);
        if (r < 0)
                return r;
        e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        r = gpuipc__dl_layout(v->info, bits / 8, e->shape, e->strides, &ndim, &strided);
        if (r < 0) {
                free(e);
                return r;
        }
        e->m.t = (struct dl_tensor){
                .data = v->data,
                .device_type = DL_CUDA,
                .device_id = v->device,
                .ndim = (int32_t)ndim,
                .code = code,
                .bits = bits,
                .lanes = 1,
                .shape = e->shape,
                .strides = strided ? e->strides : NULL,
        };
        e->m.manager_ctx = e;
        e->m.deleter = dl_delete;
        e->on_delete = on_delete;
        e->ctx = ctx;
        *ret_managed = &e->m;
        return 0;
}
