/* integ_storm.c: crash storms.  Hundreds of clients are SIGKILLed at random
 * points of their requests (mid-frame, holding leases, waiting in lookups,
 * registering), and the daemon must end up exactly where it started: the
 * same registrations, leases, connections and open fds, still serving,
 * and the owner of a buffer they leased told `released`.  The CUDA storm
 * kills cuda-ipc producers under the driver double: their registrations
 * are revoked and the lease holders' views say so. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"

#define SHARED      "storm/shared"
#define SHARED_SIZE 65536u
#define WAVES       10
#define WAVE        30          /* children per wave: 300 in all */

TestSuite(storm, .init = h_setup, .fini = h_teardown, .timeout = 60);

static gpuipc_client *connect_client(void)
{
        gpuipc_client *c = NULL;
        int r = gpuipc_client_connect(h_d.sock, &c);
        cr_assert_eq(r, 0, "gpuipc_client_connect: %s", gpuipc_strerror(r));
        return c;
}

static uint64_t register_one(gpuipc_client *c, const char *name, size_t size, unsigned flags)
{
        gpuipc_hostbuf *b = NULL;
        uint64_t id = 0;
        int r;

        cr_assert_eq(gpuipc_hostbuf_new(size, &b), 0);
        r = gpuipc_hostbuf_register(c, name, b, NULL, flags, &id);
        cr_assert_eq(r, 0, "register %s: %s", name, gpuipc_errmsg(c));
        gpuipc_hostbuf_free(b);
        return id;
}

struct counts {
        uint64_t connections, registrations, leases, bytes_host;
};

static struct counts counts_get(gpuipc_client *c)
{
        gpuipc_stats *s = NULL;
        struct counts k;
        int r = gpuipc_stats_fetch(c, &s);

        cr_assert_eq(r, 0, "stats: %s", gpuipc_errmsg(c));
        k = (struct counts) { s->connections, s->registrations, s->leases, s->bytes_host };
        gpuipc_stats_free(s);
        return k;
}

/* Polls until the counters are want (the daemon notices deaths in its own
 * time); returns the last seen. */
static struct counts counts_settle(gpuipc_client *c, struct counts want, int timeout_ms)
{
        int64_t deadline = h_now_ms() + timeout_ms;
        struct counts k;

        for (;;) {
                k = counts_get(c);
                if (memcmp(&k, &want, sizeof(k)) == 0 || h_now_ms() >= deadline)
                        return k;
                h_sleep_ms(20);
        }
}

static void expect_counts(struct counts got, struct counts want, const char *when)
{
        cr_expect_eq(got.connections, want.connections, "%s: connections %" PRIu64 ", want %"
                     PRIu64, when, got.connections, want.connections);
        cr_expect_eq(got.registrations, want.registrations, "%s: registrations %" PRIu64
                     ", want %" PRIu64, when, got.registrations, want.registrations);
        cr_expect_eq(got.leases, want.leases, "%s: leases %" PRIu64 ", want %" PRIu64, when,
                     got.leases, want.leases);
        cr_expect_eq(got.bytes_host, want.bytes_host, "%s: host bytes %" PRIu64 ", want %"
                     PRIu64, when, got.bytes_host, want.bytes_host);
}

/* ---- the children: plain C, no Criterion (they are forked, never return) */

enum mode {
        M_EPHEMERAL,    /* registers ephemeral buffers, then sleeps */
        M_LEASE,        /* holds leases on the shared buffer */
        M_WAIT,         /* blocks in a lookup of a name that never comes */
        M_HALF_FRAME,   /* hello, then half a frame, then sleeps */
        M_HALF_FD,      /* hello, then half a register frame with its memfd */
        M_CHURN,        /* register/lookup/release/unregister until killed */
        M_DURABLE,      /* registers one durable buffer, then sleeps */
        M_PARTIAL_HDR,  /* two bytes of a length prefix */
        N_MODES,
};

static const char *sock_path;
static int ready_fd = -1;       /* children write one byte here once settled */

static void child_ready(char what)
{
        if (write(ready_fd, &what, 1) < 0)
                _exit(3);
}

static void __attribute__((noreturn)) child_sleep(void)
{
        for (;;)
                pause();
}

static int raw_connect(void)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0)
                _exit(4);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                _exit(5);
        return fd;
}

