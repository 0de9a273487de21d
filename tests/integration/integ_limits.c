/* integ_limits.c: what one uid may take, so that the others keep what they
 * need.
 *
 * Suite uid_limits: each per-uid limit against its own daemon with a small
 * limit: registrations (orphaned durable ones included), leases, bytes held
 * and connections.
 *
 * Suite uid_fairness (issue 15): the defaults and reserves.  Connection
 * slots (per uid, a reserve for root and admin-group, a hello deadline),
 * the daemon's fds and fd store entries, watch slots, waiting lookups that
 * slow every register down, the peer's identity as of accept (executable,
 * supplementary groups past 256), the listen backlog and the memory an
 * output flood leaves behind.  The tests run as root (CI does) and act as
 * other uids through sockets that children of other uids connected and
 * handed back: SO_PEERCRED and SO_PEERGROUPS are fixed at connect(2), so
 * the parent can drive them with the harness. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"
#include "sdhost.h"

static void setup(void)
{
        signal(SIGPIPE, SIG_IGN);
}

TestSuite(uid_limits, .init = setup, .timeout = 120);

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

/* ==== one uid must not take what others need ============================= */

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#define UID_A   65533u
#define UID_B   65532u

static void as_root_setup(void)
{
        signal(SIGPIPE, SIG_IGN);
        if (geteuid() != 0)
                cr_skip_test("needs root to act as other uids");
}

TestSuite(uid_fairness, .init = as_root_setup, .timeout = 120);

/* Starts the test's daemon with a socket every uid can reach. */
static void start(const char *const *extra)
{
        const char *args[32] = { "--socket-mode", "0666" };
        int n = 2;

        for (int i = 0; extra && extra[i]; i++)
                args[n++] = extra[i];
        args[n] = NULL;
        h_daemon_start(&h_d, args);
        cr_assert_eq(chmod(h_d.dir, 0755), 0);
}

/* ---- sockets connected by other uids ---------------------------------- */

struct who {
        uid_t uid;
        const gid_t *groups;
        int ngroups;
};

static int send_fd(int sock, int fd)
{
        char c = 0;
        struct iovec iov = { .iov_base = &c, .iov_len = 1 };
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } u;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                             .msg_controllen = sizeof(u.buf) };
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
        return sendmsg(sock, &mh, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
        char c;
        struct iovec iov = { .iov_base = &c, .iov_len = 1 };
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } u;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                             .msg_controllen = sizeof(u.buf) };
        struct cmsghdr *cm;
        int fd;

        if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != 1)
                return -1;
        cm = CMSG_FIRSTHDR(&mh);
        if (!cm || cm->cmsg_type != SCM_RIGHTS)
                return -1;
        memcpy(&fd, CMSG_DATA(cm), sizeof(int));
        return fd;
}

/* Connects n sockets to the daemon as w (without hello) and stores them
 * in fds; returns how many connects succeeded (the rest are -1). */
static int connect_as(const struct who *w, int n, int *fds)
{
        int sv[2], got = 0, st;
        pid_t pid;

        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                struct sockaddr_un sa = { .sun_family = AF_UNIX };

                alarm(60);
                close(sv[0]);
                if (setgroups((size_t)w->ngroups, w->groups) < 0 || setgid(w->uid) < 0 ||
                    setuid(w->uid) < 0)
                        _exit(100);
                snprintf(sa.sun_path, sizeof(sa.sun_path), "%.107s", h_d.sock);
                for (int i = 0; i < n; i++) {
                        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

                        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                                _exit(i == 0 ? 101 : 0);
                        if (send_fd(sv[1], fd) < 0)
                                _exit(102);
                        close(fd);
                }
                _exit(0);
        }
        close(sv[1]);
        for (int i = 0; i < n; i++) {
                fds[i] = recv_fd(sv[0]);
                got += fds[i] >= 0;
        }
        close(sv[0]);
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "connecting child: status %d", st);
        return got;
}

static int connect_uid(uid_t uid)
{
        int fd;

        cr_assert_eq(connect_as(&(struct who){ .uid = uid }, 1, &fd), 1);
        return fd;
}

