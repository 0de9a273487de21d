/* integ_ops.c: the operator's ops against a real daemon: metrics (parsed
 * strictly, and over HTTP), watch, revoke and owner.exe. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"

TestSuite(ops, .timeout = 30);

static void start(const char *const *args)
{
        h_daemon_start(&h_d, args);
}

static gpuipc_client *client(void)
{
        gpuipc_client *c;

        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        return c;
}

static uint64_t put(gpuipc_client *c, const char *name, size_t size)
{
        gpuipc_hostbuf *b;
        uint64_t id;

        cr_assert_eq(gpuipc_hostbuf_new(size, &b), 0);
        cr_assert_eq(gpuipc_hostbuf_register(c, name, b, NULL, 0, &id), 0, "%s", gpuipc_errmsg(c));
        gpuipc_hostbuf_free(b);
        return id;
}

/* ---- a strict reading of the text exposition format ------------------- */

struct family {
        char name[128];
        char type[16];
};

static bool name_ok(const char *s, size_t n)
{
        if (n == 0)
                return false;
        for (size_t i = 0; i < n; i++) {
                char ch = s[i];
                bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
                             ch == ':';
                if (!alpha && !(i > 0 && ch >= '0' && ch <= '9'))
                        return false;
        }
        return true;
}

/* Parses `{k="v",...}`, checking escapes; copies the value of `want` (may
 * be NULL) into out.  Returns the length consumed, or -1. */
static int labels(const char *s, const char *want, char *out, size_t outlen)
{
        const char *p = s;

        if (*p != '{')
                return 0;
        p++;
        while (*p != '}') {
                const char *k = p;
                char val[64];
                size_t vn = 0;
                while (*p && *p != '=')
                        p++;
                if (*p != '=' || !name_ok(k, (size_t)(p - k)) || p[1] != '"')
                        return -1;
                size_t klen = (size_t)(p - k);
                p += 2;
                while (*p && *p != '"') {
                        if (*p == '\\') {
                                p++;
                                if (*p != '\\' && *p != '"' && *p != 'n')
                                        return -1;
                        } else if (*p == '\n') {
                                return -1;
                        }
                        if (vn < sizeof(val) - 1)
                                val[vn++] = *p;
                        p++;
                }
                if (*p != '"')
                        return -1;
                val[vn] = '\0';
                if (want && strlen(want) == klen && strncmp(k, want, klen) == 0)
                        snprintf(out, outlen, "%s", val);
                p++;
                if (*p == ',')
                        p++;
                else if (*p != '}')
                        return -1;
        }
        return (int)(p + 1 - s);
}

/* Checks every line; returns the number of samples.  Histograms: buckets
 * rise, the +Inf bucket equals _count. */
