/* bench_ipc.c: round trips, throughput, Redis comparison and registry scale
 * of gpuipcd, each against a raw AF_UNIX floor of the same message shape.
 *
 * usage: bench_ipc GPUIPCD CSV
 * Environment: BENCH_SECONDS (per measurement, default 1), BENCH_ROUNDS
 * (interleaved rounds, default 3), BENCH_SCALE_MAX (largest registry, default
 * 1000000), REDIS_SERVER (default: redis-server from $PATH; "none" skips).
 *
 * Every figure is the median over the rounds; a ratio is computed within
 * each round (gpuipcd and its floor measured back to back) and then its
 * median taken. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "gpuipc.h"

#define MAXROUNDS 16
#define HOT "bench/hot"

enum kind {
        K_RAW,          /* raw floor: steps[] round trips, or `depth` pipelined */
        K_LIB_LOOKUP,   /* gpuipc_view_lookup, views held */
        K_LIB_LOOKUP_REL,
        K_LIB_REG,      /* gpuipc_fd_register, ephemeral */
        K_LIB_REG_UNREG,
        K_WIRE_LOOKUP,  /* proto frames, leases held; depth > 1: pipelined */
        K_WIRE_LOOKUP_HAVE, /* the same offering a held lease: replies without fd */
        K_WIRE_REG,     /* pipelined registers, one sendmsg (with fd) each */
        K_REDIS,        /* GET, depth pipelined */
};

struct shape {
        size_t req, rep;        /* frame bytes */
        bool req_fd, rep_fd;
};

struct spec {
        const char *section, *name;
        enum kind kind;
        int conns, depth;
        struct shape steps[2];
        int nsteps;
        int floor;              /* index of the floor case, -1 */
        int redis;              /* index of the Redis case to compare ops with, -1 */
        bool skip;
        double p50[MAXROUNDS], p99[MAXROUNDS], ops[MAXROUNDS];
        double r_p50[MAXROUNDS], r_ops[MAXROUNDS], r_redis[MAXROUNDS];
};

static struct {
        const char *sock, *raw_sock, *redis_sock;
        double seconds;
        int rounds;
        int memfd;
        uint64_t reg_quota;             /* REG_QUOTA_MAX or what the daemon allows */
        size_t redis_val;
        pid_t daemon, raw, redis;
} G;

static struct spec cases[64];
static int ncases;

static int add(const char *section, const char *name, enum kind k, int conns, int depth)
{
        struct spec *s = &cases[ncases];

        memset(s, 0, sizeof(*s));
        s->section = section;
        s->name = name;
        s->kind = k;
        s->conns = conns;
        s->depth = depth;
        s->floor = s->redis = -1;
        return ncases++;
}

static int add_raw(const char *name, int conns, int depth, struct shape a, const struct shape *b)
{
        int i = add("floor", name, K_RAW, conns, depth);

        cases[i].steps[0] = a;
        cases[i].nsteps = 1;
        if (b) {
                cases[i].steps[1] = *b;
                cases[i].nsteps = 2;
        }
        return i;
}

/* ---- workers ------------------------------------------------------------- */

struct worker {
        const struct spec *sp;
        int idx;
        pthread_barrier_t *bar;
        struct samples s;
        uint64_t ops;
        double t0, t1;
        pthread_t th;
};

static bool running(struct worker *w, uint64_t i)
{
        /* Check the clock every few operations only. */
        if ((i & 7) == 0)
                w->t1 = now_us();
        return w->t1 - w->t0 < G.seconds * 1e6;
}

#define WARMUP 200
/* Host registrations one connection of the register-only loops holds
 * before it reconnects: at most 6000, and no more than the daemon lets one
 * uid hold (daemon_host_reg_cap: 3944 at RLIMIT_NOFILE 20000). */
#define REG_QUOTA_MAX 6000u

static void start_clock(struct worker *w)
{
        pthread_barrier_wait(w->bar);
        w->t0 = w->t1 = now_us();
}

static void stop_clock(struct worker *w)
{
        w->t1 = now_us();
}

static void run_raw(struct worker *w)
{
        const struct spec *sp = w->sp;
        struct conn_rd c;
        uint8_t *req[2];
        uint8_t *batch = NULL;
        size_t blen = 0;
        int s = unix_connect(G.raw_sock);
        uint32_t len;

        if (s < 0)
                die("connect %s: %s", G.raw_sock, strerror(-s));
        rd_init(&c, s);
        for (int k = 0; k < sp->nsteps; k++) {
                req[k] = xmalloc(sp->steps[k].req);
                rawreq_build(req[k], sp->steps[k].req, sp->steps[k].rep, sp->steps[k].rep_fd);
        }
        if (sp->depth > 1 && !sp->steps[0].req_fd) {
                blen = sp->steps[0].req * (size_t)sp->depth;
                batch = xmalloc(blen);
                for (int d = 0; d < sp->depth; d++)
                        memcpy(batch + d * sp->steps[0].req, req[0], sp->steps[0].req);
        }
        for (uint64_t i = 0, warm = 0;; i++) {
                double t = now_us();
                if (sp->depth > 1) {
                        if (batch)
                                send_all(s, batch, blen, -1);
                        else
                                for (int d = 0; d < sp->depth; d++)
                                        send_all(s, req[0], sp->steps[0].req, G.memfd);
                        for (int d = 0; d < sp->depth; d++)
                                rd_next(&c, &len);
                } else {
                        for (int k = 0; k < sp->nsteps; k++) {
                                send_all(s, req[k], sp->steps[k].req,
                                         sp->steps[k].req_fd ? G.memfd : -1);
                                rd_next(&c, &len);
                        }
                }
                if (warm < WARMUP) {
                        if (++warm == WARMUP) {
                                start_clock(w);
                                i = 0;
                        }
                        continue;
                }
                samples_add(&w->s, now_us() - t);
                w->ops += sp->depth > 1 ? (uint64_t)sp->depth : 1;
                if (!running(w, i))
                        break;
        }
        stop_clock(w);
        free(batch);
        for (int k = 0; k < sp->nsteps; k++)
                free(req[k]);
        rd_free(&c);
}

