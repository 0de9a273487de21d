/* gpu_bench.c: GPU handoff from C, side by side in one run (issue 13).
 *
 * Needs an NVIDIA GPU and a running gpuipcd ($GPUIPC_SOCKET);
 * tests/bench/gpu_run.sh starts one and runs `gpu_bench all`.
 *
 * Each case is one producer and one consumer process (spawned, CUDA
 * context and kernels ready) and ROUNDS handoffs between them; the first
 * round warms up and is left out.  Before every handoff the producer fills
 * the buffer with that round's pattern, synchronises, then sleeps the same
 * idle time (2 ms or 50 ms: after 50 ms every driver call is slower).  The
 * consumer is already waiting.  Timed on CLOCK_MONOTONIC, one host:
 *   usable   from the producer's handoff call to the consumer holding a
 *            device pointer it may read
 *   kernel   to the consumer's first full-read kernel done (count_bad over
 *            every byte, tests/gpu/kernels.ptx); a wrong byte fails the run
 *   call     the producer's handoff call alone
 * Systems:
 *   floor    no daemon: the driver calls and one AF_UNIX socketpair.
 *            cuda-ipc: cuIpcGetMemHandle, the 64-byte handle, then
 *            cuIpcOpenMemHandle.  cuda-vmm: cuMemExportToShareableHandle,
 *            the fd over SCM_RIGHTS, then import, reserve, map, set access.
 *   gpuipc   the C library and gpuipcd: gpuipc_cuda_register, and a
 *            gpuipc_view_lookup already waiting for the name.  cuda-ipc memory is
 *            cuMemAlloc's, cuda-vmm memory gpuipc_cudabuf_new's.
 *   pinned   cuMemcpyDtoH to pinned memory, the bytes over the socket in
 *            1 MiB writes into the consumer's pinned buffer, cuMemcpyHtoD.
 *   relay    the floor with a forwarding process between the two (a forked
 *            poll() loop that passes each message and fd on): the least a
 *            handoff through any broker costs, with no broker work.
 * Patterns: "fresh", new memory every round, freed after the consumer let
 * go of it; "reused", the same memory every round (the floor's consumer
 * keeps its mapping and the producer its handle; gpuipc registers it
 * GPUIPC_REGISTER_CACHEABLE, so the library keeps it mapped over the
 * producer's unregister and register again).
 * rtt is the socketpair's ping-pong (floor; through the relay for relay) or
 * gpuipc_client_ping (gpuipc), median of 1000 back to back, measured before
 * the rounds; rtt_idle the same, median of ROUNDS, each after the case's idle
 * time (the answering side blocked in read all along, as a consumer is).
 *
 * usage: gpu_bench all [ROUNDS]       CSV on stdout (ROUNDS 2..64, default 16)
 *        gpu_bench relay FD_A FD_B     the relay alone, between two inherited
 *                                      sockets (gpu_handoff.py's py-relay rows)
 *        gpu_bench role ...            (internal)
 * $GPU_BENCH_ONLY, a shell pattern, runs only the cases whose first five CSV
 * fields match it (e.g. "gpuipc,cuda-ipc,*,50,1MiB").  $GPU_BENCH_PASSES=N
 * (1..8, default 1) runs every case N times, pass after pass, with new
 * processes each time; each row then gives the quantiles over the timed
 * rounds of all N passes ("rounds" counts them) and the rtts' median. */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
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
#define MAXR 64
#define MAXPASS 8
#define NCASE (3 * 2 * 4 * 2 * 2)   /* sizes, idles, systems, kinds, patterns */

enum { S_FLOOR, S_GPUIPC, S_PINNED, S_RELAY };
enum { K_IPC, K_VMM, K_HOST };
static const char *const sys_name[] = { "floor", "gpuipc", "pinned", "relay" };
static const char *const kind_name[] = { "cuda-ipc", "cuda-vmm", "host" };

enum { R_READY = 1, R_T0, R_DONE };

struct rec {
        int tag, round;
        double v[4];
};

struct cfg {
        int sys, kind;
        bool fresh;
        unsigned idle_us;
        uint64_t size;
        int rounds;
};