/* Whether the daemon keeps fd open: a ping after hello is answered. */
static bool raw_ping(int fd, uint64_t seq)
{
        struct h_frame f;
        bool ok;

        if (h_raw_request(fd, "ping", seq, 0, NULL, NULL, NULL, 0) < 0)
                return false;
        if (h_raw_recv(fd, 5000, &f) != 1)
                return false;
        ok = f.m.root && proto_get(f.m.root, "seq") && !proto_get(f.m.root, "error");
        h_frame_free(&f);
        return ok;
}

/* A raw request with string and uint fields, answered by its reply. */
struct kv {
        const char *k;
        const char *s;          /* NULL: u */
        uint64_t u;
};

static void pack_kvs(msgpack_packer *pk, void *data)
{
        for (const struct kv *p = data; p->k; p++) {
                if (p->s)
                        proto_pack_kstr(pk, p->k, p->s);
                else
                        proto_pack_ku64(pk, p->k, p->u);
        }
}

static unsigned n_kvs(const struct kv *kv)
{
        unsigned n = 0;

        while (kv[n].k)
                n++;
        return n;
}

static void raw_req(int fd, const char *op, uint64_t seq, const struct kv *kv)
{
        cr_assert_eq(h_raw_request(fd, op, seq, kv ? n_kvs(kv) : 0, kv ? pack_kvs : NULL,
                                   (void *)kv, NULL, 0), 0);
}

/* ---- 1. connections --------------------------------------------------- */

/* With the defaults, one uid gets 256 connections, not all 1024. */
Test(uid_fairness, connections_per_uid_default)
{
        int fds[300], n;

        start(NULL);
        n = connect_as(&(struct who){ .uid = UID_A }, 257, fds);
        cr_assert_eq(n, 257);
        for (int i = 0; i < 256; i++)
                h_raw_hello(fds[i], 1);
        h_raw_expect_event(fds[256], "limit", true);
        h_raw_expect_eof(fds[256], 3000);
        /* another uid still connects */
        fds[257] = connect_uid(UID_B);
        h_raw_hello(fds[257], 1);
        for (int i = 0; i < 258; i++)
                close(fds[i]);
        h_daemon_stop(&h_d);
}

/* The last reserved-connections slots are root's and admin-group's. */
Test(uid_fairness, connection_reserve_for_admins)
{
        int fds[16], extra, r;

        start((const char *const[]){ "--max-connections", "8", "--reserved-connections", "2",
                                     "--max-connections-per-uid", "100", NULL });
        /* two uids fill what they may: 6 of 8 */
        cr_assert_eq(connect_as(&(struct who){ .uid = UID_A }, 4, fds), 4);
        cr_assert_eq(connect_as(&(struct who){ .uid = UID_B }, 2, fds + 4), 2);
        for (int i = 0; i < 6; i++)
                h_raw_hello(fds[i], 1);
        extra = connect_uid(UID_B);
        h_raw_expect_event(extra, "limit", true);
        h_raw_expect_eof(extra, 3000);
        close(extra);
        /* root still gets in, twice */
        for (int i = 6; i < 8; i++) {
                fds[i] = h_raw_connect(h_d.sock);
                h_raw_hello(fds[i], 1);
        }
        extra = h_raw_connect(h_d.sock);
        h_raw_expect_event(extra, "limit", true);
        close(extra);
        for (int i = 0; i < 8; i++)
                cr_expect(raw_ping(fds[i], 2), "connection %d", i);
        for (int i = 0; i < 8; i++)
                close(fds[i]);
        (void)r;
        h_daemon_stop(&h_d);
}

/* A connection that never says hello is closed after hello-timeout-ms
 * (default 5000); one that did stays. */
