/* integ_review.c: fixes from a code review, each checked against a real
 * daemon: read-only consumer fds, records too large for a reply, half-close,
 * shutdown, backpressure, fds of refused frames and hello ordering. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"

#define SIZE 4096u
#define SEED 7u

static void no_setup(void)
{
        signal(SIGPIPE, SIG_IGN);
}

TestSuite(review, .init = h_setup, .fini = h_teardown, .timeout = 30);
TestSuite(review_own, .init = no_setup, .timeout = 30);

static int hello_conn(void)
{
        int fd = h_raw_connect(h_d.sock);
        h_raw_hello(fd, 1);
        return fd;
}

/* A producer connection with "rv/buf" registered with flags, filled with
 * the pattern; public, since writable_lookup_other_uid looks it up as
 * another uid. */
static gpuipc_client *producer(unsigned flags)
{
        static const gpuipc_access pub = { .size = sizeof(gpuipc_access), .public_ = 1 };
        gpuipc_client *c = NULL;
        gpuipc_hostbuf *b = NULL;
        uint8_t *p;

        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_assert_eq(gpuipc_client_set_access(c, &pub), 0);
        cr_assert_eq(gpuipc_hostbuf_new(SIZE, &b), 0);
        p = gpuipc_hostbuf_data(b);
        for (size_t i = 0; i < SIZE; i++)
                p[i] = h_pattern(i, SEED);
        cr_assert_eq(gpuipc_hostbuf_register(c, "rv/buf", b, NULL, flags, NULL), 0);
        gpuipc_hostbuf_free(b);
        return c;
}

struct lookup_args {
        const char *name;
        bool writable;
};

static void pack_lookup(msgpack_packer *pk, void *data)
{
        struct lookup_args *a = data;
        proto_pack_kstr(pk, "name", a->name);
        if (a->writable)
                proto_pack_kbool(pk, "writable", true);
}

/* Raw lookup; returns the fd of the reply (the caller closes it). */
static int raw_lookup(int fd, uint64_t seq, const char *name, bool writable, const char *code)
{
        struct lookup_args a = { name, writable };
        struct h_frame f;
        int mfd = -1;

        cr_assert_eq(h_raw_request(fd, "lookup", seq, 1 + writable, pack_lookup, &a, NULL, 0), 0);
        cr_assert_eq(h_raw_recv(fd, 5000, &f), 1);
        h_expect_reply(&f, seq, code);
        if (!*code) {
                cr_assert_eq(f.nfds, 1);
                mfd = f.fds[0];
                f.nfds = 0;
        }
        h_frame_free(&f);
        return mfd;
}

static void expect_pattern(const char *what)
{
        gpuipc_client *c = NULL;
        gpuipc_view *v = NULL;
        const uint8_t *p;

        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_assert_eq(gpuipc_view_lookup(c, "rv/buf", 0, 0, &v), 0);
        p = gpuipc_view_data(v);
        for (size_t i = 0; i < SIZE; i++)
                cr_assert_eq(p[i], h_pattern(i, SEED), "byte %zu changed after %s", i, what);
        cr_assert_eq(gpuipc_view_release(v), 0);
        gpuipc_client_free(c);
}

static int raw_lookup_sock(int fd)
{
        int mfd = raw_lookup(fd, 90, "big/x", false, "");
        close(mfd);
        return mfd;
}

/* Item 1: a consumer's fd cannot punch holes in, truncate or seal the
 * producer's memfd. */