static int check_exposition(const char *text)
{
        struct family fam[64];
        unsigned nfam = 0;
        int samples = 0;
        char *copy = strdup(text), *save = NULL, *line;
        char last_series[256] = "";
        double last_bucket = -1;

        cr_assert_not_null(copy);
        cr_assert(strlen(text) > 0 && text[strlen(text) - 1] == '\n', "no final newline");
        for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (strncmp(line, "# HELP ", 7) == 0)
                        continue;
                if (strncmp(line, "# TYPE ", 7) == 0) {
                        cr_assert_lt(nfam, 64);
                        cr_assert_eq(sscanf(line + 7, "%127s %15s", fam[nfam].name,
                                            fam[nfam].type), 2, "bad TYPE: %s", line);
                        cr_assert(strcmp(fam[nfam].type, "gauge") == 0 ||
                                  strcmp(fam[nfam].type, "counter") == 0 ||
                                  strcmp(fam[nfam].type, "histogram") == 0, "%s", line);
                        for (unsigned i = 0; i < nfam; i++)
                                cr_assert_str_neq(fam[i].name, fam[nfam].name, "TYPE twice");
                        nfam++;
                        continue;
                }
                cr_assert_neq(line[0], '#', "unknown comment: %s", line);
                /* name{labels} value */
                size_t n = strcspn(line, "{ ");
                char name[128], le[64] = "", series[256];
                cr_assert(name_ok(line, n), "bad name: %s", line);
                cr_assert_lt(n, sizeof(name));
                memcpy(name, line, n);
                name[n] = '\0';
                int k = labels(line + n, "le", le, sizeof(le));
                cr_assert_geq(k, 0, "bad labels: %s", line);
                const char *v = line + n + k;
                cr_assert_eq(*v, ' ', "no space before the value: %s", line);
                char *end;
                double val = strtod(v + 1, &end);
                cr_assert(*end == '\0' && end != v + 1, "bad value: %s", line);
                cr_assert(!isnan(val));
                /* Its family: the name itself, or a histogram's base. */
                bool found = false;
                for (unsigned i = 0; i < nfam && !found; i++) {
                        size_t fl = strlen(fam[i].name);
                        if (strcmp(fam[i].name, name) == 0)
                                found = strcmp(fam[i].type, "histogram") != 0;
                        else if (strncmp(fam[i].name, name, fl) == 0 &&
                                 strcmp(fam[i].type, "histogram") == 0)
                                found = !strcmp(name + fl, "_bucket") || !strcmp(name + fl, "_sum") ||
                                        !strcmp(name + fl, "_count");
                }
                cr_assert(found, "sample without a TYPE before it: %s", line);
                /* Histogram buckets: cumulative and ending in +Inf == _count. */
                snprintf(series, sizeof(series), "%.*s", (int)(strstr(line, ",le=") ?
                         strstr(line, ",le=") - line : 0), line);
                if (strstr(name, "_bucket")) {
                        if (strcmp(series, last_series) != 0) {
                                snprintf(last_series, sizeof(last_series), "%s", series);
                                last_bucket = -1;
                        }
                        cr_assert_geq(val, last_bucket, "bucket falls: %s", line);
                        last_bucket = val;
                } else if (strstr(name, "_count") && last_series[0]) {
                        cr_assert_eq(val, last_bucket, "+Inf bucket != count: %s", line);
                        cr_assert_str_eq(le, "");
                }
                if (strstr(name, "_bucket") && le[0] == '+')
                        cr_assert_str_eq(le, "+Inf");
                samples++;
        }
        free(copy);
        return samples;
}

Test(ops, metrics_parse)
{
        gpuipc_client *c;
        gpuipc_view *v;
        gpuipc_list *l;
        char *text;

        start(NULL);
        c = client();
        put(c, "m/a", 4096);
        cr_assert_eq(gpuipc_view_lookup(c, "m/a", 0, 0, &v), 0);
        cr_assert_eq(gpuipc_name_stat(c, "m/none", &l), -ENOENT);
        cr_assert_eq(gpuipc_metrics_fetch(c, &text), 0, "%s", gpuipc_errmsg(c));
        cr_assert_gt(check_exposition(text), 20);
        cr_assert_not_null(strstr(text, "gpuipcd_registrations{kind=\"host\"} 1\n"), "%s", text);
        cr_assert_not_null(strstr(text, "gpuipcd_leases 1\n"));
        cr_assert_not_null(strstr(text, "gpuipcd_bytes{kind=\"host\",device=\"host\"} 4096\n"));
        cr_assert_not_null(strstr(text, "gpuipcd_errors_total{op=\"stat\",code=\"not_found\"} 1\n"));
        cr_assert_not_null(strstr(text, "gpuipcd_requests_total{op=\"register\"} 1\n"));
        cr_assert_not_null(strstr(text, "gpuipcd_build_info{version=\"" ));
        cr_assert_not_null(strstr(text, "le=\"+Inf\"} "));
        free(text);
        gpuipc_view_release(v);
        gpuipc_client_free(c);
        h_daemon_stop(&h_d);
}

/* The value of an unlabelled sample NAME in text; NAN when absent. */
static double sample(const char *text, const char *name)
{
        size_t n = strlen(name);

        for (const char *p = text; (p = strstr(p, name)); p += n)
                if ((p == text || p[-1] == '\n') && p[n] == ' ')
                        return strtod(p + n + 1, NULL);
        return NAN;
}

