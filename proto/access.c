/* access.c: the access rule's codec, for the register request, the
 * registration record and the journal alike (docs/protocol.md, "Access
 * control"). */
#include <errno.h>
#include <string.h>

#include "proto.h"

static void pack_ids(struct proto_map *m, const char *key, const uint32_t *ids, uint32_t n)
{
        proto_map_key(m, key);
        msgpack_pack_array(m->pk, n);
        for (uint32_t i = 0; i < n; i++)
                msgpack_pack_uint32(m->pk, ids[i]);
}

void proto_access_pack(msgpack_packer *pk, const struct proto_access *a)
{
        static const struct proto_access owner_only;
        struct proto_map m;

        if (!a)
                a = &owner_only;
        proto_map_begin(&m, pk);
        proto_map_kbool(&m, "public", a->public_);
        pack_ids(&m, "uids", a->uids, a->n_uids);
        pack_ids(&m, "gids", a->gids, a->n_gids);
        if (a->has_group) {
                proto_map_kstr(&m, "group", a->group);
                proto_map_ku64(&m, "group_gid", a->group_gid);
        }
        proto_map_end(&m);
}

static int decode_ids(const msgpack_object *m, const char *key, bool need, uint32_t *ids,
                      uint32_t *ret_n, char *why, size_t why_len)
{
        const msgpack_object *a = NULL;
        int k;

        k = proto_get_array(m, key, &a);
        if (k == -EINVAL || (k < 0 && need))
                return proto_invalid(why, why_len, "access.%s must be an array of uint", key);
        if (!a)
                return 0;
        if (a->via.array.size > PROTO_ACCESS_IDS_MAX)
                return proto_invalid(why, why_len, "access.%s has more than %u entries", key,
                            PROTO_ACCESS_IDS_MAX);
        for (uint32_t i = 0; i < a->via.array.size; i++) {
                uint64_t v;
                if (proto_obj_u64(&a->via.array.ptr[i], &v) < 0 || v >= UINT32_MAX)
                        return proto_invalid(why, why_len, "access.%s entries must be uints below "
                                    "4294967295", key);
                ids[i] = (uint32_t)v;
        }
        *ret_n = a->via.array.size;
        return 0;
}

static int decode_group(const msgpack_object *m, bool need, struct proto_access *a, char *why,
                        size_t why_len)
{
        const char *group;
        size_t glen = 0;
        uint64_t gid;
        int k;

        k = proto_get_str(m, "group", &group, &glen);
        if (k == -EINVAL || (k == 0 && (glen == 0 || glen > PROTO_ACCESS_GROUP_MAX ||
                                        memchr(group, '\0', glen) ||
                                        proto_utf8_valid(group, glen) != glen)))
                return proto_invalid(why, why_len, "access.group must be a group name of 1 to %u "
                            "bytes of UTF-8", PROTO_ACCESS_GROUP_MAX);
        k = proto_get_u64(m, "group_gid", &gid);
        if (glen == 0)
                return k == -ENOENT ? 0 : proto_invalid(why, why_len, "access.group_gid needs "
                                                "access.group, the name it stands for");
        memcpy(a->group, group, glen);
        a->group[glen] = '\0';
        if (k == -ENOENT && !need)
                return 0;
        if (k < 0 || gid >= UINT32_MAX)
                return proto_invalid(why, why_len, "access.group_gid must be a uint below "
                            "4294967295");
        a->group_gid = (uint32_t)gid;
        a->has_group = true;
        return 0;
}

int proto_access_decode(const msgpack_object *m, unsigned flags, struct proto_access *a,
                        char *why, size_t why_len)
{
        bool full = flags & PROTO_ACCESS_FULL;
        int k;

        memset(a, 0, sizeof(*a));
        if (!m || m->type != MSGPACK_OBJECT_MAP)
                return proto_invalid(why, why_len, "access must be a map");
        k = decode_ids(m, "uids", full, a->uids, &a->n_uids, why, why_len);
        if (k == 0)
                k = decode_ids(m, "gids", full, a->gids, &a->n_gids, why, why_len);
        if (k == 0) {
                k = proto_get_bool(m, "public", &a->public_);
                if (k == -EINVAL || (k < 0 && full))
                        return proto_invalid(why, why_len, "access.public must be a bool");
                k = decode_group(m, full, a, why, why_len);
        }
        return k;
}