Test(review, lookup_fd_is_read_only)
{
        gpuipc_client *prod = producer(0);
        int fd = hello_conn(), mfd;
        void *p;

        mfd = raw_lookup(fd, 2, "rv/buf", false, "");
        cr_assert_eq(fcntl(mfd, F_GETFL) & O_ACCMODE, O_RDONLY);
        cr_expect_eq(fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, SIZE), -1);
        cr_expect_eq(errno, EBADF);
        cr_expect_eq(ftruncate(mfd, SIZE * 4), -1);
        cr_expect_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_WRITE), -1);
        cr_expect_eq(errno, EPERM);
        cr_expect_eq(pwrite(mfd, "x", 1, 0), -1);
        p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        cr_expect_eq(p, MAP_FAILED);
        p = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, mfd, 0);
        cr_assert_neq(p, MAP_FAILED);
        cr_expect_eq(((uint8_t *)p)[0], h_pattern(0, SEED));
        munmap(p, SIZE);
        close(mfd);
        close(fd);
        expect_pattern("a read-only consumer's attacks");
        gpuipc_client_free(prod);
}

/* Whether this kernel has F_SEAL_FUTURE_WRITE (Linux 5.1). */
static bool have_future_write_seal(void)
{
        int fd = memfd_create("probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        bool ok;

        cr_assert_geq(fd, 0);
        ok = fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0;
        close(fd);
        return ok;
}

/* A read-only fd is no write barrier by itself: a memfd's inode is mode
 * 0777, so /proc/self/fd/N reopens it read-write.  The library's
 * F_SEAL_FUTURE_WRITE makes writes through that reopen fail. */
Test(review, read_only_fd_reopened_read_write_cannot_write)
{
        gpuipc_client *prod, *c = NULL;
        gpuipc_view *v = NULL;
        char path[64];
        int fd, mfd, rw;
        void *p;

        if (!have_future_write_seal())
                cr_skip_test("the kernel has no F_SEAL_FUTURE_WRITE");
        prod = producer(0);
        fd = hello_conn();
        mfd = raw_lookup(fd, 2, "rv/buf", false, "");
        cr_assert_eq(fcntl(mfd, F_GETFL) & O_ACCMODE, O_RDONLY);
        cr_expect(fcntl(mfd, F_GET_SEALS) & F_SEAL_FUTURE_WRITE);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", mfd);
        rw = open(path, O_RDWR | O_CLOEXEC);
        cr_assert_geq(rw, 0, "reopen %s: %s", path, strerror(errno));
        errno = 0;
        cr_expect_eq(pwrite(rw, "x", 1, 0), -1);
        cr_expect_eq(errno, EPERM);
        errno = 0;
        p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
        cr_expect_eq(p, MAP_FAILED);
        cr_expect_eq(errno, EPERM);
        p = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, rw, 0);
        cr_assert_neq(p, MAP_FAILED);
        cr_expect_eq(mprotect(p, SIZE, PROT_READ | PROT_WRITE), -1);
        munmap(p, SIZE);
        cr_expect_eq(fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, SIZE), -1);
        close(rw);
        close(mfd);
        /* the owner's writable lookup gets the read-write fd, which cannot
         * map writable either; the library says why */
        mfd = raw_lookup(fd, 3, "rv/buf", true, "");
        cr_assert_eq(fcntl(mfd, F_GETFL) & O_ACCMODE, O_RDWR);
        cr_expect_eq(mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0), MAP_FAILED);
        close(mfd);
        close(fd);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_expect_eq(gpuipc_view_lookup(c, "rv/buf", 0, GPUIPC_LOOKUP_WRITABLE, &v), -EPERM);
        cr_expect_null(v);
        cr_expect(strstr(gpuipc_errmsg(c), "without GPUIPC_REGISTER_SHARED_WRITE"),
                  "errmsg: %s", gpuipc_errmsg(c));
        gpuipc_client_free(c);
        expect_pattern("writes through a reopened read-only fd");
        gpuipc_client_free(prod);
}

/* The seal leaves the producer's own mapping writable; register_fd seals
 * a caller's memfd unless GPUIPC_REGISTER_SHARED_WRITE. */
