/* access.c: the access rule a client's registrations carry. */
#include <errno.h>
#include <string.h>

#include "internal.h"

GPUIPC_EXPORT int gpuipc_access_set(gpuipc_client *c, const gpuipc_access *a)
{
        struct gpuipc__access n = { 0 };
        size_t glen;

        if (!c)
                return -EINVAL;
        if (!a) {
                c->access = n;
                return 0;
        }
        if (a->n_uids > GPUIPC_ACCESS_IDS_MAX || a->n_gids > GPUIPC_ACCESS_IDS_MAX ||
            (a->n_uids && !a->uids) || (a->n_gids && !a->gids))
                return gpuipc__fail(c, -EINVAL, "an access rule lists at most %d uids and "
                                    "%d gids", GPUIPC_ACCESS_IDS_MAX, GPUIPC_ACCESS_IDS_MAX);
        glen = a->group ? strlen(a->group) : 0;
        if (a->group && (glen == 0 || glen >= sizeof(n.group)))
                return gpuipc__fail(c, -EINVAL, "access group names are 1 to %zu bytes",
                                    sizeof(n.group) - 1);
        n.set = true;
        n.public_ = a->public_ != 0;
        n.n_uids = a->n_uids;
        n.n_gids = a->n_gids;
        if (a->n_uids)
                memcpy(n.uids, a->uids, a->n_uids * sizeof(uint32_t));
        if (a->n_gids)
                memcpy(n.gids, a->gids, a->n_gids * sizeof(uint32_t));
        if (a->group)
                memcpy(n.group, a->group, glen + 1);
        c->access = n;
        return 0;
}

uint32_t gpuipc__access_keys(const gpuipc_client *c)
{
        return c->access.set;
}

void gpuipc__access_pack(msgpack_packer *pk, const gpuipc_client *c)
{
        const struct gpuipc__access *a = &c->access;

        if (!a->set)
                return;
        proto_pack_str(pk, "access");
        msgpack_pack_map(pk, a->group[0] ? 4 : 3);
        proto_pack_kbool(pk, "public", a->public_);
        proto_pack_str(pk, "uids");
        msgpack_pack_array(pk, a->n_uids);
        for (uint32_t i = 0; i < a->n_uids; i++)
                msgpack_pack_uint32(pk, a->uids[i]);
        proto_pack_str(pk, "gids");
        msgpack_pack_array(pk, a->n_gids);
        for (uint32_t i = 0; i < a->n_gids; i++)
                msgpack_pack_uint32(pk, a->gids[i]);
        if (a->group[0])
                proto_pack_kstr(pk, "group", a->group);
}