Test(uid_fairness, hello_deadline)
{
        struct h_frame f;
        int idle, ok, fast;
        int64_t t0, dt;

        start(NULL);
        t0 = h_now_ms();
        idle = connect_uid(UID_A);
        ok = connect_uid(UID_A);
        h_raw_hello(ok, 1);
        cr_assert_eq(h_raw_recv(idle, 10000, &f), 1, "no event on the idle connection");
        h_expect_event(&f, "timeout", true);
        h_frame_free(&f);
        h_raw_expect_eof(idle, 3000);
        dt = h_now_ms() - t0;
        cr_expect_geq(dt, 4500, "closed after %lld ms", (long long)dt);
        cr_expect_leq(dt, 9000, "closed after %lld ms", (long long)dt);
        cr_expect(raw_ping(ok, 2));
        close(idle);
        close(ok);
        h_daemon_stop(&h_d);

        /* configurable */
        start((const char *const[]){ "--hello-timeout-ms", "200", NULL });
        t0 = h_now_ms();
        fast = h_raw_connect(h_d.sock);
        h_raw_expect_event(fast, "timeout", true);
        dt = h_now_ms() - t0;
        cr_expect_lt(dt, 2000, "closed after %lld ms", (long long)dt);
        close(fast);
        h_daemon_stop(&h_d);
}

/* ---- 2. fds ----------------------------------------------------------- */

struct put_args {
        const char *prefix;
        int max;                /* registrations to try */
        int *ret_n;             /* written through a pipe */
};

/* As uid: registers durable host buffers until one is refused; writes how
 * many succeeded, the error and its message to fd out. */
static void put_until_refused(uid_t uid, const char *prefix, int max, int *ret_n, int *ret_err,
                              char *msg, size_t msg_len)
{
        int p[2], st;
        pid_t pid;

        cr_assert_eq(pipe(p), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                struct rlimit rl = { 65536, 65536 };
                gpuipc_client *c;
                char name[64], out[600];
                int n = 0, r = 0;

                alarm(60);
                close(p[0]);
                (void)setrlimit(RLIMIT_NOFILE, &rl);
                if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
                        _exit(100);
                if (gpuipc_client_connect(h_d.sock, &c) < 0)
                        _exit(101);
                for (; n < max; n++) {
                        gpuipc_hostbuf *b;

                        snprintf(name, sizeof(name), "%s/%d", prefix, n);
                        if (gpuipc_hostbuf_new(4096, &b) < 0)
                                _exit(102);
                        r = gpuipc_hostbuf_register(c, name, b, NULL, 0, NULL);
                        gpuipc_hostbuf_free(b);
                        if (r < 0)
                                break;
                }
                snprintf(out, sizeof(out), "%d %d %s", n, r, r < 0 ? gpuipc_errmsg(c) : "");
                if (write(p[1], out, strlen(out)) < 0)
                        _exit(103);
                gpuipc_client_free(c);
                _exit(0);
        }
        close(p[1]);
        {
                char buf[600];
                ssize_t k = 0, m;
                int off = 0;

                while ((m = read(p[0], buf + k, sizeof(buf) - 1 - (size_t)k)) > 0)
                        k += m;
                buf[k > 0 ? k : 0] = '\0';
                cr_assert_eq(sscanf(buf, "%d %d %n", ret_n, ret_err, &off), 2, "child: '%s'",
                             buf);
                snprintf(msg, msg_len, "%s", buf + off);
        }
        close(p[0]);
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "registering child: status %d", st);
}

Test(uid_fairness, fd_budget_per_uid)
{
        char msg[600];
        int n, err;

        start((const char *const[]){ "--max-fds-per-uid", "6", NULL });
        put_until_refused(UID_A, "fa", 10, &n, &err, msg, sizeof(msg));
        cr_expect_eq(n, 3, "%d registrations (2 fds each)", n);
        cr_expect_eq(err, -ENOBUFS, "%s", msg);
        cr_expect_not_null(strstr(msg, "max-fds-per-uid"), "%s", msg);
        /* another uid has its own budget */
        put_until_refused(UID_B, "fb", 2, &n, &err, msg, sizeof(msg));
        cr_expect_eq(n, 2, "%s", msg);
        h_daemon_stop(&h_d);
}

/* With few fds, one uid cannot take them all: another uid's registrations
 * and new connections still succeed. */