Test(review, producer_mapping_stays_writable_after_sealing)
{
        gpuipc_client *prod = NULL, *c = NULL;
        gpuipc_hostbuf *b = NULL;
        gpuipc_view *v = NULL;
        uint8_t *p, got[2];
        int m1, m2;

        if (!have_future_write_seal())
                cr_skip_test("the kernel has no F_SEAL_FUTURE_WRITE");
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &prod), 0);
        cr_assert_eq(gpuipc_hostbuf_new(SIZE, &b), 0);
        p = gpuipc_hostbuf_data(b);
        p[0] = 1;
        cr_assert_eq(gpuipc_hostbuf_register(prod, "rv/own", b, NULL, 0, NULL), 0);
        cr_expect(fcntl(gpuipc_hostbuf_fd(b), F_GET_SEALS) & F_SEAL_FUTURE_WRITE);
        p[0] = 2;       /* after sealing: the existing mapping still writes */
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_assert_eq(gpuipc_view_lookup(c, "rv/own", 0, 0, &v), 0);
        cr_expect_eq(((const uint8_t *)gpuipc_view_data(v))[0], 2);
        p[0] = 3;
        cr_expect_eq(((const uint8_t *)gpuipc_view_data(v))[0], 3);
        cr_assert_eq(gpuipc_view_release(v), 0);

        m1 = memfd_create("rv1", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        m2 = memfd_create("rv2", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        cr_assert(m1 >= 0 && m2 >= 0);
        cr_assert_eq(ftruncate(m1, SIZE), 0);
        cr_assert_eq(ftruncate(m2, SIZE), 0);
        cr_assert_eq(gpuipc_fd_register(prod, "rv/fd1", m1, 0, SIZE, NULL, 0, NULL), 0);
        cr_assert_eq(gpuipc_fd_register(prod, "rv/fd2", m2, 0, SIZE, NULL,
                                        GPUIPC_REGISTER_SHARED_WRITE, NULL), 0);
        cr_expect(fcntl(m1, F_GET_SEALS) & F_SEAL_FUTURE_WRITE);
        cr_expect_eq(fcntl(m2, F_GET_SEALS) & F_SEAL_FUTURE_WRITE, 0);
        cr_expect_eq(pwrite(m1, "x", 1, 0), -1);
        cr_expect_eq(pwrite(m2, "x", 1, 0), 1);
        cr_assert_eq(gpuipc_view_lookup(c, "rv/fd2", 0, GPUIPC_LOOKUP_WRITABLE, &v), 0);
        ((uint8_t *)gpuipc_view_data(v))[1] = 'y';
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_expect_eq(pread(m2, got, 2, 0), 2);
        cr_expect_eq(got[1], 'y');
        close(m1);
        close(m2);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
        gpuipc_client_free(prod);
}

/* Item 1: the owner's uid gets a read-write fd with writable: true, also
 * through the library's GPUIPC_LOOKUP_WRITABLE. */
Test(review, writable_lookup_same_uid)
{
        gpuipc_client *prod = producer(GPUIPC_REGISTER_SHARED_WRITE), *c = NULL;
        gpuipc_view *v = NULL;
        int fd = hello_conn(), mfd;

        mfd = raw_lookup(fd, 2, "rv/buf", true, "");
        cr_assert_eq(fcntl(mfd, F_GETFL) & O_ACCMODE, O_RDWR);
        close(mfd);
        close(fd);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_assert_eq(gpuipc_view_lookup(c, "rv/buf", 0, GPUIPC_LOOKUP_WRITABLE, &v), 0);
        ((uint8_t *)gpuipc_view_data(v))[1] = (uint8_t)~h_pattern(1, SEED);
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(gpuipc_view_lookup(c, "rv/buf", 0, 0, &v), 0);
        cr_expect_eq(((const uint8_t *)gpuipc_view_data(v))[1], (uint8_t)~h_pattern(1, SEED));
        cr_assert_eq(gpuipc_view_release(v), 0);
        gpuipc_client_free(c);
        gpuipc_client_free(prod);
}

/* Item 1: another uid gets permission for writable (needs root to switch). */
Test(review, writable_lookup_other_uid)
{
        gpuipc_client *prod;
        pid_t pid;
        int st = 0;

        if (geteuid() != 0)
                cr_skip_test("needs root to connect as another uid");
        prod = producer(GPUIPC_REGISTER_SHARED_WRITE);
        cr_assert_eq(chmod(h_d.dir, 0755), 0);
        cr_assert_eq(chmod(h_d.sock, 0666), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                int fd, mfd;
                alarm(5);       /* a failed assert here must not hang the parent */
                if (setgid(65534) < 0 || setuid(65534) < 0)
                        _exit(3);
                fd = hello_conn();
                mfd = raw_lookup(fd, 2, "rv/buf", false, "");
                raw_lookup(fd, 3, "rv/buf", true, "permission");
                _exit((fcntl(mfd, F_GETFL) & O_ACCMODE) == O_RDONLY ? 0 : 4);
        }
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
        gpuipc_client_free(prod);
}

/* ---- item 2: records that would not fit a reply ------------------------ */

static void pack_big_register(msgpack_packer *pk, void *data)
{
        size_t *vlen = data;
        char *v = malloc(*vlen);

        cr_assert_not_null(v);
        memset(v, 'v', *vlen);
        proto_pack_kstr(pk, "name", "big/x");
        proto_pack_kstr(pk, "kind", "host");
        proto_pack_ku64(pk, "size", SIZE);
        proto_pack_ku64(pk, "fds", 1);
        proto_pack_str(pk, "meta");
        msgpack_pack_map(pk, 1);
        proto_pack_str(pk, "user");
        msgpack_pack_map(pk, 1);
        proto_pack_str(pk, "k");
        proto_pack_strn(pk, v, *vlen);
        free(v);
}

static int sealed_memfd(void)
{
        int fd = memfd_create("rv", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        cr_assert_geq(fd, 0);
        cr_assert_eq(ftruncate(fd, SIZE), 0);
        cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL), 0);
        return fd;
}

