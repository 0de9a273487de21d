/* bench_batch.c: a batch row for `make bench` (issue 19): buffers handed
 * over per second on one connection, as
 *   batch       gpuipc_batch_view_lookup() + gpuipc_batch_view_release() of a
 *               batch of NBUF host buffers (NBUF int32 columns in one memfd)
 *   batch+arrow the same, exporting the ArrowSchema and ArrowArray and
 *               releasing them too (what an Arrow consumer does)
 *   single/lib  NBUF gpuipc_view_lookup() + gpuipc_view_release() of single
 *               registrations of the same buffers, one after another
 *   single/pipe NBUF single lookups pipelined on the wire (all sent, then
 *               all replies read), then NBUF releases likewise
 *   floor       one raw AF_UNIX round trip of the batch reply's size with
 *               one fd (bench_util's raw server), times NBUF: the most a
 *               lookup-per-batch design can hand over on one socket
 * The consumer is this process, the producer another connection of it.
 * Each figure is the median over BENCH_ROUNDS (default 5) runs of
 * BENCH_SECONDS (default 1) each; BENCH_ONLY=N runs case N alone (for a
 * profiler).  The CPU columns are this thread's and the daemon's CPU time
 * per operation.
 *
 * usage: bench_batch GPUIPCD CSV */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "gpuipc.h"

#define NBUF 64
#define ROWS 1024

static void gk(gpuipc_client *c, int r, const char *what)
{
        if (r < 0)
                die("%s: %s (%s)", what, gpuipc_strerror(r), c ? gpuipc_errmsg(c) : "-");
}

static void noop_schema(struct ArrowSchema *s)
{
        s->release = NULL;
}

static void noop_array(struct ArrowArray *a)
{
        a->release = NULL;
}

/* NBUF int32 columns of ROWS rows in one hostbuf, registered as a batch
 * ("bench/batch") and each as a single registration ("bench/s/I"). */
static gpuipc_hostbuf *produce(gpuipc_client *p)
{
        static struct ArrowSchema cs[NBUF];
        static struct ArrowArray ca[NBUF];
        static const void *bufs[NBUF][2];
        static char names[NBUF][16];
        gpuipc_hostbuf *hb = NULL;
        gpuipc_batch *b = NULL;
        char name[64];

        gk(NULL, gpuipc_hostbuf_new(NBUF * ROWS * 4, &hb), "hostbuf");
        gk(NULL, gpuipc_batch_new(&b), "batch_new");
        for (int i = 0; i < NBUF; i++) {
                int32_t *v = (int32_t *)gpuipc_hostbuf_data(hb) + (size_t)i * ROWS;
                for (int k = 0; k < ROWS; k++)
                        v[k] = i * k;
                snprintf(names[i], sizeof(names[i]), "c%d", i);
                bufs[i][0] = NULL;
                bufs[i][1] = v;
                cs[i] = (struct ArrowSchema){ .format = "i", .name = names[i],
                                              .release = noop_schema };
                ca[i] = (struct ArrowArray){ .length = ROWS, .n_buffers = 2,
                                             .buffers = bufs[i], .release = noop_array };
                if (gpuipc_batch_add_column(b, &cs[i], &ca[i], -1) < 0)
                        die("add_column: %s", gpuipc_batch_errmsg(b));
        }
        gk(p, gpuipc_batch_register(p, "bench/batch", b, 0, NULL), "batch_register");
        gpuipc_batch_free(b);
        for (int i = 0; i < NBUF; i++) {
                snprintf(name, sizeof(name), "bench/s/%d", i);
                gk(p, gpuipc_fd_register(p, name, gpuipc_hostbuf_fd(hb), (uint64_t)i * ROWS * 4,
                                         ROWS * 4, NULL, 0, NULL), "register_fd");
        }
        return hb;
}

/* Runs fn for `seconds`; returns buffers per second. */
struct run {
        const char *name;
        void (*fn)(void *arg);
        void *arg;
        double bufs[16], p50[16], cpu[16], dcpu[16];
};

static double seconds = 1.0;
static pid_t daemon_pid;

/* CPU time of this thread, and of the daemon (utime + stime), in us. */
static double thread_cpu_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static double daemon_cpu_us(void)
{
        char path[64], buf[1024], *p;
        unsigned long long ut = 0, st = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)daemon_pid);
        f = fopen(path, "r");
        if (!f)
                return NAN;
        p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
        fclose(f);
        /* after "comm)": state ppid pgrp session tty tpgid flags minflt
         * cminflt majflt cmajflt utime stime */
        if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                         &ut, &st) != 2)
                return NAN;
        return (double)(ut + st) * 1e6 / (double)sysconf(_SC_CLK_TCK);
}