/* A frame: length prefix and body, malloc'ed. */
static uint8_t *build_frame(const char *op, uint64_t seq, const char *name, uint64_t size,
                            unsigned nfds, size_t *ret_len)
{
        struct proto_out o;
        uint8_t *buf;

        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 2 + (name ? 4 : 1) + (nfds > 0));
        proto_pack_ku64(&o.pk, "seq", seq);
        proto_pack_kstr(&o.pk, "op", op);
        if (name) {
                proto_pack_kstr(&o.pk, "name", name);
                proto_pack_kstr(&o.pk, "kind", "host");
                proto_pack_ku64(&o.pk, "size", size);
                proto_pack_kbool(&o.pk, "ephemeral", true);
        } else {
                proto_pack_ku64(&o.pk, "version", 1);
        }
        if (nfds > 0)
                proto_pack_ku64(&o.pk, "fds", nfds);
        if (proto_out_finish(&o, PROTO_MAX_FRAME) < 0)
                _exit(6);
        buf = proto_out_release(&o, ret_len);
        if (!buf)
                _exit(7);
        return buf;
}

static void raw_hello(int fd)
{
        size_t n;
        uint8_t *f = build_frame("hello", 1, NULL, 0, 0, &n);
        uint8_t reply[512];

        if (write(fd, f, n) != (ssize_t)n)
                _exit(8);
        free(f);
        if (read(fd, reply, sizeof(reply)) <= 0)
                _exit(9);
}

static void __attribute__((noreturn)) child_main(unsigned i, enum mode mode)
{
        gpuipc_client *c = NULL;
        gpuipc_view *v[4];
        char name[64];
        int fd;

        /* The storm's kill times differ per child. */
        srand((unsigned)getpid());
        switch (mode) {
        case M_HALF_FRAME:
        case M_HALF_FD:
        case M_PARTIAL_HDR: {
                size_t n;
                uint8_t *f;
                fd = raw_connect();
                raw_hello(fd);
                snprintf(name, sizeof(name), "storm/raw/%u", i);
                f = build_frame("register", 2, name, 4096, mode == M_HALF_FD, &n);
                if (mode == M_PARTIAL_HDR) {
                        if (write(fd, f, 2) != 2)
                                _exit(10);
                } else if (mode == M_HALF_FRAME) {
                        if (write(fd, f, n / 2) != (ssize_t)(n / 2))
                                _exit(10);
                } else {
                        /* The memfd travels with the first half. */
                        int mfd = memfd_create("storm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
                        char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
                        struct iovec iov = { f, n / 2 };
                        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                                             .msg_control = cbuf,
                                             .msg_controllen = sizeof(cbuf) };
                        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                        if (mfd < 0 || ftruncate(mfd, 4096) < 0)
                                _exit(11);
                        cm->cmsg_level = SOL_SOCKET;
                        cm->cmsg_type = SCM_RIGHTS;
                        cm->cmsg_len = CMSG_LEN(sizeof(int));
                        memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
                        if (sendmsg(fd, &mh, MSG_NOSIGNAL) != (ssize_t)(n / 2))
                                _exit(12);
                        close(mfd);
                }
                free(f);
                child_ready('h');
                child_sleep();
        }
        default:
                break;
        }

        if (gpuipc_client_connect(sock_path, &c) < 0)
                _exit(20);
        switch (mode) {
        case M_EPHEMERAL:
        case M_DURABLE:
                for (unsigned k = 0; k < (mode == M_DURABLE ? 1u : 3u); k++) {
                        gpuipc_hostbuf *b = NULL;
                        snprintf(name, sizeof(name), "storm/%s/%u/%u",
                                 mode == M_DURABLE ? "d" : "e", i, k);
                        if (gpuipc_hostbuf_new(4096, &b) < 0)
                                _exit(21);
                        if (gpuipc_hostbuf_register(c, name, b, NULL,
                                                 mode == M_DURABLE ? 0 : GPUIPC_REGISTER_EPHEMERAL,
                                                 NULL) < 0)
                                _exit(22);
                        gpuipc_hostbuf_free(b);
                }
                child_ready(mode == M_DURABLE ? 'd' : 'e');
                child_sleep();
        case M_LEASE:
                for (unsigned k = 0; k < 4; k++)
                        if (gpuipc_view_lookup(c, SHARED, 5000, 0, &v[k]) < 0)
                                _exit(23);
                child_ready('l');
                child_sleep();
        case M_WAIT:
                snprintf(name, sizeof(name), "storm/never/%u", i);
                child_ready('w');
                (void)gpuipc_view_lookup(c, name, -1, 0, &v[0]);
                _exit(24);      /* only the kill may end it */
        case M_CHURN:
                child_ready('c');
                for (unsigned k = 0;; k++) {
                        gpuipc_hostbuf *b = NULL;
                        gpuipc_list *l = NULL;
                        snprintf(name, sizeof(name), "storm/churn/%u/%u", i, k % 4);
                        if (gpuipc_hostbuf_new(4096, &b) == 0 &&
                            gpuipc_hostbuf_register(c, name, b, NULL, GPUIPC_REGISTER_EPHEMERAL,
                                                 NULL) == 0 &&
                            gpuipc_view_lookup(c, SHARED, 0, 0, &v[0]) == 0)
                                gpuipc_view_release(v[0]);
                        gpuipc_hostbuf_free(b);
                        if (gpuipc_list_fetch(c, "storm", 0, &l) == 0)
                                gpuipc_list_free(l);
                        (void)gpuipc_name_unregister(c, name);
                }
        default:
                _exit(25);
        }
}