Test(review_own, register_refuses_records_too_large_for_a_reply)
{
        static const char *const args[] = { "--max-frame", "1024", NULL };
        struct h_daemon d = { 0 };
        size_t vlen = 880;
        struct h_frame f;
        int fd, mfd = sealed_memfd(), base;

        h_daemon_start(&d, args);
        fd = h_raw_connect(d.sock);
        cr_assert_eq(h_raw_hello(fd, 1), 1024);
        base = h_daemon_fd_count(&d);
        cr_assert_eq(h_raw_request(fd, "register", 2, 5, pack_big_register, &vlen, &mfd, 1), 0);
        h_raw_expect_reply(fd, 2, "too_large");
        cr_expect_eq(h_daemon_fd_settle(&d, base, 2000), base, "the refused memfd stayed open");
        /* the namespace is usable: list answers, and a smaller one registers */
        cr_assert_eq(h_raw_request(fd, "list", 3, 0, NULL, NULL, NULL, 0), 0);
        cr_assert_eq(h_raw_recv(fd, 5000, &f), 1);
        h_expect_reply(&f, 3, "");
        h_frame_free(&f);
        vlen = 500;
        cr_assert_eq(h_raw_request(fd, "register", 4, 5, pack_big_register, &vlen, &mfd, 1), 0);
        h_raw_expect_reply(fd, 4, "");
        cr_expect_geq(raw_lookup_sock(fd), 0);
        close(mfd);
        close(fd);
        h_daemon_stop(&d);
}

/* ---- item 3: half-close ------------------------------------------------ */

Test(review, half_close_gets_its_replies)
{
        int fd = hello_conn(), n = 0;
        struct h_frame f;
        int r;

        for (int i = 0; i < 50; i++)
                cr_assert_eq(h_raw_request(fd, "ping", 10 + (uint64_t)i, 0, NULL, NULL, NULL, 0), 0);
        cr_assert_eq(shutdown(fd, SHUT_WR), 0);
        while ((r = h_raw_recv(fd, 5000, &f)) == 1) {
                h_expect_reply(&f, 10 + (uint64_t)n, "");
                h_frame_free(&f);
                n++;
        }
        cr_expect_eq(r, 0, "no EOF after the replies");
        cr_expect_eq(n, 50, "%d of 50 replies arrived before EOF", n);
        close(fd);
}

