/* integ_lease.c: leases end with release or with the holder's death, and
 * the producer hears about it. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"

TestSuite(lease, .init = h_setup, .fini = h_teardown, .timeout = 20);

static gpuipc_client *connect_client(void)
{
        gpuipc_client *c = NULL;
        int r = gpuipc_client_connect(h_d.sock, &c);
        cr_assert_eq(r, 0, "gpuipc_client_connect: %s", gpuipc_strerror(r));
        return c;
}

static uint64_t register_one(gpuipc_client *c, const char *name, size_t size, uint32_t seed)
{
        gpuipc_hostbuf *b = NULL;
        uint64_t id = 0;
        uint8_t *p;

        cr_assert_eq(gpuipc_hostbuf_new(size, &b), 0);
        p = gpuipc_hostbuf_data(b);
        for (size_t i = 0; i < size; i++)
                p[i] = h_pattern(i, seed);
        cr_assert_eq(gpuipc_hostbuf_register(c, name, b, NULL, 0, &id), 0, "%s", gpuipc_errmsg(c));
        gpuipc_hostbuf_free(b);
        return id;
}

static int leases_of(gpuipc_client *c, const char *name)
{
        gpuipc_list *l = NULL;
        int r = gpuipc_name_stat(c, name, &l), n;
        cr_assert_eq(r, 0, "stat %s: %s", name, gpuipc_strerror(r));
        cr_assert_eq(gpuipc_list_count(l), 1);
        n = (int)gpuipc_list_get(l, 0)->leases;
        gpuipc_list_free(l);
        return n;
}

static int leases_settle(gpuipc_client *c, const char *name, int want)
{
        int64_t deadline = h_now_ms() + 3000;
        int n;
        while ((n = leases_of(c, name)) != want && h_now_ms() < deadline)
                h_sleep_ms(10);
        return n;
}

static void spawn_holder(struct h_child *ch, const char *name, const char *size, const char *seed)
{
        const char *args[] = { name, size, seed, "--hold", NULL };
        char line[32];
        h_spawn(ch, "helper-consumer", args, true);
        cr_assert_geq(h_read_line(ch, line, sizeof(line), 10000), 0, "consumer did not look up %s", name);
        cr_assert_str_eq(line, "ok");
}

Test(lease, killed_consumer_releases)
{
        gpuipc_client *p = connect_client();
        uint64_t id = register_one(p, "lease/kill", 65536, 3);
        struct h_child ch;
        int64_t t0;

        spawn_holder(&ch, "lease/kill", "65536", "3");
        cr_expect_eq(leases_of(p, "lease/kill"), 1);
        cr_assert_eq(kill(ch.pid, SIGKILL), 0);
        cr_expect_eq(h_wait(&ch, 5000), 128 + SIGKILL);
        t0 = h_now_ms();
        cr_expect_eq(gpuipc_reg_wait_released(p, id, 5000), 0, "%s", gpuipc_errmsg(p));
        cr_expect_lt(h_now_ms() - t0, 4000);
        cr_expect_eq(leases_of(p, "lease/kill"), 0);
        /* still registered and intact */
        {
                const char *args[] = { "lease/kill", "65536", "3", NULL };
                struct h_child c2;
                h_spawn(&c2, "helper-consumer", args, false);
                cr_expect_eq(h_wait(&c2, 10000), 0);
        }
        gpuipc_client_free(p);
}

Test(lease, release_before_wait_counts)
{
        gpuipc_client *p = connect_client(), *c = connect_client();
        uint64_t id = register_one(p, "lease/norm", 4096, 1);
        gpuipc_view *v = NULL;

        cr_assert_eq(gpuipc_view_lookup(c, "lease/norm", 0, 0, &v), 0);
        cr_expect_eq(leases_of(p, "lease/norm"), 1);
        cr_expect_eq(gpuipc_view_release(v), 0);
        cr_expect_eq(leases_of(p, "lease/norm"), 0);
        cr_expect_eq(gpuipc_reg_wait_released(p, id, 5000), 0, "%s", gpuipc_errmsg(p));
        gpuipc_client_free(c);
        gpuipc_client_free(p);
}