Test(uid_fairness, fd_reserve_below_rlimit)
{
        struct rlimit rl = { 600, 600 };
        char msg[600];
        int n, err, fds[40];

        /* The daemon inherits the limit (and raises its soft limit to the
         * hard one). */
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
        start((const char *const[]){ "--max-connections", "64", NULL });
        put_until_refused(UID_A, "ra", 1000, &n, &err, msg, sizeof(msg));
        cr_expect_eq(err, -ENOBUFS, "after %d: %s", n, msg);
        cr_expect_not_null(strstr(msg, "fd budget"), "%s", msg);
        cr_expect_geq(n, 50, "%d registrations", n);
        put_until_refused(UID_B, "rb", 10, &n, &err, msg, sizeof(msg));
        cr_expect_eq(n, 10, "another uid registers: %s", msg);
        /* and connections still come in */
        cr_assert_eq(connect_as(&(struct who){ .uid = UID_B }, 40, fds), 40);
        for (int i = 0; i < 40; i++) {
                h_raw_hello(fds[i], 1);
                close(fds[i]);
        }
        cr_expect(h_daemon_alive(&h_d));
        h_daemon_stop(&h_d);
}

/* ---- 3. the fd store -------------------------------------------------- */

static struct h_sd sd;

static void sd_fini(void)
{
        h_sd_stop(&sd);
}

static bool lookup_ok(const char *name)
{
        gpuipc_client *c;
        gpuipc_view *v;
        int r;

        if (gpuipc_client_connect(sd.sock, &c) < 0)
                return false;
        r = gpuipc_view_lookup(c, name, 0, 0, &v);
        if (r == 0)
                gpuipc_view_release(v);
        gpuipc_client_free(c);
        return r == 0;
}

/* One uid's registrations cannot fill the store: it is refused (limit)
 * and the store keeps working for everyone, across a restart. */
Test(uid_fairness, fdstore_budget, .fini = sd_fini)
{
        char msg[600];
        int n, err;

        setenv("FDSTORE", "48", 1);     /* as systemd >= 254 tells the daemon */
        h_sd_start(&sd, (const char *const[]){ "--socket-mode", "0666", NULL });
        cr_assert_eq(chmod(sd.dir, 0755), 0);
        cr_assert_eq(chmod(sd.sock, 0666), 0);
        put_until_refused(UID_A, "sa", 60, &n, &err, msg, sizeof(msg));
        cr_expect_eq(err, -ENOBUFS, "after %d: %s", n, msg);
        cr_expect_not_null(strstr(msg, "fd store budget"), "%s", msg);
        cr_expect_geq(n, 4, "%d registrations", n);
        put_until_refused(UID_B, "sb", 2, &n, &err, msg, sizeof(msg));
        cr_expect_eq(n, 2, "another uid registers: %s", msg);
        h_sd_restart(&sd, SIGTERM);
        cr_expect(lookup_ok("sb/0"), "uid %u's registration survived the restart", UID_B);
        cr_expect(lookup_ok("sa/0"));
        h_sd_stop(&sd);
        unsetenv("FDSTORE");
}

static double metric(const char *name)
{
        gpuipc_client *c;
        char *text;
        const char *p;
        double v = -1;

        cr_assert_eq(gpuipc_client_connect(sd.sock, &c), 0);
        cr_assert_eq(gpuipc_metrics_fetch(c, &text), 0);
        for (p = text; (p = strstr(p, name)); p++)
                if ((p == text || p[-1] == '\n') && p[strlen(name)] == ' ') {
                        v = strtod(p + strlen(name) + 1, NULL);
                        break;
                }
        free(text);
        gpuipc_client_free(c);
        return v;
}