/* ---- item 4: shutdown -------------------------------------------------- */

static void pack_wait(msgpack_packer *pk, void *data)
{
        proto_pack_kstr(pk, "name", "rv/never");
        proto_pack_ku64(pk, "wait_ms", 60000);
}

Test(review, shutdown_answers_and_announces)
{
        int fd = hello_conn(), idle = hello_conn();
        struct h_frame f;

        cr_assert_eq(h_raw_request(fd, "lookup", 5, 2, pack_wait, NULL, NULL, 0), 0);
        /* a round trip, so that the lookup is parked before the signal */
        cr_assert_eq(h_raw_request(fd, "ping", 6, 0, NULL, NULL, NULL, 0), 0);
        h_raw_expect_reply(fd, 6, "");
        cr_assert_eq(kill(h_d.pid, SIGTERM), 0);
        h_raw_expect_reply(fd, 5, "shutting_down");
        h_raw_expect_event(fd, "shutting_down", true);
        cr_expect_eq(h_raw_recv(fd, 5000, &f), 0, "no EOF after the shutdown event");
        h_raw_expect_event(idle, "shutting_down", true);
        close(fd);
        close(idle);
}

/* A peer that reads nothing does not hold shutdown up beyond the grace. */
Test(review, shutdown_does_not_wait_for_a_stuck_peer)
{
        int fd = hello_conn();
        int64_t t0;

        /* fill its socket with replies it never reads, until the daemon
         * stops reading too */
        cr_assert_eq(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
        for (int i = 0; i < 200000; i++)
                if (h_raw_request(fd, "ping", 10 + (uint64_t)i, 0, NULL, NULL, NULL, 0) < 0)
                        break;
        h_sleep_ms(200);
        t0 = h_now_ms();
        h_daemon_stop(&h_d);
        cr_expect_lt(h_now_ms() - t0, 5000, "shutdown took %lld ms", (long long)(h_now_ms() - t0));
        close(fd);
}

/* ---- item 5: backpressure ---------------------------------------------- */

/* Requests for large replies, sent without reading: the daemon stops
 * reading instead of queueing past --max-output and closing the peer. */
Test(review_own, backpressure_instead_of_disconnect)
{
        static const char *const args[] = { "--max-output", "1000000", NULL };
        struct h_daemon d = { 0 };
        size_t vlen = 1000;
        int fd, mfd = sealed_memfd();
        const int n = 2000;     /* ~2 MB of replies */
        struct h_frame f;

        h_daemon_start(&d, args);
        fd = h_raw_connect(d.sock);
        h_raw_hello(fd, 1);
        cr_assert_eq(h_raw_request(fd, "register", 2, 5, pack_big_register, &vlen, &mfd, 1), 0);
        h_raw_expect_reply(fd, 2, "");
        close(mfd);
        /* all requests in one write, small enough for the socket buffer */
        {
                uint8_t *buf = malloc((size_t)n * 64), body[64];
                size_t at = 0;
                cr_assert_not_null(buf);
                for (int i = 0; i < n; i++) {
                        struct proto_out o;
                        proto_out_init(&o);
                        msgpack_pack_map(&o.pk, 3);
                        proto_pack_kstr(&o.pk, "op", "stat");
                        proto_pack_ku64(&o.pk, "seq", 10 + (uint64_t)i);
                        proto_pack_kstr(&o.pk, "name", "big/x");
                        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME), 0);
                        cr_assert_leq(o.sb.size, sizeof(body));
                        memcpy(buf + at, o.sb.data, o.sb.size);
                        at += o.sb.size;
                        proto_out_free(&o);
                }
                cr_assert_eq(h_raw_send(fd, buf, at, NULL, 0), 0);
                free(buf);
        }
        h_sleep_ms(300);
        cr_assert(h_daemon_alive(&d));
        for (int i = 0; i < n; i++) {
                cr_assert_eq(h_raw_recv(fd, 5000, &f), 1, "reply %d of %d missing", i, n);
                h_expect_reply(&f, 10 + (uint64_t)i, "");
                h_frame_free(&f);
        }
        close(fd);
        h_daemon_stop(&d);
}

