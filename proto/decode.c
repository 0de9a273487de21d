/* decode.c: checked msgpack decoding and typed field access. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

/* One zone kept by proto_msg_free() for the next proto_decode(), cleared
 * down to its first chunk: msgpack_unpack_next() would allocate a new zone
 * for every frame.  Threads swap it atomically, like proto_out's buffer. */
static msgpack_zone *spare_zone;

int proto_decode(const uint8_t *buf, size_t len, struct proto_msg *m, const char **ret_why)
{
        msgpack_zone *z;
        int r;

        msgpack_unpacked_init(&m->up);
        m->root = NULL;
        z = __atomic_exchange_n(&spare_zone, NULL, __ATOMIC_ACQUIRE);
        if (!z)
                z = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
        if (!z)
                return -ENOMEM;
        m->up.zone = z;         /* proto_msg_free() gives it back */
        r = proto_unpack(buf, len, z, &m->up.data, ret_why);
        if (r < 0)
                goto fail;
        m->root = &m->up.data;
        return 0;

fail:
        /* The zone goes back at once: a caller need not free a failed m. */
        proto_msg_free(m);
        return r;
}

void proto_msg_free(struct proto_msg *m)
{
        msgpack_zone *z;

        if (!m)
                return;
        z = m->up.zone;
        if (z) {
                msgpack_zone_clear(z);
                z = __atomic_exchange_n(&spare_zone, z, __ATOMIC_ACQ_REL);
                if (z)
                        msgpack_zone_free(z);
        }
        msgpack_unpacked_init(&m->up);
        m->root = NULL;
}

bool proto_obj_str_eq(const msgpack_object *o, const char *s)
{
        size_t n = strlen(s);

        /* msgpack-c leaves ptr NULL for some empty strings: never pass it to
         * memcmp() with a zero length. */
        return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
               (n == 0 || memcmp(o->via.str.ptr, s, n) == 0);
}

const msgpack_object *proto_get(const msgpack_object *map, const char *key)
{
        size_t n;

        if (!map || map->type != MSGPACK_OBJECT_MAP)
                return NULL;
        /* proto_obj_str_eq() per key, with the key's length taken once:
         * records are read key by key, and this is their hottest loop. */
        n = strlen(key);
        for (uint32_t i = 0; i < map->via.map.size; i++) {
                const msgpack_object *k = &map->via.map.ptr[i].key;
                if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
                    (n == 0 || (k->via.str.ptr[0] == key[0] &&
                                memcmp(k->via.str.ptr, key, n) == 0)))
                        return &map->via.map.ptr[i].val;
        }
        return NULL;
}

/* memcmp() == 0 for the short keys of records, without its call. */
static inline bool same_bytes(const char *a, const char *b, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (a[i] != b[i])
                        return false;
        return true;
}

void proto_get_n(const msgpack_object *map, const struct proto_key *keys, unsigned n,
                 const msgpack_object **ret)
{
        uint32_t seen = 0, all;
        unsigned next = 0;

        if (n > PROTO_GET_N_MAX)
                n = PROTO_GET_N_MAX;
        all = n == 32 ? UINT32_MAX : (UINT32_C(1) << n) - 1;
        for (unsigned j = 0; j < n; j++)
                ret[j] = NULL;
        if (!map || map->type != MSGPACK_OBJECT_MAP)
                return;
        for (uint32_t i = 0; i < map->via.map.size && seen != all; i++) {
                const msgpack_object *k = &map->via.map.ptr[i].key, *v = &map->via.map.ptr[i].val;
                if (k->type != MSGPACK_OBJECT_STR || k->via.str.size == 0)
                        continue;
                /* Maps mostly list their keys in the table's order: the
                 * search starts after the last key found. */
                for (unsigned t = 0, j = next; t < n; t++, j = j + 1 == n ? 0 : j + 1) {
                        if (k->via.str.size != keys[j].len || (seen >> j & 1) ||
                            !same_bytes(k->via.str.ptr, keys[j].name, keys[j].len))
                                continue;
                        /* The first occurrence wins, as with proto_get(). */
                        seen |= UINT32_C(1) << j;
                        ret[j] = v->type == MSGPACK_OBJECT_NIL ? NULL : v;
                        next = j + 1 == n ? 0 : j + 1;
                        break;
                }
        }
}

