/* integ_cli.c: gpuipcctl against a real daemon, as an operator runs it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <grp.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"

TestSuite(cli, .init = h_setup, .fini = h_teardown, .timeout = 20);

struct run {
        int status;             /* exit code, or 128 + signal */
        uint8_t *out;           /* stdout, NUL-terminated */
        size_t out_len;
};

/* Runs gpuipcctl with args (NULL-terminated), GPUIPC_SOCKET set to env_sock
 * (NULL: unset), feeding in[0..in_len) through a pipe on stdin (in NULL:
 * /dev/null) and collecting stdout through a pipe. */
static void ctl(struct run *r, const char *env_sock, const void *in, size_t in_len,
                const char *const *args)
{
        const char *path = h_path("gpuipcctl");
        char *argv[32];
        int ip[2], op[2], argc = 0, status;
        size_t cap = 65536, done = 0;
        int64_t deadline = h_now_ms() + 15000;
        pid_t pid;

        cr_assert_eq(access(path, X_OK), 0, "no %s", path);
        argv[argc++] = (char *)path;
        for (int i = 0; args[i] && argc < 31; i++)
                argv[argc++] = (char *)args[i];
        argv[argc] = NULL;
        cr_assert_eq(pipe2(ip, O_CLOEXEC), 0);
        cr_assert_eq(pipe2(op, O_CLOEXEC), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                if (in)
                        dup2(ip[0], 0);
                else {
                        int dn = open("/dev/null", O_RDONLY);
                        dup2(dn, 0);
                }
                dup2(op[1], 1);
                {
                        /* diagnostics go to the test's directory, not the test log */
                        char errpath[320];
                        int ef;
                        snprintf(errpath, sizeof(errpath), "%s/ctl.stderr", h_d.dir);
                        ef = open(errpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
                        if (ef >= 0)
                                dup2(ef, 2);
                }
                if (env_sock)
                        setenv("GPUIPC_SOCKET", env_sock, 1);
                else
                        unsetenv("GPUIPC_SOCKET");
                execv(path, argv);
                _exit(127);
        }
        close(ip[0]);
        close(op[1]);
        if (!in) {
                close(ip[1]);
                ip[1] = -1;
        } else {
                fcntl(ip[1], F_SETFL, O_NONBLOCK);
        }
        r->out = malloc(cap + 1);
        r->out_len = 0;
        cr_assert_not_null(r->out);
        for (;;) {
                struct pollfd p[2] = { { .fd = op[0], .events = POLLIN },
                                       { .fd = ip[1], .events = POLLOUT } };
                int left = (int)(deadline - h_now_ms());
                ssize_t k;

                if (left <= 0) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &status, 0);
                        cr_assert_fail("gpuipcctl %s: still running after 15 s", args[0]);
                }
                if (poll(p, ip[1] >= 0 ? 2 : 1, left) <= 0)
                        continue;
                if (ip[1] >= 0 && (p[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
                        k = write(ip[1], (const uint8_t *)in + done, in_len - done);
                        if (k > 0)
                                done += (size_t)k;
                        if (k < 0 && errno != EAGAIN) {
                                close(ip[1]);
                                ip[1] = -1;
                        }
                        if (done == in_len && ip[1] >= 0) {
                                close(ip[1]);
                                ip[1] = -1;
                        }
                }
                if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
                        if (r->out_len == cap) {
                                cap *= 2;
                                r->out = realloc(r->out, cap + 1);
                                cr_assert_not_null(r->out);
                        }
                        k = read(op[0], r->out + r->out_len, cap - r->out_len);
                        if (k <= 0)
                                break;
                        r->out_len += (size_t)k;
                }
        }
        if (ip[1] >= 0)
                close(ip[1]);
        close(op[0]);
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        r->out[r->out_len] = '\0';
        r->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#define CTL(r, in, in_len, ...)                                                       \
        do {                                                                          \
                const char *a_[] = { __VA_ARGS__, NULL };                             \
                ctl(r, NULL, in, in_len, a_);                                         \
        } while (0)

static uint8_t *pattern(size_t n, uint32_t seed)
{
        uint8_t *b = malloc(n);
        cr_assert_not_null(b);
        for (size_t i = 0; i < n; i++)
                b[i] = h_pattern(i, seed);
        return b;
}

static void write_file(const char *path, const void *b, size_t n)
{
        FILE *f = fopen(path, "wb");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(b, 1, n, f), n);
        fclose(f);
}

