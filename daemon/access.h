/* access.h: who may see a registration, and who is an administrator.
 *
 * A registration's owner (its uid) and root always may; the access rule a
 * register request carries may add uids, gids, a group (with the gid the
 * producer resolved it to, group_gid, or else resolved by the daemon once,
 * at register time) or everyone.  A peer matches a gid by its primary
 * gid or one of the supplementary groups read from SO_PEERGROUPS when the
 * connection is accepted (the groups it had when it connected, no /proc
 * race; the first PEER_GROUPS_MAX of them). */
#ifndef GPUIPCD_ACCESS_H
#define GPUIPCD_ACCESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto.h"

struct conn;
struct reg;

#define PEER_GROUPS_MAX  256u   /* supplementary groups kept per peer */

/* Validates the access map of request map req (absent: owner only, *ret
 * NULL) and takes its group's gid from group_gid, or resolves the name with
 * NSS when the request has none.  -EINVAL or -ENOMEM, with the reason in
 * why (why_len bytes). */
int access_parse(const msgpack_object *req, struct proto_access **ret, char *why,
                 size_t why_len);
/* Sets the admin group (set false: none, root only). */
void access_set_admin_group(bool set, gid_t gid);

/* Reads the supplementary groups of the peer of socket fd into groups
 * (PEER_GROUPS_MAX entries): the first PEER_GROUPS_MAX, in the kernel's
 * (ascending) order, when it has more.  Returns how many were kept; 0 when
 * they cannot be read, which only ever denies. */
uint32_t access_read_groups(int fd, gid_t *groups);
/* Whether a peer with these credentials is root or in admin-group. */
bool access_peer_is_admin(uint32_t uid, uint32_t gid, const gid_t *groups, uint32_t n_groups);
/* Whether c may look r up: root, the owner's uid, or r's rule. */
bool access_may_lookup(const struct conn *c, const struct reg *r);
/* Whether c may see r in list, stat and watch: the above, or an admin. */
bool access_may_see(const struct conn *c, const struct reg *r);
/* Root, or a member of admin-group. */
bool access_is_admin(const struct conn *c);

#endif
