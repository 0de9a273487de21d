/* gpu_bench.c: GPU buffer handoff through gpuipcd, against a pinned host copy.
 * Needs an NVIDIA GPU and a running gpuipcd ($GPUIPC_SOCKET);
 * tests/bench/gpu_run.sh starts one and runs `gpu_bench all`.
 *
 * For 1 MiB, 64 MiB and 1 GiB, a producer process fills device memory and
 * registers it; a consumer process (CUDA context and kernels ready, already
 * waiting in gpuipc_lookup) maps it and runs count_bad (tests/gpu/kernels.ptx)
 * over every byte: the first kernel able to read.  Measured from just before
 * register (producer) to that kernel's completion (consumer), CLOCK_MONOTONIC
 * on one host:
 *   cuda-ipc cold   cuMemAlloc memory, first lookup (cuIpcOpenMemHandle)
 *   cuda-ipc warm   a second lookup of it in the same consumer (opened once)
 *   cuda-vmm cold   gpuipc_cudabuf_new memory (POSIX fd import), and warm
 *   pinned copy     cuMemcpyDtoH to pinned memory, AF_UNIX socket in 1 MiB
 *                   writes into the consumer's pinned buffer, cuMemcpyHtoD
 * Every kernel checks the bytes: a wrong byte fails the run.
 *
 * usage: gpu_bench all [ROUNDS]           prints CSV on stdout
 *        gpu_bench producer|consumer MODE SIZE RESFD GOFD SOCKFD   (internal) */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_util.h"

extern char **environ;

#define MiB (1ull << 20)
#define SEED 91u
#define MAXR 16
#define WARM_N 201      /* warm lookups per round; the median is reported */

enum { R_CONS_READY = 1, R_PROD_READY, R_PROD_T0, R_CONS_DONE };

struct rec {
        int tag;
        int pad;
        double v[6];
};

static int res_fd = -1;

