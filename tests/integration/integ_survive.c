/* integ_survive: restart cases found in review: shutdown must not tell
 * clients of releases the next daemon undoes, compaction must not miss the
 * change that triggered it, released events a detached session missed,
 * snapshots of ownerless ephemeral buffers, a failed start, and a client
 * of a daemon without a store releasing stale lease ids or clashing ids. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"
#include "sdhost.h"

static struct h_sd sd;

static void init(void) { signal(SIGPIPE, SIG_IGN); }
static void fini(void) { h_sd_stop(&sd); }
TestSuite(survive, .init = init, .fini = fini, .timeout = 240);

static gpuipc_client *cl(void)
{
        gpuipc_client *c = NULL;
        int r = gpuipc_client_connect(h_d.sock, &c);
        cr_assert_eq(r, 0, "connect: %s", gpuipc_strerror(r));
        return c;
}

static uint64_t reg_host(gpuipc_client *c, const char *name, unsigned flags)
{
        gpuipc_hostbuf *b = NULL;
        uint64_t id = 0;
        cr_assert_eq(gpuipc_hostbuf_new(4096, &b), 0);
        memset(gpuipc_hostbuf_data(b), 0x5a, 4096);
        int r = gpuipc_hostbuf_register(c, name, b, NULL, flags, &id);
        cr_assert_eq(r, 0, "register %s: %s (%s)", name, gpuipc_strerror(r), gpuipc_errmsg(c));
        gpuipc_hostbuf_free(b);
        return id;
}

static void counts(gpuipc_client *c, uint64_t *regs, uint64_t *leases)
{
        gpuipc_stats *s = NULL;
        int r = gpuipc_stats_fetch(c, &s);
        cr_assert_eq(r, 0, "stats: %s (%s)", gpuipc_strerror(r), gpuipc_errmsg(c));
        *regs = s->registrations;
        *leases = s->leases;
        gpuipc_stats_free(s);
}

/* SIGTERM: a consumer connected after the producer is closed first; its
 * lease is dropped in memory (journal frozen) and the producer is told
 * "released" although the lease comes back after the restart. */
Test(survive, sigterm_false_release)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL;
        uint64_t id, regs, leases;
        int r;

        h_sd_start(&sd, NULL);
        p = cl();
        id = reg_host(p, "t/a", 0);
        c = cl();
        cr_assert_eq(gpuipc_view_lookup(c, "t/a", 0, 0, &v), 0);
        h_sd_restart(&sd, SIGTERM);
        r = gpuipc_reg_wait_released(p, id, 1000);
        counts(p, &regs, &leases);
        cr_expect_neq(r, 0, "producer told 'released' while the consumer's lease "
                      "survived the restart (leases now %" PRIu64 ")", leases);
        gpuipc_view_release(v);
        gpuipc_client_free(c);
        gpuipc_client_free(p);
}

/* release while the owner is detached, then a second restart: the
 * release_missed mark is not journalled. */
Test(survive, release_missed_two_restarts)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL;
        uint64_t id;
        int r;

        h_sd_start(&sd, NULL);
        p = cl();
        id = reg_host(p, "t/b", 0);
        c = cl();
        cr_assert_eq(gpuipc_view_lookup(c, "t/b", 0, 0, &v), 0);
        h_sd_restart(&sd, SIGKILL);
        r = gpuipc_view_release(v);     /* c resumes, releases; p detached */
        cr_assert_eq(r, 0, "release: %s (%s)", gpuipc_strerror(r), gpuipc_errmsg(c));
        h_sd_restart(&sd, SIGKILL);
        r = gpuipc_reg_wait_released(p, id, 1500);
        cr_expect_eq(r, 0, "released event lost over a second restart");
        gpuipc_client_free(c);
        gpuipc_client_free(p);
}

/* owner unregistered its buffer (still leased), restart, consumer
 * releases while the owner is detached: reg freed, release_missed lost. */
