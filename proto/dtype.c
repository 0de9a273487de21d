/* dtype.c: dtype names and typestrs (see dtype.h). */
#include <errno.h>
#include <string.h>

#include "dtype.h"

static const struct {
        const char *name;
        enum proto_dtype_kind kind;
        uint8_t size;
} names[] = {
        { "bool", PROTO_DTYPE_BOOL, 1 },        { "int8", PROTO_DTYPE_INT, 1 },
        { "int16", PROTO_DTYPE_INT, 2 },        { "int32", PROTO_DTYPE_INT, 4 },
        { "int64", PROTO_DTYPE_INT, 8 },        { "uint8", PROTO_DTYPE_UINT, 1 },
        { "uint16", PROTO_DTYPE_UINT, 2 },      { "uint32", PROTO_DTYPE_UINT, 4 },
        { "uint64", PROTO_DTYPE_UINT, 8 },      { "float16", PROTO_DTYPE_FLOAT, 2 },
        { "float32", PROTO_DTYPE_FLOAT, 4 },    { "float64", PROTO_DTYPE_FLOAT, 8 },
        { "bfloat16", PROTO_DTYPE_BFLOAT, 2 },  { "complex64", PROTO_DTYPE_COMPLEX, 8 },
        { "complex128", PROTO_DTYPE_COMPLEX, 16 },
};

/* A typestr's kinds, each with the sizes it comes in (bit n: n bytes). */
static const struct {
        char code;
        enum proto_dtype_kind kind;
        uint32_t sizes;
} codes[] = {
        { 'b', PROTO_DTYPE_BOOL, 1u << 1 },
        { 'i', PROTO_DTYPE_INT, 1u << 1 | 1u << 2 | 1u << 4 | 1u << 8 },
        { 'u', PROTO_DTYPE_UINT, 1u << 1 | 1u << 2 | 1u << 4 | 1u << 8 },
        { 'f', PROTO_DTYPE_FLOAT, 1u << 2 | 1u << 4 | 1u << 8 },
        { 'c', PROTO_DTYPE_COMPLEX, 1u << 8 | 1u << 16 },
};

/* One or two decimal digits, no leading zero, nothing after. */
static int typestr_size(const char *s, unsigned *ret)
{
        if (s[0] < '1' || s[0] > '9')
                return -EINVAL;
        if (!s[1]) {
                *ret = (unsigned)(s[0] - '0');
                return 0;
        }
        if (s[1] < '0' || s[1] > '9' || s[2])
                return -EINVAL;
        *ret = (unsigned)(10 * (s[0] - '0') + (s[1] - '0'));
        return 0;
}

static int typestr(const char *s, struct proto_dtype *ret)
{
        unsigned size;

        if (!s[0] || !strchr("<>|=", s[0]) || !s[1] || typestr_size(s + 2, &size) < 0)
                return -EINVAL;
        for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
                if (s[1] == codes[i].code) {
                        if (size > 31 || !(codes[i].sizes & (1u << size)))
                                return -EINVAL;
                        ret->kind = codes[i].kind;
                        ret->size = (uint8_t)size;
                        ret->order = s[0];
                        return 0;
                }
        return -EINVAL;
}

int proto_dtype_parse(const char *s, struct proto_dtype *ret)
{
        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (!strcmp(s, names[i].name)) {
                        ret->kind = names[i].kind;
                        ret->size = names[i].size;
                        ret->order = 0;
                        return 0;
                }
        return typestr(s, ret);
}
