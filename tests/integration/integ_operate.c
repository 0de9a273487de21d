/* integ_operate.c: what operators see and do (issue 17): lease holders,
 * unregistered buffers still held, TTLs, removal by prefix, put --hold,
 * --json everywhere, pipes, exit codes, sizes and shell completion.
 * gpuipcctl runs through /bin/sh so that pipes are tested as a shell
 * builds them. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"
#include "sdhost.h"

TestSuite(operate, .init = h_setup, .fini = h_teardown, .timeout = 30);

struct out {
        int status;             /* the shell's exit code */
        char *out, *err;        /* its stdout and stderr, NUL-terminated */
};

static char *slurp(const char *path)
{
        FILE *f = fopen(path, "rb");
        char *buf;
        long n;

        cr_assert_not_null(f, "%s: %s", path, strerror(errno));
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fseek(f, 0, SEEK_SET);
        buf = malloc((size_t)n + 1);
        cr_assert_not_null(buf);
        cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
        buf[n] = '\0';
        fclose(f);
        return buf;
}

/* Runs the shell command fmt with $C the gpuipcctl binary and $D the test's
 * directory, GPUIPC_SOCKET the test daemon's socket. */
static void sh(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sh(struct out *o, const char *fmt, ...)
{
        char cmd[2048], outp[320], errp[320];
        va_list ap;
        pid_t pid;
        int st;

        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        snprintf(outp, sizeof(outp), "%s/sh.out", h_d.dir);
        snprintf(errp, sizeof(errp), "%s/sh.err", h_d.dir);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                int fo = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
                int fe = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
                if (fo < 0 || fe < 0)
                        _exit(126);
                dup2(fo, 1);
                dup2(fe, 2);
                signal(SIGPIPE, SIG_DFL);       /* as in an interactive shell */
                setenv("C", h_path("gpuipcctl"), 1);
                setenv("D", h_d.dir, 1);
                setenv("GPUIPC_SOCKET", h_d.sock, 1);
                alarm(20);
                execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
                _exit(127);
        }
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        o->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        o->out = slurp(outp);
        o->err = slurp(errp);
}

static void out_free(struct out *o)
{
        free(o->out);
        free(o->err);
}

#define EXPECT_IN(hay, needle) \
        cr_expect_not_null(strstr((hay), (needle)), "'%s' not in:\n%s", (needle), (hay))
#define EXPECT_NOT_IN(hay, needle) \
        cr_expect_null(strstr((hay), (needle)), "'%s' in:\n%s", (needle), (hay))

static uint64_t ctl_now_unix_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A host registration through the library, durable. */
static void reg(gpuipc_client *c, const char *name, size_t n)
{
        gpuipc_hostbuf *b;

        cr_assert_eq(gpuipc_hostbuf_new(n, &b), 0);
        memset(gpuipc_hostbuf_data(b), 7, n);
        cr_assert_eq(gpuipc_hostbuf_register(c, name, b, NULL, 0, NULL), 0, "%s", gpuipc_errmsg(c));
        gpuipc_hostbuf_free(b);
}

/* ---- 1. who holds what ------------------------------------------------- */