Test(survive, release_missed_freed)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL;
        uint64_t id;
        int r;

        h_sd_start(&sd, NULL);
        p = cl();
        id = reg_host(p, "t/c", 0);
        c = cl();
        cr_assert_eq(gpuipc_view_lookup(c, "t/c", 0, 0, &v), 0);
        cr_assert_eq(gpuipc_name_unregister(p, "t/c"), 0);
        h_sd_restart(&sd, SIGKILL);
        r = gpuipc_view_release(v);
        cr_assert_eq(r, 0, "release: %s (%s)", gpuipc_strerror(r), gpuipc_errmsg(c));
        r = gpuipc_reg_wait_released(p, id, 1500);
        cr_expect_eq(r, 0, "released event of an unregistered buffer lost");
        gpuipc_client_free(c);
        gpuipc_client_free(p);
}

/* journal length: the daemon's memfd:gpuipcd-state */
static long long jlen(void)
{
        char dir[64], path[600], link[256];
        long long best = -1;
        struct dirent *e;
        DIR *d;

        snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)sd.pid);
        d = opendir(dir);
        cr_assert(d);
        while ((e = readdir(d))) {
                ssize_t n;
                struct stat st;
                snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
                n = readlink(path, link, sizeof(link) - 1);
                if (n <= 0)
                        continue;
                link[n] = 0;
                if (!strstr(link, "gpuipcd-state"))
                        continue;
                if (stat(path, &st) == 0)
                        best = st.st_size;
        }
        closedir(d);
        return best;
}

#define T (4LL << 20)

/* compaction triggered by an R record snapshots the lease being released. */
Test(survive, compact_at_release_resurrects_lease)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL, *victim = NULL;
        gpuipc_view *extra[200];
        int nextra = 0;
        uint64_t regs, leases, regs2, leases2;
        long long l0, dl = 0, dr = 0;

        h_sd_start(&sd, NULL);
        p = cl();
        reg_host(p, "t/d", 0);
        c = cl();
        /* pad */
        while (T - jlen() > 4000) {
                cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &v), 0);
                gpuipc_view_release(v);
        }
        l0 = jlen();
        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &v), 0);
        dl = jlen() - l0;
        l0 = jlen();
        gpuipc_view_release(v);
        dr = jlen() - l0;
        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &victim), 0);
        for (;;) {
                long long g = T - jlen();
                cr_assert(g >= 0, "overshot");
                if (g < dr)
                        break;
                /* x lookup+release pairs and y held lookups that land the
                 * journal just below the threshold, so that the victim's
                 * release record crosses it */
                int found = 0, bx = 0;
                for (int x = 0; x < 100 && !found; x++)
                        for (int y = 0; y < 150 && !found; y++) {
                                long long s = x * (dl + dr) + y * dl;
                                if (s <= g && s > g - dr) {
                                        found = 1;
                                        bx = x;
                                }
                        }
                cr_assert(found, "no pad plan for gap %lld (dl %lld dr %lld)", g, dl, dr);
                if (bx > 0) {
                        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &v), 0);
                        gpuipc_view_release(v);
                } else {
                        cr_assert(nextra < 200);
                        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &extra[nextra++]), 0);
                }
        }
        gpuipc_view_release(victim);
        counts(p, &regs, &leases);
        h_sd_restart(&sd, SIGKILL);
        counts(p, &regs2, &leases2);
        cr_expect_eq(leases2, leases, "a released lease came back after the restart");
        gpuipc_client_free(c);
        gpuipc_client_free(p);
}