/* "Max open files" of /proc/PID/limits: the soft limit. */
static double soft_nofile(pid_t pid)
{
        char path[64], line[256];
        double v = NAN;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
        f = fopen(path, "re");
        cr_assert_not_null(f);
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, "Max open files", 14) == 0)
                        v = strtod(line + 14, NULL);
        fclose(f);
        return v;
}

/* Process metrics under the names Prometheus' client libraries use, read
 * against /proc; fd store metrics when no store is in use. */
Test(ops, metrics_process)
{
        gpuipc_client *c;
        char *text;
        double fds, fds2, now = (double)time(NULL), rss, start_s;

        start(NULL);
        c = client();
        cr_assert_eq(gpuipc_metrics_fetch(c, &text), 0, "%s", gpuipc_errmsg(c));
        check_exposition(text);
        fds = sample(text, "process_open_fds");
        cr_assert(fds >= 4 && fds < 1000, "process_open_fds %g\n%s", fds, text);
        cr_assert_eq(sample(text, "process_max_fds"), soft_nofile(h_d.pid), "%s", text);
        rss = sample(text, "process_resident_memory_bytes");
        cr_assert(rss > 1e5 && rss < 1e10, "process_resident_memory_bytes %g", rss);
        cr_assert_gt(sample(text, "process_virtual_memory_bytes"), rss);
        start_s = sample(text, "process_start_time_seconds");
        cr_assert(start_s > now - 120 && start_s < now + 2, "start %f, now %f", start_s, now);
        cr_assert_geq(sample(text, "process_cpu_seconds_total"), 0);
        cr_assert_eq(sample(text, "gpuipcd_fdstore_enabled"), 0, "no NOTIFY_SOCKET here");
        cr_assert(isnan(sample(text, "gpuipcd_fdstore_entries")), "no store: no entries");
        cr_assert_eq(sample(text, "gpuipcd_fd_closes_pending"), 0, "nothing let go yet: %s",
                     text);
        free(text);

        /* Each host registration holds fds in the daemon: the count moves. */
        put(c, "mp/a", 4096);
        put(c, "mp/b", 4096);
        cr_assert_eq(gpuipc_metrics_fetch(c, &text), 0);
        fds2 = sample(text, "process_open_fds");
        cr_assert_geq(fds2, fds + 2, "%g then %g", fds, fds2);
        free(text);
        gpuipc_client_free(c);
        h_daemon_stop(&h_d);
}

/* ---- HTTP ------------------------------------------------------------- */

static int unix_connect(const char *path)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        cr_assert_geq(fd, 0);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s: %s", path,
                     strerror(errno));
        return fd;
}

/* A TCP connection to addr (numeric, of family af) and port. */
static int tcp_connect(int af, const char *addr, int port)
{
        struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(port) };
        struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons(port) };
        int fd = socket(af, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int r;

        cr_assert_geq(fd, 0);
        if (af == AF_INET) {
                cr_assert_eq(inet_pton(AF_INET, addr, &s4.sin_addr), 1);
                r = connect(fd, (struct sockaddr *)&s4, sizeof(s4));
        } else {
                cr_assert_eq(inet_pton(AF_INET6, addr, &s6.sin6_addr), 1);
                r = connect(fd, (struct sockaddr *)&s6, sizeof(s6));
        }
        cr_assert_eq(r, 0, "%s port %d: %s", addr, port, strerror(errno));
        return fd;
}

/* A TCP port of family af that was free a moment ago; -1 when this host
 * has no such loopback (af AF_INET6 without IPv6). */
static int free_port(int af)
{
        struct sockaddr_storage ss = { .ss_family = (sa_family_t)af };
        socklen_t len = sizeof(ss);
        int fd = socket(af, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

        if (af == AF_INET6)
                ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
        else
                ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&ss, af == AF_INET6 ?
                            sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)) == 0 &&
            getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
                port = ntohs(af == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
        if (fd >= 0)
                close(fd);
        return port;
}

/* Sends req (may be NULL) on fd and reads until EOF within timeout_ms;
 * closes fd. */
