/* test_waits.c: lookups that wait for a name (daemon/waits.c), on a daemon
 * in this process: each waiter ends exactly once, with its answer when the
 * name is registered, timeout, shutting_down, or silently when its
 * connection goes. */
#include <stdio.h>

#include "daemon_fixture.h"
#include "waits.h"

TestSuite(waits, .init = fx_setup, .fini = fx_teardown, .timeout = 10);

/* What the answer callback was called with, in order. */
static struct answered {
        struct conn *c;
        uint64_t seq;
        uint64_t reg_id;
        bool writable, cache;
} answered[16];
static unsigned n_answered;
static int answer_result;       /* what the callback returns */

static int answer(struct conn *c, uint64_t seq, struct reg *r, bool writable, bool cache,
                  char *msg, size_t msg_len)
{
        cr_assert_lt(n_answered, 16);
        answered[n_answered++] = (struct answered){ c, seq, r->id, writable, cache };
        if (answer_result < 0)
                snprintf(msg, msg_len, "refused by the test");
        return answer_result;
}

/* A registration of name owned by uid, as registered (access: owner only). */
static struct reg *reg_named(const char *name, uint64_t id, uint32_t uid)
{
        size_t n = strlen(name);
        struct reg *r = calloc(1, sizeof(*r) + n + 1);

        cr_assert_not_null(r);
        memcpy(r->name, name, n);
        r->name_len = (uint16_t)n;
        r->id = id;
        r->uid = uid;
        r->fd = r->ro_fd = -1;
        r->live = true;
        return r;
}

static int wait_for(struct conn *c, uint64_t seq, const char *name, uint64_t ms)
{
        return waits_add(c, seq, name, strlen(name), ms, false, false, -1, answer);
}

Test(waits, a_registration_answers_its_name_only)
{
        int p1, p2;
        struct conn *c1 = fx_conn(&p1), *c2 = fx_conn(&p2);
        struct reg *a = reg_named("w/a", 7, c1->party.uid), *b = reg_named("w/b", 8, c1->party.uid);

        cr_assert_eq(wait_for(c1, 1, "w/a", 60000), 0);
        cr_assert_eq(waits_add(c1, 2, "w/a", 3, 60000, true, true, -1, answer), 0);
        cr_assert_eq(wait_for(c2, 3, "w/a", 60000), 0);
        cr_assert_eq(wait_for(c2, 4, "w/b", 60000), 0);
        cr_expect_eq(c1->n_waits, 2);
        waits_wake(&fx_d, b);
        cr_assert_eq(n_answered, 1);
        cr_expect(answered[0].c == c2 && answered[0].seq == 4 && answered[0].reg_id == 8);
        waits_wake(&fx_d, a);
        cr_assert_eq(n_answered, 4, "every waiter of w/a is answered");
        /* A connection's waiters in the order they came, with what they asked. */
        for (unsigned i = 1, last1 = 0, last2 = 0; i < 4; i++) {
                uint64_t s = answered[i].seq;
                cr_expect_eq(answered[i].reg_id, 7);
                if (answered[i].c == c1) {
                        cr_expect_gt(s, last1);
                        last1 = (unsigned)s;
                } else {
                        cr_expect_gt(s, last2);
                        last2 = (unsigned)s;
                }
                if (s == 2)
                        cr_expect(answered[i].writable && answered[i].cache);
                if (s == 1)
                        cr_expect(!answered[i].writable && !answered[i].cache);
        }
        cr_expect_eq(c1->n_waits, 0);
        cr_expect_eq(c2->n_waits, 0);
        cr_expect_eq(fx_d.waits.n, 0, "no queue is left behind");
        /* Answered once: a second registration of the name finds nobody. */
        waits_wake(&fx_d, a);
        cr_expect_eq(n_answered, 4);
        close(p1), close(p2), free(a), free(b);
}

Test(waits, who_may_not_look_it_up_keeps_waiting)
{
        int p;
        struct conn *c = fx_conn(&p);
        struct reg *theirs, *own;

        c->party.uid = 1000;    /* not root, who may look anything up */
        theirs = reg_named("w/x", 9, 1001);
        own = reg_named("w/x", 10, 1000);
        cr_assert_eq(wait_for(c, 1, "w/x", 60000), 0);
        waits_wake(&fx_d, theirs);
        cr_expect_eq(n_answered, 0, "another uid's registration, owner only");
        cr_expect_eq(c->n_waits, 1);
        waits_wake(&fx_d, own);
        cr_expect_eq(n_answered, 1);
        close(p), free(theirs), free(own);
}