Test(lease, release_during_wait)
{
        const char *args[] = { "lease/later", "4096", "2", "--hold-ms", "300", NULL };
        gpuipc_client *p = connect_client();
        uint64_t id = register_one(p, "lease/later", 4096, 2);
        struct h_child ch;
        char line[32];
        int64_t t0, dt;

        h_spawn(&ch, "helper-consumer", args, true);
        cr_assert_geq(h_read_line(&ch, line, sizeof(line), 10000), 0);
        t0 = h_now_ms();
        cr_expect_eq(gpuipc_reg_wait_released(p, id, 5000), 0, "%s", gpuipc_errmsg(p));
        dt = h_now_ms() - t0;
        cr_expect_geq(dt, 150, "released after %" PRId64 " ms, while still held", dt);
        cr_expect_eq(h_wait(&ch, 5000), 0);
        gpuipc_client_free(p);
}

Test(lease, wait_released_times_out_without_lookup)
{
        gpuipc_client *p = connect_client();
        uint64_t id = register_one(p, "lease/none", 4096, 1);
        int64_t t0, dt;

        t0 = h_now_ms();
        cr_expect_eq(gpuipc_reg_wait_released(p, id, 300), -ETIMEDOUT);
        dt = h_now_ms() - t0;
        cr_expect_geq(dt, 290, "timed out after %" PRId64 " ms", dt);
        cr_expect_lt(dt, 3000);
        cr_expect_eq(gpuipc_client_ping(p), 0);
        gpuipc_client_free(p);
}

Test(lease, last_of_two_holders)
{
        gpuipc_client *p = connect_client();
        uint64_t id = register_one(p, "lease/two", 8192, 9);
        struct h_child a, b;

        spawn_holder(&a, "lease/two", "8192", "9");
        spawn_holder(&b, "lease/two", "8192", "9");
        cr_expect_eq(leases_of(p, "lease/two"), 2);
        kill(a.pid, SIGKILL);
        cr_expect_eq(h_wait(&a, 5000), 128 + SIGKILL);
        cr_expect_eq(leases_settle(p, "lease/two", 1), 1);
        /* one lease remains: not released yet */
        cr_expect_eq(gpuipc_reg_wait_released(p, id, 300), -ETIMEDOUT);
        cr_expect_eq(h_wait(&b, 5000), 0);      /* EOF on stdin: releases normally */
        cr_expect_eq(gpuipc_reg_wait_released(p, id, 5000), 0, "%s", gpuipc_errmsg(p));
        cr_expect_eq(leases_of(p, "lease/two"), 0);
        gpuipc_client_free(p);
}

Test(lease, unregistered_buffer_freed_with_last_lease)
{
        gpuipc_client *p = connect_client(), *c = connect_client();
        gpuipc_view *v = NULL;
        gpuipc_stats *s = NULL;
        int64_t deadline;

        register_one(p, "lease/gone", 4096, 5);
        cr_assert_eq(gpuipc_view_lookup(c, "lease/gone", 0, 0, &v), 0);
        cr_assert_eq(gpuipc_name_unregister(p, "lease/gone"), 0);
        cr_assert_eq(gpuipc_stats_fetch(p, &s), 0);
        cr_expect_eq(s->registrations, 1);
        cr_expect_eq(s->bytes_host, 4096);
        gpuipc_stats_free(s);
        /* the holder dies without releasing */
        gpuipc_client_free(c);
        deadline = h_now_ms() + 3000;
        for (;;) {
                cr_assert_eq(gpuipc_stats_fetch(p, &s), 0);
                if (s->registrations == 0 || h_now_ms() > deadline)
                        break;
                gpuipc_stats_free(s);
                h_sleep_ms(10);
        }
        cr_expect_eq(s->registrations, 0);
        cr_expect_eq(s->leases, 0);
        cr_expect_eq(s->bytes_host, 0);
        gpuipc_stats_free(s);
        /* the view outlives its client, and is still released cleanly */
        for (size_t i = 0; i < 4096; i++)
                if (((uint8_t *)gpuipc_view_data(v))[i] != h_pattern(i, 5))
                        cr_assert_fail("byte %zu changed", i);
        gpuipc_view_release(v);
        gpuipc_client_free(p);
}