static const char *first_non_space(const struct run *r)
{
        const char *p = (const char *)r->out;
        while (*p == ' ' || *p == '\n' || *p == '\t')
                p++;
        return p;
}

Test(cli, put_file_then_get_to_pipe)
{
        size_t n = (1u << 20) + 123;
        uint8_t *data = pattern(n, 77);
        char file[320], out[320];
        struct run r;

        snprintf(file, sizeof(file), "%s/input.bin", h_d.dir);
        write_file(file, data, n);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "put", "cli/file", file);
        cr_assert_eq(r.status, 0, "put: exit %d", r.status);
        cr_expect(r.out_len > 0 && strtoull((char *)r.out, NULL, 10) >= 1, "put printed \"%s\", not an id",
                  (char *)r.out);
        free(r.out);
        /* put has exited: the daemon holds the only copy */
        CTL(&r, NULL, 0, "--socket", h_d.sock, "get", "cli/file");
        cr_assert_eq(r.status, 0, "get: exit %d", r.status);
        cr_assert_eq(r.out_len, n, "get wrote %zu bytes, want %zu", r.out_len, n);
        cr_expect_arr_eq(r.out, data, n);
        free(r.out);
        /* and to a file with -o */
        snprintf(out, sizeof(out), "%s/output.bin", h_d.dir);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "get", "cli/file", "-o", out);
        cr_assert_eq(r.status, 0);
        free(r.out);
        {
                FILE *f = fopen(out, "rb");
                uint8_t *back = malloc(n + 1);
                cr_assert_not_null(f);
                cr_expect_eq(fread(back, 1, n + 1, f), n);
                cr_expect_arr_eq(back, data, n);
                fclose(f);
                free(back);
        }
        free(data);
}

Test(cli, put_from_stdin)
{
        size_t n = 300000;
        uint8_t *data = pattern(n, 5);
        struct run r;

        CTL(&r, data, n, "--socket", h_d.sock, "put", "cli/stdin");
        cr_assert_eq(r.status, 0, "put from stdin: exit %d", r.status);
        free(r.out);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "get", "cli/stdin");
        cr_assert_eq(r.status, 0);
        cr_assert_eq(r.out_len, n, "got %zu bytes, want %zu", r.out_len, n);
        cr_expect_arr_eq(r.out, data, n);
        free(r.out);
        /* "-" is stdin too */
        CTL(&r, data, 1000, "--socket", h_d.sock, "put", "cli/dash", "-");
        cr_assert_eq(r.status, 0);
        free(r.out);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "get", "cli/dash");
        cr_assert_eq(r.out_len, 1000);
        cr_expect_arr_eq(r.out, data, 1000);
        free(r.out);
        free(data);
}