static void gk(gpuipc_client *c, int r, const char *what)
{
        if (r < 0)
                die("%s: %s (%s)", what, gpuipc_strerror(r), c ? gpuipc_errmsg(c) : "-");
}

static void run_lib(struct worker *w)
{
        const struct spec *sp = w->sp;
        gpuipc_client *c;
        gpuipc_view **views = NULL;
        size_t nviews = 0, cap = 0;
        char name[64];

        /* The daemon holds two fds per host registration (the memfd and
         * the read-only copy lookups get) and its fd limit may be low (20000
         * here): register-only loops reconnect, untimed, after their share
         * of G.reg_quota (closing drops ephemeral ones). */
        uint64_t quota = G.reg_quota / (uint64_t)sp->conns, held = 0;

        gk(NULL, gpuipc_client_connect(G.sock, &c), "gpuipc_client_connect");
        for (uint64_t i = 0, warm = 0, seq = 0;; i++, seq++) {
                gpuipc_view *v;
                if (sp->kind == K_LIB_REG && ++held > quota) {
                        double tp = now_us();
                        gpuipc_client_free(c);
                        usleep(20000);
                        gk(NULL, gpuipc_client_connect(G.sock, &c), "gpuipc_client_connect");
                        held = 1;
                        w->t0 += now_us() - tp;
                }
                double t = now_us(), t_mid;
                switch (sp->kind) {
                case K_LIB_LOOKUP:
                case K_LIB_LOOKUP_REL:
                        gk(c, gpuipc_view_lookup(c, HOT, 0, 0, &v), "gpuipc_view_lookup");
                        t_mid = now_us();
                        if (sp->kind == K_LIB_LOOKUP_REL) {
                                gk(c, gpuipc_view_release(v), "gpuipc_view_release");
                        } else {
                                if (nviews == cap) {
                                        cap = cap ? cap * 2 : 4096;
                                        views = realloc(views, cap * sizeof(*views));
                                        if (!views)
                                                die("out of memory");
                                }
                                views[nviews++] = v;
                        }
                        break;
                default:
                        snprintf(name, sizeof(name), "bench/r/%d/%" PRIu64, w->idx, seq);
                        gk(c, gpuipc_fd_register(c, name, G.memfd, 0, 4096, NULL,
                                                 GPUIPC_REGISTER_EPHEMERAL, NULL),
                           "gpuipc_fd_register");
                        t_mid = now_us();
                        if (sp->kind == K_LIB_REG_UNREG)
                                gk(c, gpuipc_name_unregister(c, name), "gpuipc_name_unregister");
                        break;
                }
                if (warm < WARMUP) {
                        if (++warm == WARMUP) {
                                start_clock(w);
                                i = 0;
                        }
                        continue;
                }
                /* "lookup" and "register" time the first call only. */
                samples_add(&w->s, (sp->kind == K_LIB_LOOKUP || sp->kind == K_LIB_REG ? t_mid
                                                                                      : now_us()) - t);
                w->ops++;
                if (!running(w, i))
                        break;
        }
        stop_clock(w);
        /* Untimed: the daemon drops leases and ephemeral registrations with
         * the connection; the views are then freed locally. */
        gpuipc_client_free(c);
        for (size_t i = 0; i < nviews; i++)
                gpuipc_view_release(views[i]);
        free(views);
}

static void run_wire(struct worker *w)
{
        const struct spec *sp = w->sp;
        struct conn_rd c;
        struct proto_out o;
        uint8_t *batch;
        size_t one, blen;
        int depth = sp->depth > 1 ? sp->depth : 1;
        char name[64];

        wire_connect(&c, G.sock);
        if (sp->kind == K_WIRE_LOOKUP_HAVE) {
                /* One lookup with the fd, then its lease in every request. */
                wire_lookup(&o, 6, HOT);
                send_all(c.sock, o.sb.data, o.sb.size, -1);
                proto_out_free(&o);
                uint64_t lease = wire_reply(&c, "lease", NULL);
                wire_lookup_have(&o, 7, HOT, lease);
        } else {
                wire_lookup(&o, 7, HOT);
        }
        one = o.sb.size;
        blen = one * (size_t)depth;
        batch = xmalloc(blen);
        for (int d = 0; d < depth; d++)
                memcpy(batch + d * one, o.sb.data, one);
        proto_out_free(&o);
        for (uint64_t i = 0, warm = 0, seq = 0, held = 0;; i++) {
                if (sp->kind == K_WIRE_REG && (held += (uint64_t)depth) > G.reg_quota) {
                        double tp = now_us();
                        rd_free(&c);
                        usleep(20000);
                        wire_connect(&c, G.sock);
                        held = (uint64_t)depth;
                        w->t0 += now_us() - tp;
                }
                double t = now_us();
                if (sp->kind != K_WIRE_REG) {
                        send_all(c.sock, batch, blen, -1);
                } else {
                        for (int d = 0; d < depth; d++, seq++) {
                                snprintf(name, sizeof(name), "bench/p/%d/%" PRIu64, w->idx, seq);
                                wire_register(&o, seq, name, 0, 4096, true);
                                send_all(c.sock, o.sb.data, o.sb.size, G.memfd);
                                proto_out_free(&o);
                        }
                }
                for (int d = 0; d < depth; d++)
                        wire_reply(&c, NULL, NULL);
                if (warm < WARMUP / 10 + 1) {
                        if (++warm == WARMUP / 10 + 1) {
                                start_clock(w);
                                i = 0;
                        }
                        continue;
                }
                samples_add(&w->s, now_us() - t);
                w->ops += (uint64_t)depth;
                if (!running(w, i))
                        break;
        }
        stop_clock(w);
        if (sp->kind == K_WIRE_LOOKUP_HAVE && c.fds_rx > 1)
                die("%u lookups offering a held lease came with an fd", c.fds_rx - 1);
        free(batch);
        rd_free(&c);
}