/* The metrics say how full the store is, against $FDSTORE. */
Test(uid_fairness, fdstore_metrics, .fini = sd_fini)
{
        char msg[600];
        double before;
        int n, err;

        setenv("FDSTORE", "48", 1);
        h_sd_start(&sd, (const char *const[]){ "--socket-mode", "0666", NULL });
        cr_assert_eq(chmod(sd.dir, 0755), 0);
        cr_assert_eq(chmod(sd.sock, 0666), 0);
        cr_expect_eq(metric("gpuipcd_fdstore_enabled"), 1);
        cr_expect_eq(metric("gpuipcd_fdstore_max"), 48);
        before = metric("gpuipcd_fdstore_entries");
        cr_expect_geq(before, 1, "the journal is stored");
        put_until_refused(UID_A, "fm", 3, &n, &err, msg, sizeof(msg));
        cr_expect_eq(n, 3, "%s", msg);
        cr_expect_eq(metric("gpuipcd_fdstore_entries"), before + 3, "one entry per host buffer");
        h_sd_stop(&sd);
        unsetenv("FDSTORE");
}

Test(uid_fairness, fdstore_budget_per_uid, .fini = sd_fini)
{
        char msg[600];
        int n, err;

        h_sd_start(&sd, (const char *const[]){ "--socket-mode", "0666",
                                               "--max-fdstore-per-uid", "3", NULL });
        cr_assert_eq(chmod(sd.dir, 0755), 0);
        cr_assert_eq(chmod(sd.sock, 0666), 0);
        put_until_refused(UID_A, "pa", 10, &n, &err, msg, sizeof(msg));
        cr_expect_eq(n, 3);
        cr_expect_eq(err, -ENOBUFS, "%s", msg);
        cr_expect_not_null(strstr(msg, "max-fdstore-per-uid"), "%s", msg);
        put_until_refused(UID_B, "pb", 3, &n, &err, msg, sizeof(msg));
        cr_expect_eq(n, 3, "%s", msg);
        h_sd_restart(&sd, SIGTERM);
        cr_expect(lookup_ok("pa/2"));
        cr_expect(lookup_ok("pb/2"));
        h_sd_stop(&sd);
}

/* ---- 4. watch slots --------------------------------------------------- */

Test(uid_fairness, watches_per_uid)
{
        int fds[9], root;
        struct h_frame f;

        start(NULL);
        cr_assert_eq(connect_as(&(struct who){ .uid = UID_A }, 9, fds), 9);
        for (int i = 0; i < 9; i++) {
                h_raw_hello(fds[i], 1);
                raw_req(fds[i], "watch", 2, NULL);
                cr_assert_eq(h_raw_recv(fds[i], 5000, &f), 1);
                h_expect_reply(&f, 2, i < 8 ? "" : "limit");
                if (i == 8) {
                        size_t ml = 0;
                        const char *m = h_error_message(&f, &ml);

                        cr_expect_not_null(memmem(m, ml, "max-watches-per-uid", 19), "%.*s",
                                           (int)ml, m);
                }
                h_frame_free(&f);
        }
        root = h_raw_connect(h_d.sock);
        h_raw_hello(root, 1);
        raw_req(root, "watch", 2, NULL);
        h_raw_expect_reply(root, 2, "");
        close(root);
        for (int i = 0; i < 9; i++)
                close(fds[i]);
        h_daemon_stop(&h_d);
}

/* ---- 5. waiting lookups ----------------------------------------------- */

static int64_t churn(gpuipc_client *c, int rounds)
{
        int64_t t0 = h_now_ms();

        for (int i = 0; i < rounds; i++) {
                cr_assert_eq(put(c, "wait/x", 4096), 0, "%s", gpuipc_errmsg(c));
                cr_assert_eq(gpuipc_name_unregister(c, "wait/x"), 0);
        }
        return h_now_ms() - t0;
}

/* Lookups of another uid waiting for a name (root's, owner only: they may
 * not have it) must not make each register of that name walk them all. */
