/* integ_access.c: per-registration access rules, checked with real uids.
 *
 * The tests run as root and fork children that drop to other uids, gids
 * and supplementary groups (setgroups, setgid, setuid) before connecting;
 * each test starts its own daemon with a socket any uid can reach. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"

#define OWNER   65530u  /* registers; never in the groups below */
#define OTHER   65533u
#define THIRD   65532u
#define GID     4242u   /* a gid nobody has unless the test gives it */
#define NOGROUP 65534u  /* "nogroup" on Debian */

static void setup(void)
{
        signal(SIGPIPE, SIG_IGN);
        if (geteuid() != 0)
                cr_skip_test("needs root to act as other uids");
}

TestSuite(access, .init = setup, .timeout = 60);

static void start(const char *admin_group)
{
        const char *args[] = { "--socket-mode", "0666", NULL, NULL, NULL };

        if (admin_group) {
                args[2] = "--admin-group";
                args[3] = admin_group;
        }
        h_daemon_start(&h_d, args);
        cr_assert_eq(chmod(h_d.dir, 0755), 0);
}

struct who {
        uid_t uid;
        gid_t gid;
        gid_t groups[2];
        int ngroups;
};

#define WHO(u) (&(struct who){ .uid = (u), .gid = (u) })

/* Forks, becomes w and returns fn(arg) as the child's exit code. */
static pid_t as_user_start(const struct who *w, int (*fn)(void *), void *arg)
{
        pid_t pid = fork();

        cr_assert_geq(pid, 0);
        if (pid == 0) {
                alarm(20);      /* a stuck child must not hang the test */
                if (setgroups((size_t)w->ngroups, w->groups) < 0 || setgid(w->gid) < 0 ||
                    setuid(w->uid) < 0)
                        _exit(100);
                _exit(fn(arg));
        }
        return pid;
}

static int as_user_wait(pid_t pid)
{
        int st;

        cr_assert_eq(waitpid(pid, &st, 0), pid);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int as_user(const struct who *w, int (*fn)(void *), void *arg)
{
        return as_user_wait(as_user_start(w, fn, arg));
}

/* ---- what the children do ---------------------------------------------- */

struct reg_args {
        const char *name;
        gpuipc_access access;   /* all zero and !set: the default rule */
        bool set;
        int want;               /* register's (or gpuipc_client_set_access's) expected result */
};

static int do_register(void *p)
{
        struct reg_args *a = p;
        gpuipc_client *c = NULL;
        gpuipc_hostbuf *b = NULL;
        int r;

        if (gpuipc_client_connect(h_d.sock, &c) < 0 || gpuipc_hostbuf_new(4096, &b) < 0)
                return 10;
        if (a->set) {
                r = gpuipc_client_set_access(c, &a->access);
                if (r < 0) {
                        gpuipc_hostbuf_free(b);
                        gpuipc_client_free(c);
                        return r == a->want ? 0 : 11;
                }
        }
        /* durable: it outlives this process, owned by its uid */
        r = gpuipc_hostbuf_register(c, a->name, b, NULL, 0, NULL);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
        return r == a->want ? 0 : 12;
}

static void reg_as(uid_t uid, const char *name, const gpuipc_access *a)
{
        struct reg_args ra = { .name = name, .set = a != NULL };

        if (a)
                ra.access = *a;
        cr_assert_eq(as_user(WHO(uid), do_register, &ra), 0, "registering %s", name);
}

/* Whether the caller may see name: 0 when lookup, stat and list all find
 * it, 1 when all three say it is not there; anything else is a bug. */
static int do_probe(void *p)
{
        const char *name = p;
        gpuipc_client *c = NULL;
        gpuipc_view *v = NULL;
        gpuipc_list *l = NULL;
        int rl, rs, n;

        if (gpuipc_client_connect(h_d.sock, &c) < 0)
                return 10;
        rl = gpuipc_view_lookup(c, name, 0, 0, &v);
        if (v)
                gpuipc_view_release(v);
        rs = gpuipc_name_stat(c, name, &l);
        gpuipc_list_free(l);
        l = NULL;
        if (gpuipc_list_fetch(c, name, 0, &l) < 0)
                return 11;
        n = (int)gpuipc_list_count(l);
        gpuipc_list_free(l);
        gpuipc_client_free(c);
        if (rl == 0 && rs == 0 && n == 1)
                return 0;
        if (rl == -ENOENT && rs == -ENOENT && n == 0)
                return 1;
        return 20 + (rl == 0) + 2 * (rs == 0) + 4 * n;
}

static int probe(const struct who *w, const char *name)
{
        return as_user(w, do_probe, (void *)name);
}

/* ---- the tests ---------------------------------------------------------- */

Test(access, default_owner_only)
{
        gpuipc_client *root;
        gpuipc_view *v = NULL;
        gpuipc_list *l = NULL;

        start(NULL);
        reg_as(OWNER, "acc/a", NULL);
        cr_expect_eq(probe(WHO(OWNER), "acc/a"), 0, "the owner's uid sees it");
        cr_expect_eq(probe(WHO(OTHER), "acc/a"), 1, "another uid must not");
        /* root sees it */
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &root), 0);
        cr_expect_eq(gpuipc_view_lookup(root, "acc/a", 0, 0, &v), 0);
        gpuipc_view_release(v);
        cr_assert_eq(gpuipc_list_fetch(root, "acc", 0, &l), 0);
        cr_expect_eq(gpuipc_list_count(l), 1);
        gpuipc_list_free(l);
        gpuipc_client_free(root);
        h_daemon_stop(&h_d);
}