Test(operate, show_lists_holders)
{
        gpuipc_client *p, *q;
        gpuipc_view *v;
        gpuipc_list *l;
        const gpuipc_info *in;
        char want[512], exe[256];
        ssize_t n;
        struct out o;

        n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        cr_assert_gt(n, 0);
        exe[n] = '\0';
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &p), 0);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &q), 0);
        reg(p, "op/held", 4096);
        cr_assert_eq(gpuipc_view_lookup(q, "op/held", 0, 0, &v), 0);

        /* the library */
        cr_assert_eq(gpuipc_name_stat(p, "op/held", &l), 0);
        in = gpuipc_list_get(l, 0);
        cr_assert_eq(in->n_holders, 1);
        cr_expect_eq(gpuipc_info_holder(in, 0)->pid, (uint32_t)getpid());
        cr_expect_eq(gpuipc_info_holder(in, 0)->uid, (uint32_t)getuid());
        cr_expect_str_eq(gpuipc_info_holder(in, 0)->exe, exe);
        cr_expect_gt(gpuipc_info_holder(in, 0)->lease, 0);
        cr_expect_gt(gpuipc_info_holder(in, 0)->since_ms, in->created_ms - 1);
        gpuipc_list_free(l);
        /* a plain list does not carry holders */
        cr_assert_eq(gpuipc_list_fetch(p, "op", 0, &l), 0);
        cr_expect_eq(gpuipc_list_get(l, 0)->n_holders, 0);
        cr_expect_null(gpuipc_info_holder(gpuipc_list_get(l, 0), 0));
        gpuipc_list_free(l);

        sh(&o, "$C show op/held");
        cr_expect_eq(o.status, 0, "%s", o.err);
        EXPECT_IN(o.out, "holders:   1\n");
        snprintf(want, sizeof(want), " %d ", (int)getpid());
        EXPECT_IN(o.out, want);
        EXPECT_IN(o.out, exe);
        out_free(&o);
        sh(&o, "$C show --json op/held");
        cr_expect_eq(o.status, 0);
        snprintf(want, sizeof(want), "\"holders\": [\n    {\"pid\": %d, \"uid\": %d, \"exe\": \"%s\", "
                 "\"lease\": ", (int)getpid(), (int)getuid(), exe);
        EXPECT_IN(o.out, want);
        EXPECT_IN(o.out, "\"age_ms\": ");
        out_free(&o);

        /* unregistered while held: gone from list, shown by list --all */
        cr_assert_eq(gpuipc_name_unregister(p, "op/held"), 0);
        sh(&o, "$C list op");
        EXPECT_NOT_IN(o.out, "op/held");
        out_free(&o);
        sh(&o, "$C list --all op");
        cr_expect_eq(o.status, 0);
        EXPECT_IN(o.out, "op/held");
        EXPECT_IN(o.out, "unregistered");
        snprintf(want, sizeof(want), "held by pid %d (uid %d, lease ", (int)getpid(), (int)getuid());
        EXPECT_IN(o.out, want);
        out_free(&o);
        sh(&o, "$C list --all --json op");
        EXPECT_IN(o.out, "\"state\": \"unregistered\"");
        EXPECT_IN(o.out, "\"holders\": [");
        out_free(&o);
        cr_assert_eq(gpuipc_list_fetch(p, "op", GPUIPC_LIST_ALL | GPUIPC_LIST_HOLDERS, &l), 0);
        cr_assert_eq(gpuipc_list_count(l), 1);
        in = gpuipc_list_get(l, 0);
        cr_expect(in->flags & GPUIPC_INFO_UNREGISTERED);
        cr_assert_eq(in->n_holders, 1);
        cr_expect_eq(gpuipc_info_holder(in, 0)->pid, (uint32_t)getpid());
        gpuipc_list_free(l);
        cr_expect_eq(gpuipc_list_fetch(p, NULL, 0x80, &l), -EINVAL);

        /* released: freed, gone from --all too */
        gpuipc_view_release(v);
        cr_assert_eq(gpuipc_list_fetch(p, "op", GPUIPC_LIST_ALL, &l), 0);
        cr_expect_eq(gpuipc_list_count(l), 0);
        gpuipc_list_free(l);
        gpuipc_client_free(q);
        gpuipc_client_free(p);
}

/* At most 32 holders are listed, newest first; leases counts them all. */
Test(operate, holders_are_capped)
{
        gpuipc_client *p;
        gpuipc_view *v[40];
        gpuipc_list *l;
        const gpuipc_info *in;

        cr_assert_eq(gpuipc_client_connect(h_d.sock, &p), 0);
        reg(p, "op/many", 4096);
        for (int i = 0; i < 40; i++)
                cr_assert_eq(gpuipc_view_lookup(p, "op/many", 0, 0, &v[i]), 0);
        cr_assert_eq(gpuipc_name_stat(p, "op/many", &l), 0);
        in = gpuipc_list_get(l, 0);
        cr_expect_eq(in->leases, 40);
        cr_assert_eq(in->n_holders, 32);
        for (uint32_t i = 1; i < in->n_holders; i++)
                cr_expect_gt(gpuipc_info_holder(in, i - 1)->lease, gpuipc_info_holder(in, i)->lease, "newest first");
        gpuipc_list_free(l);
        for (int i = 0; i < 40; i++)
                gpuipc_view_release(v[i]);
        gpuipc_client_free(p);
}

/* ---- 2. bulk removal and lifetimes -------------------------------------- */

