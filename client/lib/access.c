/* access.c: the access rule a client's registrations carry. */
#include <errno.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* The gid of group name, looked up here, in the producer: the daemon then
 * trusts group_gid and does no NSS lookup of its own in its event loop. */
static int resolve_group(gpuipc_client *c, const char *name, uint32_t *ret_gid)
{
        long hint = sysconf(_SC_GETGR_R_SIZE_MAX);
        size_t len = hint > 0 ? (size_t)hint : 4096;
        struct group g, *res = NULL;
        char *buf = NULL;
        int k;

        for (;;) {
                char *nbuf = realloc(buf, len);
                if (!nbuf) {
                        free(buf);
                        return gpuipc__fail(c, -ENOMEM, "out of memory looking up group '%s'",
                                            name);
                }
                buf = nbuf;
                k = getgrnam_r(name, &g, buf, len, &res);
                if (k != ERANGE || len >= (1u << 20))
                        break;
                len *= 2;
        }
        if (k == 0 && res)
                *ret_gid = (uint32_t)res->gr_gid;
        free(buf);
        if (k == ENOENT || k == ESRCH)          /* "not found" from some NSS modules */
                k = 0;
        if (k != 0)
                return gpuipc__fail(c, -k, "cannot look up group '%s': %s", name, strerror(k));
        if (!res)
                return gpuipc__fail(c, -ENOENT, "access group '%s': no such group on this host",
                                    name);
        if (*ret_gid == UINT32_MAX)
                return gpuipc__fail(c, -EINVAL, "access group '%s' has gid 4294967295", name);
        return 0;
}

GPUIPC_EXPORT int gpuipc_client_set_access(gpuipc_client *c, const gpuipc_access *a)
{
        struct gpuipc__access n = { 0 };
        const char *why;
        size_t glen;
        int r;

        if (!c)
                return -EINVAL;
        if (!a) {
                c->access = n;
                return 0;
        }
        r = gpuipc__sized_check(a, a->size, GPUIPC__ACCESS_V1, sizeof(*a), &why);
        if (r < 0)
                return gpuipc__fail(c, r, "gpuipc_access: %s", why);
        if (a->n_uids > GPUIPC_ACCESS_IDS_MAX || a->n_gids > GPUIPC_ACCESS_IDS_MAX ||
            (a->n_uids && !a->uids) || (a->n_gids && !a->gids))
                return gpuipc__fail(c, -EINVAL, "an access rule lists at most %d uids and "
                                    "%d gids", GPUIPC_ACCESS_IDS_MAX, GPUIPC_ACCESS_IDS_MAX);
        glen = a->group ? strlen(a->group) : 0;
        if (a->group && (glen == 0 || glen >= sizeof(n.rule.group)))
                return gpuipc__fail(c, -EINVAL, "access group names are 1 to %zu bytes",
                                    sizeof(n.rule.group) - 1);
        if (a->group) {
                r = resolve_group(c, a->group, &n.rule.group_gid);
                if (r < 0)
                        return r;
                memcpy(n.rule.group, a->group, glen + 1);
                n.rule.has_group = true;
        }
        n.set = true;
        n.rule.public_ = a->public_ != 0;
        n.rule.n_uids = a->n_uids;
        n.rule.n_gids = a->n_gids;
        if (a->n_uids)
                memcpy(n.rule.uids, a->uids, a->n_uids * sizeof(uint32_t));
        if (a->n_gids)
                memcpy(n.rule.gids, a->gids, a->n_gids * sizeof(uint32_t));
        c->access = n;
        return 0;
}

/* The TTL rides with the access rule: both are per-client settings that
 * every register request carries, whatever its kind. */
int gpuipc_client_set_ttl(gpuipc_client *c, uint64_t ttl_ms)
{
        if (!c || ttl_ms > GPUIPC__TTL_MAX_MS)
                return -EINVAL;
        c->ttl_ms = ttl_ms;
        return 0;
}

uint32_t gpuipc__access_keys(const gpuipc_client *c)
{
        return c->access.set + (c->ttl_ms > 0);
}

void gpuipc__access_pack(msgpack_packer *pk, const gpuipc_client *c)
{
        const struct gpuipc__access *a = &c->access;

        if (c->ttl_ms > 0)
                proto_pack_ku64(pk, "ttl_ms", c->ttl_ms);
        if (!a->set)
                return;
        proto_pack_str(pk, "access");
        proto_access_pack(pk, &a->rule);
}