/* compaction triggered by a hello's S record omits that session. */
Test(survive, compact_at_hello_loses_session)
{
        gpuipc_client *p, *c, *n;
        gpuipc_view *v = NULL;
        gpuipc_list *l = NULL;
        long long g;
        int r;

        h_sd_start(&sd, NULL);
        p = cl();
        reg_host(p, "t/e", 0);
        c = cl();
        while (T - jlen() > 60) {
                cr_assert_eq(gpuipc_view_lookup(c, "t/e", 0, 0, &v), 0);
                gpuipc_view_release(v);
        }
        g = T - jlen();
        cr_assert_geq(g, 0, "the journal passed the threshold before the hello");
        n = cl();        /* S record crosses the threshold */
        reg_host(n, "t/eph", GPUIPC_REGISTER_EPHEMERAL);
        h_sd_restart(&sd, SIGKILL);
        r = gpuipc_name_stat(n, "t/eph", &l);    /* n reconnects and tries to resume */
        cr_expect_eq(r, 0, "live client's ephemeral registration lost");
        gpuipc_list_free(l);
        gpuipc_client_free(n);
        gpuipc_client_free(c);
        gpuipc_client_free(p);
}

/* ephemeral reg whose owner closed while a consumer still holds it: a
 * snapshot writes it without a session and replay drops it with the lease. */
Test(survive, snapshot_drops_leased_ephemeral)
{
        gpuipc_client *p, *c, *q;
        gpuipc_view *v = NULL, *w = NULL;
        uint64_t regs, leases, regs2, leases2;
        long long start;

        h_sd_start(&sd, NULL);
        q = cl();
        reg_host(q, "t/pad", 0);
        p = cl();
        reg_host(p, "t/f", GPUIPC_REGISTER_EPHEMERAL);
        c = cl();
        cr_assert_eq(gpuipc_view_lookup(c, "t/f", 0, 0, &v), 0);
        gpuipc_client_free(p);
        h_sleep_ms(200);
        counts(c, &regs, &leases);
        /* force a compaction */
        start = jlen();
        while (jlen() >= start) {
                cr_assert_eq(gpuipc_view_lookup(c, "t/pad", 0, 0, &w), 0);
                gpuipc_view_release(w);
        }
        h_sd_restart(&sd, SIGKILL);
        counts(c, &regs2, &leases2);
        cr_expect_eq(leases2, leases, "consumer's lease on an orphaned ephemeral buffer "
                     "lost across a compaction + restart");
        gpuipc_view_release(v);
        gpuipc_client_free(c);
        gpuipc_client_free(q);
}

/* The same without a compaction in between. */
Test(survive, leased_ephemeral_of_a_gone_owner)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL;
        uint64_t regs, leases, regs2, leases2;

        h_sd_start(&sd, NULL);
        p = cl();
        reg_host(p, "t/f", GPUIPC_REGISTER_EPHEMERAL);
        c = cl();
        cr_assert_eq(gpuipc_view_lookup(c, "t/f", 0, 0, &v), 0);
        gpuipc_client_free(p);
        h_sleep_ms(200);
        counts(c, &regs, &leases);
        h_sd_restart(&sd, SIGKILL);
        counts(c, &regs2, &leases2);
        cr_expect_eq(leases2, leases);
        gpuipc_view_release(v);
        gpuipc_client_free(c);
}

/* A release while the owner is detached reaches it when it resumes. */
Test(survive, release_missed_one_restart)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL;
        uint64_t id;
        int r;

        h_sd_start(&sd, NULL);
        p = cl();
        id = reg_host(p, "t/b", 0);
        c = cl();
        cr_assert_eq(gpuipc_view_lookup(c, "t/b", 0, 0, &v), 0);
        h_sd_restart(&sd, SIGKILL);
        r = gpuipc_view_release(v);
        cr_assert_eq(r, 0);
        r = gpuipc_reg_wait_released(p, id, 1500);
        cr_expect_eq(r, 0);
        gpuipc_client_free(c);
        gpuipc_client_free(p);
}

static const char *const nostore[] = { "--fdstore", "no", NULL };

/* No store: a view from before the restart must not release a new lease
 * that got its lease id. */