Test(operate, rm_prefix)
{
        gpuipc_client *c;
        uint64_t removed = 9, skipped = 9;
        struct out o;

        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        reg(c, "job/1/a", 64);
        reg(c, "job/1/b", 64);
        reg(c, "job/10", 64);
        reg(c, "keep/x", 64);
        sh(&o, "$C rm --prefix job/1");
        cr_expect_eq(o.status, 0, "%s", o.err);
        EXPECT_IN(o.out, "removed 2 registrations under job/1");
        out_free(&o);
        sh(&o, "$C list");
        EXPECT_IN(o.out, "job/10");
        EXPECT_IN(o.out, "keep/x");
        EXPECT_NOT_IN(o.out, "job/1/");
        out_free(&o);
        cr_expect_eq(gpuipc_prefix_unregister(c, "job", &removed, &skipped), 0);
        cr_expect_eq(removed, 1);
        cr_expect_eq(skipped, 0);
        cr_expect_eq(gpuipc_prefix_unregister(c, "", NULL, NULL), -EINVAL);
        sh(&o, "$C rm --prefix nothing/here");
        cr_expect_eq(o.status, 0);
        EXPECT_IN(o.out, "removed 0 registrations");
        out_free(&o);
        sh(&o, "$C rm --prefix job x; echo rc=$?");
        EXPECT_IN(o.out, "rc=2");
        out_free(&o);
        gpuipc_client_free(c);
}

static int other_uid_rm(void *arg)
{
        gpuipc_client *c;
        uint64_t removed = 9, skipped = 9;
        int r;

        (void)arg;
        if (gpuipc_client_connect(h_d.sock, &c) < 0)
                return 10;
        r = gpuipc_prefix_unregister(c, "mine", &removed, &skipped);
        gpuipc_client_free(c);
        /* public ones are visible to it, and not its to remove */
        return r == 0 && removed == 0 && skipped == 2 ? 0 : 11;
}

/* As another uid: rm --prefix skips what it may not remove, and rm of a
 * visible buffer says permission. */
Test(operate, rm_other_users)
{
        gpuipc_access pub = { .size = sizeof(gpuipc_access), .public_ = 1 };
        gpuipc_client *c;
        struct out o;
        pid_t pid;
        int st;

        if (geteuid() != 0)
                cr_skip_test("needs root to act as another uid");
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_assert_eq(gpuipc_client_set_access(c, &pub), 0);
        reg(c, "mine/a", 64);
        reg(c, "mine/b", 64);
        /* the directory and socket must let uid 65534 in */
        cr_assert_eq(chmod(h_d.dir, 0755), 0);
        cr_assert_eq(chmod(h_d.sock, 0666), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                alarm(20);
                if (setgid(65534) < 0 || setuid(65534) < 0)
                        _exit(100);
                _exit(other_uid_rm(NULL));
        }
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: status %d", st);
        sh(&o, "setpriv --reuid=65534 --regid=65534 --clear-groups $C rm mine/a; echo rc=$?");
        if (strstr(o.err, "setpriv")) {
                out_free(&o);
                gpuipc_client_free(c);
                cr_skip_test("no setpriv");
        }
        EXPECT_IN(o.out, "rc=1");
        EXPECT_IN(o.err, "permission denied");
        out_free(&o);
        sh(&o, "setpriv --reuid=65534 --regid=65534 --clear-groups $C rm --prefix mine");
        cr_expect_eq(o.status, 0, "%s", o.err);
        EXPECT_IN(o.out, "removed 0 registrations under mine; skipped 2 of other users (permission)");
        out_free(&o);
        gpuipc_client_free(c);
}

