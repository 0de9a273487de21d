/* test_lib_dlpack.c: how gpuipc_view_dlpack() reads a registration's
 * layout (client/lib/dlpack.c): dtype names and typestrs as the Python
 * package takes them, shapes and byte strides turned into elements, and
 * layouts that do not fit refused.  Linked from the library's objects. */
#include <errno.h>
#include <stdint.h>

#include <criterion/criterion.h>

#include "internal.h"

enum { INT = 0, UINT = 1, FLOAT = 2, BFLOAT = 4, COMPLEX = 5, BOOL = 6 };

static void dtype_is(const char *dtype, int code, int bits)
{
        uint8_t c = 99, b = 99;

        cr_assert_eq(gpuipc__dl_dtype(dtype, &c, &b), 0, "%s", dtype ? dtype : "(null)");
        cr_expect_eq(c, code, "%s: code %u", dtype ? dtype : "(null)", c);
        cr_expect_eq(b, bits, "%s: bits %u", dtype ? dtype : "(null)", b);
}

Test(dlpack, dtype_names_and_typestrs)
{
        dtype_is(NULL, UINT, 8);
        dtype_is("", UINT, 8);
        dtype_is("float32", FLOAT, 32);
        dtype_is("float16", FLOAT, 16);
        dtype_is("bfloat16", BFLOAT, 16);
        dtype_is("int64", INT, 64);
        dtype_is("uint16", UINT, 16);
        dtype_is("bool", BOOL, 8);
        dtype_is("complex128", COMPLEX, 128);
        dtype_is("<f4", FLOAT, 32);
        dtype_is("<f2", FLOAT, 16);
        dtype_is("=f8", FLOAT, 64);
        dtype_is("|u1", UINT, 8);
        dtype_is("<i8", INT, 64);
        dtype_is("|b1", BOOL, 8);
        dtype_is("<c8", COMPLEX, 64);
        dtype_is("<c16", COMPLEX, 128);
}

Test(dlpack, dtypes_without_a_dlpack_type_are_refused)
{
        static const char *bad[] = {
                ">f4",          /* big-endian */
                "<f3", "<f16", "<i3", "|b2", "<c4", "<c32", "<f", "<", "f4",
                "float", "Float32", "float32 ", "<U8", "|V16", "object",
        };
        uint8_t c, b;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                cr_expect_eq(gpuipc__dl_dtype(bad[i], &c, &b), -EINVAL, "%s", bad[i]);
}

struct layout {
        int64_t shape[PROTO_NDIM_MAX], strides[PROTO_NDIM_MAX];
        uint32_t ndim;
        bool strided;
};

static int layout(uint32_t ndim, const int64_t *shape, const int64_t *strides, uint64_t size,
                  uint32_t isize, struct layout *out)
{
        gpuipc_info info = { .ndim = ndim, .shape = shape, .strides = strides, .size = size };

        return gpuipc__dl_layout(&info, isize, out->shape, out->strides, &out->ndim,
                                 &out->strided);
}

Test(dlpack, no_metadata_is_the_bytes_in_one_dimension)
{
        struct layout l;

        cr_assert_eq(layout(0, NULL, NULL, 4096, 1, &l), 0);
        cr_expect_eq(l.ndim, 1);
        cr_expect_eq(l.shape[0], 4096);
        cr_expect(!l.strided);
        /* A dtype given without a shape: whole items only. */
        cr_assert_eq(layout(0, NULL, NULL, 4096, 4, &l), 0);
        cr_expect_eq(l.shape[0], 1024);
        cr_expect_eq(layout(0, NULL, NULL, 4098, 4, &l), -EINVAL);
}

Test(dlpack, shape_and_byte_strides_become_elements)
{
        const int64_t shape[] = { 3, 4 }, fortran[] = { 4, 12 };
        struct layout l;

        cr_assert_eq(layout(2, shape, NULL, 48, 4, &l), 0);
        cr_expect_eq(l.ndim, 2);
        cr_expect(l.shape[0] == 3 && l.shape[1] == 4);
        cr_expect(!l.strided);
        cr_assert_eq(layout(2, shape, fortran, 48, 4, &l), 0);
        cr_expect(l.strided);
        cr_expect(l.strides[0] == 1 && l.strides[1] == 3, "%lld %lld",
                  (long long)l.strides[0], (long long)l.strides[1]);
        /* Fewer bytes than the layout spans. */
        cr_expect_eq(layout(2, shape, NULL, 47, 4, &l), -EINVAL);
        cr_expect_eq(layout(2, shape, fortran, 44, 4, &l), -EINVAL);
        /* The buffer may be larger than the array. */
        cr_expect_eq(layout(2, shape, NULL, 4096, 4, &l), 0);
}

Test(dlpack, strides_that_do_not_fit_are_refused)
{
        const int64_t shape[] = { 2, 2 }, odd[] = { 6, 4 }, negative[] = { -8, 4 };
        struct layout l;

        cr_expect_eq(layout(2, shape, odd, 64, 4, &l), -EINVAL);
        cr_expect_eq(layout(2, shape, negative, 64, 4, &l), -EINVAL);
}

Test(dlpack, empty_arrays_and_overflow)
{
        const int64_t empty[] = { 0, 5 }, huge[] = { INT64_MAX, 4 }, big_stride[] = { 8, 4 };
        const int64_t two[] = { 2, 1 };
        const int64_t wide[] = { INT64_MAX / 2, 1 };
        struct layout l;

        /* No elements: spans nothing, whatever the size. */
        cr_expect_eq(layout(2, empty, NULL, 0, 4, &l), 0);
        cr_expect_eq(layout(2, huge, NULL, UINT64_MAX, 4, &l), -EOVERFLOW);
        cr_expect_eq(layout(2, two, wide, UINT64_MAX, 1, &l), 0);
        cr_expect_eq(layout(2, huge, big_stride, UINT64_MAX, 4, &l), -EOVERFLOW);
}

Test(dlpack, too_many_dimensions)
{
        int64_t shape[PROTO_NDIM_MAX + 1];
        struct layout l;

        for (size_t i = 0; i < PROTO_NDIM_MAX + 1; i++)
                shape[i] = 1;
        cr_expect_eq(layout(PROTO_NDIM_MAX + 1, shape, NULL, 64, 1, &l), -EINVAL);
        cr_expect_eq(layout(PROTO_NDIM_MAX, shape, NULL, 64, 1, &l), 0);
}