/* The driver floor, straight or through the relay: the same two roles. */
static bool floorish(const struct cfg *g)
{
        return g->sys == S_FLOOR || g->sys == S_RELAY;
}

/* What the floor's producer sends each round. */
struct floor_msg {
        int32_t round;
        int32_t is_new;         /* a new allocation: handle (ipc) or fd (vmm) */
        uint64_t asize;         /* vmm: the allocation's size */
        CUipcMemHandle h;
};

static int res_fd = -1;

static void send_rec(int tag, int round, double a, double b, double c)
{
        struct rec r = { .tag = tag, .round = round, .v = { a, b, c, 0 } };

        if (write(res_fd, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
                fprintf(stderr, "gpu_bench[%d]: result pipe: %s\n", (int)getpid(),
                        strerror(errno));
                exit(1);
        }
}

static int io_all(int s, void *buf, size_t n, bool wr)
{
        char *p = buf;

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

static int send_fd(int s, const void *msg, size_t n, int fd)
{
        char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
        struct iovec iov = { (void *)msg, n };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

        if (fd >= 0) {
                mh.msg_control = cbuf;
                mh.msg_controllen = sizeof(cbuf);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(cm), &fd, sizeof(int));
        }
        return sendmsg(s, &mh, 0) == (ssize_t)n ? 0 : fail("sendmsg: %s", strerror(errno));
}

static int recv_fd(int s, void *msg, size_t n, int *ret_fd)
{
        char cbuf[CMSG_SPACE(sizeof(int))];
        struct iovec iov = { msg, n };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                             .msg_controllen = sizeof(cbuf) };
        struct cmsghdr *cm;

        *ret_fd = -1;
        if (recvmsg(s, &mh, MSG_CMSG_CLOEXEC) != (ssize_t)n)
                return fail("recvmsg: %s", strerror(errno));
        cm = CMSG_FIRSTHDR(&mh);
        if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
                memcpy(ret_fd, CMSG_DATA(cm), sizeof(int));
        return 0;
}

static int cmp_d(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return (x > y) - (x < y);
}

#define RTT_WARM 1000     /* round trips back to back */

/* Median of n round trips (at most RTT_WARM), each after idle us asleep (0:
 * back to back), over the socketpair (straight or through the relay) from
 * the side that starts them, or through the daemon (gpuipc_client_ping).
 * The answering side of a socket waits in read() all along, as a consumer
 * waits, and returns 0. */
static double rtt_p50(gpuipc_client *c, int sock, bool start, unsigned idle, int n)
{
        static double t[RTT_WARM];
        char b = 'p';

        for (int i = 0; i < n; i++) {
                double t0;
                if (!start) {
                        if (read(sock, &b, 1) != 1 || write(sock, &b, 1) != 1)
                                return NAN;
                        continue;
                }
                if (idle)
                        usleep(idle);
                t0 = now_us();
                if (c ? gpuipc_client_ping(c) < 0
                      : write(sock, &b, 1) != 1 || read(sock, &b, 1) != 1)
                        return NAN;
                t[i] = now_us() - t0;
        }
        if (!start)
                return 0;
        qsort(t, (size_t)n, sizeof(double), cmp_d);
        return t[n / 2];
}

/* ---- VMM memory of the floor ---------------------------------------- */

struct vmm {
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        uint64_t asize;
};

static int vmm_map(struct vmm *m, uint64_t asize)
{
        CUmemAccessDesc acc = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

        m->asize = asize;
        CK(cuMemAddressReserve(&m->va, asize, 0, 0, 0));
        CK(cuMemMap(m->va, asize, 0, m->h, 0));
        CK(cuMemSetAccess(m->va, asize, &acc, 1));
        return 0;
}

static int vmm_new(struct vmm *m, uint64_t size)
{
        CUmemAllocationProp p = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                  .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                  .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
        size_t g;

        CK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
        uint64_t asize = (size + g - 1) / g * g;
        CK(cuMemCreate(&m->h, asize, &p, 0));
        return vmm_map(m, asize);
}

static int vmm_free(struct vmm *m)
{
        if (!m->va)
                return 0;
        CK(cuMemUnmap(m->va, m->asize));
        CK(cuMemAddressFree(m->va, m->asize));
        if (m->h)
                CK(cuMemRelease(m->h));
        memset(m, 0, sizeof(*m));
        return 0;
}