Test(operate, put_ttl_expires)
{
        gpuipc_client *c;
        gpuipc_view *v;
        gpuipc_list *l;
        struct out o;
        int64_t deadline;

        sh(&o, "printf abcdef > $D/in && $C put op/ttl $D/in --ttl 3s && $C put op/nottl $D/in");
        cr_assert_eq(o.status, 0, "%s", o.err);
        out_free(&o);
        sh(&o, "$C show op/ttl");
        EXPECT_IN(o.out, "expires:   ");
        EXPECT_IN(o.out, "(in ");
        out_free(&o);
        sh(&o, "$C show --json op/ttl; $C show --json op/nottl");
        EXPECT_IN(o.out, "\"expires_ms\": 1");
        EXPECT_IN(o.out, "\"expires_ms\": null");
        out_free(&o);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_assert_eq(gpuipc_name_stat(c, "op/ttl", &l), 0);
        cr_expect_gt(gpuipc_list_get(l, 0)->expires_ms, gpuipc_list_get(l, 0)->created_ms);
        cr_expect_eq(gpuipc_list_get(l, 0)->expires_ms - gpuipc_list_get(l, 0)->created_ms, 3000);
        gpuipc_list_free(l);
        cr_assert_eq(gpuipc_view_lookup(c, "op/ttl", 0, 0, &v), 0);
        deadline = h_now_ms() + 10000;
        while (gpuipc_name_stat(c, "op/ttl", &l) == 0) {
                gpuipc_list_free(l);
                cr_assert_lt(h_now_ms(), deadline, "op/ttl did not expire");
                h_sleep_ms(20);
        }
        /* the reader keeps its mapping; the other registration stays */
        cr_expect_eq(memcmp(gpuipc_view_data(v), "abcdef", 6), 0);
        gpuipc_view_release(v);
        cr_assert_eq(gpuipc_name_stat(c, "op/nottl", &l), 0);
        gpuipc_list_free(l);

        /* the library's TTL applies to later registrations, until reset */
        cr_expect_eq(gpuipc_client_set_ttl(c, 200), 0);
        reg(c, "op/lib", 64);
        cr_expect_eq(gpuipc_client_set_ttl(c, 0), 0);
        reg(c, "op/lib-kept", 64);
        cr_expect_eq(gpuipc_client_set_ttl(c, UINT64_MAX), -EINVAL);
        deadline = h_now_ms() + 5000;
        while (gpuipc_name_stat(c, "op/lib", &l) == 0) {
                gpuipc_list_free(l);
                cr_assert_lt(h_now_ms(), deadline, "op/lib did not expire");
                h_sleep_ms(20);
        }
        cr_assert_eq(gpuipc_name_stat(c, "op/lib-kept", &l), 0);
        cr_expect_eq(gpuipc_list_get(l, 0)->expires_ms, 0);
        gpuipc_list_free(l);
        gpuipc_client_free(c);

        sh(&o, "$C put op/x $D/in --ttl soon; echo rc=$?; $C put op/x $D/in --ttl 0; echo rc=$?");
        EXPECT_IN(o.out, "rc=2\nrc=2\n");
        out_free(&o);
}

/* Many TTLs, unregistered early or not: each ends on time, none twice. */
Test(operate, many_ttls)
{
        gpuipc_client *c;
        gpuipc_list *l;
        char name[32];
        int64_t deadline;

        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        for (int i = 0; i < 50; i++) {
                cr_assert_eq(gpuipc_client_set_ttl(c, 100 + (uint64_t)(i * 37 % 300)), 0);
                snprintf(name, sizeof(name), "ttl/%d", i);
                reg(c, name, 64);
        }
        for (int i = 0; i < 50; i += 3) {
                snprintf(name, sizeof(name), "ttl/%d", i);
                cr_expect_eq(gpuipc_name_unregister(c, name), 0);
        }
        deadline = h_now_ms() + 10000;
        for (;;) {
                cr_assert_eq(gpuipc_list_fetch(c, "ttl", 0, &l), 0);
                if (gpuipc_list_count(l) == 0)
                        break;
                gpuipc_list_free(l);
                cr_assert_lt(h_now_ms(), deadline, "TTLs did not all expire");
                h_sleep_ms(20);
        }
        gpuipc_list_free(l);
        gpuipc_client_free(c);
        cr_expect(h_daemon_alive(&h_d));
}

Test(operate, put_hold)
{
        struct out o;

        /* --hold keeps it while gpuipcctl runs, and removes it on SIGINT */
        sh(&o, "printf abc > $D/in; $C put op/held $D/in --hold > $D/id & pid=$!; "
               "i=0; until $C show op/held > /dev/null 2>&1; do i=$((i+1)); "
               "[ $i -gt 200 ] && exit 9; sleep 0.05; done; "
               "$C show op/held | grep '^ephemeral: yes'; kill -INT $pid; wait $pid; "
               "echo rc=$?; cat $D/id; $C show op/held; echo show=$?");
        cr_expect_eq(o.status, 0, "%s", o.err);
        EXPECT_IN(o.out, "ephemeral: yes\nrc=0\n");
        EXPECT_IN(o.out, "show=1");
        out_free(&o);
        /* --ephemeral alone says what it does */
        sh(&o, "$C put op/eph $D/in --ephemeral");
        cr_expect_eq(o.status, 0);
        EXPECT_IN(o.err, "--ephemeral without --hold");
        out_free(&o);
}