/* ---- Redis (RESP) -------------------------------------------------------- */

struct resp {
        int s;
        char buf[1 << 16];
        size_t start, end;
};

static void resp_fill(struct resp *r)
{
        if (r->start > 0 && r->start == r->end)
                r->start = r->end = 0;
        if (r->end == sizeof(r->buf)) {
                memmove(r->buf, r->buf + r->start, r->end - r->start);
                r->end -= r->start;
                r->start = 0;
        }
        ssize_t n = read(r->s, r->buf + r->end, sizeof(r->buf) - r->end);
        if (n <= 0)
                die("redis: connection lost");
        r->end += (size_t)n;
}

/* Reads one reply: +OK / $N bulk. */
static void resp_reply(struct resp *r)
{
        for (;;) {
                char *nl = memchr(r->buf + r->start, '\n', r->end - r->start);
                if (nl) {
                        char *p = r->buf + r->start;
                        if (*p == '-')
                                die("redis error: %.*s", (int)(nl - p), p);
                        if (*p == '$') {
                                long n = strtol(p + 1, NULL, 10);
                                size_t need = (size_t)(nl + 1 - p) + (n > 0 ? (size_t)n + 2 : 0);
                                while (r->end - r->start < need)
                                        resp_fill(r);
                                r->start += need;
                                return;
                        }
                        r->start = (size_t)(nl + 1 - r->buf);
                        return;
                }
                resp_fill(r);
        }
}

static void resp_connect(struct resp *r)
{
        r->s = unix_connect(G.redis_sock);
        if (r->s < 0)
                die("connect %s: %s", G.redis_sock, strerror(-r->s));
        r->start = r->end = 0;
}

static void run_redis(struct worker *w)
{
        static const char get[] = "*2\r\n$3\r\nGET\r\n$9\r\nbench:hot\r\n";
        int depth = w->sp->depth > 1 ? w->sp->depth : 1;
        size_t blen = (sizeof(get) - 1) * (size_t)depth;
        char *batch = xmalloc(blen);
        struct resp *r = xmalloc(sizeof(*r));

        for (int d = 0; d < depth; d++)
                memcpy(batch + d * (sizeof(get) - 1), get, sizeof(get) - 1);
        resp_connect(r);
        for (uint64_t i = 0, warm = 0;; i++) {
                double t = now_us();
                send_all(r->s, batch, blen, -1);
                for (int d = 0; d < depth; d++)
                        resp_reply(r);
                if (warm < WARMUP) {
                        if (++warm == WARMUP) {
                                start_clock(w);
                                i = 0;
                        }
                        continue;
                }
                samples_add(&w->s, now_us() - t);
                w->ops += (uint64_t)depth;
                if (!running(w, i))
                        break;
        }
        stop_clock(w);
        close(r->s);
        free(r);
        free(batch);
}

static void redis_set(void)
{
        struct resp *r = xmalloc(sizeof(*r));
        char *cmd = xmalloc(G.redis_val + 128);
        int n = sprintf(cmd, "*3\r\n$3\r\nSET\r\n$9\r\nbench:hot\r\n$%zu\r\n", G.redis_val);

        memset(cmd + n, 'x', G.redis_val);
        memcpy(cmd + n + G.redis_val, "\r\n", 2);
        resp_connect(r);
        send_all(r->s, cmd, (size_t)n + G.redis_val + 2, -1);
        resp_reply(r);
        close(r->s);
        free(r);
        free(cmd);
}

static pid_t redis_start(const char *bin)
{
        pid_t pid = fork();

        if (pid < 0)
                die("fork: %s", strerror(errno));
        if (pid == 0) {
                if (!freopen("/dev/null", "w", stdout))
                        _exit(127);
                execlp(bin, bin, "--port", "0", "--unixsocket", G.redis_sock, "--save", "",
                      "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
                      (char *)NULL);
                fprintf(stderr, "bench: exec %s: %s\n", bin, strerror(errno));
                _exit(127);
        }
        if (wait_socket(G.redis_sock, 10000) < 0) {
                proc_stop(pid);
                fprintf(stderr, "bench: redis-server did not start; skipping Redis\n");
                return -1;
        }
        return pid;
}

/* Reads and discards what the daemon sends (released events) until EOF, so
 * an owner connection never blocks the daemon's writes. */
static void *drain_main(void *arg)
{
        int s = (int)(intptr_t)arg;
        char buf[4096];

        while (read(s, buf, sizeof(buf)) > 0)
                ;
        return NULL;
}

static void drain_start(int s)
{
        pthread_t t;

        if (pthread_create(&t, NULL, drain_main, (void *)(intptr_t)s) != 0)
                die("pthread_create: %s", strerror(errno));
        pthread_detach(t);
}

/* ---- running a case ------------------------------------------------------- */

static void *worker_main(void *arg)
{
        struct worker *w = arg;

        switch (w->sp->kind) {
        case K_RAW:
                run_raw(w);
                break;
        case K_LIB_LOOKUP:
        case K_LIB_LOOKUP_REL:
        case K_LIB_REG:
        case K_LIB_REG_UNREG:
                run_lib(w);
                break;
        case K_WIRE_LOOKUP:
        case K_WIRE_LOOKUP_HAVE:
        case K_WIRE_REG:
                run_wire(w);
                break;
        case K_REDIS:
                run_redis(w);
                break;
        }
        return NULL;
}