struct kid {
        pid_t pid;
        int kill_at_ms;         /* after the wave started */
};

/* Forks a wave of children, kills each at its random time (some before
 * they are set up, most after), reaps them, and returns how many durable
 * registrations were confirmed to exist. */
static void run_wave(unsigned wave, unsigned *ret_durable_ready, unsigned *ret_durable_tried)
{
        struct kid kids[WAVE];
        int pfd[2];
        int64_t t0;
        unsigned ready = 0, killed = 0;

        cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
        fflush(NULL);
        for (unsigned k = 0; k < WAVE; k++) {
                unsigned i = wave * WAVE + k;
                enum mode mode = (enum mode)(i % N_MODES);
                pid_t pid = fork();
                cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
                if (pid == 0) {
                        close(pfd[0]);
                        ready_fd = pfd[1];
                        child_main(i, mode);
                }
                kids[k].pid = pid;
                /* A third are killed within 15 ms (often mid-connect or
                 * mid-request), the rest after up to 200 ms. */
                kids[k].kill_at_ms = (rand() % 3 == 0) ? rand() % 15 : 30 + rand() % 170;
                if (mode == M_DURABLE)
                        (*ret_durable_tried)++;
        }
        close(pfd[1]);
        t0 = h_now_ms();
        while (killed < WAVE) {
                int64_t now = h_now_ms() - t0;
                for (unsigned k = 0; k < WAVE; k++)
                        if (kids[k].pid > 0 && kids[k].kill_at_ms <= now) {
                                cr_assert_eq(kill(kids[k].pid, SIGKILL), 0);
                                kids[k].pid = -kids[k].pid;
                                killed++;
                        }
                h_sleep_ms(2);
        }
        /* Durable registrations confirmed: each 'd' byte is one. */
        for (;;) {
                char b[64];
                ssize_t n = read(pfd[0], b, sizeof(b));
                if (n <= 0)
                        break;
                for (ssize_t j = 0; j < n; j++) {
                        ready++;
                        *ret_durable_ready += b[j] == 'd';
                }
        }
        close(pfd[0]);
        for (unsigned k = 0; k < WAVE; k++) {
                int st;
                cr_assert_eq(waitpid(-kids[k].pid, &st, 0), -kids[k].pid);
                /* No child may have ended on its own: that is a failure
                 * inside it (its exit code says where). */
                cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                          "child %u exited with %d", wave * WAVE + k,
                          WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        }
        (void)ready;
}