static int do_unregister(void *p)
{
        gpuipc_client *c = NULL;
        int r;

        if (gpuipc_client_connect(h_d.sock, &c) < 0)
                return 10;
        r = gpuipc_name_unregister(c, p);
        gpuipc_client_free(c);
        return r == 0 ? 0 : r == -ENOENT ? 1 : r == -EPERM ? 2 : 3;
}

Test(access, unregister_owner_or_root)
{
        static const uint32_t other[] = { OTHER };

        start(NULL);
        reg_as(OWNER, "acc/hidden", NULL);
        reg_as(OWNER, "acc/shared", &(gpuipc_access){ .size = sizeof(gpuipc_access), .uids = other, .n_uids = 1 });
        /* not visible: not_found, so existence is not revealed */
        cr_expect_eq(as_user(WHO(OTHER), do_unregister, "acc/hidden"), 1);
        /* visible, but not the owner's uid: permission */
        cr_expect_eq(as_user(WHO(OTHER), do_unregister, "acc/shared"), 2);
        cr_expect_eq(as_user(WHO(OWNER), do_unregister, "acc/shared"), 0);
        h_daemon_stop(&h_d);
}

Test(access, allowed_uid)
{
        static const uint32_t uids[] = { 1, OTHER };

        start(NULL);
        reg_as(OWNER, "acc/u", &(gpuipc_access){ .size = sizeof(gpuipc_access), .uids = uids, .n_uids = 2 });
        cr_expect_eq(probe(WHO(OTHER), "acc/u"), 0);
        cr_expect_eq(probe(WHO(THIRD), "acc/u"), 1);
        h_daemon_stop(&h_d);
}

Test(access, allowed_gid_primary_and_supplementary)
{
        static const uint32_t gids[] = { GID };
        struct who supp = { .uid = OTHER, .gid = OTHER, .groups = { GID }, .ngroups = 1 };
        struct who prim = { .uid = THIRD, .gid = GID };

        start(NULL);
        reg_as(OWNER, "acc/g", &(gpuipc_access){ .size = sizeof(gpuipc_access), .gids = gids, .n_gids = 1 });
        cr_expect_eq(probe(&supp, "acc/g"), 0, "supplementary group");
        cr_expect_eq(probe(&prim, "acc/g"), 0, "primary group");
        cr_expect_eq(probe(WHO(THIRD), "acc/g"), 1);
        h_daemon_stop(&h_d);
}