Test(uid_fairness, waiters_do_not_slow_registers)
{
        enum { CONNS = 400, WAITS = 256, ROUNDS = 200 };
        static int fds[CONNS];
        gpuipc_client *c;
        int64_t base, with;

        start((const char *const[]){ "--max-connections", "1024", "--max-connections-per-uid",
                                     "1024", NULL });
        c = client();
        (void)churn(c, 20);
        base = churn(c, ROUNDS);
        cr_assert_eq(connect_as(&(struct who){ .uid = UID_A }, CONNS, fds), CONNS);
        for (int i = 0; i < CONNS; i++) {
                h_raw_hello(fds[i], 1);
                for (int k = 0; k < WAITS; k++)
                        raw_req(fds[i], "lookup", 2 + (uint64_t)k,
                                (const struct kv[]){ { "name", "wait/x", 0 },
                                                     { "wait_ms", NULL, 600000 },
                                                     { NULL, NULL, 0 } });
                cr_assert(raw_ping(fds[i], 1000), "connection %d", i);
        }
        with = churn(c, ROUNDS);
        cr_expect_leq(with, 3 * base + 150, "%d registers: %lld ms with %d waiters, %lld ms "
                      "without", ROUNDS, (long long)with, CONNS * WAITS, (long long)base);
        gpuipc_client_free(c);
        for (int i = 0; i < CONNS; i++)
                close(fds[i]);
        h_daemon_stop(&h_d);
}

/* ---- 13. who the peer is, as of accept -------------------------------- */

/* A process that connects and then execs another program is recorded as
 * the program that connected. */
Test(uid_fairness, exe_read_at_accept)
{
        char fdarg[16], self[512], line[64];
        gpuipc_client *c;
        gpuipc_list *l;
        struct h_child ch = { .in = -1, .out = -1 };
        int fd, p_in[2], p_out[2];
        ssize_t n;
        pid_t pid;

        start(NULL);
        n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        cr_assert_gt(n, 0);
        self[n] = '\0';
        cr_assert_eq(pipe2(p_in, O_CLOEXEC), 0);
        cr_assert_eq(pipe2(p_out, O_CLOEXEC), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                alarm(30);
                fd = h_raw_connect(h_d.sock);
                (void)fcntl(fd, F_SETFD, 0);
                h_sleep_ms(300);        /* the daemon has accepted it */
                snprintf(fdarg, sizeof(fdarg), "%d", fd);
                dup2(p_in[0], 0);
                dup2(p_out[1], 1);
                execl(h_path("tests/helper-rawreg"), "helper-rawreg", fdarg, "exe/x", NULL);
                _exit(127);
        }
        close(p_in[0]);
        close(p_out[1]);
        ch.pid = pid;
        ch.in = p_in[1];
        ch.out = p_out[0];
        cr_assert_gt(h_read_line(&ch, line, sizeof(line), 10000), 0, "helper-rawreg said nothing");
        cr_assert_str_eq(line, "ok");
        c = client();
        cr_assert_eq(gpuipc_name_stat(c, "exe/x", &l), 0, "%s", gpuipc_errmsg(c));
        cr_expect_str_eq(gpuipc_list_get(l, 0)->owner_exe, self);
        gpuipc_list_free(l);
        gpuipc_client_free(c);
        cr_expect_eq(h_wait(&ch, 5000), 0);
        h_daemon_stop(&h_d);
}