static char *http_fd(int fd, const char *req, size_t reqlen, int timeout_ms)
{
        size_t cap = 1 << 20, n = 0;
        char *buf = malloc(cap);
        int64_t deadline = h_now_ms() + timeout_ms;

        if (req)
                cr_assert_eq(write(fd, req, reqlen), (ssize_t)reqlen);
        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int left = (int)(deadline - h_now_ms());
                cr_assert_gt(left, 0, "no EOF in time");
                if (poll(&p, 1, left) <= 0)
                        continue;
                ssize_t r = read(fd, buf + n, cap - 1 - n);
                if (r <= 0)
                        break;
                n += (size_t)r;
        }
        buf[n] = '\0';
        close(fd);
        return buf;
}

static char *http(const char *path, const char *req, size_t reqlen, int timeout_ms)
{
        return http_fd(unix_connect(path), req, reqlen, timeout_ms);
}

/* GET /metrics over TCP: a 200 with the exposition. */
static void get_tcp(int af, const char *addr, int port)
{
        static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
        char *r = http_fd(tcp_connect(af, addr, port), req, sizeof(req) - 1, 5000);

        cr_assert(strncmp(r, "HTTP/1.0 200 OK\r\n", 17) == 0, "%s port %d: %s", addr, port, r);
        cr_assert_not_null(strstr(r, "\r\n\r\n# HELP gpuipcd_build_info"), "%s", r);
        check_exposition(strstr(r, "\r\n\r\n") + 4);
        free(r);
}

Test(ops, metrics_http)
{
        char arg[400], path[320], big[4096];
        char *r;

        snprintf(path, sizeof(path), "/tmp/gpuipc-mhttp-%d.sock", (int)getpid());
        snprintf(arg, sizeof(arg), "unix:%s", path);
        start((const char *const[]){ "--metrics-listen", arg, NULL });

        r = http(path, "GET /metrics HTTP/1.0\r\n\r\n", 25, 5000);
        cr_assert(strncmp(r, "HTTP/1.0 200 OK\r\n", 17) == 0, "%s", r);
        cr_assert_not_null(strstr(r, "Content-Type: text/plain; version=0.0.4"));
        cr_assert_not_null(strstr(r, "\r\n\r\n# HELP gpuipcd_build_info"));
        check_exposition(strstr(r, "\r\n\r\n") + 4);
        free(r);

        /* HEAD: the same status and headers, Content-Length included, and
         * no body. */
        r = http(path, "HEAD /metrics HTTP/1.0\r\n\r\n", 26, 5000);
        cr_assert(strncmp(r, "HTTP/1.0 200 OK\r\n", 17) == 0, "%s", r);
        cr_assert_not_null(strstr(r, "Content-Type: text/plain; version=0.0.4"));
        {
                const char *cl = strstr(r, "Content-Length: ");
                const char *end = strstr(r, "\r\n\r\n");
                cr_assert(cl && end, "%s", r);
                cr_assert_gt(strtoul(cl + 16, NULL, 10), 1000, "%s", r);
                cr_assert_str_eq(end + 4, "", "HEAD got a body");
        }
        free(r);
        r = http(path, "HEAD /nothing HTTP/1.0\r\n\r\n", 26, 5000);
        cr_assert(strncmp(r, "HTTP/1.0 404", 12) == 0, "%s", r);
        cr_assert_str_eq(strstr(r, "\r\n\r\n") + 4, "", "HEAD got a body");
        free(r);

        r = http(path, "GET / HTTP/1.0\r\n\r\n", 18, 5000);
        cr_assert(strncmp(r, "HTTP/1.0 404", 12) == 0, "%s", r);
        free(r);
        r = http(path, "POST /metrics HTTP/1.0\r\n\r\n", 26, 5000);
        cr_assert(strncmp(r, "HTTP/1.0 404", 12) == 0, "%s", r);
        free(r);

        /* A NUL (or another control byte) in the head: 400 at once, not a
         * wait for an end of head hidden behind it. */
        {
                static const char nul[] = "GET /metrics\0 HTTP/1.0\r\n\r\n",
                                  esc[] = "GET /metrics\x1b[2J HTTP/1.0\r\n\r\n";
                r = http(path, nul, sizeof(nul) - 1, 2000);
                cr_assert(strncmp(r, "HTTP/1.0 400", 12) == 0, "%s", r);
                free(r);
                static const char head[] = "HEAD /metrics\0 HTTP/1.0\r\n\r\n",
                                  after[] = "GET /metrics HTTP/1.0\r\n\r\nbody\x01\0";
                r = http(path, esc, sizeof(esc) - 1, 2000);
                cr_assert(strncmp(r, "HTTP/1.0 400", 12) == 0, "%s", r);
                free(r);
                r = http(path, head, sizeof(head) - 1, 2000);
                cr_assert(strncmp(r, "HTTP/1.0 400", 12) == 0, "%s", r);
                cr_assert_str_eq(strstr(r, "\r\n\r\n") + 4, "", "HEAD got a body");
                free(r);
                /* What follows the head is not the head. */
                r = http(path, after, sizeof(after) - 1, 5000);
                cr_assert(strncmp(r, "HTTP/1.0 200 OK\r\n", 17) == 0, "%s", r);
                free(r);
        }

        /* A request head that never ends is cut off at the cap. */
        memset(big, 'a', sizeof(big));
        r = http(path, big, sizeof(big), 5000);
        cr_assert(strncmp(r, "HTTP/1.0 431", 12) == 0, "%s", r);
        free(r);

        /* A silent client is dropped after the idle timeout (5 s). */
        r = http(path, NULL, 0, 8000);
        cr_assert_str_eq(r, "");
        free(r);

        cr_assert(h_daemon_alive(&h_d));
        h_daemon_stop(&h_d);
        cr_assert_neq(access(path, F_OK), 0, "the metrics socket was left behind");
}

