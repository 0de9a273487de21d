/* meta.c: the buffer metadata codec (docs/protocol.md, "meta"), for the
 * register request, the journal and the client's record parser alike. */
#include <errno.h>

#include "proto.h"

static bool utf8(const msgpack_object *o)
{
        return proto_utf8_valid(o->via.str.ptr, o->via.str.size) == o->via.str.size;
}

int proto_strmap_check(const msgpack_object *u, const char *what, char *why, size_t why_len)
{
        if (u->via.map.size > PROTO_USER_MAX_ENTRIES)
                return proto_invalid(why, why_len, "%s has more than %u entries", what,
                                     PROTO_USER_MAX_ENTRIES);
        for (uint32_t i = 0; i < u->via.map.size; i++) {
                const msgpack_object *k = &u->via.map.ptr[i].key, *v = &u->via.map.ptr[i].val;
                if (k->type != MSGPACK_OBJECT_STR || v->type != MSGPACK_OBJECT_STR)
                        return proto_invalid(why, why_len, "%s must map str to str", what);
                if (k->via.str.size > PROTO_USER_KEY_MAX)
                        return proto_invalid(why, why_len, "%s key longer than %u bytes", what,
                                             PROTO_USER_KEY_MAX);
                if (v->via.str.size > PROTO_USER_VALUE_MAX)
                        return proto_invalid(why, why_len, "%s value longer than %u bytes", what,
                                             PROTO_USER_VALUE_MAX);
                if (!utf8(k) || !utf8(v))
                        return proto_invalid(why, why_len, "%s %s %u is not valid UTF-8", what,
                                             utf8(k) ? "value" : "key", i);
        }
        return 0;
}

static int check_ints(const msgpack_object *a, const char *what, bool nonneg, char *why,
                      size_t why_len)
{
        for (uint32_t i = 0; a && i < a->via.array.size; i++) {
                int64_t v;
                if (proto_obj_i64(&a->via.array.ptr[i], &v) < 0 || (nonneg && v < 0))
                        return proto_invalid(why, why_len, "meta.%s entries must be integers%s", what,
                                    nonneg ? " >= 0" : "");
        }
        return 0;
}

int proto_meta_check(const msgpack_object *meta, struct proto_meta *ret, char *why,
                     size_t why_len)
{
        struct proto_meta m = { 0 };
        const char *dtype;
        size_t dtype_len = 0;
        uint32_t ndim;
        int r;

        r = proto_get_str(meta, "dtype", &dtype, &dtype_len);
        if (r == -EINVAL)
                return proto_invalid(why, why_len, "meta.dtype must be a str");
        if (r == 0 && dtype_len > PROTO_DTYPE_MAX)
                return proto_invalid(why, why_len, "meta.dtype is longer than %u bytes", PROTO_DTYPE_MAX);
        if (r == 0 && proto_utf8_valid(dtype, dtype_len) != dtype_len)
                return proto_invalid(why, why_len, "meta.dtype is not valid UTF-8");
        if (r == 0)
                m.dtype = proto_get(meta, "dtype");
        r = proto_get_array(meta, "shape", &m.shape);
        if (r == -EINVAL)
                return proto_invalid(why, why_len, "meta.shape must be an array of int");
        ndim = m.shape ? m.shape->via.array.size : 0;
        if (ndim > PROTO_NDIM_MAX)
                return proto_invalid(why, why_len, "meta.shape has more than %u entries", PROTO_NDIM_MAX);
        r = proto_get_array(meta, "strides", &m.strides);
        if (r == -EINVAL)
                return proto_invalid(why, why_len, "meta.strides must be an array of int");
        if (m.strides && m.strides->via.array.size != ndim)
                return proto_invalid(why, why_len, "meta.strides must have as many entries as "
                            "meta.shape (%u)", ndim);
        r = proto_get_map(meta, "user", &m.user);
        if (r == -EINVAL)
                return proto_invalid(why, why_len, "meta.user must be a map of str to str");
        if (m.user && proto_strmap_check(m.user, "meta.user", why, why_len) < 0)
                return -EINVAL;
        if (check_ints(m.shape, "shape", true, why, why_len) < 0 ||
            check_ints(m.strides, "strides", false, why, why_len) < 0)
                return -EINVAL;
        *ret = m;
        return 0;
}

static void pack_ints(struct proto_map *m, const char *key, const msgpack_object *a)
{
        proto_map_key(m, key);
        msgpack_pack_array(m->pk, a->via.array.size);
        for (uint32_t i = 0; i < a->via.array.size; i++) {
                int64_t v = 0;
                (void)proto_obj_i64(&a->via.array.ptr[i], &v);
                msgpack_pack_int64(m->pk, v);
        }
}

void proto_meta_pack(msgpack_packer *pk, const struct proto_meta *meta)
{
        struct proto_map m;

        proto_map_begin(&m, pk);
        if (meta->dtype)
                proto_map_kstrn(&m, "dtype", meta->dtype->via.str.ptr, meta->dtype->via.str.size);
        if (meta->shape)
                pack_ints(&m, "shape", meta->shape);
        if (meta->strides)
                pack_ints(&m, "strides", meta->strides);
        if (meta->user) {
                struct proto_map u;
                proto_map_key(&m, "user");
                proto_map_begin(&u, pk);
                for (uint32_t i = 0; i < meta->user->via.map.size; i++) {
                        const msgpack_object_kv *kv = &meta->user->via.map.ptr[i];
                        proto_map_add(&u);
                        proto_pack_strn(pk, kv->key.via.str.ptr, kv->key.via.str.size);
                        proto_pack_strn(pk, kv->val.via.str.ptr, kv->val.via.str.size);
                }
                proto_map_end(&u);
        }
        proto_map_end(&m);
}
