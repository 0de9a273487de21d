/* access.c: access rules of registrations, and the admin check. */
#include <errno.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "access.h"
#include "conn.h"
#include "ops.h"

static bool admin_gid_set;
static gid_t admin_gid;

void ops_admin_set_group(bool set, gid_t gid)
{
        admin_gid_set = set;
        admin_gid = gid;
}

uint32_t access_read_groups(int fd, gid_t *groups)
{
        socklen_t len = PEER_GROUPS_MAX * sizeof(gid_t);
        gid_t *all;
        uint32_t n;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0)
                return (uint32_t)(len / sizeof(gid_t));
        /* ERANGE: len is the size needed.  The kernel caps a process at
         * NGROUPS_MAX (65536) groups, so this is at most 256 KiB, once per
         * accepted connection of such a peer. */
        if (errno != ERANGE || len <= PEER_GROUPS_MAX * sizeof(gid_t) ||
            len > 65536 * sizeof(gid_t))
                return 0;
        all = malloc(len);
        if (!all)
                return 0;
        n = 0;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, all, &len) == 0) {
                n = (uint32_t)(len / sizeof(gid_t));
                if (n > PEER_GROUPS_MAX)
                        n = PEER_GROUPS_MAX;
                memcpy(groups, all, n * sizeof(gid_t));
        }
        free(all);
        return n;
}

static bool groups_have(uint32_t gid, const gid_t *groups, uint32_t n, uint32_t want)
{
        if (gid == want)
                return true;
        for (uint32_t i = 0; i < n; i++)
                if (groups[i] == want)
                        return true;
        return false;
}

static bool in_group(const struct conn *c, uint32_t gid)
{
        return groups_have(c->party.gid, c->groups, c->n_groups, gid);
}

bool access_peer_is_admin(uint32_t uid, uint32_t gid, const gid_t *groups, uint32_t n_groups)
{
        return uid == 0 || (admin_gid_set && groups_have(gid, groups, n_groups, admin_gid));
}

bool access_is_admin(const struct conn *c)
{
        return access_peer_is_admin(c->party.uid, c->party.gid, c->groups, c->n_groups);
}

bool access_may_lookup(const struct conn *c, const struct reg *r)
{
        const struct reg_access *a = r->access;

        if (c->party.uid == 0 || c->party.uid == r->uid)
                return true;
        if (!a)
                return false;
        if (a->public_ || (a->has_group && in_group(c, a->group_gid)))
                return true;
        for (uint32_t i = 0; i < a->n_uids; i++)
                if (a->uids[i] == c->party.uid)
                        return true;
        for (uint32_t i = 0; i < a->n_gids; i++)
                if (in_group(c, a->gids[i]))
                        return true;
        return false;
}

bool access_may_see(const struct conn *c, const struct reg *r)
{
        return access_may_lookup(c, r) || access_is_admin(c);
}

static int parse_ids(struct req *q, const msgpack_object *m, const char *key, uint32_t *ids,
                     uint32_t *ret_n)
{
        const msgpack_object *a = NULL;
        int k;

        k = proto_get_array(m, key, &a);
        if (k == -EINVAL)
                return req_fail(q, -EINVAL, "access.%s must be an array of uint", key);
        if (!a)
                return 0;
        if (a->via.array.size > ACCESS_IDS_MAX)
                return req_fail(q, -EINVAL, "access.%s has more than %u entries", key,
                                ACCESS_IDS_MAX);
        for (uint32_t i = 0; i < a->via.array.size; i++) {
                uint64_t v;
                if (proto_obj_u64(&a->via.array.ptr[i], &v) < 0 || v >= UINT32_MAX)
                        return req_fail(q, -EINVAL, "access.%s entries must be uints below "
                                        "4294967295", key);
                ids[i] = (uint32_t)v;
        }
        *ret_n = a->via.array.size;
        return 0;
}

/* The group's gid, by name, for raw clients that send no group_gid.  NSS
 * may block the loop for a moment (longer on a slow directory service); a
 * rule that names a group without its gid pays that once, at register time.
 * libgpuipc resolves the name in the producer and sends group_gid. */