Test(storm, killed_clients_leave_nothing_behind)
{
        gpuipc_client *owner, *c;
        struct counts base, got;
        gpuipc_list *l = NULL;
        unsigned durable_ready = 0, durable_tried = 0;
        uint64_t shared_id;
        int fds0, fds, r;
        int64_t t0 = h_now_ms();

        srand((unsigned)time(NULL) ^ (unsigned)getpid());
        sock_path = h_d.sock;
        owner = connect_client();
        shared_id = register_one(owner, SHARED, SHARED_SIZE, 0);
        base = counts_get(owner);
        fds0 = h_daemon_fd_count(&h_d);
        cr_assert_eq(base.registrations, 1);
        cr_assert_eq(base.leases, 0);

        for (unsigned w = 0; w < WAVES; w++)
                run_wave(w, &durable_ready, &durable_tried);

        /* Only the durable registrations of the dead remain: between those
         * confirmed and those attempted (a child killed after the daemon
         * registered but before the reply arrived leaves one too). */
        got = counts_settle(owner, (struct counts) { base.connections,
                                                     base.registrations + durable_ready,
                                                     0, base.bytes_host + 4096ull * durable_ready },
                            5000);
        cr_assert(h_daemon_alive(&h_d), "the daemon died in the storm");
        cr_expect_eq(got.connections, base.connections, "connections %" PRIu64 " want %" PRIu64,
                     got.connections, base.connections);
        cr_expect_eq(got.leases, 0, "leases left: %" PRIu64, got.leases);
        cr_expect_geq(got.registrations, base.registrations + durable_ready);
        cr_expect_leq(got.registrations, base.registrations + durable_tried);

        /* A survivor removes them, exactly as many as the list shows. */
        c = connect_client();
        r = gpuipc_list_fetch(c, "storm/d", 0, &l);
        cr_assert_eq(r, 0, "list: %s", gpuipc_errmsg(c));
        cr_expect_eq(gpuipc_list_count(l), got.registrations - base.registrations,
                     "durable left %zu, registrations over baseline %" PRIu64,
                     gpuipc_list_count(l), got.registrations - base.registrations);
        for (size_t i = 0; i < gpuipc_list_count(l); i++) {
                const gpuipc_info *in = gpuipc_list_get(l, i);
                cr_expect_eq(in->leases, 0, "%s still leased", in->name);
                cr_expect(in->flags & GPUIPC_INFO_OWNER_GONE, "%s: owner not gone", in->name);
                r = gpuipc_name_unregister(c, in->name);
                cr_expect_eq(r, 0, "unregister %s: %s", in->name, gpuipc_errmsg(c));
        }
        gpuipc_list_free(l);
        r = gpuipc_list_fetch(c, "storm", 0, &l);
        cr_assert_eq(r, 0);
        cr_expect_eq(gpuipc_list_count(l), 1, "registrations left under storm/: %zu",
                     gpuipc_list_count(l));
        gpuipc_list_free(l);
        gpuipc_client_free(c);

        got = counts_settle(owner, base, 5000);
        expect_counts(got, base, "after the storm");
        fds = h_daemon_fd_settle(&h_d, fds0, 5000);
        cr_expect_eq(fds, fds0, "daemon fds: %d, before the storm %d", fds, fds0);

        /* The lease holders all died: the owner heard `released`. */
        r = gpuipc_reg_wait_released(owner, shared_id, 5000);
        cr_expect_eq(r, 0, "wait_released: %s (%s)", gpuipc_strerror(r), gpuipc_errmsg(owner));

        /* And it still serves: a fresh round trip with a lease. */
        c = connect_client();
        {
                gpuipc_view *v = NULL;
                cr_expect_eq(gpuipc_client_ping(c), 0);
                r = gpuipc_view_lookup(c, SHARED, 0, 0, &v);
                cr_expect_eq(r, 0, "lookup after the storm: %s", gpuipc_errmsg(c));
                cr_expect_eq(gpuipc_view_size(v), SHARED_SIZE);
                gpuipc_view_release(v);
        }
        gpuipc_client_free(c);
        gpuipc_client_free(owner);
        cr_log_info("storm: %u children killed in %" PRId64 " ms, %u durable confirmed of %u",
                    WAVES * WAVE, h_now_ms() - t0, durable_ready, durable_tried);
}

/* ---- cuda-ipc producers killed under the driver double ----------------- */

#define CPRODUCERS 40
#define CREGS      2

static void cuda_setup(void)
{
        setenv("GPUIPC_LIBCUDA", h_path("tests/cuda-double/libcuda.so.1"), 1);
        unsetenv("CUDA_VISIBLE_DEVICES");
        h_setup();
}