/* ---- 3. JSON everywhere ------------------------------------------------- */

Test(operate, json_outputs)
{
        char want[64];
        struct out o;

        sh(&o, "$C ping --json");
        cr_expect_eq(o.status, 0);
        cr_expect_eq(strncmp(o.out, "{\"server\": \"gpuipcd ", 20), 0, "%s", o.out);
        snprintf(want, sizeof(want), "\"pid\": %d, \"protocol\": 1, \"latency_us\": ", (int)h_d.pid);
        EXPECT_IN(o.out, want);
        out_free(&o);
        sh(&o, "printf abc | $C put op/j --json");
        cr_expect_eq(o.status, 0);
        cr_expect_str_eq(o.out, "{\"id\": 1, \"name\": \"op/j\"}\n");
        out_free(&o);
        sh(&o, "$C doctor --json");
        EXPECT_IN(o.out, "\"summary\": {\"checks\": ");
        EXPECT_IN(o.out, "\"reachable\": true}");
        out_free(&o);
        sh(&o, "$C doctor");
        EXPECT_IN(o.out, " checks: ");
        EXPECT_IN(o.out, " fail\n");
        out_free(&o);
}

/* ---- 4. pipes and files ------------------------------------------------- */

Test(operate, get_to_pipes)
{
        struct out o;

        sh(&o, "head -c 3000000 /dev/urandom > $D/big && $C put op/big $D/big > /dev/null && "
               "$C get op/big -o - | cmp - $D/big && echo same");
        cr_expect_eq(o.status, 0, "%s", o.err);
        EXPECT_IN(o.out, "same");
        out_free(&o);
        /* a reader that stops early: quiet, status 0 */
        sh(&o, "{ $C get op/big; echo rc=$? >&2; } | head -c 10 | wc -c");
        cr_expect_eq(o.status, 0);
        EXPECT_IN(o.out, "10");
        cr_expect_str_eq(o.err, "rc=0\n");
        out_free(&o);
        sh(&o, "$C get op/big -o $D/copy && cmp $D/copy $D/big && echo same");
        EXPECT_IN(o.out, "same");
        out_free(&o);
}

Test(operate, put_max_size)
{
        struct out o;

        sh(&o, "head -c 2048 /dev/zero | $C put op/big --max-size 1K; echo rc=$?");
        EXPECT_IN(o.out, "rc=1");
        EXPECT_IN(o.err, "larger than --max-size 1.0 KiB");
        out_free(&o);
        sh(&o, "head -c 1024 /dev/zero | $C put op/fits --max-size 1K; echo rc=$?");
        EXPECT_IN(o.out, "rc=0");
        out_free(&o);
        /* a regular file has no default cap; an explicit one applies */
        sh(&o, "head -c 5000 /dev/zero > $D/f; $C put op/file $D/f --max-size 4K; echo rc=$?; "
               "$C put op/file $D/f; echo rc=$?");
        EXPECT_IN(o.out, "rc=1\n");
        EXPECT_IN(o.out, "\nrc=0\n");
        out_free(&o);
        sh(&o, "$C put op/x --max-size 1Q < /dev/null; echo rc=$?; "
               "$C put op/x --max-size 0 < /dev/null; echo rc=$?");
        EXPECT_IN(o.out, "rc=2\nrc=2\n");
        out_free(&o);
}

/* A large input read on a terminal shows its progress; elsewhere not. */
Test(operate, put_progress)
{
        struct out o;

        if (access("/usr/bin/script", X_OK) != 0)
                cr_skip_test("no script(1) to give put a terminal");
        sh(&o, "script -qec 'head -c 80M /dev/zero | $C put op/p' /dev/null");
        cr_expect_eq(o.status, 0, "%s", o.err);
        /* one line while reading (pipe reads come in any size), then the total */
        {
                const char *first = strstr(o.out, "\rgpuipcctl: put: read ");
                cr_expect(first && strstr(first + 1, "\rgpuipcctl: put: read 80.0 MiB\r\n"),
                          "no progress, then the total, in:\n%s", o.out);
        }
        out_free(&o);
        sh(&o, "head -c 80M /dev/zero | $C put op/q");
        cr_expect_eq(o.status, 0);
        EXPECT_NOT_IN(o.err, "read");
        out_free(&o);
}