const msgpack_object *proto_get_present(const msgpack_object *map, const char *key)
{
        const msgpack_object *o = proto_get(map, key);
        return o && o->type != MSGPACK_OBJECT_NIL ? o : NULL;
}

int proto_obj_u64(const msgpack_object *o, uint64_t *ret)
{
        if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return -EINVAL;
        *ret = o->via.u64;
        return 0;
}

int proto_obj_i64(const msgpack_object *o, int64_t *ret)
{
        if (!o)
                return -EINVAL;
        if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
                *ret = o->via.i64;
                return 0;
        }
        if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
                *ret = (int64_t)o->via.u64;
                return 0;
        }
        return -EINVAL;
}

int proto_get_u64(const msgpack_object *map, const char *key, uint64_t *ret)
{
        const msgpack_object *o = proto_get_present(map, key);
        return o ? proto_obj_u64(o, ret) : -ENOENT;
}

int proto_get_i64(const msgpack_object *map, const char *key, int64_t *ret)
{
        const msgpack_object *o = proto_get_present(map, key);
        return o ? proto_obj_i64(o, ret) : -ENOENT;
}

/* The value of key when it has type t; -ENOENT when absent, -EINVAL else. */
static int get_typed(const msgpack_object *map, const char *key, msgpack_object_type t,
                     const msgpack_object **ret)
{
        const msgpack_object *o = proto_get_present(map, key);
        if (!o)
                return -ENOENT;
        if (o->type != t)
                return -EINVAL;
        *ret = o;
        return 0;
}

int proto_get_bool(const msgpack_object *map, const char *key, bool *ret)
{
        const msgpack_object *o;
        int r = get_typed(map, key, MSGPACK_OBJECT_BOOLEAN, &o);

        if (r == 0)
                *ret = o->via.boolean;
        return r;
}

int proto_get_str(const msgpack_object *map, const char *key, const char **ret, size_t *ret_len)
{
        const msgpack_object *o;
        int r = get_typed(map, key, MSGPACK_OBJECT_STR, &o);

        if (r == 0) {
                *ret = o->via.str.ptr;
                *ret_len = o->via.str.size;
        }
        return r;
}

int proto_get_bin(const msgpack_object *map, const char *key, const uint8_t **ret, size_t *ret_len)
{
        const msgpack_object *o;
        int r = get_typed(map, key, MSGPACK_OBJECT_BIN, &o);

        if (r == 0) {
                *ret = (const uint8_t *)o->via.bin.ptr;
                *ret_len = o->via.bin.size;
        }
        return r;
}

int proto_get_map(const msgpack_object *map, const char *key, const msgpack_object **ret)
{
        return get_typed(map, key, MSGPACK_OBJECT_MAP, ret);
}

int proto_get_array(const msgpack_object *map, const char *key, const msgpack_object **ret)
{
        return get_typed(map, key, MSGPACK_OBJECT_ARRAY, ret);
}

int proto_obj_strdup(const msgpack_object *o, char **ret)
{
        char *s;

        if (!o || o->type != MSGPACK_OBJECT_STR)
                return -EINVAL;
        if (o->via.str.size > 0 && memchr(o->via.str.ptr, '\0', o->via.str.size))
                return -EINVAL;
        s = malloc(o->via.str.size + 1);
        if (!s)
                return -ENOMEM;
        if (o->via.str.size > 0)
                memcpy(s, o->via.str.ptr, o->via.str.size);
        s[o->via.str.size] = '\0';
        *ret = s;
        return 0;
}