/* A peer in more than 256 supplementary groups keeps the first 256. */
Test(uid_fairness, many_groups_keep_first_256)
{
        static gid_t groups[300];
        uint32_t gid = 20100;
        gpuipc_access a = { .size = sizeof(gpuipc_access), .gids = &gid, .n_gids = 1 };
        gpuipc_client *c;
        struct h_frame f;
        int fd;

        for (int i = 0; i < 300; i++)
                groups[i] = 20000 + (gid_t)i;
        start(NULL);
        c = client();
        cr_assert_eq(gpuipc_client_set_access(c, &a), 0);
        cr_assert_eq(put(c, "grp/x", 4096), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(connect_as(&(struct who){ .uid = UID_A, .groups = groups, .ngroups = 300 },
                                1, &fd), 1);
        h_raw_hello(fd, 1);
        raw_req(fd, "lookup", 2, (const struct kv[]){ { "name", "grp/x", 0 },
                                                      { NULL, NULL, 0 } });
        cr_assert_eq(h_raw_recv(fd, 5000, &f), 1);
        h_expect_reply(&f, 2, "");
        h_frame_free(&f);
        close(fd);
        gpuipc_client_free(c);
        h_daemon_stop(&h_d);
}

/* ---- 17. the listen backlog ------------------------------------------ */

Test(uid_fairness, backlog_is_somaxconn)
{
        enum { N = 400 };
        static int fds[N];
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int ok = 0, somaxconn = 0;
        FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");

        if (!f || fscanf(f, "%d", &somaxconn) != 1 || somaxconn < 2 * N) {
                if (f)
                        fclose(f);
                cr_skip_test("net.core.somaxconn is below %d", 2 * N);
        }
        fclose(f);
        start(NULL);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%.107s", h_d.sock);
        /* A stopped daemon accepts nothing: connects queue in the backlog. */
        cr_assert_eq(kill(h_d.pid, SIGSTOP), 0);
        for (int i = 0; i < N; i++) {
                fds[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                cr_assert_geq(fds[i], 0);
                ok += connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)) == 0;
        }
        cr_assert_eq(kill(h_d.pid, SIGCONT), 0);
        cr_expect_eq(ok, N, "%d of %d connects queued", ok, N);
        for (int i = 0; i < N; i++)
                close(fds[i]);
        h_sleep_ms(200);
        h_daemon_stop(&h_d);
}

/* ---- 18. memory of an output flood ----------------------------------- */

Test(uid_fairness, output_flood_memory_given_back)
{
        enum { WATCHERS = 32, KEEP = 1500, CHURN = 4000 };
        static int w[WATCHERS];
        char name[256];
        gpuipc_client *c;
        long rss0, rss_peak, rss_after;

#ifdef UNDER_ASAN
        /* ASan's allocator keeps freed memory in quarantine, whatever the
         * daemon asks of malloc. */
        cr_skip_test("RSS is ASan's under the sanitizers");
#endif
        start((const char *const[]){ "--max-output", "8388608", NULL });
        c = client();
        /* public: the watchers of other uids see them */
        cr_assert_eq(gpuipc_client_set_access(c, &(gpuipc_access){ .size = sizeof(gpuipc_access), .public_ = 1 }), 0);
        rss0 = h_daemon_rss_kb(&h_d);
        /* 8 watchers each of 4 uids (max-watches-per-uid is 8) */
        for (int i = 0; i < WATCHERS; i += 8)
                cr_assert_eq(connect_as(&(struct who){ .uid = UID_A - (uid_t)i / 8 }, 8, w + i),
                             8);
        for (int i = 0; i < WATCHERS; i++) {
                h_raw_hello(w[i], 1);
                raw_req(w[i], "watch", 2, NULL);
                h_raw_expect_reply(w[i], 2, "");
                /* and never read again */
        }
        /* Registrations that stay, allocated between the queued events. */
        for (int i = 0; i < KEEP + CHURN; i++) {
                snprintf(name, sizeof(name), "flood/%0200d", i);
                cr_assert_eq(put(c, name, 4096), 0, "%d: %s", i, gpuipc_errmsg(c));
                if (i >= KEEP)
                        cr_assert_eq(gpuipc_name_unregister(c, name), 0);
        }
        rss_peak = h_daemon_rss_kb(&h_d);
        cr_assert_gt(rss_peak - rss0, 40 * 1024, "the flood took %ld KiB", rss_peak - rss0);
        for (int i = 0; i < WATCHERS; i++)
                close(w[i]);
        /* a round trip: the daemon has seen the watchers go */
        h_sleep_ms(300);
        cr_assert_eq(gpuipc_name_unregister(c, "flood/nonexistent"), -ENOENT);
        rss_after = h_daemon_rss_kb(&h_d);
        cr_expect_lt(rss_after - rss0, (rss_peak - rss0) / 3,
                     "RSS %ld KiB before, %ld KiB at the peak, %ld KiB after the watchers went",
                     rss0, rss_peak, rss_after);
        gpuipc_client_free(c);
        h_daemon_stop(&h_d);
}
