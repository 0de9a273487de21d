/* test_watch.c: watch subscriptions and their events (daemon/watch.c), on
 * a daemon in this process: who gets which event, with what fields, and
 * the limits on subscriptions. */
#include <stdio.h>

#include "daemon_fixture.h"
#include "watch.h"

TestSuite(watch, .init = fx_setup, .fini = fx_teardown, .timeout = 10);

static struct reg *reg_named(const char *name, uint64_t id, uint32_t uid)
{
        size_t n = strlen(name);
        struct reg *r = calloc(1, sizeof(*r) + n + 1);

        cr_assert_not_null(r);
        memcpy(r->name, name, n);
        r->name_len = (uint16_t)n;
        r->id = id;
        r->uid = uid;
        r->pid = 4242;
        r->size = 4096;
        r->kind = PROTO_KIND_HOST;
        r->fd = r->ro_fd = -1;
        r->live = true;
        return r;
}

static int subscribe(struct conn *c, const char *prefix)
{
        return watch_add(c, prefix, strlen(prefix));
}

/* The next event on peer: its type, asserting a watch event for name. */
static const char *next_event(int peer, const char *name, struct fx_frame *f, char *type, size_t len)
{
        char buf[64];

        cr_assert_eq(fx_recv(peer, f, 2000), 1, "no event");
        cr_expect_str_eq(fx_str(f, "event", buf, sizeof(buf)), "watch");
        cr_expect_str_eq(fx_str(f, "name", buf, sizeof(buf)), name);
        return fx_str(f, "type", type, len);
}

static bool nothing_more(int peer)
{
        struct fx_frame f;

        if (fx_recv(peer, &f, 50) == 0)
                return true;
        fx_frame_free(&f);
        return false;
}

Test(watch, events_of_a_registration_in_order_with_their_fields)
{
        int p, hp;
        struct conn *w = fx_conn(&p), *holder = fx_conn(&hp);
        struct reg *r = reg_named("sp/a", 7, w->party.uid);
        struct lease l = { .reg = r, .holder = &holder->party, .id = 33 };
        struct fx_frame f;
        char type[32], kind[16];

        cr_assert_eq(subscribe(w, ""), 0);
        watch_on_added(r, &fx_d);
        cr_expect_str_eq(next_event(p, "sp/a", &f, type, sizeof(type)), "registered");
        cr_expect_eq(fx_u64(&f, "id"), 7);
        cr_expect_eq(fx_u64(&f, "size"), 4096);
        cr_expect_str_eq(fx_str(&f, "kind", kind, sizeof(kind)), "host");
        cr_expect_eq(fx_u64(&f, "pid"), 4242);
        cr_expect_eq(fx_u64(&f, "uid"), r->uid);
        cr_expect_eq(fx_u64(&f, "leases"), 0);
        cr_expect_neq(fx_u64(&f, "time_ms"), UINT64_MAX);
        cr_expect_eq(fx_u64(&f, "lease"), UINT64_MAX, "no lease field");
        fx_frame_free(&f);

        r->leases = 1;
        watch_on_leased(r, &l, &fx_d);
        cr_expect_str_eq(next_event(p, "sp/a", &f, type, sizeof(type)), "leased");
        cr_expect_eq(fx_u64(&f, "lease"), 33);
        cr_expect_eq(fx_u64(&f, "pid"), holder->party.pid, "the holder's pid");
        cr_expect_eq(fx_u64(&f, "leases"), 1);
        fx_frame_free(&f);
        watch_on_unleased(r, &l, &fx_d);
        cr_expect_str_eq(next_event(p, "sp/a", &f, type, sizeof(type)), "released");
        cr_expect_eq(fx_u64(&f, "leases"), 0, "what remains once the lease is gone");
        fx_frame_free(&f);
        r->leases = 0;

        /* unregistered: by the party whose request it is, else the owner */
        watch_set_actor(&holder->party);
        holder->party.pid = 99;
        watch_on_removed(r, &fx_d);
        watch_set_actor(NULL);
        cr_expect_str_eq(next_event(p, "sp/a", &f, type, sizeof(type)), "unregistered");
        cr_expect_eq(fx_u64(&f, "pid"), 99);
        fx_frame_free(&f);
        watch_on_removed(r, &fx_d);
        cr_expect_str_eq(next_event(p, "sp/a", &f, type, sizeof(type)), "unregistered");
        cr_expect_eq(fx_u64(&f, "pid"), 4242);
        fx_frame_free(&f);
        watch_emit_revoked(r, &holder->party);
        cr_expect_str_eq(next_event(p, "sp/a", &f, type, sizeof(type)), "revoked");
        cr_expect_eq(fx_u64(&f, "pid"), 99);
        fx_frame_free(&f);
        cr_expect(nothing_more(p));
        cr_expect(nothing_more(hp), "a connection that did not subscribe hears nothing");
        close(p), close(hp), free(r);
}