static void run_case(struct spec *sp, int round)
{
        int n = sp->conns;
        struct worker *w = calloc((size_t)n, sizeof(*w));
        struct samples all;
        pthread_barrier_t bar;
        double ops = 0;

        if (!w)
                die("out of memory");
        pthread_barrier_init(&bar, NULL, (unsigned)n);
        samples_init(&all, 1u << 22);
        for (int i = 0; i < n; i++) {
                w[i].sp = sp;
                w[i].idx = i;
                w[i].bar = &bar;
                samples_init(&w[i].s, n == 1 ? 1u << 21 : 1u << 16);
                if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0)
                        die("pthread_create: %s", strerror(errno));
        }
        for (int i = 0; i < n; i++) {
                pthread_join(w[i].th, NULL);
                if (w[i].t1 > w[i].t0)
                        ops += (double)w[i].ops / ((w[i].t1 - w[i].t0) / 1e6);
                samples_merge(&all, &w[i].s);
                samples_free(&w[i].s);
        }
        sp->p50[round] = samples_pct(&all, 50);
        sp->p99[round] = samples_pct(&all, 99);
        sp->ops[round] = ops;
        samples_free(&all);
        pthread_barrier_destroy(&bar);
        free(w);
}

static void *load_thread(void *arg)
{
        run_case(arg, 0);
        return NULL;
}

/* ---- registry scale --------------------------------------------------------- */

struct filler {
        const char *sock;
        uint64_t from, to;
        int memfd;
        bool cuda;
        pthread_barrier_t *done;
        pthread_t th;
};

static void wire_register_ipc(struct proto_out *o, uint64_t seq, const char *name,
                              uint64_t offset)
{
        static const uint8_t handle[64] = { 0x42 };

        proto_out_init(o);
        msgpack_pack_map(&o->pk, 11);
        proto_pack_kstr(&o->pk, "op", "register");
        proto_pack_ku64(&o->pk, "seq", seq);
        proto_pack_kstr(&o->pk, "name", name);
        proto_pack_kstr(&o->pk, "kind", "cuda-ipc");
        proto_pack_ku64(&o->pk, "size", 4096);
        proto_pack_ku64(&o->pk, "offset", offset);
        proto_pack_kbool(&o->pk, "ephemeral", true);
        proto_pack_kstr(&o->pk, "device", "GPU-2f1c7a9e-0b3d-4e5f-8a6b-1c2d3e4f5a6b");
        proto_pack_str(&o->pk, "handle");
        msgpack_pack_bin_with_body(&o->pk, handle, sizeof(handle));
        proto_pack_ku64(&o->pk, "buffer_id", 7);
        proto_pack_ku64(&o->pk, "alloc_size", 4096u * 1024u);
        if (proto_out_finish(o, PROTO_MAX_FRAME) < 0 || !o->sb.data)
                die("cannot build a request");
}

static void *fill_main(void *arg)
{
        struct filler *f = arg;
        struct conn_rd *c = xmalloc(sizeof(*c));
        struct proto_out o;
        char name[32];
        uint64_t sent = f->from, got = f->from;
        const uint64_t window = 256;

        wire_connect(c, f->sock);
        while (got < f->to) {
                while (sent < f->to && sent - got < window) {
                        snprintf(name, sizeof(name), "s/%07" PRIu64, sent);
                        if (f->cuda)
                                wire_register_ipc(&o, sent, name, (sent % 1024) * 4096);
                        else
                                wire_register(&o, sent, name, (sent % 1024) * 4096, 4096,
                                              false);
                        send_all(c->sock, o.sb.data, o.sb.size, f->cuda ? -1 : f->memfd);
                        proto_out_free(&o);
                        sent++;
                }
                wire_reply(c, NULL, NULL);
                got++;
        }
        /* Keep the connection (cuda-ipc registrations are ephemeral) and
         * drain the released events until the daemon stops. */
        pthread_barrier_wait(f->done);
        drain_main((void *)(intptr_t)c->sock);
        return NULL;
}

struct scale_row {
        uint64_t n;
        double lib_p50, lib_p99, wire_p50, wire_p99, rss_per_reg, rss_mib;
};

static void scale_lookups(const char *sock, uint64_t n, bool lib, struct scale_row *row)
{
        gpuipc_client *c;
        struct conn_rd wc;
        struct samples s;
        struct proto_out o;
        char name[32];
        uint64_t x = 88172645463325252ull;
        const int iters = 20000;

        samples_init(&s, (size_t)iters);
        row->lib_p50 = row->lib_p99 = NAN;
        if (lib) {
                gk(NULL, gpuipc_client_connect(sock, &c), "gpuipc_client_connect");
                for (int i = -500; i < iters; i++) {
                        gpuipc_view *v;
                        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                        snprintf(name, sizeof(name), "s/%07" PRIu64, x % n);
                        double t = now_us();
                        gk(c, gpuipc_view_lookup(c, name, 0, 0, &v), "gpuipc_view_lookup (scale)");
                        if (i >= 0)
                                samples_add(&s, now_us() - t);
                        gk(c, gpuipc_view_release(v), "gpuipc_view_release (scale)");
                }
                gpuipc_client_free(c);
                row->lib_p50 = samples_pct(&s, 50);
                row->lib_p99 = samples_pct(&s, 99);
                s.n = 0;
        }
        wire_connect(&wc, sock);
        for (int i = -500; i < iters; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                snprintf(name, sizeof(name), "s/%07" PRIu64, x % n);
                wire_lookup(&o, 9, name);
                double t = now_us();
                send_all(wc.sock, o.sb.data, o.sb.size, -1);
                uint64_t lease = wire_reply(&wc, "lease", NULL);
                if (i >= 0)
                        samples_add(&s, now_us() - t);
                proto_out_free(&o);
                wire_release(&o, 10, lease);
                send_all(wc.sock, o.sb.data, o.sb.size, -1);
                wire_reply(&wc, NULL, NULL);
                proto_out_free(&o);
        }
        rd_free(&wc);
        row->wire_p50 = samples_pct(&s, 50);
        row->wire_p99 = samples_pct(&s, 99);
        samples_free(&s);
}

/* Host registrations need two daemon fds each (the memfd and its read-only
 * copy), and the daemon lets one uid hold at most half of the fds it keeps
 * for registrations (RLIMIT_NOFILE less max-connections + 64), so their
 * scale is bounded by the daemon's RLIMIT_NOFILE; cuda-ipc registrations
 * carry no fd (the daemon never opens the handle on lookup), so they reach
 * 1M without CUDA. */