/* ---- 5. exit codes and errors ------------------------------------------- */

Test(operate, unreachable)
{
        char path[320];
        gpuipc_client *c = NULL;
        struct out o;

        sh(&o, "$C --socket $D/nobody.sock doctor; echo rc=$?");
        EXPECT_IN(o.out, "rc=3");
        out_free(&o);
        sh(&o, "$C --socket $D/nobody.sock doctor --json; echo rc=$?");
        EXPECT_IN(o.out, "\"reachable\": false}");
        EXPECT_IN(o.out, "rc=3");
        out_free(&o);
        sh(&o, "$C --socket $D/nobody.sock ping");
        cr_expect_eq(o.status, 3);
        EXPECT_IN(o.err, "nobody.sock");
        EXPECT_IN(o.err, "is gpuipcd running?");
        out_free(&o);
        snprintf(path, sizeof(path), "%s/nobody.sock", h_d.dir);
        cr_expect_eq(gpuipc_client_connect(path, &c), -ENOENT);
        EXPECT_IN(gpuipc_errmsg(NULL), path);
        EXPECT_IN(gpuipc_errmsg(NULL), "no such socket; is gpuipcd running?");
        EXPECT_NOT_IN(gpuipc_errmsg(NULL), "registration");
}

Test(operate, put_checks_meta)
{
        struct out o;

        sh(&o, "head -c 64 /dev/zero > $D/f; "
               "$C put op/a $D/f --dtype float33; echo rc=$?; "
               "$C put op/b $D/f --dtype float32 --shape 4,5; echo rc=$?; "
               "$C put op/c $D/f --dtype float32 --shape 4,4; echo rc=$?; "
               "$C put op/d $D/f --dtype '<f8' --shape 8; echo rc=$?; "
               "$C put op/e $D/f --shape 65; echo rc=$?; "
               "$C put op/f $D/f --dtype '>i4' --shape 16; echo rc=$?; "
               "$C put op/g $D/f --dtype '<f04'; echo rc=$?; "
               "$C put op/h $D/f --dtype '>c16' --shape 5; echo rc=$?");
        /* ids 1, 2 and 3 for op/c, op/d and op/f: a big-endian typestr
         * sizes the items as well (the bytes are the producer's) */
        cr_expect_str_eq(o.out, "rc=2\nrc=1\n1\nrc=0\n2\nrc=0\nrc=1\n3\nrc=0\nrc=2\nrc=1\n");
        EXPECT_IN(o.err, "unknown --dtype 'float33'");
        EXPECT_IN(o.err, "needs 80 bytes");
        EXPECT_IN(o.err, "unknown --dtype '<f04'");
        EXPECT_IN(o.err, "--dtype >c16 needs 80 bytes");
        out_free(&o);
        sh(&o, "$C list op");
        EXPECT_NOT_IN(o.out, "op/a");
        EXPECT_NOT_IN(o.out, "op/b");
        EXPECT_IN(o.out, "op/c");
        EXPECT_IN(o.out, "op/d");
        EXPECT_NOT_IN(o.out, "op/e");
        EXPECT_IN(o.out, "op/f");
        EXPECT_NOT_IN(o.out, "op/g");
        EXPECT_NOT_IN(o.out, "op/h");
        out_free(&o);
}

/* ---- 6. sizes ----------------------------------------------------------- */

Test(operate, daemon_sizes)
{
        struct h_daemon d2 = {};
        gpuipc_client *c;
        gpuipc_hostbuf *b;
        int fd;

        h_daemon_start(&d2, (const char *const[]){ "--max-frame", "32K", "--max-bytes-per-uid",
                                                    "1M", "--max-output", "1G", NULL });
        fd = h_raw_connect(d2.sock);
        cr_expect_eq(h_raw_hello(fd, 1), 32768);
        close(fd);
        cr_assert_eq(gpuipc_client_connect(d2.sock, &c), 0);
        cr_assert_eq(gpuipc_hostbuf_new(2 << 20, &b), 0);
        cr_expect_eq(gpuipc_hostbuf_register(c, "big/x", b, NULL, 0, NULL), -ENOBUFS);
        EXPECT_IN(gpuipc_errmsg(c), "2.0 MiB more would pass --max-bytes-per-uid 1.0 MiB");
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
        h_daemon_stop(&d2);
}