Test(waits, owner_uid_picks_the_owner)
{
        int p;
        struct conn *c = fx_conn(&p);
        struct reg *r0 = reg_named("w/o", 11, 0), *r5 = reg_named("w/o", 12, 5);

        c->party.uid = 0;       /* root: may look up either */
        cr_assert_eq(waits_add(c, 1, "w/o", 3, 60000, false, false, 5, answer), 0);
        waits_wake(&fx_d, r0);
        cr_expect_eq(n_answered, 0, "a registration of uid 0 does not answer owner_uid 5");
        waits_wake(&fx_d, r5);
        cr_assert_eq(n_answered, 1);
        cr_expect_eq(answered[0].reg_id, 12);
        close(p), free(r0), free(r5);
}

Test(waits, a_refused_answer_is_an_error_reply)
{
        int p;
        struct conn *c = fx_conn(&p);
        struct reg *r = reg_named("w/r", 13, c->party.uid);
        struct fx_frame f;
        char code[32];

        answer_result = -EPERM;
        cr_assert_eq(wait_for(c, 42, "w/r", 60000), 0);
        waits_wake(&fx_d, r);
        cr_assert_eq(fx_recv(p, &f, 2000), 1);
        cr_expect_eq(fx_u64(&f, "seq"), 42);
        cr_expect_str_eq(fx_code(&f, code, sizeof(code)), "permission");
        fx_frame_free(&f);
        cr_expect_eq(c->n_waits, 0);
        close(p), free(r);
}

Test(waits, timeout_ends_the_wait_with_its_seq)
{
        int p;
        struct conn *c = fx_conn(&p);
        struct reg *r = reg_named("w/t", 14, c->party.uid);
        struct fx_frame f;
        char code[32];

        cr_assert_eq(wait_for(c, 5, "w/t", 20), 0);
        cr_assert_eq(wait_for(c, 6, "w/t", 60000), 0);
        cr_assert_eq(fx_recv(p, &f, 3000), 1, "no timeout reply");
        cr_expect_eq(fx_u64(&f, "seq"), 5);
        cr_expect_str_eq(fx_code(&f, code, sizeof(code)), "timeout");
        fx_frame_free(&f);
        cr_expect_eq(c->n_waits, 1);
        waits_wake(&fx_d, r);
        cr_assert_eq(n_answered, 1);
        cr_expect_eq(answered[0].seq, 6, "the timed-out waiter is not answered again");
        close(p), free(r);
}

Test(waits, per_connection_limit)
{
        int p;
        struct conn *c = fx_conn(&p);
        char name[16];

        for (uint32_t i = 0; i < fx_d.cfg.max_waits; i++) {
                snprintf(name, sizeof(name), "w/%u", i);
                cr_assert_eq(wait_for(c, i, name, 60000), 0);
        }
        cr_expect_eq(wait_for(c, 999, "w/more", 60000), -ENOBUFS);
        cr_expect_eq(c->n_waits, fx_d.cfg.max_waits);
        close(p);
}

Test(waits, a_closing_connection_is_not_answered)
{
        int p1, p2;
        struct conn *c1 = fx_conn(&p1), *c2 = fx_conn(&p2);
        struct reg *r = reg_named("w/c", 15, c1->party.uid);

        cr_assert_eq(wait_for(c1, 1, "w/c", 60000), 0);
        cr_assert_eq(wait_for(c1, 2, "w/other", 60000), 0);
        cr_assert_eq(wait_for(c2, 3, "w/c", 60000), 0);
        waits_cancel_conn(c1);
        cr_expect_eq(c1->n_waits, 0);
        waits_wake(&fx_d, r);
        cr_assert_eq(n_answered, 1);
        cr_expect(answered[0].c == c2);
        cr_expect_eq(fx_d.waits.n, 0);
        close(p1), close(p2), free(r);
}

Test(waits, shutdown_answers_every_waiter)
{
        int p;
        struct conn *c = fx_conn(&p);
        struct fx_frame f;
        char code[32];
        bool seen[3] = { false };

        for (uint64_t s = 0; s < 3; s++)
                cr_assert_eq(wait_for(c, s, s == 2 ? "w/y" : "w/s", 60000), 0);
        waits_shutdown_conn(c);
        cr_expect_eq(c->n_waits, 0);
        for (int i = 0; i < 3; i++) {
                cr_assert_eq(fx_recv(p, &f, 2000), 1, "reply %d of 3", i);
                cr_expect_str_eq(fx_code(&f, code, sizeof(code)), "shutting_down");
                cr_assert_lt(fx_u64(&f, "seq"), 3);
                seen[fx_u64(&f, "seq")] = true;
                fx_frame_free(&f);
        }
        cr_expect(seen[0] && seen[1] && seen[2]);
        cr_expect_eq(n_answered, 0);
        cr_expect_eq(fx_d.waits.n, 0);
        close(p);
}