Test(watch, a_prefix_is_a_namespace)
{
        int p;
        struct conn *w = fx_conn(&p);
        struct reg *in = reg_named("spark/a", 1, w->party.uid);
        struct reg *same = reg_named("spark", 2, w->party.uid);
        struct reg *out = reg_named("sparkle/a", 3, w->party.uid);
        struct fx_frame f;
        char type[32];

        cr_assert_eq(subscribe(w, "spark"), 0);
        watch_on_added(out, &fx_d);
        watch_on_added(in, &fx_d);
        next_event(p, "spark/a", &f, type, sizeof(type));
        fx_frame_free(&f);
        watch_on_added(same, &fx_d);
        next_event(p, "spark", &f, type, sizeof(type));
        fx_frame_free(&f);
        /* A new subscription replaces the old one. */
        cr_assert_eq(subscribe(w, "sparkle"), 0);
        cr_expect_eq(watch_count(), 1);
        watch_on_added(in, &fx_d);
        watch_on_added(out, &fx_d);
        next_event(p, "sparkle/a", &f, type, sizeof(type));
        fx_frame_free(&f);
        cr_expect(nothing_more(p));
        close(p), free(in), free(same), free(out);
}

Test(watch, only_what_the_watcher_may_see)
{
        int p;
        struct conn *w = fx_conn(&p);
        struct reg *theirs = reg_named("x/theirs", 1, 2000), *own = reg_named("x/own", 2, 1000);
        struct fx_frame f;
        char type[32];

        w->party.uid = 1000;    /* not root, who sees everything */
        cr_assert_eq(subscribe(w, ""), 0);
        watch_on_added(theirs, &fx_d);
        watch_on_added(own, &fx_d);
        next_event(p, "x/own", &f, type, sizeof(type));
        fx_frame_free(&f);
        cr_expect(nothing_more(p));
        close(p), free(theirs), free(own);
}

Test(watch, ends_with_remove_and_with_the_connection)
{
        int p1, p2;
        struct conn *a = fx_conn(&p1), *b = fx_conn(&p2);
        struct reg *r = reg_named("e/x", 1, a->party.uid);

        cr_expect(!watch_remove(a), "nothing to remove");
        cr_assert_eq(subscribe(a, ""), 0);
        cr_assert_eq(subscribe(b, ""), 0);
        cr_expect_eq(watch_count(), 2);
        cr_expect(watch_remove(a));
        cr_expect_eq(watch_count(), 1);
        conn_close(b);
        cr_expect_eq(watch_count(), 0, "a closed connection's subscription goes");
        watch_on_added(r, &fx_d);
        cr_expect(nothing_more(p1));
        close(p1), close(p2), free(r);
}

Test(watch, subscriptions_per_uid_and_in_all)
{
        int peers[WATCH_MAX + 1];
        struct conn *c[WATCH_MAX + 1];
        uint32_t per_uid = fx_d.cfg.max_watches_per_uid;

        for (unsigned i = 0; i <= WATCH_MAX; i++)
                c[i] = fx_conn(&peers[i]);
        for (uint32_t i = 0; i < per_uid; i++)
                cr_assert_eq(subscribe(c[i], ""), 0);
        cr_expect_eq(subscribe(c[per_uid], ""), -EDQUOT, "one uid past max-watches-per-uid");
        cr_expect_eq(subscribe(c[0], "again"), 0, "replacing one is not another");
        /* The others of other uids, up to WATCH_MAX in all. */
        for (unsigned i = per_uid; i < WATCH_MAX; i++) {
                c[i]->party.uid = 5000 + i;
                cr_assert_eq(subscribe(c[i], ""), 0, "subscription %u", i);
        }
        c[WATCH_MAX]->party.uid = 9999;
        cr_expect_eq(subscribe(c[WATCH_MAX], ""), -ENOBUFS);
        cr_expect_eq(watch_count(), WATCH_MAX);
        for (unsigned i = 0; i <= WATCH_MAX; i++)
                close(peers[i]);
}