Test(survive, nostore_stale_release_hits_new_lease)
{
        gpuipc_client *p, *c;
        gpuipc_view *va = NULL, *vb = NULL;
        uint64_t ida, idb, regs, leases;
        int r;

        h_sd_start(&sd, nostore);
        p = cl();
        ida = reg_host(p, "t/a", 0);
        idb = reg_host(p, "t/b", 0);
        c = cl();
        cr_assert_eq(gpuipc_view_lookup(c, "t/a", 0, 0, &va), 0);
        h_sd_restart(&sd, SIGKILL);
        cr_assert_eq(gpuipc_client_ping(p), 0);          /* p re-registers a and b */
        cr_assert_eq(gpuipc_view_lookup(c, "t/b", 0, 0, &vb), 0);  /* new lease id 1 */
        r = gpuipc_view_release(va);              /* stale lease id 1 */
        counts(p, &regs, &leases);
        r = gpuipc_reg_wait_released(p, idb, 500);
        cr_expect_eq(leases, 1, "the stale view's release dropped the live view's lease");
        cr_expect_neq(r, 0, "the producer heard t/b released while its view is live");
        (void)ida;
        gpuipc_view_release(vb);
        gpuipc_client_free(c);
        gpuipc_client_free(p);
}

/* No store: ids of registrations given back under new ids must not be
 * handed out again for new registrations. */
Test(survive, nostore_remap_collision)
{
        gpuipc_client *q, *p, *c;
        gpuipc_view *va = NULL;
        uint64_t ida, idd[8];
        char name[32];
        int r;

        h_sd_start(&sd, nostore);
        q = cl();
        for (int i = 0; i < 5; i++) {
                snprintf(name, sizeof(name), "t/q%d", i);
                reg_host(q, name, GPUIPC_REGISTER_EPHEMERAL);
        }
        p = cl();
        ida = reg_host(p, "t/a", 0);
        c = cl();
        cr_assert_eq(gpuipc_view_lookup(c, "t/a", 0, 0, &va), 0);
        h_sd_restart(&sd, SIGKILL);
        gpuipc_client_set_reconnect(q, 0);
        cr_assert_eq(gpuipc_client_ping(p), 0);
        /* The fresh daemon hands out ids that p's caller already holds for
         * t/a (given back under a new id): p must not pass them on. */
        for (int i = 0; i < 8; i++) {
                snprintf(name, sizeof(name), "t/d%d", i);
                idd[i] = reg_host(p, name, 0);
                cr_expect_neq(idd[i], ida, "t/d%d got id %" PRIu64 ", the id of t/a", i, ida);
                for (int j = 0; j < i; j++)
                        cr_expect_neq(idd[i], idd[j], "t/d%d and t/d%d share an id", i, j);
        }
        /* c's lease on a was forgotten; take a new one and release it */
        gpuipc_view *v2 = NULL;
        cr_assert_eq(gpuipc_view_lookup(c, "t/a", 0, 0, &v2), 0);
        gpuipc_view_release(v2);
        for (int i = 0; i < 8; i++) {
                r = gpuipc_reg_wait_released(p, idd[i], 50);
                cr_expect_neq(r, 0, "the release of t/a satisfied wait_released of t/d%d", i);
        }
        r = gpuipc_reg_wait_released(p, ida, 2000);
        cr_expect_eq(r, 0, "wait_released of t/a under its first id: %s", gpuipc_strerror(r));
        gpuipc_client_free(c);
        gpuipc_client_free(p);
        gpuipc_client_free(q);
}

static int grab_port(int port)
{
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
                                 .sin_addr.s_addr = htonl(0x7f000001) };
        int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (void *)&a, sizeof(a)) < 0 || listen(fd, 1) < 0) {
                close(fd);
                return -errno;
        }
        return fd;
}

static const char *const mx[] = { "--metrics-listen", "127.0.0.1:38471", NULL };

/* A start that fails after the restore (the metrics port is taken) keeps
 * the store as it was, and does not hang on the restored sessions' pids;
 * the next start has everything back. */