Test(cli, json_outputs)
{
        struct run r;
        uint8_t data[64] = { 1, 2, 3 };

        CTL(&r, data, sizeof(data), "--socket", h_d.sock, "put", "cli/json-x", "--dtype", "uint8",
            "--shape", "8,8", "--meta", "k=v");
        cr_assert_eq(r.status, 0);
        free(r.out);
        CTL(&r, data, sizeof(data), "--socket", h_d.sock, "put", "other/y");
        cr_assert_eq(r.status, 0);
        free(r.out);

        CTL(&r, NULL, 0, "--socket", h_d.sock, "list", "--json");
        cr_expect_eq(r.status, 0);
        cr_expect_eq(*first_non_space(&r), '[', "list --json: %s", (char *)r.out);
        cr_expect_not_null(strstr((char *)r.out, "\"cli/json-x\""), "list --json: %s", (char *)r.out);
        cr_expect_not_null(strstr((char *)r.out, "\"other/y\""));
        free(r.out);

        CTL(&r, NULL, 0, "--socket", h_d.sock, "list", "cli", "--json");
        cr_expect_eq(r.status, 0);
        cr_expect_eq(*first_non_space(&r), '[');
        cr_expect_not_null(strstr((char *)r.out, "\"cli/json-x\""));
        cr_expect_null(strstr((char *)r.out, "other/y"), "prefix cli listed other/y: %s", (char *)r.out);
        free(r.out);

        CTL(&r, NULL, 0, "--socket", h_d.sock, "list", "nothing-here", "--json");
        cr_expect_eq(r.status, 0);
        cr_expect_eq(*first_non_space(&r), '[');
        cr_expect_null(strstr((char *)r.out, "cli/json-x"));
        free(r.out);

        CTL(&r, NULL, 0, "--socket", h_d.sock, "show", "cli/json-x", "--json");
        cr_expect_eq(r.status, 0);
        cr_expect_eq(*first_non_space(&r), '{', "show --json: %s", (char *)r.out);
        cr_expect_not_null(strstr((char *)r.out, "\"cli/json-x\""));
        cr_expect_not_null(strstr((char *)r.out, "\"uint8\""), "dtype missing: %s", (char *)r.out);
        free(r.out);

        CTL(&r, NULL, 0, "--socket", h_d.sock, "stats", "--json");
        cr_expect_eq(r.status, 0);
        cr_expect_eq(*first_non_space(&r), '{', "stats --json: %s", (char *)r.out);
        cr_expect_not_null(strstr((char *)r.out, "\"registrations\""), "stats --json: %s", (char *)r.out);
        free(r.out);

        /* the plain forms work and name the registration */
        CTL(&r, NULL, 0, "--socket", h_d.sock, "list");
        cr_expect_eq(r.status, 0);
        cr_expect_not_null(strstr((char *)r.out, "cli/json-x"));
        free(r.out);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "show", "cli/json-x");
        cr_expect_eq(r.status, 0);
        cr_expect_not_null(strstr((char *)r.out, "cli/json-x"));
        free(r.out);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "stats");
        cr_expect_eq(r.status, 0);
        free(r.out);
}

/* A group name the daemon can resolve, or NULL. */
static const char *some_group(void)
{
        static const char *const names[] = { "daemon", "nogroup", "nobody", "root" };

        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (getgrnam(names[i]))
                        return names[i];
        return NULL;
}

Test(cli, access_rule_is_shown)
{
        const char *group = some_group();
        char want[64];
        uint8_t data[16] = { 1 };
        gpuipc_client *c = NULL;
        gpuipc_list *l = NULL;
        const gpuipc_info *in;
        struct run r;

        if (!group)
                cr_skip_test("no well-known group to allow");
        CTL(&r, data, sizeof(data), "--socket", h_d.sock, "put", "acc/x", "--allow-uid", "65534",
            "--allow-group", group);
        cr_assert_eq(r.status, 0);
        free(r.out);
        CTL(&r, data, sizeof(data), "--socket", h_d.sock, "put", "acc/pub", "--public");
        cr_assert_eq(r.status, 0);
        free(r.out);
        CTL(&r, data, sizeof(data), "--socket", h_d.sock, "put", "acc/own");
        cr_assert_eq(r.status, 0);
        free(r.out);

        CTL(&r, NULL, 0, "--socket", h_d.sock, "show", "acc/x", "--json");
        cr_expect_eq(r.status, 0);
        snprintf(want, sizeof(want), "\"group\": \"%s\"", group);
        cr_expect_not_null(strstr((char *)r.out, "\"access\": {\"public\": false, \"uids\": [65534], "
                                  "\"gids\": []"), "show --json: %s", (char *)r.out);
        cr_expect_not_null(strstr((char *)r.out, want), "show --json: %s", (char *)r.out);
        free(r.out);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "show", "acc/x");
        cr_expect_eq(r.status, 0);
        cr_expect_not_null(strstr((char *)r.out, "access:    listed"), "show: %s", (char *)r.out);
        cr_expect_not_null(strstr((char *)r.out, "65534"), "show: %s", (char *)r.out);
        cr_expect_not_null(strstr((char *)r.out, group), "show: %s", (char *)r.out);
        free(r.out);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "show", "acc/pub", "--json");
        cr_expect_not_null(strstr((char *)r.out, "\"access\": {\"public\": true, \"uids\": [], "
                                  "\"gids\": [], \"group\": null}"), "show --json: %s",
                           (char *)r.out);
        free(r.out);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "list", "acc");
        cr_expect_eq(r.status, 0);
        cr_expect_not_null(strstr((char *)r.out, "ACCESS"), "list: %s", (char *)r.out);
        cr_expect_not_null(strstr((char *)r.out, "+1 uid +group"), "list: %s", (char *)r.out);
        cr_expect_not_null(strstr((char *)r.out, "public"), "list: %s", (char *)r.out);
        cr_expect_not_null(strstr((char *)r.out, "owner"), "list: %s", (char *)r.out);
        free(r.out);

        /* the library's fields */
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_assert_eq(gpuipc_name_stat(c, "acc/x", &l), 0);
        in = gpuipc_list_get(l, 0);
        cr_expect_eq(in->access_public, 0);
        cr_assert_eq(in->n_access_uids, 1);
        cr_expect_eq(in->access_uids[0], 65534);
        cr_expect_eq(in->n_access_gids, 0);
        cr_expect_null(in->access_gids);
        cr_expect_str_eq(in->access_group, group);
        gpuipc_list_free(l);
        cr_assert_eq(gpuipc_name_stat(c, "acc/pub", &l), 0);
        in = gpuipc_list_get(l, 0);
        cr_expect_eq(in->access_public, 1);
        cr_expect_eq(in->n_access_uids, 0);
        cr_expect_null(in->access_uids);
        cr_expect_str_eq(in->access_group, "");
        gpuipc_list_free(l);
        gpuipc_client_free(c);
}

