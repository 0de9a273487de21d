/* same_objects.h: proto_unpack() (proto/unpack.c) against msgpack-c's own
 * msgpack_unpack(), for the frame fuzzer and the unit tests. */
#ifndef GPUIPC_TESTS_SAME_OBJECTS_H
#define GPUIPC_TESTS_SAME_OBJECTS_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

/* Whether a (proto_unpack) and b (msgpack-c) are the same objects:
 * types, values, and strings at the same bytes of the frame. */
static inline bool same_objects(const msgpack_object *a, const msgpack_object *b)
{
        if (a->type != b->type)
                return false;
        switch (a->type) {
        case MSGPACK_OBJECT_NIL:
                return true;
        case MSGPACK_OBJECT_BOOLEAN:
                return a->via.boolean == b->via.boolean;
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
                return a->via.u64 == b->via.u64;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER:
                return a->via.i64 == b->via.i64;
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
                return memcmp(&a->via.f64, &b->via.f64, sizeof(double)) == 0;
        case MSGPACK_OBJECT_STR:
        case MSGPACK_OBJECT_BIN:
                /* msgpack-c's pointer for an empty one is its own choice */
                return a->via.str.size == b->via.str.size &&
                       (a->via.str.size == 0 || a->via.str.ptr == b->via.str.ptr);
        case MSGPACK_OBJECT_ARRAY:
                if (a->via.array.size != b->via.array.size)
                        return false;
                for (uint32_t i = 0; i < a->via.array.size; i++)
                        if (!same_objects(&a->via.array.ptr[i], &b->via.array.ptr[i]))
                                return false;
                return true;
        case MSGPACK_OBJECT_MAP:
                if (a->via.map.size != b->via.map.size)
                        return false;
                for (uint32_t i = 0; i < a->via.map.size; i++)
                        if (!same_objects(&a->via.map.ptr[i].key, &b->via.map.ptr[i].key) ||
                            !same_objects(&a->via.map.ptr[i].val, &b->via.map.ptr[i].val))
                                return false;
                return true;
        default:
                return false;           /* ext: refused by both */
        }
}

/* Whether msgpack-c decodes body into the same objects as root (what
 * proto_decode() made of it); running out of memory counts as the same. */
static inline bool same_as_msgpack_c(const uint8_t *body, size_t len,
                                     const msgpack_object *root)
{
        msgpack_zone *z = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
        msgpack_object o;
        size_t off = 0;
        int r;

        if (!z)
                return true;
        r = msgpack_unpack((const char *)body, len, &off, z, &o);
        r = r == MSGPACK_UNPACK_NOMEM_ERROR ||
            (r == MSGPACK_UNPACK_SUCCESS && off == len && same_objects(root, &o));
        msgpack_zone_free(z);
        return r;
}


#endif