Test(access, allowed_group_by_name)
{
        struct who member = { .uid = OTHER, .gid = OTHER, .groups = { NOGROUP }, .ngroups = 1 };
        /* the library resolves the name, in the producer */
        struct reg_args bad = { .name = "acc/bad", .set = true, .want = -ENOENT,
                                .access = { .size = sizeof(gpuipc_access), .group = "no-such-group-gpuipc" } };

        if (!getgrnam("nogroup"))
                cr_skip_test("no group named nogroup");
        start(NULL);
        reg_as(OWNER, "acc/n", &(gpuipc_access){ .size = sizeof(gpuipc_access), .group = "nogroup" });
        cr_expect_eq(probe(&member, "acc/n"), 0);
        cr_expect_eq(probe(WHO(THIRD), "acc/n"), 1);
        cr_expect_eq(as_user(WHO(OWNER), do_register, &bad), 0,
                     "unknown group: gpuipc_client_set_access fails with ENOENT");
        h_daemon_stop(&h_d);
}

Test(access, public)
{
        start(NULL);
        reg_as(OWNER, "acc/p", &(gpuipc_access){ .size = sizeof(gpuipc_access), .public_ = 1 });
        cr_expect_eq(probe(WHO(OTHER), "acc/p"), 0);
        cr_expect_eq(probe(WHO(THIRD), "acc/p"), 0);
        h_daemon_stop(&h_d);
}

struct list_args {
        size_t want;
        const char *revoke;
        int revoke_want;
};

static int do_list_revoke(void *p)
{
        struct list_args *a = p;
        gpuipc_client *c = NULL;
        gpuipc_list *l = NULL;
        size_t n;
        int r = 0;

        if (gpuipc_client_connect(h_d.sock, &c) < 0 || gpuipc_list_fetch(c, "acc", 0, &l) < 0)
                return 10;
        n = gpuipc_list_count(l);
        gpuipc_list_free(l);
        if (a->revoke)
                r = gpuipc_name_revoke(c, a->revoke, NULL);
        gpuipc_client_free(c);
        if (n != a->want)
                return 11;
        return r == a->revoke_want ? 0 : 12;
}

Test(access, admin_group_sees_all_and_revokes)
{
        struct who admin = { .uid = OTHER, .gid = OTHER, .groups = { NOGROUP }, .ngroups = 1 };
        struct list_args as_admin = { .want = 2, .revoke = "acc/x1", .revoke_want = 0 };
        struct list_args as_other = { .want = 0, .revoke = "acc/x2", .revoke_want = -EPERM };

        if (!getgrnam("nogroup"))
                cr_skip_test("no group named nogroup");
        start("nogroup");
        reg_as(OWNER, "acc/x1", NULL);
        reg_as(OWNER, "acc/x2", NULL);
        cr_expect_eq(as_user(WHO(THIRD), do_list_revoke, &as_other), 0,
                     "a non-admin lists nothing and may not revoke");
        cr_expect_eq(as_user(&admin, do_list_revoke, &as_admin), 0,
                     "an admin lists both and revokes");
        /* the admin does not get handles: lookup stays owner-only */
        cr_expect_eq(probe(&admin, "acc/x2"), 20 + 2 + 4,
                     "admin: stat and list yes, lookup no");
        h_daemon_stop(&h_d);
}

struct wait_args {
        const char *name;
        int timeout_ms;
        int want;
};

static int do_wait(void *p)
{
        struct wait_args *a = p;
        gpuipc_client *c = NULL;
        gpuipc_view *v = NULL;
        int r;

        if (gpuipc_client_connect(h_d.sock, &c) < 0)
                return 10;
        r = gpuipc_view_lookup(c, a->name, a->timeout_ms, 0, &v);
        if (v)
                gpuipc_view_release(v);
        gpuipc_client_free(c);
        return r == a->want ? 0 : 11;
}