/* ---- 7. completion ------------------------------------------------------ */

Test(operate, completion)
{
        struct out o;

        sh(&o, "$C completion bash > $D/c.bash && bash -n $D/c.bash && echo ok; "
               "$C completion zsh | head -1; $C completion fish | grep -c '^complete'; "
               "$C completion tcsh; echo rc=$?");
        EXPECT_IN(o.out, "ok\n#compdef gpuipcctl\n");
        EXPECT_IN(o.out, "rc=2");
        out_free(&o);
        /* bash completes subcommands, options and the daemon's names */
        sh(&o, "printf x | $C put comp/one > /dev/null; "
               "PATH=$(dirname $C):$PATH bash -c '. $D/c.bash; "
               "COMP_WORDS=(gpuipcctl sh); COMP_CWORD=1; _gpuipcctl; echo \"${COMPREPLY[*]}\"; "
               "COMP_WORDS=(gpuipcctl put --tt); COMP_CWORD=2; _gpuipcctl; echo \"${COMPREPLY[*]}\"; "
               "COMP_WORDS=(gpuipcctl show comp/); COMP_CWORD=2; _gpuipcctl; echo \"${COMPREPLY[*]}\"'");
        cr_expect_eq(o.status, 0, "%s", o.err);
        cr_expect_str_eq(o.out, "show\n--ttl\ncomp/one\n");
        out_free(&o);
}

/* ---- a TTL across a restart with the fd store --------------------------- */

static struct h_sd sd;

static void sd_init(void)
{
        signal(SIGPIPE, SIG_IGN);
}

static void sd_fini(void)
{
        h_sd_stop(&sd);
}

TestSuite(operate_restart, .init = sd_init, .fini = sd_fini, .timeout = 30);

/* The journal keeps expires_ms: the restored registration ends on time, and
 * one whose TTL passed while the daemon was down ends at once. */
Test(operate_restart, ttl_survives)
{
        gpuipc_client *c;
        gpuipc_list *l;
        uint64_t expires;
        int64_t deadline;

        h_sd_start(&sd, NULL);
        cr_assert_eq(gpuipc_client_connect(sd.sock, &c), 0);
        cr_assert_eq(gpuipc_client_set_ttl(c, 5000), 0);
        reg(c, "rt/ttl", 4096);
        cr_assert_eq(gpuipc_client_set_ttl(c, 300), 0);
        reg(c, "rt/short", 4096);
        cr_assert_eq(gpuipc_client_set_ttl(c, 0), 0);
        reg(c, "rt/kept", 4096);
        cr_assert_eq(gpuipc_name_stat(c, "rt/ttl", &l), 0);
        expires = gpuipc_list_get(l, 0)->expires_ms;
        gpuipc_list_free(l);
        gpuipc_client_free(c);

        h_sd_kill(&sd, SIGKILL);
        h_sleep_ms(400);                /* rt/short's TTL passes while it is down */
        h_sd_start_again(&sd);
        cr_assert_eq(gpuipc_client_connect(sd.sock, &c), 0);
        cr_assert_eq(gpuipc_name_stat(c, "rt/ttl", &l), 0, "rt/ttl was not restored: %s",
                     gpuipc_errmsg(c));
        cr_expect_eq(gpuipc_list_get(l, 0)->expires_ms, expires);
        gpuipc_list_free(l);
        deadline = h_now_ms() + 2000;
        while (gpuipc_name_stat(c, "rt/short", &l) == 0) {
                gpuipc_list_free(l);
                cr_assert_lt(h_now_ms(), deadline, "rt/short outlived its TTL across the restart");
                h_sleep_ms(20);
        }
        deadline = h_now_ms() + 10000;
        while (gpuipc_name_stat(c, "rt/ttl", &l) == 0) {
                gpuipc_list_free(l);
                cr_assert_lt(h_now_ms(), deadline, "rt/ttl did not expire after the restart");
                h_sleep_ms(20);
        }
        cr_expect_geq(ctl_now_unix_ms() + 50, expires, "rt/ttl ended early");
        cr_assert_eq(gpuipc_name_stat(c, "rt/kept", &l), 0);
        gpuipc_list_free(l);
        gpuipc_client_free(c);
        cr_expect_eq(h_sd_errors(&sd), 0);
}