/* gpuipcd with args; returns its exit status and stderr in err (its
 * stdout goes to /dev/null). */
static int run_daemon(const char *const *args, char *err, size_t len)
{
        int p[2], status;
        char *argv[16];
        int n = 0;
        pid_t pid;
        ssize_t k;

        argv[n++] = (char *)h_path("gpuipcd");
        for (int i = 0; args[i]; i++)
                argv[n++] = (char *)args[i];
        argv[n] = NULL;
        cr_assert_eq(pipe(p), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                int null = open("/dev/null", O_WRONLY);

                dup2(p[1], 2);
                if (null >= 0)
                        dup2(null, 1);
                execv(argv[0], argv);
                _exit(127);
        }
        close(p[1]);
        k = read(p[0], err, len - 1);
        err[k > 0 ? k : 0] = '\0';
        close(p[0]);
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* --help, --version and a refusal before the loop runs exit with their
 * status and nothing left allocated (the sanitizer pass: LeakSanitizer
 * changes the status of a leaking exit). */
Test(ops, early_exits_are_clean)
{
        char err[1024];
        int rc;

        rc = run_daemon((const char *const[]){ "--help", NULL }, err, sizeof(err));
        cr_assert_eq(rc, 0, "--help: %d: %s", rc, err);
        rc = run_daemon((const char *const[]){ "--version", NULL }, err, sizeof(err));
        cr_assert_eq(rc, 0, "--version: %d: %s", rc, err);
        rc = run_daemon((const char *const[]){ "--no-config", "--socket", "/tmp/gpuipc-x.sock",
                                               "--admin-group", "no-such-group-here", NULL },
                        err, sizeof(err));
        cr_assert_eq(rc, 1, "%s", err);
        cr_assert_not_null(strstr(err, "admin-group 'no-such-group-here': no such group"), "%s",
                           err);
}

Test(ops, metrics_listen_loopback_only)
{
        char err[1024];
        int rc = run_daemon((const char *const[]){ "--no-config", "--socket", "/tmp/gpuipc-x.sock",
                                                   "--metrics-listen", "0.0.0.0:9464", NULL },
                            err, sizeof(err));

        cr_assert_eq(rc, 2, "%s", err);
        cr_assert_not_null(strstr(err, "not a loopback address"), "%s", err);
        cr_assert_not_null(strstr(err, "set metrics-public=yes"), "%s", err);
}

/* With metrics-public, 0.0.0.0 is served, and the any address takes
 * loopback connections too. */
Test(ops, metrics_public_any_ipv4)
{
        char arg[32];
        int port = free_port(AF_INET);

        cr_assert_gt(port, 0);
        snprintf(arg, sizeof(arg), "0.0.0.0:%d", port);
        start((const char *const[]){ "--metrics-listen", arg, "--metrics-public", "yes", NULL });
        get_tcp(AF_INET, "127.0.0.1", port);
        cr_assert(h_daemon_alive(&h_d));
        h_daemon_stop(&h_d);
}

/* [::] is dual-stack: libuv clears IPV6_V6ONLY. */
Test(ops, metrics_public_any_ipv6)
{
        char arg[32];
        int port = free_port(AF_INET6);

        if (port < 0)
                cr_skip_test("no IPv6 loopback on this host");
        snprintf(arg, sizeof(arg), "[::]:%d", port);
        start((const char *const[]){ "--metrics-public=yes", "--metrics-listen", arg, NULL });
        get_tcp(AF_INET6, "::1", port);
        get_tcp(AF_INET, "127.0.0.1", port);
        cr_assert(h_daemon_alive(&h_d));
        h_daemon_stop(&h_d);
}

Test(ops, config_file_error_exits_1)
{
        char err[1024], path[128];
        FILE *f;
        int rc;

        snprintf(path, sizeof(path), "/tmp/gpuipc-cfg-%d.conf", (int)getpid());
        f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs("# ok\nmax-frame=4096\nno-such-key=1\n", f);
        fclose(f);
        rc = run_daemon((const char *const[]){ "--config", path, NULL }, err, sizeof(err));
        unlink(path);
        cr_assert_eq(rc, 1, "%s", err);
        cr_assert_not_null(strstr(err, ":3: unknown key 'no-such-key'"), "%s", err);
}

/* ---- watch, revoke, owner.exe ---------------------------------------- */

static gpuipc_event *next(gpuipc_client *w, const char *type)
{
        gpuipc_event *e;

        cr_assert_eq(gpuipc_event_next(w, 5000, &e), 0, "waiting for %s: %s", type,
                     gpuipc_errmsg(w));
        cr_assert_str_eq(e->type, type);
        return e;
}

Test(ops, watch_revoke_exe)
{
        gpuipc_client *w, *p, *c;
        gpuipc_event *e;
        gpuipc_view *v;
        gpuipc_list *l;
        uint32_t n = 99;
        uint64_t id;

        start(NULL);
        w = client();
        p = client();
        c = client();
        cr_assert_eq(gpuipc_event_watch(w, "ns"), 0, "%s", gpuipc_errmsg(w));
        put(p, "other/x", 100);         /* outside the prefix: not seen */
        id = put(p, "ns/a", 4096);

        cr_assert_eq(gpuipc_name_stat(c, "ns/a", &l), 0);
        cr_assert_not_null(strstr(gpuipc_list_get(l, 0)->owner_exe, "integ_ops"), "exe '%s'",
                           gpuipc_list_get(l, 0)->owner_exe);
        gpuipc_list_free(l);

        e = next(w, "registered");
        cr_assert_eq(e->id, id);
        cr_assert_str_eq(e->name, "ns/a");
        cr_assert_eq(e->size, 4096);
        cr_assert_eq(e->pid, (uint32_t)getpid());
        gpuipc_event_free(e);

        cr_assert_eq(gpuipc_view_lookup(c, "ns/a", 0, 0, &v), 0);
        e = next(w, "leased");
        cr_assert_eq(e->leases, 1);
        cr_assert_neq(e->lease, 0);
        gpuipc_event_free(e);

        /* Tests run as root, who may always revoke. */
        cr_assert_eq(gpuipc_name_revoke(w, "ns/a", &n), 0, "%s", gpuipc_errmsg(w));
        cr_assert_eq(n, 1);
        e = next(w, "revoked");
        gpuipc_event_free(e);
        e = next(w, "released");
        cr_assert_eq(e->leases, 0);
        gpuipc_event_free(e);
        e = next(w, "unregistered");
        gpuipc_event_free(e);
        cr_assert_eq(gpuipc_name_stat(c, "ns/a", &l), -ENOENT);
        cr_assert_eq(gpuipc_event_next(w, 100, &e), -ETIMEDOUT);
        /* The holder's lease is gone: releasing it is not_found, the view
         * is freed all the same. */
        (void)gpuipc_view_release(v);
        cr_assert_eq(gpuipc_name_revoke(w, "ns/a", NULL), -ENOENT);
        cr_assert_eq(gpuipc_client_ping(c), 0);

        gpuipc_client_free(c);
        gpuipc_client_free(p);
        gpuipc_client_free(w);
        h_daemon_stop(&h_d);
}

Test(ops, revoke_needs_admin)
{
        int status;
        pid_t pid;

        start((const char *const[]){ "--socket-mode", "0666", NULL });
        /* Let uid 65534 reach the socket in the test's directory. */
        cr_assert_eq(chmod(h_d.dir, 0711), 0);
        {
                gpuipc_client *p = client();
                put(p, "adm/x", 64);
                pid = fork();
                cr_assert_geq(pid, 0);
                if (pid == 0) {
                        gpuipc_client *c;
                        int r;
                        if (setgid(65534) < 0 || setuid(65534) < 0)
                                _exit(10);
                        if (gpuipc_client_connect(h_d.sock, &c) < 0)
                                _exit(11);
                        r = gpuipc_name_revoke(c, "adm/x", NULL);
                        _exit(r == -EPERM ? 0 : 12);
                }
                cr_assert_eq(waitpid(pid, &status, 0), pid);
                cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
                gpuipc_client_free(p);
        }
        h_daemon_stop(&h_d);
}

Test(ops, watchdog_pings_with_status)
{
        char buf[512];
        int64_t deadline;
        int pings = 0;

        setenv("WATCHDOG_USEC", "200000", 1);   /* a ping every 100 ms */
        start(NULL);
        unsetenv("WATCHDOG_USEC");
        deadline = h_now_ms() + 3000;
        while (pings < 3 && h_now_ms() < deadline) {
                struct pollfd p = { .fd = h_d.notify_fd, .events = POLLIN };
                ssize_t n;
                if (poll(&p, 1, 500) <= 0)
                        continue;
                n = recv(h_d.notify_fd, buf, sizeof(buf) - 1, 0);
                cr_assert_gt(n, 0);
                buf[n] = '\0';
                if (strncmp(buf, "WATCHDOG=1\n", 11) == 0) {
                        cr_assert_not_null(strstr(buf, "STATUS=0 connections, 0 registrations"),
                                           "%s", buf);
                        pings++;
                }
        }
        cr_assert_eq(pings, 3);
        h_daemon_stop(&h_d);
}

Test(ops, revoke_by_admin_group)
{
        int status;
        pid_t pid;

        start((const char *const[]){ "--socket-mode", "0666", "--admin-group", "nogroup", NULL });
        cr_assert_eq(chmod(h_d.dir, 0711), 0);
        {
                gpuipc_client *p = client();
                put(p, "adm/y", 64);
                pid = fork();
                cr_assert_geq(pid, 0);
                if (pid == 0) {
                        gpuipc_client *c;
                        /* nobody, with nogroup (65534) as a supplementary group only */
                        gid_t g = 65534;
                        if (setgroups(1, &g) < 0 || setgid(1) < 0 || setuid(65534) < 0)
                                _exit(10);
                        if (gpuipc_client_connect(h_d.sock, &c) < 0)
                                _exit(11);
                        _exit(gpuipc_name_revoke(c, "adm/y", NULL) == 0 ? 0 : 12);
                }
                cr_assert_eq(waitpid(pid, &status, 0), pid);
                cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
                gpuipc_client_free(p);
        }
        h_daemon_stop(&h_d);
}
