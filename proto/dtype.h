/* dtype.h: the element types a registration's meta.dtype names.
 *
 * Shared by libgpuipc (the DLPack export) and gpuipcctl (put's --dtype).
 * The daemon does not read dtypes: meta.dtype is the producer's word,
 * passed on as given.  Each caller keeps its own rule on top of the
 * grammar: the DLPack export refuses big-endian types, put takes them. */
#ifndef GPUIPC_PROTO_DTYPE_H
#define GPUIPC_PROTO_DTYPE_H

#include <stdint.h>

enum proto_dtype_kind {
        PROTO_DTYPE_BOOL,
        PROTO_DTYPE_INT,
        PROTO_DTYPE_UINT,
        PROTO_DTYPE_FLOAT,
        PROTO_DTYPE_BFLOAT,
        PROTO_DTYPE_COMPLEX,
};

struct proto_dtype {
        enum proto_dtype_kind kind;
        uint8_t size;           /* bytes per item */
        char order;             /* a typestr's '<', '>', '|' or '='; 0 for a name */
};

/* A dtype name ("float32", "bfloat16", "complex64": the names of
 * torch, NumPy and CuPy), or a typestr as NumPy's array interface writes
 * it: byte order ('<', '>', '|', '='), kind ('b', 'i', 'u', 'f', 'c') and
 * size in bytes, in plain digits ("<f4", "|b1", "<c16").  Only the sizes
 * each kind comes in: b1; i and u 1, 2, 4, 8; f 2, 4, 8; c 8, 16.
 * -EINVAL for anything else (NULL and "" included). */
int proto_dtype_parse(const char *s, struct proto_dtype *ret);

#endif