Test(access, waiting_lookup_not_satisfied_by_hidden)
{
        static const uint32_t other[] = { OTHER };
        struct wait_args hidden = { "acc/w", 1500, -ETIMEDOUT };
        struct wait_args allowed = { "acc/w2", 5000, 0 };
        pid_t p1, p2;

        start(NULL);
        p1 = as_user_start(WHO(OTHER), do_wait, &hidden);
        p2 = as_user_start(WHO(OTHER), do_wait, &allowed);
        h_sleep_ms(300);        /* both are waiting by now */
        reg_as(OWNER, "acc/w", NULL);
        reg_as(OWNER, "acc/w2", &(gpuipc_access){ .size = sizeof(gpuipc_access), .uids = other, .n_uids = 1 });
        cr_expect_eq(as_user_wait(p1), 0, "a hidden registration must not end the wait");
        cr_expect_eq(as_user_wait(p2), 0, "an allowed one must");
        h_daemon_stop(&h_d);
}

static int do_watch(void *p)
{
        int *ready = p;
        gpuipc_client *c = NULL;
        gpuipc_event *e = NULL;
        int r;

        if (gpuipc_client_connect(h_d.sock, &c) < 0 || gpuipc_event_watch(c, "acc") < 0)
                return 10;
        if (write(ready[1], "x", 1) != 1)
                return 11;
        /* The hidden registration comes first: the first event must be
         * the public one's. */
        r = gpuipc_event_next(c, 5000, &e);
        if (r < 0)
                return 12;
        r = strcmp(e->name, "acc/pub") == 0 && strcmp(e->type, "registered") == 0 ? 0 : 13;
        gpuipc_event_free(e);
        gpuipc_client_free(c);
        return r;
}

Test(access, watch_does_not_leak)
{
        int ready[2];
        char ch;
        pid_t w;

        start(NULL);
        cr_assert_eq(pipe(ready), 0);
        w = as_user_start(WHO(OTHER), do_watch, ready);
        cr_assert_eq(read(ready[0], &ch, 1), 1);
        reg_as(OWNER, "acc/hidden", NULL);
        reg_as(OWNER, "acc/pub", &(gpuipc_access){ .size = sizeof(gpuipc_access), .public_ = 1 });
        cr_expect_eq(as_user_wait(w), 0);
        close(ready[0]);
        close(ready[1]);
        h_daemon_stop(&h_d);
}

/* ---- the record's access map, on the wire ------------------------------ */

static void pack_stat(msgpack_packer *pk, void *data)
{
        proto_pack_kstr(pk, "name", data);
}

static void pack_bad_register(msgpack_packer *pk, void *data)
{
        proto_pack_kstr(pk, "name", "acc/too-many");
        proto_pack_kstr(pk, "kind", "host");
        proto_pack_ku64(pk, "size", 4096);
        proto_pack_ku64(pk, "fds", 1);
        proto_pack_str(pk, "access");
        msgpack_pack_map(pk, 1);
        proto_pack_str(pk, "uids");
        msgpack_pack_array(pk, 33);
        for (int i = 0; i < 33; i++)
                msgpack_pack_uint32(pk, (uint32_t)i);
}

