/* bench_util.c: see bench_util.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

double now_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

void die(const char *fmt, ...)
{
        va_list ap;

        fprintf(stderr, "bench[%d]: ", (int)getpid());
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        exit(1);
}

void *xmalloc(size_t n)
{
        void *p = malloc(n ? n : 1);

        if (!p)
                die("out of memory (%zu bytes)", n);
        return p;
}

/* ---- samples ------------------------------------------------------------ */

void samples_init(struct samples *s, size_t cap)
{
        s->v = xmalloc(cap * sizeof(*s->v));
        s->n = 0;
        s->cap = cap;
}

void samples_merge(struct samples *dst, const struct samples *src)
{
        size_t k = src->n;

        if (k > dst->cap - dst->n)
                k = dst->cap - dst->n;
        memcpy(dst->v + dst->n, src->v, k * sizeof(*src->v));
        dst->n += k;
}

static int cmp_f(const void *a, const void *b)
{
        float x = *(const float *)a, y = *(const float *)b;

        return (x > y) - (x < y);
}

double samples_pct(struct samples *s, double p)
{
        size_t i;

        if (s->n == 0)
                return NAN;
        qsort(s->v, s->n, sizeof(*s->v), cmp_f);
        i = (size_t)(p / 100.0 * (double)(s->n - 1) + 0.5);
        return s->v[i];
}

void samples_free(struct samples *s)
{
        free(s->v);
        s->v = NULL;
        s->n = s->cap = 0;
}

static int cmp_d(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return (x > y) - (x < y);
}

double median(double *v, int n)
{
        double t[64];
        int k = 0;

        for (int i = 0; i < n && k < 64; i++)
                if (!isnan(v[i]))
                        t[k++] = v[i];
        if (k == 0)
                return NAN;
        qsort(t, (size_t)k, sizeof(double), cmp_d);
        return k % 2 ? t[k / 2] : (t[k / 2 - 1] + t[k / 2]) / 2;
}

/* ---- processes ------------------------------------------------------------ */

static char tmpdir[64];

const char *tmpdir_get(void)
{
        if (!tmpdir[0]) {
                strcpy(tmpdir, "/tmp/gpuipc-bench.XXXXXX");
                if (!mkdtemp(tmpdir))
                        die("mkdtemp: %s", strerror(errno));
        }
        return tmpdir;
}

void tmpdir_remove(void)
{
        char cmd[128];

        if (tmpdir[0]) {
                snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
                if (system(cmd) != 0)
                        fprintf(stderr, "bench: could not remove %s\n", tmpdir);
        }
}

int unix_connect(const char *path)
{
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        int s;

        if (strlen(path) >= sizeof(a.sun_path))
                return -ENAMETOOLONG;
        strcpy(a.sun_path, path);
        s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return -errno;
        if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
                int e = errno;
                close(s);
                return -e;
        }
        return s;
}

int wait_socket(const char *path, int timeout_ms)
{
        double end = now_us() + timeout_ms * 1e3;

        for (;;) {
                int s = unix_connect(path);
                if (s >= 0) {
                        close(s);
                        return 0;
                }
                if (now_us() > end)
                        return s;
                usleep(10000);
        }
}

uint64_t daemon_host_reg_cap(uint64_t nofile)
{
        uint64_t reserve = DAEMON_CONN_RESERVE < nofile / 2 ? DAEMON_CONN_RESERVE : nofile / 2;
        uint64_t cap = (nofile - reserve) / 4;

        return cap > 16 ? cap - 16 : 0;         /* room for the benchmark's own */
}