static int resolve_group(struct req *q, struct reg_access *a)
{
        struct group g, *res = NULL;
        char buf[4096];
        int k;

        k = getgrnam_r(a->group, &g, buf, sizeof(buf), &res);
        if (k != 0 || !res)
                return req_fail(q, -EINVAL, "access.group '%s': %s", a->group,
                                k ? strerror(k) : "no such group");
        a->group_gid = (uint32_t)res->gr_gid;
        a->has_group = true;
        return 0;
}

/* The gid the producer resolved the group name to, when it sent one: the
 * daemon trusts it (the producer could grant any gid through gids anyway)
 * and does no NSS lookup.  -ENOENT when absent. */
static int parse_group_gid(struct req *q, const msgpack_object *m, struct reg_access *a)
{
        uint64_t v;
        int k;

        k = proto_get_u64(m, "group_gid", &v);
        if (k == -ENOENT)
                return k;
        if (k < 0 || v >= UINT32_MAX)
                return req_fail(q, -EINVAL, "access.group_gid must be a uint below 4294967295");
        a->group_gid = (uint32_t)v;
        a->has_group = true;
        return 0;
}

int access_parse(struct req *q, struct reg_access **ret)
{
        const msgpack_object *m = NULL;
        struct reg_access *a;
        const char *group;
        size_t glen = 0;
        uint64_t gid;
        int k;

        *ret = NULL;
        k = proto_get_map(q->m, "access", &m);
        if (k == -EINVAL)
                return req_fail(q, -EINVAL, "access must be a map");
        if (!m)
                return 0;
        a = calloc(1, sizeof(*a));
        if (!a)
                return req_fail(q, -ENOMEM, "out of memory");
        k = parse_ids(q, m, "uids", a->uids, &a->n_uids);
        if (k == 0)
                k = parse_ids(q, m, "gids", a->gids, &a->n_gids);
        if (k == 0 && proto_get_bool(m, "public", &a->public_) == -EINVAL)
                k = req_fail(q, -EINVAL, "access.public must be a bool");
        if (k == 0) {
                k = proto_get_str(m, "group", &group, &glen);
                if (k == -EINVAL || (k == 0 && (glen == 0 || glen > ACCESS_GROUP_MAX ||
                                                memchr(group, '\0', glen))))
                        k = req_fail(q, -EINVAL, "access.group must be a group name of 1 to "
                                     "%u bytes", ACCESS_GROUP_MAX);
                else if (k == 0) {
                        memcpy(a->group, group, glen);
                        k = parse_group_gid(q, m, a);
                        if (k == -ENOENT)
                                k = resolve_group(q, a);
                } else if (proto_get_u64(m, "group_gid", &gid) != -ENOENT)
                        k = req_fail(q, -EINVAL, "access.group_gid needs access.group, the "
                                     "name it stands for");
                else
                        k = 0;
        }
        if (k < 0) {
                free(a);
                return k;
        }
        *ret = a;
        return 0;
}

static void pack_ids(msgpack_packer *pk, const char *key, const uint32_t *ids, uint32_t n)
{
        proto_pack_str(pk, key);
        msgpack_pack_array(pk, n);
        for (uint32_t i = 0; i < n; i++)
                msgpack_pack_uint32(pk, ids[i]);
}

void access_pack(msgpack_packer *pk, const struct reg *r)
{
        const struct reg_access *a = r->access;

        proto_pack_str(pk, "access");
        if (!a) {
                msgpack_pack_map(pk, 3);
                proto_pack_kbool(pk, "public", false);
                pack_ids(pk, "uids", NULL, 0);
                pack_ids(pk, "gids", NULL, 0);
                return;
        }
        msgpack_pack_map(pk, a->has_group ? 5 : 3);
        proto_pack_kbool(pk, "public", a->public_);
        pack_ids(pk, "uids", a->uids, a->n_uids);
        pack_ids(pk, "gids", a->gids, a->n_gids);
        if (a->has_group) {
                proto_pack_kstr(pk, "group", a->group);
                proto_pack_ku64(pk, "group_gid", a->group_gid);
        }
}