/* ---- item 6: fds of frames refused before dispatch --------------------- */

static void put_frame(uint8_t *buf, size_t *at, const void *body, uint32_t n)
{
        buf[(*at)++] = (uint8_t)(n >> 24);
        buf[(*at)++] = (uint8_t)(n >> 16);
        buf[(*at)++] = (uint8_t)(n >> 8);
        buf[(*at)++] = (uint8_t)n;
        memcpy(buf + *at, body, n);
        *at += n;
}

/* register {"op","seq":9,"name":"rv/stolen","kind":"host","size":4096,"fds":1} */
static void register_body(uint8_t *out, uint32_t *ret_n)
{
        struct proto_out o;
        size_t n;
        uint8_t *p;

        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 6);
        proto_pack_kstr(&o.pk, "op", "register");
        proto_pack_ku64(&o.pk, "seq", 9);
        proto_pack_kstr(&o.pk, "name", "rv/stolen");
        proto_pack_kstr(&o.pk, "kind", "host");
        proto_pack_ku64(&o.pk, "size", SIZE);
        proto_pack_ku64(&o.pk, "fds", 1);
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME), 0);
        p = proto_out_release(&o, &n);
        memcpy(out, p + PROTO_HDR_LEN, n - PROTO_HDR_LEN);
        *ret_n = (uint32_t)(n - PROTO_HDR_LEN);
        free(p);
}

static void refused_then_register(const void *first, uint32_t first_len, const char *event)
{
        uint8_t buf[512], body[256];
        size_t at = 0;
        uint32_t n;
        int fd = hello_conn(), mfd = sealed_memfd(), base = h_daemon_fd_count(&h_d);

        register_body(body, &n);
        put_frame(buf, &at, first, first_len);
        /* the fd goes with the first frame's bytes alone (docs/protocol.md,
         * "File descriptors"); the register follows at once, without one */
        cr_assert_eq(h_raw_send(fd, buf, at, &mfd, 1), 0);
        at = 0;
        put_frame(buf, &at, body, n);
        cr_assert_eq(h_raw_send(fd, buf, at, NULL, 0), 0);
        h_raw_expect_event(fd, event, false);
        h_raw_expect_reply(fd, 9, "bad_fd");
        close(mfd);
        cr_expect_eq(h_daemon_fd_settle(&h_d, base, 2000), base, "the refused frame's fd leaked");
        close(fd);
}

Test(review, no_seq_frame_fds_are_not_taken_by_the_next)
{
        /* {"op": "ping", "fds": 1} */
        static const char body[] = "\x82\xa2op\xa4ping\xa3" "fds\x01";
        refused_then_register(body, sizeof(body) - 1, "bad_request");
}

Test(review, undecodable_frame_fds_are_not_taken_by_the_next)
{
        static const char body[] = "\xc1\xc1\xc1";
        refused_then_register(body, sizeof(body) - 1, "bad_frame");
}

/* ---- item 8: hello first ----------------------------------------------- */

Test(review, unknown_op_before_hello_is_hello_required)
{
        int fd = h_raw_connect(h_d.sock);

        cr_assert_eq(h_raw_request(fd, "frobnicate", 1, 0, NULL, NULL, NULL, 0), 0);
        h_raw_expect_reply(fd, 1, "hello_required");
        h_raw_hello(fd, 2);
        cr_assert_eq(h_raw_request(fd, "frobnicate", 3, 0, NULL, NULL, NULL, 0), 0);
        h_raw_expect_reply(fd, 3, "unknown_op");
        close(fd);
}