pid_t daemon_start(const char *bin, const char *path, uint64_t nofile, uint64_t *ret_nofile)
{
        struct rlimit rl;
        pid_t pid;
        int r;

        if (access(bin, X_OK) != 0)
                die("%s: not executable (run `make all` first): %s", bin, strerror(errno));
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                die("getrlimit: %s", strerror(errno));
        if (nofile) {
                struct rlimit want = { nofile, nofile };
                /* Raising the hard limit needs CAP_SYS_RESOURCE; otherwise
                 * take what the hard limit allows. */
                if (setrlimit(RLIMIT_NOFILE, &want) < 0) {
                        want.rlim_cur = want.rlim_max = rl.rlim_max;
                        if (setrlimit(RLIMIT_NOFILE, &want) < 0)
                                die("setrlimit(RLIMIT_NOFILE): %s", strerror(errno));
                }
        }
        if (ret_nofile) {
                struct rlimit now;
                getrlimit(RLIMIT_NOFILE, &now);
                *ret_nofile = now.rlim_cur;
        }
        pid = fork();
        if (pid < 0)
                die("fork: %s", strerror(errno));
        if (pid == 0) {
                execl(bin, bin, "--no-config", "--socket", path, "--max-registrations", "4000000",
                      "--max-leases", "100000000", "--max-connections", "4096",
                      "--max-leases-per-uid", "100000000",
                      "--max-registrations-per-uid", "4000000", "--max-fds-per-uid", "4000000000",
                      "--max-connections-per-uid", "4096",
                      "--max-output", "268435456", "--log-level", "3", (char *)NULL);
                fprintf(stderr, "bench: exec %s: %s\n", bin, strerror(errno));
                _exit(127);
        }
        /* Our own limit goes back: only the daemon needs a large table. */
        setrlimit(RLIMIT_NOFILE, &rl);
        r = wait_socket(path, 10000);
        if (r < 0) {
                proc_stop(pid);
                die("gpuipcd did not start listening on %s: %s", path, strerror(-r));
        }
        return pid;
}

void proc_stop(pid_t pid)
{
        int st;

        if (pid <= 0)
                return;
        kill(pid, SIGTERM);
        for (int i = 0; i < 200; i++) {
                if (waitpid(pid, &st, WNOHANG) == pid)
                        return;
                usleep(10000);
        }
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
}

uint64_t proc_rss(pid_t pid)
{
        char path[64], line[256];
        uint64_t kb = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        f = fopen(path, "r");
        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %" SCNu64 " kB", &kb) == 1)
                        break;
        fclose(f);
        return kb * 1024;
}

/* ---- frame I/O ------------------------------------------------------------ */

void rd_init(struct conn_rd *c, int sock)
{
        c->sock = sock;
        c->fds_rx = 0;
        if (proto_reader_init(&c->r, PROTO_MAX_FRAME_LIMIT) < 0)
                die("out of memory");
}

void rd_free(struct conn_rd *c)
{
        proto_reader_free(&c->r);
        if (c->sock >= 0)
                close(c->sock);
        c->sock = -1;
}

const uint8_t *rd_next(struct conn_rd *c, uint32_t *ret_len)
{
        const uint8_t *body;
        uint64_t off;
        int fds[16];

        for (;;) {
                uint8_t *p;
                size_t room;
                unsigned nfds = 0;
                int k = proto_reader_next(&c->r, &body, ret_len, &off);

                if (k == 1)
                        return body;
                if (k < 0)
                        die("bad frame length from the server");
                if (proto_reader_space(&c->r, &p, &room) < 0)
                        die("out of memory");
                ssize_t n = proto_recv(c->sock, p, room, fds, 16, &nfds);
                for (unsigned i = 0; i < nfds; i++)
                        close(fds[i]);
                c->fds_rx += nfds;
                if (n == 0)
                        die("the server closed the connection");
                if (n < 0 && n != -EINTR)
                        die("recv: %s", strerror((int)-n));
                if (n > 0)
                        proto_reader_commit(&c->r, (size_t)n);
        }
}

void send_all(int sock, const void *buf, size_t len, int fd)
{
        const uint8_t *p = buf;

        while (len > 0) {
                struct iovec iov = { (void *)p, len };
                ssize_t n = proto_send(sock, &iov, 1, fd >= 0 ? &fd : NULL, fd >= 0);
                if (n == -EINTR)
                        continue;
                if (n < 0)
                        die("send: %s", strerror((int)-n));
                p += n;
                len -= (size_t)n;
                fd = -1;
        }
}

/* ---- raw floor server ----------------------------------------------------- */

static int raw_memfd = -1;