static void measure(struct run *r, int round)
{
        struct samples s;
        double t0 = now_us(), t, end = t0 + seconds * 1e6;
        double c0 = thread_cpu_us(), d0 = daemon_cpu_us();
        uint64_t n = 0;

        samples_init(&s, 1u << 20);
        do {
                double a = now_us();
                r->fn(r->arg);
                t = now_us();
                samples_add(&s, t - a);
                n++;
        } while (t < end);
        r->bufs[round] = (double)n * NBUF / ((t - t0) / 1e6);
        r->p50[round] = samples_pct(&s, 50);
        r->cpu[round] = (thread_cpu_us() - c0) / (double)n;
        r->dcpu[round] = (daemon_cpu_us() - d0) / (double)n;
        samples_free(&s);
}

static void run_batch(void *arg)
{
        gpuipc_client *c = arg;
        gpuipc_batch_view *v = NULL;

        gk(c, gpuipc_batch_view_lookup(c, "bench/batch", 0, 0, &v), "batch_lookup");
        gk(c, gpuipc_batch_view_release(v), "batch_view_release");
}

static void run_batch_arrow(void *arg)
{
        gpuipc_client *c = arg;
        gpuipc_batch_view *v = NULL;
        struct ArrowSchema s;
        struct ArrowArray a;

        gk(c, gpuipc_batch_view_lookup(c, "bench/batch", 0, 0, &v), "batch_lookup");
        gk(c, gpuipc_batch_view_export(v, -1, &s, &a), "export");
        gk(c, gpuipc_batch_view_release(v), "batch_view_release");
        if (((const int32_t *)a.children[NBUF - 1]->buffers[1])[ROWS - 1] !=
            (NBUF - 1) * (ROWS - 1))
                die("batch+arrow: wrong data");
        s.release(&s);
        a.release(&a);                  /* the lease goes back at the next call */
}

static void run_single_lib(void *arg)
{
        gpuipc_client *c = arg;
        char name[64];

        for (int i = 0; i < NBUF; i++) {
                gpuipc_view *v = NULL;
                snprintf(name, sizeof(name), "bench/s/%d", i);
                gk(c, gpuipc_view_lookup(c, name, 0, 0, &v), "lookup");
                gk(c, gpuipc_view_release(v), "view_release");
        }
}

struct pipe_ctx {
        struct conn_rd rd;
        uint64_t seq;
        uint8_t *req;                   /* NBUF lookups, back to back */
        size_t req_len;
};

static void run_single_pipe(void *arg)
{
        struct pipe_ctx *x = arg;
        uint64_t leases[NBUF];
        struct proto_out o;
        msgpack_sbuffer rel;

        send_all(x->rd.sock, x->req, x->req_len, -1);
        for (int i = 0; i < NBUF; i++)
                leases[i] = wire_reply(&x->rd, "lease", NULL);
        msgpack_sbuffer_init(&rel);
        for (int i = 0; i < NBUF; i++) {
                wire_release(&o, ++x->seq, leases[i]);
                msgpack_sbuffer_write(&rel, o.sb.data, o.sb.size);
                proto_out_free(&o);
        }
        send_all(x->rd.sock, rel.data, rel.size, -1);
        msgpack_sbuffer_destroy(&rel);
        for (int i = 0; i < NBUF; i++)
                (void)wire_reply(&x->rd, NULL, NULL);
}

struct floor_ctx {
        int sock;
        struct conn_rd rd;
        uint8_t req[16];
};

static void run_floor(void *arg)
{
        struct floor_ctx *x = arg;
        uint32_t len;

        send_all(x->sock, x->req, sizeof(x->req), -1);
        (void)rd_next(&x->rd, &len);
}

/* The size of the batch's lookup reply, for the floor. */
static size_t batch_reply_len(const char *sock)
{
        struct conn_rd rd;
        struct proto_out o;
        uint32_t len;

        wire_connect(&rd, sock);
        wire_lookup(&o, 2, "bench/batch");
        send_all(rd.sock, o.sb.data, o.sb.size, -1);
        proto_out_free(&o);
        (void)wire_reply(&rd, "lease", &len);
        rd_free(&rd);
        return len + 4;
}