/* put seals the buffer against writers unless --shared-write. */
/* Another user's strings reach an operator's terminal through show: they
 * come out with their control characters as \xNN, never as escapes. */
Test(cli, show_escapes_control_characters)
{
        struct run r;
        uint8_t data[16] = { 0 };

        CTL(&r, data, sizeof(data), "--socket", h_d.sock, "put", "cli/esc", "--meta",
            "k\x1b]0;x\x07=v\r\nX", "--meta", "ok=gr\xc3\xbc\xc3\x9f");
        cr_assert_eq(r.status, 0);
        free(r.out);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "show", "cli/esc");
        cr_expect_eq(r.status, 0);
        for (size_t i = 0; i < r.out_len; i++)
                cr_expect(r.out[i] >= 0x20 || r.out[i] == '\n', "show wrote byte 0x%02x at %zu: %s",
                          r.out[i], i, (char *)r.out);
        cr_expect_not_null(strstr((char *)r.out, "user.k\\x1b]0;x\\x07: v\\x0d\\x0aX"),
                           "meta: %s", (char *)r.out);
        cr_expect_not_null(strstr((char *)r.out, "gr\xc3\xbc\xc3\x9f"), "UTF-8 as it is: %s",
                           (char *)r.out);
        free(r.out);
}

Test(cli, put_shared_write)
{
        uint8_t data[16] = { 1 };
        gpuipc_client *c = NULL;
        gpuipc_view *v = NULL;
        struct run r;

        CTL(&r, data, sizeof(data), "--socket", h_d.sock, "put", "sw/ro");
        cr_assert_eq(r.status, 0);
        free(r.out);
        CTL(&r, data, sizeof(data), "--socket", h_d.sock, "put", "sw/rw", "--shared-write");
        cr_assert_eq(r.status, 0);
        free(r.out);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_assert_eq(gpuipc_view_lookup(c, "sw/rw", 0, GPUIPC_LOOKUP_WRITABLE, &v), 0, "%s",
                     gpuipc_errmsg(c));
        ((uint8_t *)gpuipc_view_data(v))[0] = 9;
        cr_expect_eq(gpuipc_view_release(v), 0);
        v = NULL;
        /* an old kernel has no write seal: then the lookup succeeds */
        if (gpuipc_view_lookup(c, "sw/ro", 0, GPUIPC_LOOKUP_WRITABLE, &v) == 0)
                gpuipc_view_release(v);
        else
                cr_expect_not_null(strstr(gpuipc_errmsg(c), "GPUIPC_REGISTER_SHARED_WRITE"));
        gpuipc_client_free(c);
}