static void *raw_conn(void *arg)
{
        int s = (int)(intptr_t)arg;
        struct conn_rd c;
        uint8_t *out = xmalloc(1 << 20);
        size_t used = 0;

        memset(out, 0, 1 << 20);
        rd_init(&c, s);
        for (;;) {
                const uint8_t *body;
                uint32_t len;
                uint8_t *p;
                size_t room;
                unsigned nfds = 0;
                int fds[16];
                uint64_t off;
                int k;

                /* Answer every buffered frame, then flush and read more. */
                while ((k = proto_reader_next(&c.r, &body, &len, &off)) == 1) {
                        uint32_t rl;
                        bool fd;
                        if (len < 5)
                                goto out;
                        fd = body[0] != 0;
                        rl = (uint32_t)body[1] << 24 | (uint32_t)body[2] << 16 |
                             (uint32_t)body[3] << 8 | body[4];
                        if (rl + 4u > (1u << 20) - used) {
                                send_all(s, out, used, -1);
                                used = 0;
                        }
                        out[used] = (uint8_t)(rl >> 24);
                        out[used + 1] = (uint8_t)(rl >> 16);
                        out[used + 2] = (uint8_t)(rl >> 8);
                        out[used + 3] = (uint8_t)rl;
                        if (fd) {
                                /* fds ride on the frame's first byte. */
                                send_all(s, out, used, -1);
                                memmove(out, out + used, 4);
                                send_all(s, out, rl + 4u, raw_memfd);
                                memset(out, 0, 4);
                                used = 0;
                        } else {
                                used += rl + 4u;
                        }
                }
                if (k < 0)
                        goto out;
                if (used) {
                        send_all(s, out, used, -1);
                        memset(out, 0, used);
                        used = 0;
                }
                if (proto_reader_space(&c.r, &p, &room) < 0)
                        goto out;
                ssize_t n = proto_recv(s, p, room, fds, 16, &nfds);
                for (unsigned i = 0; i < nfds; i++)
                        close(fds[i]);
                if (n == -EINTR)
                        continue;
                if (n <= 0)
                        goto out;
                proto_reader_commit(&c.r, (size_t)n);
        }
out:
        rd_free(&c);
        free(out);
        return NULL;
}

pid_t rawsrv_start(const char *path)
{
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        pid_t pid;
        int ls, r;

        pid = fork();
        if (pid < 0)
                die("fork: %s", strerror(errno));
        if (pid > 0) {
                r = wait_socket(path, 5000);
                if (r < 0)
                        die("raw server did not start: %s", strerror(-r));
                return pid;
        }
        signal(SIGPIPE, SIG_IGN);
        raw_memfd = memfd_sealed(4096, false);
        ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        strcpy(a.sun_path, path);
        if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, 256) < 0)
                die("raw server on %s: %s", path, strerror(errno));
        for (;;) {
                pthread_t t;
                pthread_attr_t at;
                int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
                if (s < 0)
                        continue;
                pthread_attr_init(&at);
                pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
                pthread_attr_setstacksize(&at, 256 << 10);
                if (pthread_create(&t, &at, raw_conn, (void *)(intptr_t)s) != 0)
                        close(s);
                pthread_attr_destroy(&at);
        }
}

void rawreq_build(uint8_t *buf, size_t req_len, size_t rep_len, bool rep_fd)
{
        uint32_t body = (uint32_t)(req_len - 4), rl = (uint32_t)(rep_len - 4);

        memset(buf, 0, req_len);
        buf[0] = (uint8_t)(body >> 24);
        buf[1] = (uint8_t)(body >> 16);
        buf[2] = (uint8_t)(body >> 8);
        buf[3] = (uint8_t)body;
        buf[4] = rep_fd;
        buf[5] = (uint8_t)(rl >> 24);
        buf[6] = (uint8_t)(rl >> 16);
        buf[7] = (uint8_t)(rl >> 8);
        buf[8] = (uint8_t)rl;
}

/* ---- gpuipcd wire client ---------------------------------------------------- */

static void req_begin(struct proto_out *o, const char *op, uint64_t seq, uint32_t nfields)
{
        proto_out_init(o);
        msgpack_pack_map(&o->pk, 2 + nfields);
        proto_pack_kstr(&o->pk, "op", op);
        proto_pack_ku64(&o->pk, "seq", seq);
}

