/* test_session.c: session tokens, detached sessions and what they missed,
 * and resuming them (daemon/session.c), on a daemon in this process. */
#include <stdio.h>

#include "daemon_fixture.h"
#include "session.h"

TestSuite(session, .init = fx_setup, .fini = fx_teardown, .timeout = 10);

static const uint8_t token_a[PROTO_SESSION_LEN] = "session-token-a";
static const uint8_t token_b[PROTO_SESSION_LEN] = "session-token-b";

Test(session, tokens_are_random)
{
        struct reg_party a, b;

        reg_party_init(&a, 1, 0, 0);
        reg_party_init(&b, 1, 0, 0);
        cr_assert_eq(session_new_token(&a), 0);
        cr_assert_eq(session_new_token(&b), 0);
        cr_expect_neq(memcmp(a.session, b.session, PROTO_SESSION_LEN), 0);
}

Test(session, start_time_of_a_process)
{
        uint64_t mine = session_start_time((uint32_t)getpid());

        cr_expect_gt(mine, 0);
        cr_expect_eq(session_start_time((uint32_t)getpid()), mine, "the same process, the same time");
        cr_expect_geq(mine, session_start_time(1), "this process started after init");
        cr_expect_eq(session_start_time(0), 0);
        cr_expect_eq(session_start_time(UINT32_MAX), 0, "no such process");
}

Test(session, detached_sessions_by_token)
{
        struct reg_party *a, *b;
        int err = 0;

        a = session_detached_add(&fx_d, token_a, 100, 1000, 1000, 77, &err);
        cr_assert_not_null(a);
        cr_expect(a->detached);
        cr_expect(a->pid == 100 && a->uid == 1000 && a->gid == 1000);
        cr_expect_eq(memcmp(a->session, token_a, PROTO_SESSION_LEN), 0);
        cr_expect_null(session_detached_add(&fx_d, token_a, 101, 1000, 1000, 0, &err));
        cr_expect_eq(err, -EEXIST, "one session per token");
        b = session_detached_add(&fx_d, token_b, 200, 2000, 2000, 0, &err);
        cr_assert_not_null(b);
        cr_expect_eq(session_detached_count(&fx_d), 2);
        cr_expect_eq(session_detached_find(&fx_d, token_a), a);
        cr_expect_eq(session_detached_find(&fx_d, token_b), b);
        cr_expect_null(session_detached_find(&fx_d, (const uint8_t[PROTO_SESSION_LEN]){ 0 }));
}

static void count_each(const struct reg_party *p, void *data)
{
        (*(unsigned *)data)++;
        cr_expect(p->detached);
}

Test(session, released_events_kept_oldest_first_and_capped)
{
        int err;
        struct reg_party *p = session_detached_add(&fx_d, token_a, 100, 1000, 1000, 0, &err);
        const struct session_missed *m;
        char name[32];
        unsigned n = 0, each = 0;

        cr_assert_not_null(p);
        cr_expect_null(session_missed_of(p));
        for (uint64_t id = 1; id <= SESSION_MISSED_MAX + 10; id++) {
                snprintf(name, sizeof(name), "m/%llu", (unsigned long long)id);
                cr_assert(session_note_released(&fx_d, p, id, name, strlen(name)));
        }
        m = session_missed_of(p);
        cr_assert_not_null(m);
        cr_expect_eq(m->id, 11, "the oldest ones went past SESSION_MISSED_MAX");
        cr_expect_str_eq(m->name, "m/11");
        for (uint64_t want = 11; m; m = m->next, want++, n++)
                cr_expect_eq(m->id, want);
        cr_expect_eq(n, SESSION_MISSED_MAX);
        session_detached_each(&fx_d, count_each, &each);
        cr_expect_eq(each, 1);
}

Test(session, resume_takes_over_what_it_owned_and_missed)
{
        int peer, err;
        struct conn *c = fx_conn(&peer);
        struct reg_party *p;
        struct reg_params rp = { .name = "s/own", .name_len = 5, .size = 4096, .fd = -1 };
        struct reg *r = NULL;
        struct session_missed *missed = NULL;
        struct fx_frame f;
        char buf[32];

        p = session_detached_add(&fx_d, token_a, c->party.pid, c->party.uid, c->party.gid, 55, &err);
        cr_assert_not_null(p);
        cr_assert_eq(registry_add(fx_d.reg, p, &rp, &r), 0);
        cr_assert(session_note_released(&fx_d, p, 9, "s/gone", 6));

        /* Another uid, or another pid, does not resume it. */
        c->party.uid++;
        cr_expect(!session_resume(&fx_d, c, token_a, &missed));
        c->party.uid--;
        c->party.pid++;
        cr_expect(!session_resume(&fx_d, c, token_a, &missed));
        c->party.pid--;
        cr_expect(!session_resume(&fx_d, c, token_b, &missed), "an unknown token");
        cr_expect_null(missed);
        cr_expect_eq(session_detached_count(&fx_d), 1);

        cr_assert(session_resume(&fx_d, c, token_a, &missed));
        cr_expect_eq(session_detached_count(&fx_d), 0, "resumed: no longer detached");
        cr_expect_null(session_detached_find(&fx_d, token_a));
        cr_expect_eq(r->owner, &c->party, "the connection owns the registration now");
        cr_expect_eq(c->party.n_live, 1);
        cr_expect_eq(memcmp(c->party.session, token_a, PROTO_SESSION_LEN), 0, "and has the token");
        cr_expect_eq(c->party.start_time, 55);
        cr_assert_not_null(missed);
        cr_expect_eq(missed->id, 9);
        cr_expect_null(missed->next);
        session_send_missed(c, missed);
        cr_assert_eq(fx_recv(peer, &f, 2000), 1, "the missed released event");
        cr_expect_str_eq(fx_str(&f, "event", buf, sizeof(buf)), "released");
        cr_expect_eq(fx_u64(&f, "id"), 9);
        cr_expect_str_eq(fx_str(&f, "name", buf, sizeof(buf)), "s/gone");
        fx_frame_free(&f);
        close(peer);
}