static void send_rec(int tag, const double *v, int n)
{
        struct rec r = { .tag = tag };

        for (int i = 0; i < n && i < 6; i++)
                r.v[i] = v[i];
        if (write(res_fd, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
                fprintf(stderr, "gpu_bench[%d]: result pipe: %s\n", (int)getpid(),
                        strerror(errno));
                exit(1);
        }
}

static int wait_go(int go)
{
        char b;

        return read(go, &b, 1) == 1 ? 0 : fail("orchestrator went away");
}

static int io_all(int s, char *p, size_t n, bool wr)
{
        while (n > 0) {
                ssize_t k = wr ? write(s, p, n < MiB ? n : MiB) : read(s, p, n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return fail("socket %s: %s", wr ? "write" : "read",
                                    k ? strerror(errno) : "EOF");
                p += k;
                n -= (size_t)k;
        }
        return 0;
}

/* ---- producer ----------------------------------------------------------- */

static int producer(gpuipc_client *c, const char *mode, uint64_t size, int go, int sock)
{
        double t0;
        uint64_t id;

        if (!strcmp(mode, "pinned")) {
                CUdeviceptr d;
                void *h;
                CK(cuMemAlloc(&d, size));
                fill(d, size, SEED, 0, NULL);
                CK(cuMemAllocHost(&h, size));
                memset(h, 0, size);
                CK(cuCtxSynchronize());
                send_rec(R_PROD_READY, NULL, 0);
                if (wait_go(go))
                        return 1;
                t0 = now_us();
                CK(cuMemcpyDtoH(h, d, size));
                if (io_all(sock, h, size, true))
                        return 1;
                send_rec(R_PROD_T0, &t0, 1);
                /* Wait for the consumer to close its end. */
                char b;
                while (read(sock, &b, 1) > 0)
                        ;
                CK(cuMemFreeHost(h));
                CK(cuMemFree(d));
                return 0;
        }
        if (!strcmp(mode, "cuda-ipc")) {
                CUdeviceptr d;
                CK(cuMemAlloc(&d, size));
                fill(d, size, SEED, 0, NULL);
                CK(cuCtxSynchronize());
                send_rec(R_PROD_READY, NULL, 0);
                if (wait_go(go))
                        return 1;
                t0 = now_us();
                GK(gpuipc_register_cuda(c, "bench/gpu/buf", d, size, NULL, NULL, 0, &id));
                send_rec(R_PROD_T0, &t0, 1);
                /* The memory stays ours: keep it until the consumer is done. */
                GK(gpuipc_wait_released(c, id, 600000));
                GK(gpuipc_unregister(c, "bench/gpu/buf"));
                CK(cuMemFree(d));
                return 0;
        }
        gpuipc_cudabuf *b;
        GK(gpuipc_cudabuf_new(0, size, &b));
        fill(gpuipc_cudabuf_ptr(b), size, SEED, 0, NULL);
        CK(cuCtxSynchronize());
        send_rec(R_PROD_READY, NULL, 0);
        if (wait_go(go))
                return 1;
        t0 = now_us();
        GK(gpuipc_register_cuda(c, "bench/gpu/buf", gpuipc_cudabuf_ptr(b), size, NULL, NULL, 0,
                                &id));
        send_rec(R_PROD_T0, &t0, 1);
        GK(gpuipc_wait_released(c, id, 600000));
        GK(gpuipc_unregister(c, "bench/gpu/buf"));
        gpuipc_cudabuf_free(b);
        return 0;
}

/* ---- consumer ----------------------------------------------------------- */

static int cmp_d(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return (x > y) - (x < y);
}

static double ping_p50(gpuipc_client *c)
{
        static double t[1000];

        for (int i = 0; i < 1000; i++) {
                double t0 = now_us();
                if (gpuipc_ping(c) < 0)
                        return NAN;
                t[i] = now_us() - t0;
        }
        qsort(t, 1000, sizeof(double), cmp_d);
        return t[500];
}

static int consumer(gpuipc_client *c, const char *mode, uint64_t size, int sock)
{
        double v[6] = { 0 };
        unsigned long long bad;

        /* Warm up the daemon path and the kernels before timing anything. */
        v[4] = ping_p50(c);
        {
                CUdeviceptr w;
                CK(cuMemAlloc(&w, MiB));
                fill(w, MiB, SEED, 0, NULL);
                if (count_bad(w, MiB, SEED, 0) != 0)
                        return fail("warm-up kernel read wrong bytes");
                CK(cuMemFree(w));
        }
        if (!strcmp(mode, "pinned")) {
                CUdeviceptr d;
                void *h;
                CK(cuMemAlloc(&d, size));
                CK(cuMemAllocHost(&h, size));
                memset(h, 0, size);
                send_rec(R_CONS_READY, NULL, 0);
                if (io_all(sock, h, size, false))
                        return 1;
                v[0] = now_us();
                CK(cuMemcpyHtoD(d, h, size));
                bad = count_bad(d, size, SEED, 0);
                v[1] = now_us();
                v[5] = (double)bad;
                send_rec(R_CONS_DONE, v, 6);
                close(sock);
                CK(cuMemFreeHost(h));
                CK(cuMemFree(d));
                return bad ? fail("pinned copy: %llu wrong bytes", bad) : 0;
        }
        gpuipc_view *v1, *v2;
        send_rec(R_CONS_READY, NULL, 0);
        GK(gpuipc_lookup(c, "bench/gpu/buf", 600000, 0, &v1));
        v[0] = now_us();
        if (gpuipc_view_size(v1) != size)
                return fail("view is %zu bytes, expected %llu", gpuipc_view_size(v1),
                            (unsigned long long)size);
        bad = count_bad((CUdeviceptr)(uintptr_t)gpuipc_view_data(v1), size, SEED, 0);
        v[1] = now_us();
        /* Warm: the same buffer again while the first view holds it open.
         * The warm lookup figure is the median of WARM_N lookups (each view
         * released again); one sample right after the cold path's kernel
         * is mostly noise.  Then one more lookup, timed through its kernel. */
        double lk[WARM_N];
        for (int i = 0; i < WARM_N; i++) {
                gpuipc_view *w;
                double t = now_us();
                GK(gpuipc_lookup(c, "bench/gpu/buf", 0, 0, &w));
                lk[i] = now_us() - t;
                GK(gpuipc_view_release(w));
        }
        qsort(lk, WARM_N, sizeof(double), cmp_d);
        v[2] = lk[WARM_N / 2];
        double t2 = now_us();
        GK(gpuipc_lookup(c, "bench/gpu/buf", 0, 0, &v2));
        bad += count_bad((CUdeviceptr)(uintptr_t)gpuipc_view_data(v2), size, SEED, 0);
        v[3] = now_us() - t2;
        v[5] = (double)bad;
        send_rec(R_CONS_DONE, v, 6);
        GK(gpuipc_view_release(v2));
        GK(gpuipc_view_release(v1));
        return bad ? fail("%s: %llu wrong bytes", mode, bad) : 0;
}

static int role(char **argv)
{
        const char *who = argv[1], *mode = argv[2];
        uint64_t size = strtoull(argv[3], NULL, 10);
        int go = atoi(argv[5]), sock = atoi(argv[6]);
        gpuipc_client *c = NULL;
        int r;

        res_fd = atoi(argv[4]);
        gpu_setup();
        GK(gpuipc_connect(NULL, &c));
        gpu_client = c;
        r = !strcmp(who, "producer") ? producer(c, mode, size, go, sock)
                                     : consumer(c, mode, size, sock);
        gpuipc_client_free(c);
        return r ? 1 : 0;
}

/* ---- orchestration ------------------------------------------------------ */

/* Every fd of ours is close-on-exec and numbered >= 100; each child gets
 * exactly its three as fds 3 (results), 4 (go) and 5 (its socket end), so no
 * child holds the other's socket end open. */
static int hi_fd(int fd)
{
        int n = fcntl(fd, F_DUPFD_CLOEXEC, 100);

        close(fd);
        return n;
}

static pid_t spawn_role(const char *self, const char *who, const char *mode, uint64_t size,
                        int resfd, int gofd, int sockfd)
{
        char s_size[32];
        char *argv[] = { (char *)self, (char *)who, (char *)mode, s_size, "3", "4", "5",
                         NULL };
        posix_spawn_file_actions_t fa;
        pid_t pid;
        int r;

        snprintf(s_size, sizeof(s_size), "%llu", (unsigned long long)size);
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, resfd, 3);
        posix_spawn_file_actions_adddup2(&fa, gofd, 4);
        posix_spawn_file_actions_adddup2(&fa, sockfd, 5);
        r = posix_spawn(&pid, self, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        return r == 0 ? pid : -1;
}

/* Next record, or -1 when a child failed or 600 s passed. */
static int next_rec(int fd, struct rec *r, pid_t *kids, int nkids)
{
        for (int waited = 0; waited < 600; waited++) {
                struct pollfd p = { fd, POLLIN, 0 };
                if (poll(&p, 1, 1000) == 1)
                        return read(fd, r, sizeof(*r)) == (ssize_t)sizeof(*r) ? 0 : -1;
                for (int i = 0; i < nkids; i++) {
                        int st;
                        if (kids[i] > 0 && waitpid(kids[i], &st, WNOHANG) == kids[i]) {
                                kids[i] = -1;
                                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                                        fprintf(stderr, "gpu_bench: a %s process failed "
                                                "(see its message above)\n",
                                                i ? "consumer" : "producer");
                                        return -1;
                                }
                        }
                }
        }
        fprintf(stderr, "gpu_bench: no progress for 600 s\n");
        return -1;
}

/* One handoff: res[0] register -> kernel done, [1] register -> lookup
 * returned, [2] warm lookup, [3] warm lookup -> kernel done, [4] ping p50 (us
 * for [2] and [4], ms otherwise). */
static int run_case(const char *self, const char *mode, uint64_t size, double res[5])
{
        int rp[2], gp[2], sp[2];
        pid_t kids[2];
        double t0 = NAN;
        struct rec r, done = { 0 };
        int ok = 0, got = 0;

        if (pipe2(rp, O_CLOEXEC) < 0 || pipe2(gp, O_CLOEXEC) < 0 ||
            socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
                fprintf(stderr, "gpu_bench: pipe: %s\n", strerror(errno));
                return -1;
        }
        rp[0] = hi_fd(rp[0]);
        rp[1] = hi_fd(rp[1]);
        gp[0] = hi_fd(gp[0]);
        gp[1] = hi_fd(gp[1]);
        sp[0] = hi_fd(sp[0]);
        sp[1] = hi_fd(sp[1]);
        if (rp[0] < 0 || rp[1] < 0 || gp[0] < 0 || gp[1] < 0 || sp[0] < 0 || sp[1] < 0) {
                fprintf(stderr, "gpu_bench: fcntl(F_DUPFD_CLOEXEC): %s\n", strerror(errno));
                return -1;
        }
        kids[0] = spawn_role(self, "producer", mode, size, rp[1], gp[0], sp[0]);
        kids[1] = spawn_role(self, "consumer", mode, size, rp[1], gp[0], sp[1]);
        close(sp[0]);
        close(sp[1]);
        close(gp[0]);
        if (kids[0] < 0 || kids[1] < 0) {
                fprintf(stderr, "gpu_bench: cannot spawn %s\n", self);
                ok = -1;
        }
        /* Both ready -> go; then t0 and the consumer's result. */
        while (ok == 0 && got < 4) {
                if (next_rec(rp[0], &r, kids, 2) < 0) {
                        ok = -1;
                        break;
                }
                got++;
                if (r.tag == R_PROD_T0)
                        t0 = r.v[0];
                else if (r.tag == R_CONS_DONE)
                        done = r;
                if (got == 2) {
                        usleep(50000);  /* the consumer is now waiting in lookup */
                        if (write(gp[1], "g", 1) != 1)
                                ok = -1;
                }
        }
        close(gp[1]);
        close(rp[0]);
        close(rp[1]);
        for (int i = 0; i < 2; i++) {
                int st;
                if (kids[i] <= 0)
                        continue;
                if (ok < 0)
                        kill(kids[i], SIGKILL);
                if (waitpid(kids[i], &st, 0) == kids[i] && (!WIFEXITED(st) || WEXITSTATUS(st)))
                        ok = -1;
        }
        if (ok < 0 || isnan(t0) || done.tag != R_CONS_DONE)
                return -1;
        res[0] = (done.v[1] - t0) / 1e3;
        res[1] = (done.v[0] - t0) / 1e3;
        res[2] = done.v[2];
        res[3] = done.v[3] / 1e3;
        res[4] = done.v[4];
        return 0;
}

static double med(double *v, int n)
{
        double t[MAXR];
        int k = 0;

        for (int i = 0; i < n; i++)
                if (!isnan(v[i]))
                        t[k++] = v[i];
        if (!k)
                return NAN;
        qsort(t, (size_t)k, sizeof(double), cmp_d);
        return k % 2 ? t[k / 2] : (t[k / 2 - 1] + t[k / 2]) / 2;
}

int main(int argc, char **argv)
{
        static const uint64_t sizes[] = { MiB, 64 * MiB, 1024 * MiB };
        static const char *const sname[] = { "1MiB", "64MiB", "1GiB" };
        static const char *const modes[] = { "pinned", "cuda-ipc", "cuda-vmm" };
        int rounds = 3, failures = 0;

        if (argc == 7)
                return role(argv);
        if (argc < 2 || strcmp(argv[1], "all") != 0) {
                fprintf(stderr, "usage: %s all [ROUNDS]\n", argv[0]);
                return 2;
        }
        if (argc > 2)
                rounds = atoi(argv[2]);
        if (rounds < 1 || rounds > MAXR) {
                fprintf(stderr, "gpu_bench: ROUNDS must be 1..%d\n", MAXR);
                return 2;
        }
        if (!getenv("GPUIPC_SOCKET") || !getenv("GPUIPC_GPU_PTX")) {
                fprintf(stderr, "gpu_bench: set GPUIPC_SOCKET (a running gpuipcd) and "
                        "GPUIPC_GPU_PTX (tests/gpu/kernels.ptx); tests/bench/gpu_run.sh does\n");
                return 2;
        }
        signal(SIGPIPE, SIG_IGN);
        printf("kind,size,mode,rounds,register_to_kernel_done_ms,register_to_lookup_ms,"
               "warm_lookup_us,warm_lookup_to_kernel_done_ms,ping_p50_us,"
               "pinned_over_this\n");
        fflush(stdout);
        for (int s = 0; s < 3; s++) {
                double v[3][5][MAXR];
                for (int r = 0; r < rounds; r++)
                        for (int m = 0; m < 3; m++) {
                                double res[5];
                                if (run_case(argv[0], modes[m], sizes[s], res) < 0) {
                                        fprintf(stderr, "gpu_bench: %s %s round %d FAILED\n",
                                                modes[m], sname[s], r + 1);
                                        failures++;
                                        for (int k = 0; k < 5; k++)
                                                res[k] = NAN;
                                }
                                for (int k = 0; k < 5; k++)
                                        v[m][k][r] = res[k];
                        }
                if (s == 0 && failures == rounds * 3) {
                        fprintf(stderr, "gpu_bench: every 1 MiB case failed: the setup is "
                                "broken (see the messages above); stopping\n");
                        return 1;
                }
                double pinned = med(v[0][0], rounds);
                for (int m = 0; m < 3; m++) {
                        double cold = med(v[m][0], rounds);
                        printf("gpu,%s,%s cold,%d,%.4f,%.4f,,,%.1f,%.1f\n", sname[s],
                               modes[m], rounds, cold, m ? med(v[m][1], rounds) : NAN,
                               med(v[m][4], rounds), pinned / cold);
                        if (m > 0) {
                                double warm = med(v[m][3], rounds);
                                printf("gpu,%s,%s warm,%d,%.4f,,%.1f,%.4f,%.1f,%.1f\n",
                                       sname[s], modes[m], rounds, warm, med(v[m][2], rounds),
                                       warm, med(v[m][4], rounds), pinned / warm);
                        }
                }
                fflush(stdout);
        }
        if (failures)
                fprintf(stderr, "gpu_bench: %d case(s) failed\n", failures);
        return failures ? 1 : 0;
}