int main(int argc, char **argv)
{
        char sock[256], raw[256];
        const char *e;
        gpuipc_client *p = NULL, *c = NULL;
        gpuipc_hostbuf *hb;
        struct pipe_ctx px = { 0 };
        struct floor_ctx fx = { 0 };
        struct proto_out o;
        msgpack_sbuffer req;
        pid_t d, rs;
        size_t rep;
        int rounds = 5;
        FILE *csv;

        if (argc != 3)
                die("usage: %s GPUIPCD CSV", argv[0]);
        if ((e = getenv("BENCH_SECONDS")) && atof(e) > 0)
                seconds = atof(e);
        if ((e = getenv("BENCH_ROUNDS")) && atoi(e) > 0)
                rounds = atoi(e) > 16 ? 16 : atoi(e);
        snprintf(sock, sizeof(sock), "%s/gpuipcd.sock", tmpdir_get());
        snprintf(raw, sizeof(raw), "%s/raw.sock", tmpdir_get());
        d = daemon_pid = daemon_start(argv[1], sock, 0, NULL);
        rs = rawsrv_start(raw);
        gk(NULL, gpuipc_client_connect(sock, &p), "connect");
        gk(NULL, gpuipc_client_connect(sock, &c), "connect");
        hb = produce(p);
        rep = batch_reply_len(sock);

        wire_connect(&px.rd, sock);
        msgpack_sbuffer_init(&req);
        for (int i = 0; i < NBUF; i++) {
                char name[64];
                snprintf(name, sizeof(name), "bench/s/%d", i);
                wire_lookup(&o, ++px.seq, name);
                msgpack_sbuffer_write(&req, o.sb.data, o.sb.size);
                proto_out_free(&o);
        }
        px.req = (uint8_t *)req.data;
        px.req_len = req.size;
        fx.sock = unix_connect(raw);
        if (fx.sock < 0)
                die("raw connect: %s", strerror(-fx.sock));
        rd_init(&fx.rd, fx.sock);
        rawreq_build(fx.req, sizeof(fx.req), rep, true);

        struct run runs[] = {
                { .name = "batch lookup+release (library)", .fn = run_batch, .arg = c },
                { .name = "batch lookup+export+release (library, Arrow)",
                  .fn = run_batch_arrow, .arg = c },
                { .name = "64 single lookup+release (library)", .fn = run_single_lib, .arg = c },
                { .name = "64 single lookups pipelined, then 64 releases (wire)",
                  .fn = run_single_pipe, .arg = &px },
                { .name = "floor: one raw round trip of the batch reply + fd, x64",
                  .fn = run_floor, .arg = &fx },
        };
        const int nruns = (int)(sizeof(runs) / sizeof(runs[0]));

        printf("gpuipcd batch benchmark: %d buffers of %d bytes, batch reply %zu bytes, "
               "%d round(s) x %.1f s\n", NBUF, ROWS * 4, rep, rounds, seconds);
        e = getenv("BENCH_ONLY");
        for (int r = 0; r < rounds; r++)
                for (int i = 0; i < nruns; i++)
                        if (!e || atoi(e) == i)
                                measure(&runs[i], r);
        csv = fopen(argv[2], "w");
        if (!csv)
                die("%s: %s", argv[2], strerror(errno));
        fprintf(csv, "case,buffers_per_s,p50_us_per_op,client_cpu_us_per_op,"
                "daemon_cpu_us_per_op\n");
        printf("%-56s %11s %10s %10s %10s\n", "case (one op: 64 buffers)", "buffers/s",
               "p50 us/op", "lib cpu us", "daemon cpu");
        for (int i = 0; i < nruns; i++) {
                double b = median(runs[i].bufs, rounds), l = median(runs[i].p50, rounds);
                double u = median(runs[i].cpu, rounds), dc = median(runs[i].dcpu, rounds);
                printf("%-56s %11.0f %10.1f %10.1f %10.1f\n", runs[i].name, b, l, u, dc);
                fprintf(csv, "\"%s\",%.0f,%.2f,%.2f,%.2f\n", runs[i].name, b, l, u, dc);
        }
        printf("target: 1000000 buffers/s for the batch lookup: %s\n",
               median(runs[0].bufs, rounds) >= 1e6 ? "met" : "not met");
        fclose(csv);
        rd_free(&fx.rd);
        close(fx.sock);
        rd_free(&px.rd);
        msgpack_sbuffer_destroy(&req);
        gpuipc_client_free(c);
        gpuipc_hostbuf_free(hb);
        gpuipc_client_free(p);
        proc_stop(rs);
        proc_stop(d);
        tmpdir_remove();
        return 0;
}
