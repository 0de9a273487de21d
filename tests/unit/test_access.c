/* test_access.c: who may look a registration up, see it, and administer:
 * daemon/access.c over the access-rule codec, without sockets. */
#include <errno.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "access.h"
#include "conn.h"

/* A connection of uid and gid with supplementary groups, as accepted. */
static struct conn *peer(uint32_t uid, uint32_t gid, const gid_t *groups, uint32_t n)
{
        struct conn *c = calloc(1, sizeof(*c));

        cr_assert_not_null(c);
        reg_party_init(&c->party, 4242, uid, gid);
        if (n)
                memcpy(c->groups, groups, n * sizeof(gid_t));
        c->n_groups = n;
        return c;
}

/* Decodes the request {access: BYTES} through access_parse(). */
static int parse(const char *bytes, size_t len, struct proto_access **ret, char *why)
{
        struct proto_msg m;
        int r;

        cr_assert_eq(proto_decode((const uint8_t *)bytes, len, &m, NULL), 0);
        r = access_parse(m.root, ret, why, 128);
        proto_msg_free(&m);
        return r;
}

Test(access, owner_root_and_rule)
{
        static const gid_t sup[] = { 50, 60 };
        struct proto_access rule = { .n_uids = 1, .uids = { 1001 }, .n_gids = 1, .gids = { 60 },
                                     .has_group = true, .group_gid = 70 };
        struct reg r = { .uid = 1000 };
        struct conn *owner = peer(1000, 1000, NULL, 0), *root = peer(0, 0, NULL, 0);
        struct conn *listed = peer(1001, 1001, NULL, 0), *member = peer(1002, 1002, sup, 2);
        struct conn *grouped = peer(1003, 70, NULL, 0), *other = peer(1004, 1004, NULL, 0);

        /* No rule: the owner and root only. */
        cr_expect(access_may_lookup(owner, &r) && access_may_lookup(root, &r));
        cr_expect(!access_may_lookup(listed, &r) && !access_may_lookup(other, &r));
        r.access = &rule;
        cr_expect(access_may_lookup(listed, &r), "a listed uid");
        cr_expect(access_may_lookup(member, &r), "a listed gid among the supplementary groups");
        cr_expect(access_may_lookup(grouped, &r), "the group's gid as the primary gid");
        cr_expect(!access_may_lookup(other, &r));
        rule.public_ = true;
        cr_expect(access_may_lookup(other, &r), "public");
        free(owner), free(root), free(listed), free(member), free(grouped), free(other);
}

Test(access, admins_see_what_they_may_not_look_up)
{
        static const gid_t sup[] = { 900 };
        struct reg r = { .uid = 1000 };
        struct conn *admin = peer(1005, 1005, sup, 1), *other = peer(1004, 1004, NULL, 0);

        access_set_admin_group(true, 900);
        cr_expect(access_is_admin(admin) && !access_is_admin(other));
        cr_expect(access_may_see(admin, &r) && !access_may_lookup(admin, &r));
        cr_expect(!access_may_see(other, &r));
        access_set_admin_group(false, 0);
        cr_expect(!access_is_admin(admin));
        cr_expect(access_peer_is_admin(0, 0, NULL, 0), "root always is");
        free(admin), free(other);
}

Test(access, parse_resolves_a_group_without_its_gid)
{
        /* {"access": {"group": "root"}} and {"access": {"uids": [1, 2]}} */
        static const char by_name[] = "\x81\xa6" "access\x81\xa5group\xa4root";
        static const char ids[] = "\x81\xa6" "access\x81\xa4uids\x92\x01\x02";
        struct proto_access *a;
        char why[128];

        cr_assert_eq(parse(by_name, sizeof(by_name) - 1, &a, why), 0, "%s", why);
        cr_expect(a->has_group && a->group_gid == 0 && strcmp(a->group, "root") == 0);
        free(a);
        cr_assert_eq(parse(ids, sizeof(ids) - 1, &a, why), 0, "%s", why);
        cr_expect(a->n_uids == 2 && a->uids[1] == 2 && !a->has_group);
        free(a);
}

Test(access, parse_reasons)
{
        /* {"access": 1}, {} and {"access": {"group": "no-such-group-x"}} */
        static const char not_map[] = "\x81\xa6" "access\x01";
        static const char none[] = "\x80";
        static const char unknown[] = "\x81\xa6" "access\x81\xa5group\xaf" "no-such-group-x";
        struct proto_access *a = (void *)1;
        char why[128] = "";

        cr_expect_eq(parse(not_map, sizeof(not_map) - 1, &a, why), -EINVAL);
        cr_expect_str_eq(why, "access must be a map");
        cr_expect_eq(parse(none, sizeof(none) - 1, &a, why), 0);
        cr_expect_null(a, "no rule: owner only");
        cr_expect_eq(parse(unknown, sizeof(unknown) - 1, &a, why), -EINVAL);
        cr_expect_str_eq(why, "access.group 'no-such-group-x': no such group");
}
