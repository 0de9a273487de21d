/* integ_busypoll.c: busy polling, the daemon's (--busy-poll-us) and the
 * library's ($GPUIPC_BUSY_POLL_US): requests are served as before, and the
 * spinning ends with its window, so an idle daemon or client sleeps. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"

static void no_setup(void)
{
        signal(SIGPIPE, SIG_IGN);
}

TestSuite(busypoll, .init = no_setup, .timeout = 60);

/* CPU time (user + system) of a process so far, in ms. */
static long cpu_ms(pid_t pid)
{
        char path[64], buf[1024], *p;
        unsigned long ut = 0, st = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        f = fopen(path, "r");
        cr_assert(f, "%s", path);
        cr_assert(fgets(buf, sizeof(buf), f));
        fclose(f);
        p = strrchr(buf, ')');
        cr_assert(p);
        /* after the comm: state ppid pgrp session tty tpgid flags minflt
         * cminflt majflt cmajflt utime stime */
        cr_assert_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                            &ut, &st), 2);
        return (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

/* CPU ms the process used while the test slept ms. */
static long cpu_during(pid_t pid, int ms)
{
        long before = cpu_ms(pid);

        h_sleep_ms(ms);
        return cpu_ms(pid) - before;
}

static void put(gpuipc_client *c, const char *name)
{
        gpuipc_hostbuf *b = NULL;

        cr_assert_eq(gpuipc_hostbuf_new(4096, &b), 0);
        memset(gpuipc_hostbuf_data(b), 0x5a, 4096);
        cr_assert_eq(gpuipc_hostbuf_register(c, name, b, NULL, 0, NULL), 0, "%s", gpuipc_errmsg(c));
        gpuipc_hostbuf_free(b);
}

Test(busypoll, daemon_serves_then_sleeps)
{
        gpuipc_client *c = NULL;
        gpuipc_view *v = NULL;
        long spent;

        h_daemon_start(&h_d, (const char *const[]){ "--busy-poll-us", "20000", NULL });
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        put(c, "bp/a");
        for (int i = 0; i < 200; i++) {
                cr_assert_eq(gpuipc_view_lookup(c, "bp/a", 0, 0, &v), 0, "%s", gpuipc_errmsg(c));
                cr_assert_eq(((const uint8_t *)gpuipc_view_data(v))[4095], 0x5a);
                cr_assert_eq(gpuipc_view_release(v), 0);
        }
        /* The window (20 ms) is long over after 100 ms: one idle second
         * costs the daemon next to no CPU, not the second a spin takes. */
        h_sleep_ms(100);
        spent = cpu_during(h_d.pid, 1000);
        cr_expect_lt(spent, 200, "the idle daemon used %ld ms of CPU in 1 s", spent);
        /* Input starts the window again, and it ends again. */
        cr_assert_eq(gpuipc_client_ping(c), 0);
        h_sleep_ms(100);
        spent = cpu_during(h_d.pid, 500);
        cr_expect_lt(spent, 100, "after a ping, %ld ms of CPU in 0.5 s", spent);
        gpuipc_client_free(c);
        h_daemon_stop(&h_d);    /* asserts a clean exit: the idle handle closes */
}

Test(busypoll, daemon_spins_within_the_window)
{
        gpuipc_client *c = NULL;
        long spent;

        h_daemon_start(&h_d, (const char *const[]){ "--busy-poll-us", "1000000", NULL });
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_assert_eq(gpuipc_client_ping(c), 0);
        spent = cpu_during(h_d.pid, 500);
        /* Half a second inside a one-second window: it polled, not slept. */
        cr_expect_gt(spent, 150, "the daemon used only %ld ms of CPU in its window", spent);
        gpuipc_client_free(c);
        h_daemon_stop(&h_d);
}

Test(busypoll, client_spin_keeps_timeouts)
{
        gpuipc_client *c = NULL, *c2 = NULL, *p = NULL;
        gpuipc_view *v = NULL;
        int64_t t0, took;

        h_daemon_start(&h_d, NULL);
        setenv("GPUIPC_BUSY_POLL_US", "300000", 1);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        setenv("GPUIPC_BUSY_POLL_US", "20000", 1);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c2), 0);
        unsetenv("GPUIPC_BUSY_POLL_US");
        /* A wait shorter than the spin ends on time, not with the spin... */
        t0 = h_now_ms();
        cr_expect_eq(gpuipc_view_lookup(c, "bp/none", 10, 0, &v), -ETIMEDOUT);
        took = h_now_ms() - t0;
        cr_expect(took >= 9 && took < 150, "a 10 ms wait took %lld ms", (long long)took);
        /* ...and a longer one spins first, then sleeps out the rest. */
        t0 = h_now_ms();
        cr_expect_eq(gpuipc_view_lookup(c2, "bp/none", 200, 0, &v), -ETIMEDOUT);
        took = h_now_ms() - t0;
        cr_expect(took >= 195 && took < 400, "a 200 ms wait took %lld ms", (long long)took);
        /* Answers arrive while spinning: a waiting lookup gets what another
         * client registers. */
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &p), 0);
        put(p, "bp/late");
        cr_assert_eq(gpuipc_view_lookup(c, "bp/late", 1000, 0, &v), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_view_release(v), 0);
        gpuipc_client_free(p);
        gpuipc_client_free(c2);
        gpuipc_client_free(c);
        h_daemon_stop(&h_d);
}