Test(access, record_shows_access_and_bounds)
{
        static const uint32_t uids[] = { 7, 8 };
        const msgpack_object *reg = NULL, *acc = NULL, *a = NULL;
        struct h_frame f;
        bool pub = true;
        int fd, mfd;

        start(NULL);
        reg_as(OWNER, "acc/r", &(gpuipc_access){ .size = sizeof(gpuipc_access), .uids = uids, .n_uids = 2 });
        fd = h_raw_connect(h_d.sock);
        h_raw_hello(fd, 1);
        cr_assert_eq(h_raw_request(fd, "stat", 2, 1, pack_stat, "acc/r", NULL, 0), 0);
        cr_assert_eq(h_raw_recv(fd, 5000, &f), 1);
        h_expect_reply(&f, 2, "");
        cr_assert_eq(proto_get_map(f.m.root, "reg", &reg), 0);
        cr_assert_eq(proto_get_map(reg, "access", &acc), 0);
        cr_assert_eq(proto_get_bool(acc, "public", &pub), 0);
        cr_expect(!pub);
        cr_assert_eq(proto_get_array(acc, "uids", &a), 0);
        cr_assert_eq(a->via.array.size, 2);
        cr_expect_eq(a->via.array.ptr[1].via.u64, 8);
        h_frame_free(&f);

        mfd = memfd_create("acc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        cr_assert_geq(mfd, 0);
        cr_assert_eq(ftruncate(mfd, 4096), 0);
        cr_assert_eq(fcntl(mfd, F_ADD_SEALS,
                           F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL), 0);
        cr_assert_eq(h_raw_request(fd, "register", 3, 5, pack_bad_register, NULL, &mfd, 1), 0);
        h_raw_expect_reply(fd, 3, "bad_request");
        close(mfd);
        close(fd);
        h_daemon_stop(&h_d);
}

/* ---- group_gid: the producer resolves the group name ------------------- */

#define FAKE_GROUP "gpuipc-only-here"   /* in no /etc/group the daemon reads */

struct gg_args {
        const char *name;
        const char *group;      /* NULL: no group key */
        char gid_type;          /* 0: no group_gid; 'u', 's', 'i' (negative), 'b' */
        uint64_t gid;
};

static void pack_gg_register(msgpack_packer *pk, void *data)
{
        const struct gg_args *a = data;

        proto_pack_kstr(pk, "name", a->name);
        proto_pack_kstr(pk, "kind", "host");
        proto_pack_ku64(pk, "size", 4096);
        proto_pack_ku64(pk, "fds", 1);
        proto_pack_str(pk, "access");
        msgpack_pack_map(pk, (a->group != NULL) + (a->gid_type != 0));
        if (a->group)
                proto_pack_kstr(pk, "group", a->group);
        switch (a->gid_type) {
        case 'u':
                proto_pack_ku64(pk, "group_gid", a->gid);
                break;
        case 's':
                proto_pack_kstr(pk, "group_gid", "4242");
                break;
        case 'i':
                proto_pack_str(pk, "group_gid");
                msgpack_pack_int64(pk, -1);
                break;
        case 'b':
                proto_pack_kbool(pk, "group_gid", true);
                break;
        }
}

static void raw_gg_register(int fd, uint64_t seq, const struct gg_args *a, const char *code)
{
        int mfd = memfd_create("acc-gg", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        cr_assert_geq(mfd, 0);
        cr_assert_eq(ftruncate(mfd, 4096), 0);
        cr_assert_eq(fcntl(mfd, F_ADD_SEALS,
                           F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL), 0);
        cr_assert_eq(h_raw_request(fd, "register", seq, 5, pack_gg_register, (void *)a, &mfd, 1),
                     0);
        close(mfd);
        h_raw_expect_reply(fd, seq, code);
}

Test(access, group_gid_from_the_producer)
{
        struct who supp = { .uid = OTHER, .gid = OTHER, .groups = { GID }, .ngroups = 1 };
        struct who prim = { .uid = THIRD, .gid = GID };
        const msgpack_object *reg = NULL, *acc = NULL;
        struct h_frame f;
        uint64_t gid = 0;
        const char *s;
        size_t n;
        int fd;

        if (getgrnam(FAKE_GROUP))
                cr_skip_test("this host has a group named " FAKE_GROUP);
        start(NULL);
        fd = h_raw_connect(h_d.sock);
        h_raw_hello(fd, 1);
        /* the daemon cannot resolve the name itself ... */
        raw_gg_register(fd, 2, &(struct gg_args){ "acc/gg-name", FAKE_GROUP, 0, 0 },
                        "bad_request");
        /* ... and with group_gid it does not try */
        raw_gg_register(fd, 3, &(struct gg_args){ "acc/gg", FAKE_GROUP, 'u', GID }, "");
        cr_assert_eq(h_raw_request(fd, "stat", 4, 1, pack_stat, "acc/gg", NULL, 0), 0);
        cr_assert_eq(h_raw_recv(fd, 5000, &f), 1);
        h_expect_reply(&f, 4, "");
        cr_assert_eq(proto_get_map(f.m.root, "reg", &reg), 0);
        cr_assert_eq(proto_get_map(reg, "access", &acc), 0);
        cr_assert_eq(proto_get_str(acc, "group", &s, &n), 0);
        cr_expect(n == strlen(FAKE_GROUP) && memcmp(s, FAKE_GROUP, n) == 0);
        cr_assert_eq(proto_get_u64(acc, "group_gid", &gid), 0);
        cr_expect_eq(gid, GID);
        h_frame_free(&f);
        /* group_gid must be a uint below 2^32-1, and comes with group */
        raw_gg_register(fd, 5, &(struct gg_args){ "acc/gg-s", FAKE_GROUP, 's', 0 }, "bad_request");
        raw_gg_register(fd, 6, &(struct gg_args){ "acc/gg-i", FAKE_GROUP, 'i', 0 }, "bad_request");
        raw_gg_register(fd, 7, &(struct gg_args){ "acc/gg-b", FAKE_GROUP, 'b', 0 }, "bad_request");
        raw_gg_register(fd, 8, &(struct gg_args){ "acc/gg-max", FAKE_GROUP, 'u', UINT32_MAX },
                        "bad_request");
        raw_gg_register(fd, 9, &(struct gg_args){ "acc/gg-alone", NULL, 'u', GID },
                        "bad_request");
        /* (lookups below send fd released events: no more replies read) */
        cr_expect_eq(probe(&supp, "acc/gg"), 0, "supplementary group_gid");
        cr_expect_eq(probe(&prim, "acc/gg"), 0, "primary group_gid");
        cr_expect_eq(probe(WHO(THIRD), "acc/gg"), 1, "not in group_gid");
        close(fd);
        h_daemon_stop(&h_d);
}

/* In a mount namespace whose /etc/group (a bind mount of path) has
 * FAKE_GROUP as GID, which the daemon's does not: gpuipc_client_set_access
 * resolves it here, and the daemon takes the gid it is sent.  50: no mount
 * namespace; 51: the bind mount is not what NSS reads. */
static int do_register_fake_group(const char *path)
{
        gpuipc_client *c = NULL;
        gpuipc_hostbuf *b = NULL;
        int r;

        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
            mount(path, "/etc/group", NULL, MS_BIND, NULL) < 0)
                return 50;
        if (!getgrnam(FAKE_GROUP))
                return 51;
        if (gpuipc_client_connect(h_d.sock, &c) < 0 || gpuipc_hostbuf_new(4096, &b) < 0)
                return 10;
        if (gpuipc_client_set_access(c, &(gpuipc_access){ .size = sizeof(gpuipc_access), .group = "no-such-group-gpuipc" }) != -ENOENT ||
            !strstr(gpuipc_errmsg(c), "no-such-group-gpuipc"))
                return 11;
        if (gpuipc_client_set_access(c, &(gpuipc_access){ .size = sizeof(gpuipc_access), .group = FAKE_GROUP }) < 0)
                return 12;
        r = gpuipc_hostbuf_register(c, "acc/lib-gg", b, NULL, 0, NULL);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
        return r == 0 ? 0 : 13;
}

Test(access, group_resolved_by_the_library)
{
        struct who supp = { .uid = OTHER, .gid = OTHER, .groups = { GID }, .ngroups = 1 };
        char path[320];
        pid_t pid;
        FILE *g;
        int code;

        if (getgrnam(FAKE_GROUP))
                cr_skip_test("this host has a group named " FAKE_GROUP);
        start(NULL);
        snprintf(path, sizeof(path), "%s/group", h_d.dir);
        g = fopen(path, "w");
        cr_assert_not_null(g);
        fprintf(g, "root:x:0:\n%s:x:%u:\n", FAKE_GROUP, GID);
        cr_assert_eq(fclose(g), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                alarm(20);
                _exit(do_register_fake_group(path));
        }
        code = as_user_wait(pid);
        if (code == 50 || code == 51) {
                h_daemon_stop(&h_d);
                cr_skip_test("cannot give a child its own /etc/group (%d)", code);
        }
        cr_assert_eq(code, 0, "registering with a group only the producer knows: %d", code);
        cr_expect_eq(probe(&supp, "acc/lib-gg"), 0, "member of the producer's group");
        cr_expect_eq(probe(WHO(THIRD), "acc/lib-gg"), 1, "not a member");
        h_daemon_stop(&h_d);
}