Test(cli, rm_then_get_fails)
{
        struct run r;
        uint8_t data[100] = { 9 };

        CTL(&r, data, sizeof(data), "--socket", h_d.sock, "put", "cli/rm");
        cr_assert_eq(r.status, 0);
        free(r.out);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "rm", "cli/rm");
        cr_expect_eq(r.status, 0, "rm: exit %d", r.status);
        cr_expect_eq(r.out_len, 0, "rm printed \"%s\"", (char *)r.out);
        free(r.out);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "get", "cli/rm");
        cr_expect_eq(r.status, 1, "get after rm: exit %d", r.status);
        cr_expect_eq(r.out_len, 0, "get after rm wrote %zu bytes", r.out_len);
        free(r.out);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "rm", "cli/rm");
        cr_expect_eq(r.status, 1, "second rm: exit %d", r.status);
        free(r.out);
        CTL(&r, NULL, 0, "--socket", h_d.sock, "show", "cli/rm");
        cr_expect_eq(r.status, 1, "show after rm: exit %d", r.status);
        free(r.out);
        /* a duplicate put fails too */
        CTL(&r, data, sizeof(data), "--socket", h_d.sock, "put", "cli/dup");
        cr_assert_eq(r.status, 0);
        free(r.out);
        CTL(&r, data, sizeof(data), "--socket", h_d.sock, "put", "cli/dup");
        cr_expect_eq(r.status, 1, "duplicate put: exit %d", r.status);
        free(r.out);
}

Test(cli, no_daemon_is_exit_3)
{
        char sock[320];
        struct run r;

        snprintf(sock, sizeof(sock), "%s/nobody.sock", h_d.dir);
        CTL(&r, NULL, 0, "--socket", sock, "ping");
        cr_expect_eq(r.status, 3, "ping without daemon: exit %d", r.status);
        free(r.out);
        CTL(&r, NULL, 0, "--socket", sock, "get", "a/b");
        cr_expect_eq(r.status, 3, "get without daemon: exit %d", r.status);
        free(r.out);
        CTL(&r, NULL, 0, "--socket", sock, "list");
        cr_expect_eq(r.status, 3, "list without daemon: exit %d", r.status);
        free(r.out);
        {
                const char *a[] = { "ping", NULL };
                ctl(&r, sock, NULL, 0, a);
                cr_expect_eq(r.status, 3, "ping via $GPUIPC_SOCKET without daemon: exit %d", r.status);
                free(r.out);
        }
}

Test(cli, bad_usage_is_exit_2)
{
        static const char *const cases[][6] = {
                { "bogus" },
                { "get" },
                { "get", "a/b", "c/d" },
                { "put" },
                { "put", "a/b", "f1", "f2" },
                { "put", "a/b", "--shape", "x,y" },
                { "put", "a/b", "--meta", "novalue" },
                { "get", "a/b", "--wait", "soon" },
                { "ping", "extra" },
                { "list", "--frobnicate" },
                { "rm" },
                { "show" },
                { "stats", "extra" },
        };
        struct run r;

        {
                const char *a[] = { "--socket", h_d.sock, NULL };
                ctl(&r, NULL, NULL, 0, a);
                cr_expect_eq(r.status, 2, "no subcommand: exit %d", r.status);
                free(r.out);
        }
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const char *a[10] = { "--socket", h_d.sock };
                size_t k = 2;
                for (size_t j = 0; j < 6 && cases[i][j]; j++)
                        a[k++] = cases[i][j];
                a[k] = NULL;
                ctl(&r, NULL, NULL, 0, a);
                cr_expect_eq(r.status, 2, "gpuipcctl %s %s %s: exit %d, want 2", cases[i][0],
                             cases[i][1] ? cases[i][1] : "", cases[i][1] && cases[i][2] ? cases[i][2] : "",
                             r.status);
                free(r.out);
        }
        /* usage errors do not reach the daemon */
        CTL(&r, NULL, 0, "--socket", h_d.sock, "list");
        cr_expect_eq(r.status, 0);
        cr_expect_null(strstr((char *)r.out, "a/b"));
        free(r.out);
}

Test(cli, ping_ok)
{
        struct run r;
        const char *a[] = { "ping", NULL };

        CTL(&r, NULL, 0, "--socket", h_d.sock, "ping");
        cr_expect_eq(r.status, 0, "ping: exit %d", r.status);
        cr_expect_not_null(strstr((char *)r.out, "gpuipcd"), "ping printed \"%s\"", (char *)r.out);
        free(r.out);
        /* $GPUIPC_SOCKET is honoured */
        ctl(&r, h_d.sock, NULL, 0, a);
        cr_expect_eq(r.status, 0, "ping via $GPUIPC_SOCKET: exit %d", r.status);
        free(r.out);
}