static void req_end(struct proto_out *o)
{
        if (proto_out_finish(o, PROTO_MAX_FRAME) < 0 || !o->sb.data)
                die("cannot build a request");
}

void wire_connect(struct conn_rd *c, const char *path)
{
        struct proto_out o;
        int s = unix_connect(path);

        if (s < 0)
                die("connect %s: %s", path, strerror(-s));
        rd_init(c, s);
        req_begin(&o, "hello", 1, 2);
        proto_pack_ku64(&o.pk, "version", PROTO_VERSION);
        proto_pack_kstr(&o.pk, "client", "bench");
        req_end(&o);
        send_all(s, o.sb.data, o.sb.size, -1);
        proto_out_free(&o);
        wire_reply(c, NULL, NULL);
}

void wire_lookup(struct proto_out *o, uint64_t seq, const char *name)
{
        req_begin(o, "lookup", seq, 1);
        proto_pack_kstr(&o->pk, "name", name);
        req_end(o);
}

void wire_lookup_have(struct proto_out *o, uint64_t seq, const char *name, uint64_t have)
{
        req_begin(o, "lookup", seq, 2);
        proto_pack_kstr(&o->pk, "name", name);
        proto_pack_ku64(&o->pk, "have", have);
        req_end(o);
}

void wire_release(struct proto_out *o, uint64_t seq, uint64_t lease)
{
        req_begin(o, "release", seq, 1);
        proto_pack_ku64(&o->pk, "lease", lease);
        req_end(o);
}

void wire_register(struct proto_out *o, uint64_t seq, const char *name, uint64_t offset,
                   uint64_t size, bool ephemeral)
{
        req_begin(o, "register", seq, 5 + ephemeral);
        proto_pack_kstr(&o->pk, "name", name);
        proto_pack_kstr(&o->pk, "kind", "host");
        proto_pack_ku64(&o->pk, "size", size);
        proto_pack_ku64(&o->pk, "offset", offset);
        proto_pack_ku64(&o->pk, "fds", 1);
        if (ephemeral)
                proto_pack_kbool(&o->pk, "ephemeral", true);
        req_end(o);
}

void wire_unregister(struct proto_out *o, uint64_t seq, const char *name)
{
        req_begin(o, "unregister", seq, 1);
        proto_pack_kstr(&o->pk, "name", name);
        req_end(o);
}

uint64_t wire_reply(struct conn_rd *c, const char *key, uint32_t *ret_len)
{
        struct proto_msg m;
        const msgpack_object *err;
        const char *why = NULL;
        uint64_t v = 0;
        uint32_t len;
        const uint8_t *body;

        for (;;) {
                body = rd_next(c, &len);
                if (proto_decode(body, len, &m, &why) < 0)
                        die("undecodable reply: %s", why ? why : "?");
                /* Events (no seq) are skipped. */
                if (proto_get(m.root, "seq"))
                        break;
                proto_msg_free(&m);
        }
        if (proto_get_map(m.root, "error", &err) == 0) {
                const char *msg = "?";
                size_t ml = 1;
                proto_get_str(err, "message", &msg, &ml);
                die("gpuipcd answered with an error: %.*s", (int)ml, msg);
        }
        if (key)
                proto_get_u64(m.root, key, &v);
        proto_msg_free(&m);
        if (ret_len)
                *ret_len = len + PROTO_HDR_LEN;
        return v;
}

int memfd_sealed(size_t size, bool huge)
{
        int fd = memfd_create("gpuipc-bench", MFD_CLOEXEC | MFD_ALLOW_SEALING |
                                                (huge ? MFD_HUGETLB : 0));

        if (fd < 0) {
                if (huge)
                        return -1;
                die("memfd_create: %s", strerror(errno));
        }
        if (ftruncate(fd, (off_t)size) < 0) {
                if (huge) {
                        close(fd);
                        return -1;
                }
                die("ftruncate(%zu): %s", size, strerror(errno));
        }
        /* The daemon wants host memfds sealed against writes (unless shared
         * writable); a huge-page one is filled through a mapping first, and
         * its caller seals it then. */
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
                                    (huge ? 0 : F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)) < 0)
                die("F_ADD_SEALS: %s", strerror(errno));
        return fd;
}
