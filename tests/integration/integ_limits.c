/* integ_limits.c: the per-uid limits, each against its own daemon with a
 * small limit: registrations (orphaned durable ones included), leases,
 * bytes held and connections. */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"

static void setup(void)
{
        signal(SIGPIPE, SIG_IGN);
}

TestSuite(uid_limits, .init = setup, .timeout = 60);

static gpuipc_client *client(void)
{
        gpuipc_client *c;

        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        return c;
}

static int put(gpuipc_client *c, const char *name, size_t size)
{
        gpuipc_hostbuf *b;
        int r;

        cr_assert_eq(gpuipc_hostbuf_new(size, &b), 0);
        r = gpuipc_hostbuf_register(c, name, b, NULL, 0, NULL);
        gpuipc_hostbuf_free(b);
        return r;
}

Test(uid_limits, registrations_count_orphans)
{
        gpuipc_client *c;

        h_daemon_start(&h_d, (const char *const[]){ "--max-registrations-per-uid", "2", NULL });
        /* Two durable registrations whose connection ends: orphans. */
        c = client();
        cr_assert_eq(put(c, "lim/a", 4096), 0);
        cr_assert_eq(put(c, "lim/b", 4096), 0);
        gpuipc_client_free(c);
        c = client();
        cr_expect_eq(put(c, "lim/c", 4096), -ENOBUFS);
        cr_expect_not_null(strstr(gpuipc_errmsg(c), "max-registrations-per-uid"), "%s",
                           gpuipc_errmsg(c));
        cr_expect_not_null(strstr(gpuipc_errmsg(c), "has 2 registrations"), "%s",
                           gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_name_unregister(c, "lim/a"), 0);
        cr_expect_eq(put(c, "lim/c", 4096), 0, "%s", gpuipc_errmsg(c));
        gpuipc_client_free(c);
        h_daemon_stop(&h_d);
}

Test(uid_limits, leases)
{
        gpuipc_client *p, *c1, *c2;
        gpuipc_view *v1 = NULL, *v2 = NULL, *v3 = NULL;

        h_daemon_start(&h_d, (const char *const[]){ "--max-leases-per-uid", "2", NULL });
        p = client();
        cr_assert_eq(put(p, "lim/l", 4096), 0);
        c1 = client();
        c2 = client();
        cr_assert_eq(gpuipc_view_lookup(c1, "lim/l", 0, 0, &v1), 0);
        cr_assert_eq(gpuipc_view_lookup(c2, "lim/l", 0, 0, &v2), 0);
        cr_expect_eq(gpuipc_view_lookup(p, "lim/l", 0, 0, &v3), -ENOBUFS);
        cr_expect_not_null(strstr(gpuipc_errmsg(p), "holds 2 leases (--max-leases-per-uid 2)"),
                           "%s", gpuipc_errmsg(p));
        cr_assert_eq(gpuipc_view_release(v1), 0);
        cr_expect_eq(gpuipc_view_lookup(p, "lim/l", 0, 0, &v3), 0, "%s", gpuipc_errmsg(p));
        gpuipc_view_release(v2);
        gpuipc_view_release(v3);
        gpuipc_client_free(c1);
        gpuipc_client_free(c2);
        gpuipc_client_free(p);
        h_daemon_stop(&h_d);
}

Test(uid_limits, bytes)
{
        gpuipc_client *c;

        h_daemon_start(&h_d, (const char *const[]){ "--max-bytes-per-uid", "8192", NULL });
        c = client();
        cr_assert_eq(put(c, "lim/x", 4096), 0);
        cr_assert_eq(put(c, "lim/y", 4096), 0);
        cr_expect_eq(put(c, "lim/z", 4096), -ENOBUFS);
        cr_expect_not_null(strstr(gpuipc_errmsg(c), "holds 8192 bytes"), "%s",
                           gpuipc_errmsg(c));
        cr_expect_not_null(strstr(gpuipc_errmsg(c), "max-bytes-per-uid"), "%s",
                           gpuipc_errmsg(c));
        /* unregistered and not leased: freed, its bytes given back */
        cr_assert_eq(gpuipc_name_unregister(c, "lim/x"), 0);
        cr_expect_eq(put(c, "lim/z", 4096), 0, "%s", gpuipc_errmsg(c));
        gpuipc_client_free(c);
        h_daemon_stop(&h_d);
}

static int other_uid_connects(void)
{
        pid_t pid = fork();
        int st;

        cr_assert_geq(pid, 0);
        if (pid == 0) {
                gpuipc_client *c;
                alarm(10);
                if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
                        _exit(100);
                _exit(gpuipc_client_connect(h_d.sock, &c) == 0 ? 0 : 1);
        }
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

Test(uid_limits, connections)
{
        gpuipc_client *a, *b, *c = NULL;
        int r;

        h_daemon_start(&h_d, (const char *const[]){ "--max-connections-per-uid", "2",
                                                    "--socket-mode", "0666", NULL });
        a = client();
        b = client();
        r = gpuipc_client_connect(h_d.sock, &c);
        cr_expect_lt(r, 0, "a third connection of this uid must be refused");
        if (r == 0)
                gpuipc_client_free(c);
        if (geteuid() == 0) {
                cr_assert_eq(chmod(h_d.dir, 0755), 0);
                cr_expect_eq(other_uid_connects(), 0, "another uid is not limited by this one");
        }
        gpuipc_client_free(b);
        h_sleep_ms(100);        /* the daemon sees b's end */
        cr_expect_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        gpuipc_client_free(c);
        gpuipc_client_free(a);
        h_daemon_stop(&h_d);
}
