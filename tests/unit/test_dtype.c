/* test_dtype.c: dtype names and typestrs (proto/dtype.c), as libgpuipc's
 * DLPack export and gpuipcctl put read a registration's meta.dtype. */
#include <errno.h>
#include <stddef.h>

#include <criterion/criterion.h>

#include "dtype.h"

static void is(const char *s, enum proto_dtype_kind kind, unsigned size, char order)
{
        struct proto_dtype d = { .size = 99, .order = '?' };

        cr_assert_eq(proto_dtype_parse(s, &d), 0, "%s", s);
        cr_expect_eq(d.kind, kind, "%s: kind %d", s, d.kind);
        cr_expect_eq(d.size, size, "%s: size %u", s, d.size);
        cr_expect_eq(d.order, order, "%s: order '%c'", s, d.order ? d.order : '0');
}

Test(dtype, names)
{
        is("bool", PROTO_DTYPE_BOOL, 1, 0);
        is("int8", PROTO_DTYPE_INT, 1, 0);
        is("int64", PROTO_DTYPE_INT, 8, 0);
        is("uint16", PROTO_DTYPE_UINT, 2, 0);
        is("uint32", PROTO_DTYPE_UINT, 4, 0);
        is("float16", PROTO_DTYPE_FLOAT, 2, 0);
        is("float64", PROTO_DTYPE_FLOAT, 8, 0);
        is("bfloat16", PROTO_DTYPE_BFLOAT, 2, 0);
        is("complex64", PROTO_DTYPE_COMPLEX, 8, 0);
        is("complex128", PROTO_DTYPE_COMPLEX, 16, 0);
}

Test(dtype, typestrs_in_every_byte_order)
{
        is("<f4", PROTO_DTYPE_FLOAT, 4, '<');
        is(">f8", PROTO_DTYPE_FLOAT, 8, '>');
        is("=f2", PROTO_DTYPE_FLOAT, 2, '=');
        is("|u1", PROTO_DTYPE_UINT, 1, '|');
        is("<i2", PROTO_DTYPE_INT, 2, '<');
        is(">i8", PROTO_DTYPE_INT, 8, '>');
        is("|b1", PROTO_DTYPE_BOOL, 1, '|');
        is("<c8", PROTO_DTYPE_COMPLEX, 8, '<');
        is(">c16", PROTO_DTYPE_COMPLEX, 16, '>');
}

Test(dtype, anything_else_is_refused)
{
        static const char *bad[] = {
                "", "<", "f4", "<f", "<f3", "<f16", "<i3", "<i16", "|b2", "<c4", "<c32",
                "<f04", "<f+4", "<f 4", "<f4 ", "<f-4", "<f4x", "<c016", "<c160",
                "<U8", "|V16", "|O8", "<b1\n", "!f4", "<F4",
                "float", "Float32", "float32 ", " float32", "bfloat", "object",
                "<f99999999999999999999",
        };
        struct proto_dtype d;

        cr_expect_eq(proto_dtype_parse(NULL, &d), -EINVAL);
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                cr_expect_eq(proto_dtype_parse(bad[i], &d), -EINVAL, "'%s'", bad[i]);
}