static int run_scale(const char *bin, uint64_t max, bool cuda, struct scale_row *rows,
                     uint64_t *ret_nofile)
{
        static const uint64_t levels[] = { 1000, 100000, 1000000 };
        char sock[128];
        uint64_t nofile = 0, have = 0, rss0;
        int memfd = memfd_sealed(4u << 20, false), nrows = 0;
        pid_t pid;

        snprintf(sock, sizeof(sock), "%s/scale.sock", tmpdir_get());
        pid = daemon_start(bin, sock, cuda ? 0 : 4 * max + 2 * DAEMON_CONN_RESERVE, &nofile);
        *ret_nofile = nofile;
        if (!cuda) {
                uint64_t cap = daemon_host_reg_cap(nofile);

                if (cap < max) {
                        fprintf(stderr, "bench: RLIMIT_NOFILE for gpuipcd is %" PRIu64 " (two "
                                "fds per host registration, one uid at most half of them): "
                                "host scale capped at %" PRIu64 "\n", nofile, cap);
                        max = cap;
                }
        }
        usleep(100000);
        rss0 = proc_rss(pid);
        for (size_t l = 0; l < sizeof(levels) / sizeof(levels[0]); l++) {
                uint64_t n = levels[l] < max ? levels[l] : max;
                struct filler f[4];
                pthread_barrier_t done;
                double t0 = now_us();
                if (n <= have)
                        break;
                pthread_barrier_init(&done, NULL, 5);
                for (int i = 0; i < 4; i++) {
                        f[i].sock = sock;
                        f[i].memfd = memfd;
                        f[i].cuda = cuda;
                        f[i].done = &done;
                        f[i].from = have + (n - have) * (uint64_t)i / 4;
                        f[i].to = have + (n - have) * (uint64_t)(i + 1) / 4;
                        pthread_create(&f[i].th, NULL, fill_main, &f[i]);
                        pthread_detach(f[i].th);
                }
                pthread_barrier_wait(&done);
                double dt = (now_us() - t0) / 1e6;
                usleep(200000);
                rows[nrows].n = n;
                rows[nrows].rss_mib = (double)proc_rss(pid) / 1048576.0;
                rows[nrows].rss_per_reg = ((double)proc_rss(pid) - (double)rss0) / (double)n;
                printf("  %s scale: %" PRIu64 " registrations (%.1f s, %.0f registers/s "
                       "pipelined on 4 conns)\n", cuda ? "cuda-ipc" : "host", n, dt,
                       (double)(n - have) / dt);
                fflush(stdout);
                have = n;
                scale_lookups(sock, n, !cuda, &rows[nrows]);
                nrows++;
        }
        proc_stop(pid);
        usleep(100000);
        close(memfd);
        return nrows;
}

static void print_scale(FILE *csv, const char *kind, struct scale_row *rows, int nrows)
{
        printf("%-9s %10s %11s %11s %12s %12s %9s %10s\n", "kind", "regs", "lib p50 us",
               "lib p99 us", "wire p50 us", "wire p99 us", "RSS MiB", "RSS B/reg");
        for (int i = 0; i < nrows; i++) {
                printf("%-9s %10" PRIu64 " %11.1f %11.1f %12.1f %12.1f %9.1f %10.1f\n", kind,
                       rows[i].n, rows[i].lib_p50, rows[i].lib_p99, rows[i].wire_p50,
                       rows[i].wire_p99, rows[i].rss_mib, rows[i].rss_per_reg);
                if (!isnan(rows[i].lib_p50))
                        fprintf(csv, "scale,%s lookup (library) at %" PRIu64 " registrations,"
                                "1,1,%.2f,%.2f,,,,,\n", kind, rows[i].n, rows[i].lib_p50,
                                rows[i].lib_p99);
                fprintf(csv, "scale,%s lookup (wire) at %" PRIu64 " registrations,1,1,%.2f,"
                        "%.2f,,,,,\n", kind, rows[i].n, rows[i].wire_p50, rows[i].wire_p99);
                fprintf(csv, "scale_mem,%s RSS bytes per registration at %" PRIu64 ",,,,,"
                        "%.1f,,,,\n", kind, rows[i].n, rows[i].rss_per_reg);
        }
}

/* ---- main ------------------------------------------------------------------- */

static double med(const double *v)
{
        double t[MAXROUNDS];

        memcpy(t, v, sizeof(double) * (size_t)G.rounds);
        return median(t, G.rounds);
}

static const char *yesno(bool b)
{
        return b ? "MET" : "NOT MET";
}