/* ---- producer --------------------------------------------------------- */

struct pmem {
        CUdeviceptr d;          /* cuMemAlloc, or the vmm's mapping */
        struct vmm vm;
        gpuipc_cudabuf *b;
        void *host;             /* pinned */
};

static int pmem_new(const struct cfg *g, struct pmem *m)
{
        if (g->kind == K_VMM && floorish(g)) {
                if (vmm_new(&m->vm, g->size))
                        return 1;
                m->d = m->vm.va;
        } else if (g->kind == K_VMM) {
                GK(gpuipc_cudabuf_new(0, g->size, &m->b));
                m->d = gpuipc_cudabuf_ptr(m->b);
        } else {
                CK(cuMemAlloc(&m->d, g->size));
        }
        if (g->sys == S_PINNED)
                CK(cuMemAllocHost(&m->host, g->size));
        return 0;
}

static int pmem_free(const struct cfg *g, struct pmem *m)
{
        if (m->host)
                CK(cuMemFreeHost(m->host));
        if (g->kind == K_VMM && floorish(g)) {
                if (vmm_free(&m->vm))
                        return 1;
        } else if (m->b) {
                gpuipc_cudabuf_free(m->b);
        } else if (m->d) {
                CK(cuMemFree(m->d));
        }
        memset(m, 0, sizeof(*m));
        return 0;
}