Test(survive, failed_start_keeps_the_store)
{
        gpuipc_client *p, *q;
        gpuipc_list *l = NULL;
        int64_t t0;
        int port;

        h_sd_start(&sd, mx);
        p = cl();
        reg_host(p, "t/durable", 0);
        q = cl();
        reg_host(q, "t/eph", GPUIPC_REGISTER_EPHEMERAL);   /* q stays: a session */
        gpuipc_client_free(p);
        h_sleep_ms(100);
        h_sd_kill(&sd, SIGKILL);
        port = grab_port(38471);
        cr_assert_geq(port, 0, "cannot take the metrics port: %s", strerror(-port));
        t0 = h_now_ms();
        cr_assert_eq(h_sd_try_start_again(&sd), -1, "gpuipcd started with its metrics port taken");
        cr_expect_lt(h_now_ms() - t0, 5000, "the failed start took %" PRId64 " ms",
                     h_now_ms() - t0);
        cr_expect_eq(h_sd_stored(&sd, "host-"), 2, "a failed start changed the store: [%s]",
                     h_sd_store_str(&sd));
        close(port);
        h_sd_start_again(&sd);
        p = cl();
        cr_expect_eq(gpuipc_name_stat(p, "t/durable", &l), 0, "t/durable is gone after the failed "
                     "start");
        gpuipc_list_free(l);
        cr_expect_eq(gpuipc_client_ping(q), 0);
        cr_expect_eq(gpuipc_name_stat(p, "t/eph", &l), 0, "t/eph is gone after the failed start");
        gpuipc_list_free(l);
        gpuipc_client_free(q);
        gpuipc_client_free(p);
}

/* compaction triggered by a U record: the unregistered (leased) buffer is
 * live again after the restart. */
Test(survive, compact_at_unregister_resurrects)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL, *vx = NULL;
        gpuipc_view *extra[200];
        int nextra = 0;
        long long l0, dl, dr, du = 19;
        gpuipc_list *l = NULL;
        int r;

        h_sd_start(&sd, NULL);
        p = cl();
        reg_host(p, "t/d", 0);
        c = cl();
        while (T - jlen() > 4000) {
                cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &v), 0);
                gpuipc_view_release(v);
        }
        l0 = jlen();
        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &v), 0);
        dl = jlen() - l0;
        l0 = jlen();
        gpuipc_view_release(v);
        dr = jlen() - l0;
        reg_host(p, "t/x", 0);
        cr_assert_eq(gpuipc_view_lookup(c, "t/x", 0, 0, &vx), 0);
        /* measure U size with a throwaway */
        reg_host(p, "t/y", 0);
        l0 = jlen();
        cr_assert_eq(gpuipc_name_unregister(p, "t/y"), 0);
        du = jlen() - l0;
        for (;;) {
                long long g = T - jlen();
                cr_assert(g >= 0, "overshot");
                if (g < du)
                        break;
                int found = 0, bx = 0;
                for (int x = 0; x < 100 && !found; x++)
                        for (int y = 0; y < 150 && !found; y++) {
                                long long s = x * (dl + dr) + y * dl;
                                if (s <= g && s > g - du) { found = 1; bx = x; }
                        }
                cr_assert(found, "no pad plan for gap %lld", g);
                if (bx > 0) {
                        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &v), 0);
                        gpuipc_view_release(v);
                } else {
                        cr_assert(nextra < 200);
                        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &extra[nextra++]), 0);
                }
        }
        l0 = jlen();
        cr_assert_eq(gpuipc_name_unregister(p, "t/x"), 0);
        r = gpuipc_name_stat(p, "t/x", &l);
        gpuipc_list_free(l);
        l = NULL;
        h_sd_restart(&sd, SIGKILL);
        gpuipc_client *o = cl();
        r = gpuipc_name_stat(o, "t/x", &l);
        cr_expect_neq(r, 0, "an unregistered buffer is live again after the restart");
        gpuipc_list_free(l);
        gpuipc_client_free(o);
        gpuipc_client_free(c);
        gpuipc_client_free(p);
}