int main(int argc, char **argv)
{
        const char *csvpath = argc > 2 ? argv[2] : "build/bench/results.csv";
        const char *redis_bin = getenv("REDIS_SERVER") ? getenv("REDIS_SERVER") : "redis-server";
        char sock[128], raw[128], rsock[128], cmd[256];
        struct shape lk, lkn, rel, reg, unreg;
        struct conn_rd c;
        struct proto_out o;
        uint64_t scale_max = 1000000, nofile = 0;
        struct scale_row rows[3], hrows[3];
        int nrows = 0, nhrows = 0;
        FILE *csv;

        if (argc < 2) {
                fprintf(stderr, "usage: %s GPUIPCD [CSV]\n       %s --load SOCKET SECONDS [have]\n",
                        argv[0], argv[0]);
                return 2;
        }
        if (!strcmp(argv[1], "--load") && (argc == 4 || argc == 5)) {
                /* A fixed lookup load on a running daemon, for profiling:
                 * library lookup+release on one connection and pipelined
                 * wire lookups on another, at the same time; with "have"
                 * the wire lookups offer a held lease (replies without fd). */
                bool have = argc == 5 && !strcmp(argv[4], "have");
                struct conn_rd owner;
                G.sock = argv[2];
                G.seconds = atof(argv[3]);
                G.memfd = memfd_sealed(4096, false);
                wire_connect(&owner, G.sock);
                wire_register(&o, 1, HOT, 0, 4096, false);
                send_all(owner.sock, o.sb.data, o.sb.size, G.memfd);
                proto_out_free(&o);
                wire_reply(&owner, NULL, NULL);
                drain_start(owner.sock);
                int a = add("load", "lookup+release (library)", K_LIB_LOOKUP_REL, 1, 1);
                int b = add("load", "lookup pipelined (wire)",
                            have ? K_WIRE_LOOKUP_HAVE : K_WIRE_LOOKUP, 1, 64);
                pthread_t t;
                pthread_create(&t, NULL, load_thread, &cases[b]);
                run_case(&cases[a], 0);
                pthread_join(t, NULL);
                printf("load: lookup+release %.0f/s, pipelined lookups %.0f/s\n", cases[a].ops[0],
                       cases[b].ops[0]);
                return 0;
        }
        signal(SIGPIPE, SIG_IGN);
        G.seconds = getenv("BENCH_SECONDS") ? atof(getenv("BENCH_SECONDS")) : 1.0;
        G.rounds = getenv("BENCH_ROUNDS") ? atoi(getenv("BENCH_ROUNDS")) : 3;
        if (G.rounds < 1 || G.rounds > MAXROUNDS || !(G.seconds > 0))
                die("BENCH_ROUNDS must be 1..%d and BENCH_SECONDS > 0", MAXROUNDS);
        if (getenv("BENCH_SCALE_MAX"))
                scale_max = strtoull(getenv("BENCH_SCALE_MAX"), NULL, 10);
        csv = fopen(csvpath, "w");
        if (!csv)
                die("%s: %s", csvpath, strerror(errno));

        snprintf(sock, sizeof(sock), "%s/gpuipcd.sock", tmpdir_get());
        snprintf(raw, sizeof(raw), "%s/raw.sock", tmpdir_get());
        snprintf(rsock, sizeof(rsock), "%s/redis.sock", tmpdir_get());
        G.sock = sock;
        G.raw_sock = raw;
        G.redis_sock = rsock;
        G.memfd = memfd_sealed(4096, false);
        G.daemon = daemon_start(argv[1], sock, 0, NULL);
        {
                /* gpuipcd raises its soft limit to the hard one we pass on. */
                struct rlimit rl;
                uint64_t lim = getrlimit(RLIMIT_NOFILE, &rl) < 0 ? 1024
                               : rl.rlim_max == RLIM_INFINITY ? 1u << 20 : rl.rlim_max;
                uint64_t cap = daemon_host_reg_cap(lim);

                G.reg_quota = cap < REG_QUOTA_MAX ? cap : REG_QUOTA_MAX;
                if (G.reg_quota < 64)
                        die("RLIMIT_NOFILE %" PRIu64 " leaves gpuipcd too few fds for the "
                            "register rows", lim);
        }
        G.raw = rawsrv_start(raw);

        /* The hot buffer, and the exact frame sizes of each operation. */
        {
                struct conn_rd owner;
                uint32_t rl;
                /* The owner reads its released events on a thread of its own. */
                wire_connect(&owner, sock);
                wire_register(&o, 1, HOT, 0, 4096, false);
                send_all(owner.sock, o.sb.data, o.sb.size, G.memfd);
                proto_out_free(&o);
                wire_reply(&owner, NULL, NULL);
                drain_start(owner.sock);
                wire_connect(&c, sock);
                wire_lookup(&o, 1000, HOT);
                lk = (struct shape){ o.sb.size, 0, false, true };
                send_all(c.sock, o.sb.data, o.sb.size, -1);
                proto_out_free(&o);
                uint64_t lease = wire_reply(&c, "lease", &rl);
                lk.rep = rl;
                /* A lookup offering that lease: the reply without the fd. */
                wire_lookup_have(&o, 999, HOT, lease);
                lkn = (struct shape){ o.sb.size, 0, false, false };
                send_all(c.sock, o.sb.data, o.sb.size, -1);
                proto_out_free(&o);
                uint64_t lease_n = wire_reply(&c, "lease", &rl);
                lkn.rep = rl;
                if (c.fds_rx != 1)
                        die("the daemon ignores `have` (%u fds for two lookups)", c.fds_rx);
                wire_release(&o, 998, lease_n);
                send_all(c.sock, o.sb.data, o.sb.size, -1);
                proto_out_free(&o);
                wire_reply(&c, NULL, NULL);
                G.redis_val = lk.rep - PROTO_HDR_LEN;
                wire_release(&o, 1001, lease);
                rel = (struct shape){ o.sb.size, 0, false, false };
                send_all(c.sock, o.sb.data, o.sb.size, -1);
                proto_out_free(&o);
                wire_reply(&c, NULL, &rl);
                rel.rep = rl;
                wire_register(&o, 1002, "bench/r/0/1000", 0, 4096, true);
                reg = (struct shape){ o.sb.size, 0, true, false };
                send_all(c.sock, o.sb.data, o.sb.size, G.memfd);
                proto_out_free(&o);
                wire_reply(&c, NULL, &rl);
                reg.rep = rl;
                wire_unregister(&o, 1003, "bench/r/0/1000");
                unreg = (struct shape){ o.sb.size, 0, false, false };
                send_all(c.sock, o.sb.data, o.sb.size, -1);
                proto_out_free(&o);
                wire_reply(&c, NULL, &rl);
                unreg.rep = rl;
                rd_free(&c);
        }
        if (strcmp(redis_bin, "none") != 0 &&
            (strchr(redis_bin, '/') ? access(redis_bin, X_OK) == 0
                                    : system("command -v redis-server >/dev/null 2>&1") == 0)) {
                G.redis = redis_start(redis_bin);
                if (G.redis > 0)
                        redis_set();
        } else {
                G.redis = -1;
        }

        printf("gpuipcd host benchmark: %ld online CPUs, %d round(s) x %.1f s per figure\n",
               sysconf(_SC_NPROCESSORS_ONLN), G.rounds, G.seconds);
        printf("frame sizes (bytes): lookup %zu -> %zu+fd, lookup with have %zu -> %zu, "
               "release %zu -> %zu, register %zu+fd -> %zu, unregister %zu -> %zu\n", lk.req,
               lk.rep, lkn.req, lkn.rep, rel.req, rel.rep, reg.req, reg.rep, unreg.req,
               unreg.rep);
        printf("8 and 64 connections are threads of one process; the machine has %ld CPUs, "
               "shared with the daemon (one event-loop thread).\n\n",
               sysconf(_SC_NPROCESSORS_ONLN));
        fflush(stdout);

        /* Redis first, so gpuipcd cases can point at it. */
        int rd1 = -1, rd8 = -1, rd64 = -1, rdp16 = -1, rdp64 = -1, rd8p16 = -1;
        if (G.redis > 0) {
                rd1 = add("redis", "GET", K_REDIS, 1, 1);
                rd8 = add("redis", "GET", K_REDIS, 8, 1);
                rd64 = add("redis", "GET", K_REDIS, 64, 1);
                rdp16 = add("redis", "GET pipelined", K_REDIS, 1, 16);
                rdp64 = add("redis", "GET pipelined", K_REDIS, 1, 64);
                rd8p16 = add("redis", "GET pipelined", K_REDIS, 8, 16);
        }
        (void)rd8p16;
        int fl[3], fln[3], flr[3], fr[3], fru[3], conns[3] = { 1, 8, 64 };
        int rdc[3] = { rd1, rd8, rd64 };
        for (int k = 0; k < 3; k++) {
                fl[k] = add_raw("raw lookup shape", conns[k], 1, lk, NULL);
                fln[k] = add_raw("raw lookup shape no fd", conns[k], 1, lkn, NULL);
                flr[k] = add_raw("raw lookup+release shape", conns[k], 1, lk, &rel);
                fr[k] = add_raw("raw register shape", conns[k], 1, reg, NULL);
                fru[k] = add_raw("raw register+unregister shape", conns[k], 1, reg, &unreg);
        }
        int flp = add_raw("raw lookup shape pipelined", 1, 64, lk, NULL);
        int flpn = add_raw("raw lookup shape pipelined no fd", 1, 64, lkn, NULL);
        int flpn16 = add_raw("raw lookup shape pipelined no fd", 1, 16, lkn, NULL);
        int frp = add_raw("raw register shape pipelined", 1, 64, reg, NULL);
        int lib_l[3], lib_lr[3];
        for (int k = 0; k < 3; k++) {
                /* Views stay open, so repeated lookups reuse the mapping
                 * and come without an fd: the floor has none either. */
                int i = add("gpuipcd", "lookup (library)", K_LIB_LOOKUP, conns[k], 1);
                cases[i].floor = fln[k];
                cases[i].redis = rdc[k];
                lib_l[k] = i;
                i = add("gpuipcd", "lookup+release (library)", K_LIB_LOOKUP_REL, conns[k], 1);
                cases[i].floor = flr[k];
                lib_lr[k] = i;
        }
        int wl = add("gpuipcd", "lookup (wire; no mmap)", K_WIRE_LOOKUP, 1, 1);
        cases[wl].floor = fl[0];
        cases[wl].redis = rd1;
        int wlh = add("gpuipcd", "lookup with have (wire; no fd)", K_WIRE_LOOKUP_HAVE, 1, 1);
        cases[wlh].floor = fln[0];
        cases[wlh].redis = rd1;
        int wlp = add("gpuipcd", "lookup pipelined (wire)", K_WIRE_LOOKUP, 1, 64);
        cases[wlp].floor = flp;
        cases[wlp].redis = rdp64;
        int wlp16 = add("gpuipcd", "lookup pipelined (wire)", K_WIRE_LOOKUP, 1, 16);
        cases[wlp16].redis = rdp16;
        int wlph = add("gpuipcd", "lookup pipelined with have (wire)", K_WIRE_LOOKUP_HAVE, 1, 64);
        cases[wlph].floor = flpn;
        cases[wlph].redis = rdp64;
        int wlph16 = add("gpuipcd", "lookup pipelined with have (wire)", K_WIRE_LOOKUP_HAVE, 1, 16);
        cases[wlph16].floor = flpn16;
        cases[wlph16].redis = rdp16;
        int lib_r[3];
        for (int k = 0; k < 3; k++) {
                int i = add("gpuipcd", "register (library)", K_LIB_REG, conns[k], 1);
                cases[i].floor = fr[k];
                lib_r[k] = i;
                i = add("gpuipcd", "register+unregister (library)", K_LIB_REG_UNREG, conns[k], 1);
                cases[i].floor = fru[k];
        }
        int wrp = add("gpuipcd", "register pipelined (wire)", K_WIRE_REG, 1, 64);
        cases[wrp].floor = frp;
        (void)lib_lr;

        /* Interleaved rounds: every case once per round. */
        for (int r = 0; r < G.rounds; r++) {
                double t0 = now_us();
                for (int i = 0; i < ncases; i++)
                        run_case(&cases[i], r);
                for (int i = 0; i < ncases; i++) {
                        struct spec *s = &cases[i];
                        s->r_p50[r] = s->floor >= 0 ? s->p50[r] / cases[s->floor].p50[r] : NAN;
                        s->r_ops[r] = s->floor >= 0 ? s->ops[r] / cases[s->floor].ops[r] : NAN;
                        s->r_redis[r] = s->redis >= 0 ? s->ops[r] / cases[s->redis].ops[r] : NAN;
                }
                printf("round %d/%d done (%.0f s)\n", r + 1, G.rounds, (now_us() - t0) / 1e6);
                fflush(stdout);
        }

        fprintf(csv, "section,case,conns,depth,p50_us,p99_us,ops_per_s,floor_case,"
                     "p50_vs_floor,ops_vs_floor,ops_vs_redis\n");
        printf("\n%-8s %-32s %5s %5s %9s %9s %11s %8s %8s %8s\n", "section", "case", "conns",
               "depth", "p50 us", "p99 us", "ops/s", "p50/flr", "ops/flr", "ops/redis");
        for (int i = 0; i < ncases; i++) {
                struct spec *s = &cases[i];
                double rp = med(s->r_p50), ro = med(s->r_ops), rr = med(s->r_redis);
                printf("%-8s %-32s %5d %5d %9.1f %9.1f %11.0f %8.2f %8.2f %8.2f\n", s->section,
                       s->name, s->conns, s->depth, med(s->p50), med(s->p99), med(s->ops), rp,
                       ro, rr);
                fprintf(csv, "%s,%s,%d,%d,%.2f,%.2f,%.0f,%s,%.3f,%.3f,%.3f\n", s->section,
                        s->name, s->conns, s->depth, med(s->p50), med(s->p99), med(s->ops),
                        s->floor >= 0 ? cases[s->floor].name : "", rp, ro, rr);
        }
        printf("(pipelined rows: p50/p99 are of one batch of `depth` requests)\n");
        fflush(stdout);
        proc_stop(G.raw);
        if (G.redis > 0)
                proc_stop(G.redis);
        proc_stop(G.daemon);

        /* Registry scale, on a fresh daemon. */
        printf("\nregistry scale (fresh daemon; host registrations of one shared memfd, "
               "4 KiB each at offsets)\n");
        fflush(stdout);
        nhrows = run_scale(argv[1], scale_max, false, hrows, &nofile);
        nrows = run_scale(argv[1], scale_max, true, rows, &nofile);
        print_scale(csv, "host", hrows, nhrows);
        print_scale(csv, "cuda-ipc", rows, nrows);

        /* Targets. */
        printf("\ntargets\n");
        fprintf(csv, "target,name,value,threshold,met\n");
#define TARGET(name, val, thr, ok) do { \
                printf("  %-60s %8.2f (target %s) %s\n", name, (double)(val), thr, \
                       isnan(val) ? "n/a" : yesno(ok)); \
                fprintf(csv, "target,%s,%.3f,%s,%s\n", name, (double)(val), thr, \
                        isnan(val) ? "n/a" : (ok) ? "met" : "not met"); \
        } while (0)
        double v;
        v = med(cases[lib_l[0]].r_p50);
        TARGET("lookup p50 / raw round trip, no fd (library, views open)", v, "<= 1.2",
               v <= 1.2);
        v = med(cases[wl].r_p50);
        TARGET("lookup p50 / raw round trip with fd (wire, 1 conn)", v, "<= 1.2", v <= 1.2);
        v = med(cases[wlh].r_p50);
        TARGET("lookup p50 / raw round trip, no fd (wire with have)", v, "<= 1.2", v <= 1.2);
        v = med(cases[lib_r[0]].r_p50);
        TARGET("register p50 / raw round trip with fd (library, 1 conn)", v, "<= 1.2", v <= 1.2);
        v = med(cases[lib_l[0]].r_redis);
        TARGET("lookup ops/s / Redis GET ops/s, 1 conn", v, ">= 1.3", v >= 1.3);
        v = med(cases[lib_l[1]].r_redis);
        TARGET("lookup ops/s / Redis GET ops/s, 8 conns", v, ">= 1.0", v >= 1.0);
        v = med(cases[wlph].r_redis);
        TARGET("pipelined lookup (have) / Redis GET -P 64 ops/s, 1 conn", v, ">= 1.0",
               v >= 1.0);
        v = med(cases[wlph16].r_redis);
        TARGET("pipelined lookup (have) / Redis GET -P 16 ops/s, 1 conn", v, ">= 1.0",
               v >= 1.0);
        v = med(cases[wlp].r_redis);
        TARGET("pipelined lookup with fd / Redis GET -P 64 ops/s, 1 conn", v, ">= 1.0",
               v >= 1.0);
        v = med(cases[wlph].ops);
        TARGET("batched (pipelined x64, have) lookups/s, 1 conn", v, "> 1000000", v > 1e6);
        if (nrows >= 2) {
                v = rows[nrows - 1].wire_p50 / rows[0].wire_p50;
                TARGET("lookup p50 at largest / at 1k registrations (cuda-ipc, wire)", v,
                       "0.9..1.1", v >= 0.9 && v <= 1.1);
        }
        if (nhrows >= 2) {
                v = hrows[nhrows - 1].lib_p50 / hrows[0].lib_p50;
                TARGET("lookup p50 at largest / at 1k registrations (host, library)", v,
                       "0.9..1.1", v >= 0.9 && v <= 1.1);
        }
        if (nrows >= 1) {
                /* Names are "s/NNNNNNN" (9 bytes + NUL); no metadata. */
                v = rows[nrows - 1].rss_per_reg - 10 - 64;
                TARGET("daemon RSS/registration beyond name+handle (cuda-ipc, bytes)", v,
                       "<= 256", v <= 256);
        }
        if (nhrows >= 1) {
                v = hrows[nhrows - 1].rss_per_reg - 10;
                TARGET("daemon RSS/registration beyond name (host, bytes)", v, "<= 256",
                       v <= 256);
        }
        uint64_t top_c = 0, top_h = 0;
        for (int i = 0; i < nrows; i++)
                top_c = rows[i].n;
        for (int i = 0; i < nhrows; i++)
                top_h = hrows[i].n;
        printf("(scale: largest level %" PRIu64 " cuda-ipc / %" PRIu64 " host registrations)\n",
               top_c, top_h);
        (void)nofile;
        fclose(csv);
        snprintf(cmd, sizeof(cmd), "%s", csvpath);
        printf("\nCSV: %s\n", cmd);
        tmpdir_remove();
        return 0;
}