Test(storm, killed_cuda_producers_are_revoked, .init = cuda_setup, .fini = h_teardown)
{
        struct h_child prod[CPRODUCERS];
        gpuipc_view *views[CPRODUCERS][CREGS];
        bool ready[CPRODUCERS] = { false };
        gpuipc_client *cons[2], *c;
        struct counts base, got;
        char name[64], line[32];
        unsigned nready = 0, nviews = 0, revoked = 0;
        int fds0, fds, r;

        srand((unsigned)time(NULL) ^ (unsigned)getpid());
        c = connect_client();
        cons[0] = connect_client();
        cons[1] = connect_client();
        base = counts_get(c);
        fds0 = h_daemon_fd_count(&h_d);
        memset(views, 0, sizeof(views));

        for (unsigned i = 0; i < CPRODUCERS; i++) {
                char pname[32], seed[16];
                snprintf(pname, sizeof(pname), "cstorm/%u", i);
                snprintf(seed, sizeof(seed), "%u", 10 + i);
                const char *args[] = { "ipc", pname, "0", "1", "2", seed, "--event", NULL };
                h_spawn(&prod[i], "helper-cuda-producer", args, true);
        }
        /* Every fourth producer is killed at once, mid-startup. */
        for (unsigned i = 0; i < CPRODUCERS; i += 4) {
                h_sleep_ms(rand() % 5);
                cr_assert_eq(kill(prod[i].pid, SIGKILL), 0);
        }
        for (unsigned i = 0; i < CPRODUCERS; i++) {
                if (i % 4 == 0)
                        continue;
                cr_assert_geq(h_read_line(&prod[i], line, sizeof(line), 15000), 0,
                              "producer %u: no ready line", i);
                cr_assert_str_eq(line, "ready");
                ready[i] = true;
                nready++;
                for (unsigned k = 0; k < CREGS; k++) {
                        snprintf(name, sizeof(name), "cstorm/%u/%u", i, k);
                        r = gpuipc_view_lookup(cons[k], name, 0, 0, &views[i][k]);
                        cr_assert_eq(r, 0, "lookup %s: %s", name, gpuipc_errmsg(cons[k]));
                        cr_assert_eq(gpuipc_view_info(views[i][k])->kind, GPUIPC_KIND_CUDA_IPC);
                        nviews++;
                }
        }
        got = counts_get(c);
        cr_expect_eq(got.registrations, base.registrations + nready * CREGS);
        cr_expect_eq(got.leases, base.leases + nviews);

        /* Kill the rest, in random order. */
        for (unsigned i = 0; i < CPRODUCERS; i++) {
                unsigned j = i + (unsigned)rand() % (CPRODUCERS - i);
                struct h_child t = prod[i];
                bool rt = ready[i];
                gpuipc_view *tv[CREGS];
                memcpy(tv, views[i], sizeof(tv));
                prod[i] = prod[j];
                ready[i] = ready[j];
                memcpy(views[i], views[j], sizeof(tv));
                prod[j] = t;
                ready[j] = rt;
                memcpy(views[j], tv, sizeof(tv));
        }
        for (unsigned i = 0; i < CPRODUCERS; i++)
                if (ready[i])
                        cr_assert_eq(kill(prod[i].pid, SIGKILL), 0);
        for (unsigned i = 0; i < CPRODUCERS; i++)
                cr_expect_eq(h_wait(&prod[i], 5000), 128 + SIGKILL);

        /* Every view learns that its registration was revoked. */
        for (unsigned i = 0; i < CPRODUCERS; i++) {
                for (unsigned k = 0; k < CREGS; k++) {
                        int64_t deadline = h_now_ms() + 5000;
                        if (!views[i][k])
                                continue;
                        do {
                                r = gpuipc_view_wait_stream(views[i][k], NULL);
                                if (r == 0)
                                        h_sleep_ms(10);
                        } while (r == 0 && h_now_ms() < deadline);
                        cr_expect_eq(r, -ESTALE, "view %s: wait_stream %d (%s)",
                                     gpuipc_view_info(views[i][k])->name, r,
                                     gpuipc_errmsg(cons[k]));
                        revoked += r == -ESTALE;
                }
        }
        cr_expect_eq(revoked, nviews);
        for (unsigned i = 0; i < CPRODUCERS; i++)
                for (unsigned k = 0; k < CREGS; k++)
                        gpuipc_view_release(views[i][k]);

        got = counts_settle(c, base, 5000);
        expect_counts(got, base, "after the CUDA storm");
        cr_expect(h_daemon_alive(&h_d));
        gpuipc_client_free(cons[0]);
        gpuipc_client_free(cons[1]);
        base.connections -= 2;
        got = counts_settle(c, base, 5000);
        expect_counts(got, base, "consumers gone");
        fds = h_daemon_fd_settle(&h_d, fds0 - 2, 5000);
        cr_expect_eq(fds, fds0 - 2, "daemon fds: %d, want %d", fds, fds0 - 2);
        cr_expect_eq(gpuipc_client_ping(c), 0);
        gpuipc_client_free(c);
        cr_log_info("cuda storm: %u producers killed, %u views revoked", CPRODUCERS, revoked);
}