static int producer(gpuipc_client *c, const struct cfg *g, int go, int sock)
{
        struct floor_msg msg;
        struct pmem m = { 0 };
        uint64_t id = 0;
        bool exported = false;
        char name[64], b;

        if (floorish(g)) {      /* answer the consumer's ping-pong runs */
                rtt_p50(NULL, sock, false, 0, RTT_WARM);
                rtt_p50(NULL, sock, false, 0, RTT_WARM);
                rtt_p50(NULL, sock, false, g->idle_us, g->rounds);
        }
        send_rec(R_READY, -1, 0, 0, 0);
        if (read(go, &b, 1) != 1)
                return fail("orchestrator went away");
        for (int i = 0; i < g->rounds; i++) {
                double t0, t1;
                if (!m.d && pmem_new(g, &m))
                        return 1;
                fill(m.d, g->size, SEED + (unsigned)i, 0, NULL);
                CK(cuCtxSynchronize());
                usleep(g->idle_us);
                t0 = now_us();
                memset(&msg, 0, sizeof(msg));
                msg.round = i;
                if (g->sys == S_PINNED) {
                        CK(cuMemcpyDtoH(m.host, m.d, g->size));
                        if (io_all(sock, m.host, g->size, true))
                                return 1;
                } else if (g->sys == S_GPUIPC) {
                        unsigned fl = g->fresh ? 0 : GPUIPC_REGISTER_CACHEABLE;
                        snprintf(name, sizeof(name), "bench/gpu/%d", i);
                        GK(gpuipc_cuda_register(c, name, m.d, g->size, NULL, NULL, fl, &id));
                } else if (g->kind == K_IPC) {
                        static CUipcMemHandle h;
                        if (!exported)
                                CK(cuIpcGetMemHandle(&h, m.d));
                        exported = true;
                        msg.h = h;
                        if (io_all(sock, &msg, sizeof(msg), true))
                                return 1;
                } else {
                        int fd = -1;
                        if (!exported) {
                                CK(cuMemExportToShareableHandle(&fd, m.vm.h,
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
                                msg.is_new = 1;
                                msg.asize = m.vm.asize;
                        }
                        exported = true;
                        if (send_fd(sock, &msg, sizeof(msg), fd))
                                return 1;
                        if (fd >= 0)
                                close(fd);
                }
                t1 = now_us();
                if (io_all(sock, &b, 1, false))         /* the consumer let go */
                        return 1;
                /* Reported only now: a write to the orchestrator would wake
                 * it while the handoff is under way. */
                send_rec(R_T0, i, t0, t1 - t0, 0);
                if (g->sys == S_GPUIPC)
                        GK(gpuipc_name_unregister(c, name));
                if (g->fresh) {
                        if (pmem_free(g, &m))
                                return 1;
                        exported = false;
                }
        }
        /* Cached by the consumer: free only once nobody maps it (for
         * cuda-vmm, so that the consumer lets go of it now). */
        if (g->sys == S_GPUIPC && !g->fresh)
                GK(gpuipc_reg_wait_unmapped(c, id, 120000));
        return pmem_free(g, &m);
}

/* ---- consumer --------------------------------------------------------- */

static int consumer(gpuipc_client *c, const struct cfg *g, int sock)
{
        CUdeviceptr p = 0, dd = 0;
        struct vmm vm = { 0 };
        void *hh = NULL;
        double rtt, rtt_idle = NAN;
        char b = 'a';

        /* Warm the kernels, the socket and the daemon path first. */
        {
                CUdeviceptr w;
                CK(cuMemAlloc(&w, MiB));
                fill(w, MiB, SEED, 0, NULL);
                if (count_bad(w, MiB, SEED, 0) != 0)
                        return fail("warm-up kernel read wrong bytes");
                CK(cuMemFree(w));
        }
        if (floorish(g)) {
                rtt = rtt_p50(NULL, sock, true, 0, RTT_WARM);
                rtt = rtt_p50(NULL, sock, true, 0, RTT_WARM);
                rtt_idle = rtt_p50(NULL, sock, true, g->idle_us, g->rounds);
        } else if (g->sys == S_GPUIPC) {
                rtt = rtt_p50(c, -1, true, 0, RTT_WARM);
                rtt_idle = rtt_p50(c, -1, true, g->idle_us, g->rounds);
        } else {
                rtt = NAN;
        }
        if (g->sys == S_PINNED) {
                CK(cuMemAlloc(&dd, g->size));
                CK(cuMemAllocHost(&hh, g->size));
        }
        send_rec(R_READY, -1, rtt, rtt_idle, 0);
        for (int i = 0; i < g->rounds; i++) {
                gpuipc_view *v = NULL;
                struct floor_msg msg;
                double t1, t2;
                char name[64];

                if (g->sys == S_PINNED) {
                        if (io_all(sock, hh, g->size, false))
                                return 1;
                        CK(cuMemcpyHtoD(dd, hh, g->size));
                        p = dd;
                } else if (g->sys == S_GPUIPC) {
                        snprintf(name, sizeof(name), "bench/gpu/%d", i);
                        GK(gpuipc_view_lookup(c, name, 600000, 0, &v));
                        if (gpuipc_view_size(v) != g->size)
                                return fail("view is %zu bytes, expected %llu",
                                            gpuipc_view_size(v), (unsigned long long)g->size);
                        p = (CUdeviceptr)(uintptr_t)gpuipc_view_data(v);
                } else if (g->kind == K_IPC) {
                        static CUipcMemHandle last;
                        if (io_all(sock, &msg, sizeof(msg), false))
                                return 1;
                        if (!p || memcmp(&last, &msg.h, sizeof(last))) {
                                if (p)
                                        CK(cuIpcCloseMemHandle(p));
                                CK(cuIpcOpenMemHandle(&p, msg.h,
                                                      CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
                                last = msg.h;
                        }
                } else {
                        int fd;
                        if (recv_fd(sock, &msg, sizeof(msg), &fd))
                                return 1;
                        if (msg.is_new) {
                                if (fd < 0)
                                        return fail("no fd with a new VMM allocation");
                                if (vmm_free(&vm))
                                        return 1;
                                CK(cuMemImportFromShareableHandle(&vm.h, (void *)(uintptr_t)fd,
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
                                close(fd);
                                if (vmm_map(&vm, msg.asize))
                                        return 1;
                        }
                        p = vm.va;
                }
                t1 = now_us();
                unsigned long long bad = count_bad(p, g->size, SEED + (unsigned)i, 0);
                t2 = now_us();
                if (bad)
                        return fail("%s %s round %d: %llu wrong bytes", sys_name[g->sys],
                                    kind_name[g->kind], i, bad);
                if (v)
                        GK(gpuipc_view_release(v));
                if (g->fresh && floorish(g)) {
                        if (g->kind == K_IPC && p) {
                                CK(cuIpcCloseMemHandle(p));
                                p = 0;
                        } else if (vmm_free(&vm)) {
                                return 1;
                        }
                }
                send_rec(R_DONE, i, t1, t2, 0);
                if (io_all(sock, &b, 1, true))
                        return 1;
        }
        if (g->sys == S_GPUIPC)
                gpuipc_cache_trim(c);
        if (floorish(g) && g->kind == K_IPC && p)
                CK(cuIpcCloseMemHandle(p));
        if (vmm_free(&vm))
                return 1;
        if (hh)
                CK(cuMemFreeHost(hh));
        if (dd)
                CK(cuMemFree(dd));
        return 0;
}

/* argv: self role who sys kind fresh idle_us size rounds; fds 3 (results),
 * 4 (go), 5 (the socketpair end). */
static int role(char **argv)
{
        struct cfg g = { .sys = atoi(argv[3]), .kind = atoi(argv[4]), .fresh = atoi(argv[5]),
                         .idle_us = (unsigned)atoi(argv[6]),
                         .size = strtoull(argv[7], NULL, 10), .rounds = atoi(argv[8]) };
        bool prod = !strcmp(argv[2], "producer");
        gpuipc_client *c = NULL;
        int r;

        res_fd = 3;
        gpu_setup();
        if (g.sys == S_GPUIPC) {
                GK(gpuipc_client_connect(NULL, &c));
                gpu_client = c;
        }
        r = prod ? producer(c, &g, 4, 5) : consumer(c, &g, 5);
        gpuipc_client_free(c);
        return r ? 1 : 0;
}

/* ---- orchestration ---------------------------------------------------- */

/* Our fds are close-on-exec and numbered >= 100; a child gets exactly its
 * three as 3, 4 and 5, so neither holds the other's socket end open. */
static int hi_fd(int fd)
{
        int n = fcntl(fd, F_DUPFD_CLOEXEC, 100);

        close(fd);
        return n;
}

static pid_t spawn_role(const char *self, const char *who, const struct cfg *g, int resfd,
                        int gofd, int sockfd)
{
        char a[6][32];
        char *argv[] = { (char *)self, "role", (char *)who, a[0], a[1], a[2], a[3], a[4], a[5],
                         NULL };
        posix_spawn_file_actions_t fa;
        pid_t pid;
        int r;

        snprintf(a[0], 32, "%d", g->sys);
        snprintf(a[1], 32, "%d", g->kind);
        snprintf(a[2], 32, "%d", g->fresh);
        snprintf(a[3], 32, "%u", g->idle_us);
        snprintf(a[4], 32, "%llu", (unsigned long long)g->size);
        snprintf(a[5], 32, "%d", g->rounds);
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, resfd, 3);
        posix_spawn_file_actions_adddup2(&fa, gofd, 4);
        posix_spawn_file_actions_adddup2(&fa, sockfd, 5);
        r = posix_spawn(&pid, self, &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        return r == 0 ? pid : -1;
}

/* Next record, or -1 when a child failed or 600 s passed. */
static int next_rec(int fd, struct rec *r, pid_t *kids)
{
        for (int waited = 0; waited < 600; waited++) {
                struct pollfd p = { fd, POLLIN, 0 };
                if (poll(&p, 1, 1000) == 1)
                        return read(fd, r, sizeof(*r)) == (ssize_t)sizeof(*r) ? 0 : -1;
                for (int i = 0; i < 2; i++) {
                        int st;
                        if (kids[i] > 0 && waitpid(kids[i], &st, WNOHANG) == kids[i]) {
                                kids[i] = -1;
                                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                                        fprintf(stderr, "gpu_bench: the %s failed (see its "
                                                "message above)\n", i ? "consumer" : "producer");
                                        return -1;
                                }
                        }
                }
        }
        fprintf(stderr, "gpu_bench: no progress for 600 s\n");
        return -1;
}

struct result {
        double t0[MAXR], call[MAXR], t1[MAXR], t2[MAXR];
        double rtt, rtt_idle;
};

/* A decimal fd number, digits only, or -1 for anything else ("x", "",
 * "3x", "-1", " 3", "+3"). */
static int fd_arg(const char *s)
{
        char *end;
        long v;

        if (*s < '0' || *s > '9')
                return -1;
        errno = 0;
        v = strtol(s, &end, 10);
        return errno || *end || v > INT_MAX ? -1 : (int)v;
}

/* The relay: a forked process between the floor's producer and consumer
 * (or, as `gpu_bench relay`, between gpu_handoff.py's) that forwards every
 * message, with its fd, from one side to the other, as a broker would with
 * no work of its own.  Exits at the first EOF. */
_Noreturn static void relay(int a, int b)
{
        struct pollfd p[2] = { { a, POLLIN, 0 }, { b, POLLIN, 0 } };
        char buf[512], cbuf[CMSG_SPACE(sizeof(int))];

        for (;;) {
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        _exit(1);
                }
                for (int i = 0; i < 2; i++) {
                        struct iovec iov = { buf, sizeof(buf) };
                        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                                             .msg_control = cbuf,
                                             .msg_controllen = sizeof(cbuf) };
                        struct cmsghdr *cm;
                        int fd = -1;
                        ssize_t n;

                        if (!p[i].revents)
                                continue;
                        n = recvmsg(p[i].fd, &mh, MSG_CMSG_CLOEXEC);
                        if (n <= 0)
                                _exit(n == 0 ? 0 : 1);
                        cm = mh.msg_controllen ? CMSG_FIRSTHDR(&mh) : NULL;
                        if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
                                memcpy(&fd, CMSG_DATA(cm), sizeof(int));
                        else
                                mh.msg_control = NULL, mh.msg_controllen = 0;
                        iov.iov_len = (size_t)n;
                        if (sendmsg(p[1 - i].fd, &mh, MSG_NOSIGNAL) != n)
                                _exit(1);
                        if (fd >= 0)
                                close(fd);
                }
        }
}

static int run_case(const char *self, const struct cfg *g, struct result *res)
{
        /* The relay's two socketpairs keep message bounds (SEQPACKET), so
         * that it forwards each message whole, with its fd. */
        int type = g->sys == S_RELAY ? SOCK_SEQPACKET : SOCK_STREAM;
        int rp[2], gp[2], sp[2], sq[2] = { -1, -1 };
        pid_t kids[2], rly = -1;
        struct rec r;
        int ok = 0, ready = 0, got = 0;

        if (pipe2(rp, O_CLOEXEC) < 0 || pipe2(gp, O_CLOEXEC) < 0 ||
            socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sp) < 0 ||
            (g->sys == S_RELAY && socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, sq) < 0)) {
                fprintf(stderr, "gpu_bench: pipe: %s\n", strerror(errno));
                return -1;
        }
        int *fds[] = { &rp[0], &rp[1], &gp[0], &gp[1], &sp[0], &sp[1], &sq[0], &sq[1] };
        for (int i = 0; i < (g->sys == S_RELAY ? 8 : 6); i++)
                if ((*fds[i] = hi_fd(*fds[i])) < 0) {
                        fprintf(stderr, "gpu_bench: fcntl: %s\n", strerror(errno));
                        return -1;
                }
        if (g->sys == S_RELAY) {
                rly = fork();
                if (rly == 0) {
                        int keep[] = { rp[0], rp[1], gp[0], gp[1], sp[0], sq[1] };
                        for (int i = 0; i < 6; i++)
                                close(keep[i]);
                        relay(sp[1], sq[0]);
                }
                close(sp[1]);
                close(sq[0]);
                sp[1] = sq[1];          /* the consumer's end */
        }
        kids[0] = spawn_role(self, "producer", g, rp[1], gp[0], sp[0]);
        kids[1] = spawn_role(self, "consumer", g, rp[1], gp[0], sp[1]);
        close(sp[0]);
        close(sp[1]);
        close(gp[0]);
        close(rp[1]);
        if (kids[0] < 0 || kids[1] < 0 || (g->sys == S_RELAY && rly < 0)) {
                fprintf(stderr, "gpu_bench: cannot spawn %s\n", self);
                ok = -1;
        }
        while (ok == 0 && got < 2 * g->rounds) {
                if (next_rec(rp[0], &r, kids) < 0) {
                        ok = -1;
                        break;
                }
                if (r.tag == R_READY) {
                        if (r.v[0] != 0)
                                res->rtt = r.v[0];
                        if (r.v[1] != 0)
                                res->rtt_idle = r.v[1];
                        if (++ready == 2) {
                                usleep(50000);  /* the consumer waits now */
                                if (write(gp[1], "g", 1) != 1)
                                        ok = -1;
                        }
                        continue;
                }
                if (r.round < 0 || r.round >= g->rounds) {
                        ok = -1;
                        break;
                }
                if (r.tag == R_T0) {
                        res->t0[r.round] = r.v[0];
                        res->call[r.round] = r.v[1];
                } else {
                        res->t1[r.round] = r.v[0];
                        res->t2[r.round] = r.v[1];
                }
                got++;
        }
        close(gp[1]);
        close(rp[0]);
        for (int i = 0; i < 2; i++) {
                int st;
                if (kids[i] <= 0)
                        continue;
                if (ok < 0)
                        kill(kids[i], SIGKILL);
                if (waitpid(kids[i], &st, 0) == kids[i] && (!WIFEXITED(st) || WEXITSTATUS(st)))
                        ok = -1;
        }
        if (rly > 0) {          /* both ends are closed now: it sees EOF */
                int st;
                if (ok < 0)
                        kill(rly, SIGKILL);
                if (waitpid(rly, &st, 0) == rly && ok == 0 &&
                    (!WIFEXITED(st) || WEXITSTATUS(st))) {
                        fprintf(stderr, "gpu_bench: the relay failed\n");
                        ok = -1;
                }
        }
        return ok;
}

/* q-quantile of v[0..n), nearest rank; sorts v. */
static double quant(double *v, int n, double q)
{
        qsort(v, (size_t)n, sizeof(double), cmp_d);
        return v[(int)(q * (n - 1) + 0.5)];
}

/* Median of v[0..n) that are not NaN (a pass may not have measured it). */
static double median_of(const double *v, int n)
{
        double t[MAXPASS];
        int k = 0;

        for (int i = 0; i < n; i++)
                if (!isnan(v[i]))
                        t[k++] = v[i];
        return k ? quant(t, k, 0.5) : NAN;
}

/* One CSV row over the passes of a case: the timed rounds of every pass
 * (round 0 of each warms up and is left out), the rtts' median across them. */
static void report(const struct cfg *g, const char *sname, const struct result *res, int passes)
{
        static double us[MAXPASS * MAXR], ker[MAXPASS * MAXR], call[MAXPASS * MAXR];
        double rtt[MAXPASS], rtt_idle[MAXPASS];
        int n = 0;

        for (int p = 0; p < passes; p++) {
                for (int i = 1; i < g->rounds; i++, n++) {
                        us[n] = res[p].t1[i] - res[p].t0[i];
                        ker[n] = res[p].t2[i] - res[p].t0[i];
                        call[n] = res[p].call[i];
                }
                rtt[p] = res[p].rtt;
                rtt_idle[p] = res[p].rtt_idle;
        }
        double u50 = quant(us, n, 0.5), u99 = quant(us, n, 0.99);
        double k50 = quant(ker, n, 0.5), k99 = quant(ker, n, 0.99);
        printf("%s,%s,%s,%g,%s,%d,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n", sys_name[g->sys],
               kind_name[g->kind], g->sys == S_PINNED ? "-" : g->fresh ? "fresh" : "reused",
               g->idle_us / 1e3, sname, n, u50, u99, k50, k99, quant(call, n, 0.5),
               median_of(rtt, passes), median_of(rtt_idle, passes));
        fflush(stdout);
}

/* $GPU_BENCH_PASSES: 1 to MAXPASS, default 1. */
static int passes_from_env(void)
{
        const char *e = getenv("GPU_BENCH_PASSES");
        char *end;
        long n;

        if (!e || !*e)
                return 1;
        errno = 0;
        n = strtol(e, &end, 10);
        if (errno || *end || n < 1 || n > MAXPASS)
                return -1;
        return (int)n;
}

int main(int argc, char **argv)
{
        static const uint64_t sizes[] = { MiB, 64 * MiB, 1024 * MiB };
        static const char *const sname[] = { "1MiB", "64MiB", "1GiB" };
        static const unsigned idles[] = { 2000, 50000 };
        static struct result res[NCASE][MAXPASS];
        static bool failed[NCASE];
        const char *only = getenv("GPU_BENCH_ONLY");
        int rounds = 16, failures = 0, cases = 0, passes;

        if (argc == 9 && !strcmp(argv[1], "role"))
                return role(argv);
        if (argc == 4 && !strcmp(argv[1], "relay")) {
                /* No CUDA here: the sockets' bytes (a stream's chunks, as
                 * they come) and any fd, until the first EOF. */
                int a = fd_arg(argv[2]), b = fd_arg(argv[3]);
                if (a < 0 || b < 0 || a == b || fcntl(a, F_GETFD) < 0 || fcntl(b, F_GETFD) < 0) {
                        fprintf(stderr, "gpu_bench: relay needs two open, distinct fds\n");
                        return 2;
                }
                signal(SIGPIPE, SIG_IGN);
                relay(a, b);
        }
        if (argc < 2 || strcmp(argv[1], "all") != 0) {
                fprintf(stderr, "usage: %s all [ROUNDS]\n", argv[0]);
                return 2;
        }
        if (argc > 2)
                rounds = atoi(argv[2]);
        if (rounds < 2 || rounds > MAXR) {
                fprintf(stderr, "gpu_bench: ROUNDS must be 2..%d (the first warms up)\n", MAXR);
                return 2;
        }
        passes = passes_from_env();
        if (passes < 0) {
                fprintf(stderr, "gpu_bench: GPU_BENCH_PASSES must be 1..%d\n", MAXPASS);
                return 2;
        }
        if (!getenv("GPUIPC_SOCKET") || !getenv("GPUIPC_GPU_PTX")) {
                fprintf(stderr, "gpu_bench: set GPUIPC_SOCKET (a running gpuipcd) and "
                        "GPUIPC_GPU_PTX (tests/gpu/kernels.ptx); tests/bench/gpu_run.sh does\n");
                return 2;
        }
        signal(SIGPIPE, SIG_IGN);
        printf("system,kind,pattern,idle_ms,size,rounds,usable_p50_us,usable_p99_us,"
               "kernel_p50_us,kernel_p99_us,call_p50_us,rtt_p50_us,rtt_idle_p50_us\n");
        fflush(stdout);
        /* Pass after pass over every case, new processes each time, so that
         * a slow minute of the machine falls on every row alike; a case's
         * row comes after its last pass. */
        for (int p = 0; p < passes; p++) {
                int at = 0;
                for (int s = 0; s < 3; s++)
                for (int w = 0; w < 2; w++)
                for (int sys = S_FLOOR; sys <= S_RELAY; sys++)
                for (int k = K_IPC; k <= K_VMM; k++)
                for (int f = 0; f < 2; f++, at++) {
                        struct cfg g = { sys, sys == S_PINNED ? K_HOST : k, f, idles[w],
                                         sizes[s], rounds };
                        char label[96];
                        if (sys == S_PINNED && (k || f))
                                continue;
                        snprintf(label, sizeof(label), "%s,%s,%s,%g,%s", sys_name[sys],
                                 kind_name[g.kind], sys == S_PINNED ? "-" : f ? "fresh" : "reused",
                                 idles[w] / 1e3, sname[s]);
                        if ((only && fnmatch(only, label, 0) != 0) || failed[at])
                                continue;
                        if (p == 0)
                                cases++;
                        res[at][p] = (struct result){ .rtt = NAN, .rtt_idle = NAN };
                        if (run_case(argv[0], &g, &res[at][p]) < 0) {
                                fprintf(stderr, "gpu_bench: %s (pass %d of %d) FAILED\n", label,
                                        p + 1, passes);
                                failed[at] = true;
                                failures++;
                                continue;
                        }
                        if (p == passes - 1)
                                report(&g, sname[s], res[at], passes);
                }
        }
        if (failures)
                fprintf(stderr, "gpu_bench: %d of %d cases failed\n", failures, cases);
        return failures ? 1 : 0;
}
