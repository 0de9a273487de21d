/* access.c: access rules of registrations, and the admin check. */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "access.h"
#include "conn.h"
#include "ops.h"

static bool admin_gid_set;
static gid_t admin_gid;

void access_set_admin_group(bool set, gid_t gid)
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
        const struct proto_access *a = r->access;

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

/* The group's gid, by name, for raw clients that send no group_gid.  NSS
 * may block the loop for a moment (longer on a slow directory service); a
 * rule that names a group without its gid pays that once, at register time.
 * libgpuipc resolves the name in the producer and sends group_gid (which
 * the daemon trusts: the producer could grant any gid through gids anyway). */
static int resolve_group(struct proto_access *a, char *why, size_t why_len)
{
        struct group g, *res = NULL;
        char buf[4096], quoted[REQ_QUOTE_SIZE(64)];
        int k;

        k = getgrnam_r(a->group, &g, buf, sizeof(buf), &res);
        if (k != 0 || !res)
                return proto_invalid(why, why_len, "access.group '%s': %s",
                                     req_quote(quoted, a->group, strlen(a->group), 64),
                                     k ? strerror(k) : "no such group");
        a->group_gid = (uint32_t)res->gr_gid;
        a->has_group = true;
        return 0;
}

int access_parse(const msgpack_object *req, struct proto_access **ret, char *why,
                 size_t why_len)
{
        const msgpack_object *m = NULL;
        struct proto_access *a;
        int k;

        *ret = NULL;
        k = proto_get_map(req, "access", &m);
        if (k == -EINVAL)
                return proto_invalid(why, why_len, "access must be a map");
        if (!m)
                return 0;
        a = malloc(sizeof(*a));
        if (!a) {
                snprintf(why, why_len, "out of memory");
                return -ENOMEM;
        }
        k = proto_access_decode(m, 0, a, why, why_len);
        if (k == 0 && a->group[0] && !a->has_group)
                k = resolve_group(a, why, why_len);
        if (k < 0) {
                free(a);
                return k;
        }
        *ret = a;
        return 0;
}
