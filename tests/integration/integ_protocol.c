/* integ_protocol.c: docs/protocol.md checked over raw connections: the
 * example exchange, replies and events, lifetimes (hello first, half-close,
 * shutdown), pipelining, and the configurable limits (records too large for
 * a reply, backpressure). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"

TestSuite(protocol, .init = h_setup, .fini = h_teardown, .timeout = 30);

/* Request pairs after op and seq: fmt has one letter per pair, 's' (str),
 * 'u' (uint64_t), 'b' (bool as int), each followed by the key then value. */
static void vreq(int fd, uint64_t seq, const char *op, const int *fds, unsigned nfds,
                 const char *fmt, va_list ap)
{
        struct proto_out o;
        uint8_t *b;
        size_t n;

        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 2 + (uint32_t)strlen(fmt));
        proto_pack_kstr(&o.pk, "op", op);
        proto_pack_ku64(&o.pk, "seq", seq);
        for (const char *f = fmt; *f; f++) {
                const char *key = va_arg(ap, const char *);
                switch (*f) {
                case 's':
                        proto_pack_kstr(&o.pk, key, va_arg(ap, const char *));
                        break;
                case 'u':
                        proto_pack_ku64(&o.pk, key, va_arg(ap, uint64_t));
                        break;
                case 'b':
                        proto_pack_kbool(&o.pk, key, va_arg(ap, int) != 0);
                        break;
                default:
                        cr_assert_fail("bad fmt %c", *f);
                }
        }
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT), 0);
        b = proto_out_release(&o, &n);
        cr_assert_eq(h_raw_send(fd, b, n, fds, nfds), 0);
        free(b);
        proto_out_free(&o);
}

static void req(int fd, uint64_t seq, const char *op, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vreq(fd, seq, op, NULL, 0, fmt, ap);
        va_end(ap);
}

static void req_fds(int fd, uint64_t seq, const char *op, const int *fds, unsigned nfds,
                    const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vreq(fd, seq, op, fds, nfds, fmt, ap);
        va_end(ap);
}

static void recv_reply(int fd, uint64_t seq, const char *code, struct h_frame *f)
{
        int r = h_raw_recv(fd, 5000, f);
        cr_assert_eq(r, 1, "no reply to seq %llu: %s", (unsigned long long)seq,
                     r == 0 ? "connection closed" : strerror(-r));
        h_expect_reply(f, seq, code);
}

static int memfd_with(size_t size, uint32_t seed)
{
        int fd = memfd_create("proto", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        uint8_t *p;

        cr_assert_geq(fd, 0);
        cr_assert_eq(ftruncate(fd, (off_t)size), 0);
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        cr_assert_neq(p, MAP_FAILED);
        for (size_t i = 0; i < size; i++)
                p[i] = h_pattern(i, seed);
        munmap(p, size);
        /* gpuipcd wants a write seal on host memfds unless shared_write */
        cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL),
                     0);
        return fd;
}

static uint64_t get_u64(const msgpack_object *map, const char *key)
{
        uint64_t v = 0;
        cr_assert_eq(proto_get_u64(map, key, &v), 0, "no uint %s", key);
        return v;
}

static bool str_is(const msgpack_object *map, const char *key, const char *want)
{
        return proto_obj_str_eq(proto_get(map, key), want);
}

Test(protocol, hello_reply_fields)
{
        int fd = h_raw_connect(h_d.sock);
        struct h_frame f;
        const char *s;
        size_t n;

        req(fd, 1, "hello", "us", "version", (uint64_t)1, "client", "demo");
        recv_reply(fd, 1, "", &f);
        cr_expect_eq(get_u64(f.m.root, "version"), 1);
        cr_assert_eq(proto_get_str(f.m.root, "server", &s, &n), 0);
        cr_expect(n > 8 && memcmp(s, "gpuipcd ", 8) == 0, "server %.*s", (int)n, s);
        cr_expect_eq(get_u64(f.m.root, "max_frame"), PROTO_MAX_FRAME);
        cr_expect_eq(get_u64(f.m.root, "max_fds"), PROTO_MAX_FDS);
        cr_expect_eq(get_u64(f.m.root, "pid"), (uint64_t)h_d.pid);
        h_frame_free(&f);
        /* a later version is answered with 1 */
        req(fd, 2, "hello", "u", "version", (uint64_t)7);
        recv_reply(fd, 2, "", &f);
        cr_expect_eq(get_u64(f.m.root, "version"), 1);
        h_frame_free(&f);
        /* version absent or 0 */
        req(fd, 3, "hello", "");
        h_raw_expect_reply(fd, 3, "version");
        req(fd, 4, "hello", "u", "version", (uint64_t)0);
        h_raw_expect_reply(fd, 4, "version");
        /* client text over 64 bytes */
        req(fd, 5, "hello", "us", "version", (uint64_t)1, "client",
            "0123456789012345678901234567890123456789012345678901234567890123456789");
        h_raw_expect_reply(fd, 5, "bad_request");
        close(fd);
}

/* The example exchange of docs/protocol.md, byte for byte where the
 * document fixes the bytes. */
Test(protocol, example_exchange_bytes)
{
        static const uint8_t hello[] = {
                0x00, 0x00, 0x00, 0x24, 0x84, 0xa2, 0x6f, 0x70, 0xa5, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
                0xa3, 0x73, 0x65, 0x71, 0x01, 0xa7, 0x76, 0x65, 0x72, 0x73, 0x69, 0x6f, 0x6e, 0x01,
                0xa6, 0x63, 0x6c, 0x69, 0x65, 0x6e, 0x74, 0xa4, 0x64, 0x65, 0x6d, 0x6f,
        };
        static const uint8_t reg[] = {
                0x00, 0x00, 0x00, 0x35, 0x86, 0xa2, 0x6f, 0x70, 0xa8, 0x72, 0x65, 0x67, 0x69, 0x73,
                0x74, 0x65, 0x72, 0xa3, 0x73, 0x65, 0x71, 0x02, 0xa4, 0x6e, 0x61, 0x6d, 0x65, 0xa6,
                0x64, 0x65, 0x6d, 0x6f, 0x2f, 0x78, 0xa4, 0x6b, 0x69, 0x6e, 0x64, 0xa4, 0x68, 0x6f,
                0x73, 0x74, 0xa4, 0x73, 0x69, 0x7a, 0x65, 0xcd, 0x10, 0x00, 0xa3, 0x66, 0x64, 0x73,
                0x01,
        };
        static const uint8_t reg_reply[] = {
                0x00, 0x00, 0x00, 0x16, 0x83, 0xa3, 0x73, 0x65, 0x71, 0x02, 0xa2, 0x69, 0x64, 0x01,
                0xa4, 0x6e, 0x61, 0x6d, 0x65, 0xa6, 0x64, 0x65, 0x6d, 0x6f, 0x2f, 0x78,
        };
        static const uint8_t lookup[] = {
                0x00, 0x00, 0x00, 0x1f, 0x83, 0xa2, 0x6f, 0x70, 0xa6, 0x6c, 0x6f, 0x6f, 0x6b, 0x75,
                0x70, 0xa3, 0x73, 0x65, 0x71, 0x03, 0xa4, 0x6e, 0x61, 0x6d, 0x65, 0xa9, 0x64, 0x65,
                0x6d, 0x6f, 0x2f, 0x6e, 0x6f, 0x70, 0x65,
        };
        int fd = h_raw_connect(h_d.sock), mfd = memfd_with(4096, 1);
        struct h_frame f;
        size_t n;

        cr_assert_eq(h_raw_send(fd, hello, sizeof(hello), NULL, 0), 0);
        recv_reply(fd, 1, "", &f);
        h_frame_free(&f);
        cr_assert_eq(h_raw_send(fd, reg, sizeof(reg), &mfd, 1), 0);
        recv_reply(fd, 2, "", &f);
        cr_expect_eq(get_u64(f.m.root, "id"), 1, "the first id is 1");
        cr_expect(str_is(f.m.root, "name", "demo/x"));
        cr_expect_eq(f.nfds, 0, "a register reply carries no fds");
        /* the document shows these 26 bytes */
        cr_expect_eq(f.len + 4, sizeof(reg_reply), "register reply is %u bytes, the doc shows %zu",
                     f.len + 4, sizeof(reg_reply));
        if (f.len + 4 == sizeof(reg_reply))
                cr_expect_arr_eq(f.body, reg_reply + 4, f.len, "register reply differs from the doc");
        h_frame_free(&f);
        cr_assert_eq(h_raw_send(fd, lookup, sizeof(lookup), NULL, 0), 0);
        recv_reply(fd, 3, "not_found", &f);
        h_error_message(&f, &n);
        cr_expect_gt(n, 0, "empty error message");
        h_frame_free(&f);
        close(mfd);
        close(fd);
}

Test(protocol, lease_lifecycle_over_the_wire)
{
        int own = h_raw_connect(h_d.sock), con = h_raw_connect(h_d.sock);
        int mfd = memfd_with(8192, 3);
        struct h_frame f;
        const msgpack_object *reg, *owner;
        uint64_t id, lease, id2;
        struct stat a, b;
        bool flag;

        h_raw_hello(own, 1);
        h_raw_hello(con, 1);
        req_fds(own, 2, "register", &mfd, 1, "sssuub", "name", "wire/x", "kind", "host",
                "name2", "ignored", "size", (uint64_t)4096, "fds", (uint64_t)1, "ephemeral", 0);
        recv_reply(own, 2, "", &f);
        id = get_u64(f.m.root, "id");
        h_frame_free(&f);

        /* lookup by name: a lease, the record, and the memfd */
        req(con, 3, "lookup", "s", "name", "wire/x");
        recv_reply(con, 3, "", &f);
        lease = get_u64(f.m.root, "lease");
        cr_expect_eq(get_u64(f.m.root, "fds"), 1);
        cr_assert_eq(f.nfds, 1, "lookup reply came with %u fds", f.nfds);
        cr_assert_eq(fstat(f.fds[0], &a), 0);
        cr_assert_eq(fstat(mfd, &b), 0);
        cr_expect_eq(a.st_ino, b.st_ino, "not the registered memfd");
        cr_expect(fcntl(f.fds[0], F_GETFD) & FD_CLOEXEC, "received fd lacks CLOEXEC");
        cr_assert_eq(proto_get_map(f.m.root, "reg", &reg), 0);
        cr_expect_eq(get_u64(reg, "id"), id);
        cr_expect(str_is(reg, "name", "wire/x"));
        cr_expect(str_is(reg, "kind", "host"));
        cr_expect_eq(get_u64(reg, "size"), 4096);
        cr_expect_eq(get_u64(reg, "offset"), 0);
        cr_expect_eq(get_u64(reg, "leases"), 1);
        cr_expect(str_is(reg, "state", "live"));
        cr_expect_eq(proto_get_bool(reg, "ephemeral", &flag), 0);
        cr_expect_not(flag);
        cr_expect_null(proto_get(reg, "device"), "host records have no device");
        cr_expect_null(proto_get(reg, "meta"), "no meta was registered");
        cr_assert_eq(proto_get_map(reg, "owner", &owner), 0);
        cr_expect_eq(get_u64(owner, "pid"), (uint64_t)getpid());
        cr_expect_eq(get_u64(owner, "uid"), (uint64_t)getuid());
        cr_expect_eq(proto_get_bool(owner, "connected", &flag), 0);
        cr_expect(flag);
        cr_expect_gt(get_u64(reg, "created_ms"), 1500000000000ull);
        h_frame_free(&f);

        /* lookup by id takes a second lease */
        req(con, 4, "lookup", "u", "id", id);
        recv_reply(con, 4, "", &f);
        id2 = get_u64(f.m.root, "lease");
        cr_expect_neq(id2, lease, "two lookups, one lease id");
        cr_expect_eq(f.nfds, 1);
        h_frame_free(&f);
        req(con, 5, "release", "u", "lease", id2);
        h_raw_expect_reply(con, 5, "");

        /* another connection's lease is not ours to release */
        req(own, 6, "release", "u", "lease", lease);
        h_raw_expect_reply(own, 6, "not_found");

        /* unregister: gone from the namespace, found by id, still leased */
        req(own, 7, "unregister", "s", "name", "wire/x");
        recv_reply(own, 7, "", &f);
        cr_expect_eq(get_u64(f.m.root, "id"), id);
        cr_expect_eq(get_u64(f.m.root, "leases"), 1);
        h_frame_free(&f);
        req(con, 8, "stat", "s", "name", "wire/x");
        h_raw_expect_reply(con, 8, "not_found");
        req(con, 9, "stat", "u", "id", id);
        recv_reply(con, 9, "", &f);
        cr_assert_eq(proto_get_map(f.m.root, "reg", &reg), 0);
        cr_expect(str_is(reg, "state", "unregistered"), "state of an unregistered, leased record");
        cr_expect_eq(get_u64(reg, "leases"), 1);
        h_frame_free(&f);
        /* a lookup by id wants a live registration */
        req(con, 10, "lookup", "u", "id", id);
        h_raw_expect_reply(con, 10, "not_found");
        req(con, 11, "list", "s", "prefix", "wire");
        recv_reply(con, 11, "", &f);
        {
                const msgpack_object *regs;
                cr_assert_eq(proto_get_array(f.m.root, "regs", &regs), 0);
                cr_expect_eq(regs->via.array.size, 0, "list shows an unregistered record");
        }
        h_frame_free(&f);

        /* the last release: a released event to the owner */
        req(con, 12, "release", "u", "lease", lease);
        h_raw_expect_reply(con, 12, "");
        cr_assert_eq(h_raw_recv(own, 5000, &f), 1, "no released event");
        cr_assert_not_null(f.m.root);
        cr_expect(str_is(f.m.root, "event", "released"), "got another frame than released");
        cr_expect_eq(get_u64(f.m.root, "id"), id);
        cr_expect(str_is(f.m.root, "name", "wire/x"));
        {
                uint64_t seq;
                cr_expect_eq(proto_get_u64(f.m.root, "seq", &seq), -ENOENT, "event with a seq");
        }
        h_frame_free(&f);
        req(con, 13, "stat", "u", "id", id);
        h_raw_expect_reply(con, 13, "not_found");
        req(con, 14, "release", "u", "lease", lease);
        h_raw_expect_reply(con, 14, "not_found");
        close(mfd);
        close(con);
        close(own);
}

/* `have`: a lease this connection holds on the registration found lets
 * the reply leave the fd out; any other value changes nothing. */
Test(protocol, lookup_have_omits_fd)
{
        int own = h_raw_connect(h_d.sock), con = h_raw_connect(h_d.sock);
        int other = h_raw_connect(h_d.sock);
        int mfd = memfd_with(4096, 5), mfd2 = memfd_with(4096, 6);
        struct h_frame f;
        const msgpack_object *reg;
        uint64_t id, lease, lease2, lease_y, foreign;

        h_raw_hello(own, 1);
        h_raw_hello(con, 1);
        h_raw_hello(other, 1);
        req_fds(own, 2, "register", &mfd, 1, "ssuu", "name", "have/x", "kind", "host",
                "size", (uint64_t)4096, "fds", (uint64_t)1);
        recv_reply(own, 2, "", &f);
        id = get_u64(f.m.root, "id");
        h_frame_free(&f);
        req_fds(own, 3, "register", &mfd2, 1, "ssuu", "name", "have/y", "kind", "host",
                "size", (uint64_t)4096, "fds", (uint64_t)1);
        h_raw_expect_reply(own, 3, "");

        req(con, 4, "lookup", "s", "name", "have/x");
        recv_reply(con, 4, "", &f);
        lease = get_u64(f.m.root, "lease");
        cr_expect_eq(f.nfds, 1);
        h_frame_free(&f);

        /* our lease on it: no fd, no fds field, a new lease, the record */
        req(con, 5, "lookup", "su", "name", "have/x", "have", lease);
        recv_reply(con, 5, "", &f);
        cr_expect_eq(f.nfds, 0, "the reply came with %u fds", f.nfds);
        cr_expect_null(proto_get(f.m.root, "fds"));
        lease2 = get_u64(f.m.root, "lease");
        cr_expect_neq(lease2, lease);
        cr_assert_eq(proto_get_map(f.m.root, "reg", &reg), 0);
        cr_expect_eq(get_u64(reg, "id"), id);
        cr_expect_eq(get_u64(reg, "leases"), 2);
        h_frame_free(&f);
        /* by id as well, and writable (we are the owner's uid) */
        req(con, 6, "lookup", "uub", "id", id, "have", lease2, "writable", 1);
        recv_reply(con, 6, "", &f);
        cr_expect_eq(f.nfds, 0);
        h_frame_free(&f);

        /* a lease on another registration: the fd comes */
        req(con, 7, "lookup", "s", "name", "have/y");
        recv_reply(con, 7, "", &f);
        lease_y = get_u64(f.m.root, "lease");
        h_frame_free(&f);
        req(con, 8, "lookup", "su", "name", "have/x", "have", lease_y);
        recv_reply(con, 8, "", &f);
        cr_expect_eq(f.nfds, 1, "have of another registration dropped the fd");
        cr_expect_eq(get_u64(f.m.root, "fds"), 1);
        h_frame_free(&f);
        /* another connection's lease, an unknown one, a released one */
        req(other, 9, "lookup", "s", "name", "have/x");
        recv_reply(other, 9, "", &f);
        foreign = get_u64(f.m.root, "lease");
        h_frame_free(&f);
        req(con, 10, "lookup", "su", "name", "have/x", "have", foreign);
        recv_reply(con, 10, "", &f);
        cr_expect_eq(f.nfds, 1, "another connection's lease dropped the fd");
        h_frame_free(&f);
        req(con, 11, "lookup", "su", "name", "have/x", "have", (uint64_t)999999);
        recv_reply(con, 11, "", &f);
        cr_expect_eq(f.nfds, 1);
        h_frame_free(&f);
        req(con, 12, "release", "u", "lease", lease);
        h_raw_expect_reply(con, 12, "");
        req(con, 13, "lookup", "su", "name", "have/x", "have", lease);
        recv_reply(con, 13, "", &f);
        cr_expect_eq(f.nfds, 1, "a released lease dropped the fd");
        h_frame_free(&f);
        /* the wrong type */
        req(con, 14, "lookup", "ss", "name", "have/x", "have", "1");
        h_raw_expect_reply(con, 14, "bad_request");
        close(mfd);
        close(mfd2);
        close(other);
        close(con);
        close(own);
}

Test(protocol, pipelined_requests_in_order)
{
        int fd = h_raw_connect(h_d.sock), own, mfd = memfd_with(4096, 8);
        struct proto_out o;
        uint8_t *b;
        size_t n;
        uint64_t want = 100;
        bool lookup_done = false;

        h_raw_hello(fd, 1);
        /* one write: 50 pings, a lookup that waits, 50 more pings */
        proto_out_init(&o);
        for (int i = 0; i < 101; i++) {
                struct proto_out one;
                uint8_t *ob;
                size_t on;
                proto_out_init(&one);
                if (i == 50) {
                        msgpack_pack_map(&one.pk, 4);
                        proto_pack_kstr(&one.pk, "op", "lookup");
                        proto_pack_ku64(&one.pk, "seq", 9999);
                        proto_pack_kstr(&one.pk, "name", "pipe/late");
                        proto_pack_ku64(&one.pk, "wait_ms", 10000);
                } else {
                        msgpack_pack_map(&one.pk, 2);
                        proto_pack_kstr(&one.pk, "op", "ping");
                        proto_pack_ku64(&one.pk, "seq", 100 + (uint64_t)i);
                }
                cr_assert_eq(proto_out_finish(&one, PROTO_MAX_FRAME), 0);
                ob = proto_out_release(&one, &on);
                msgpack_sbuffer_write(&o.sb, (const char *)ob, on);
                free(ob);
                proto_out_free(&one);
        }
        b = (uint8_t *)o.sb.data + PROTO_HDR_LEN;       /* skip the unused prefix */
        n = o.sb.size - PROTO_HDR_LEN;
        cr_assert_eq(h_raw_send(fd, b, n, NULL, 0), 0);
        proto_out_free(&o);
        /* the 100 pings come back in order, without waiting for the lookup */
        for (int i = 0; i < 100; i++) {
                struct h_frame f;
                uint64_t seq;
                cr_assert_eq(h_raw_recv(fd, 5000, &f), 1, "reply %d of 100 missing", i);
                cr_assert_eq(proto_get_u64(f.m.root, "seq", &seq), 0);
                if (want == 150)
                        want++;
                cr_assert_eq(seq, want, "reply %d has seq %llu, want %llu", i, (unsigned long long)seq,
                             (unsigned long long)want);
                want++;
                h_frame_free(&f);
        }
        /* now register: the waiting lookup completes */
        own = h_raw_connect(h_d.sock);
        h_raw_hello(own, 1);
        req_fds(own, 2, "register", &mfd, 1, "ssuu", "name", "pipe/late", "kind", "host", "size",
                (uint64_t)4096, "fds", (uint64_t)1);
        h_raw_expect_reply(own, 2, "");
        {
                struct h_frame f;
                cr_assert_eq(h_raw_recv(fd, 5000, &f), 1, "the waiting lookup never completed");
                h_expect_reply(&f, 9999, "");
                cr_expect_eq(f.nfds, 1);
                lookup_done = true;
                h_frame_free(&f);
        }
        cr_expect(lookup_done);
        close(own);
        close(mfd);
        close(fd);
}

Test(protocol, waiting_lookup_cancelled_by_disconnect)
{
        int fd = h_raw_connect(h_d.sock), mfd = memfd_with(4096, 2);
        gpuipc_client *c = NULL;
        gpuipc_stats *s = NULL;
        int64_t deadline;

        h_raw_hello(fd, 1);
        req(fd, 2, "lookup", "su", "name", "cancel/x", "wait_ms", (uint64_t)10000);
        h_sleep_ms(50);
        close(fd);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_assert_eq(gpuipc_fd_register(c, "cancel/x", mfd, 0, 4096, NULL, 0, NULL), 0,
                     "%s", gpuipc_errmsg(c));
        deadline = h_now_ms() + 2000;
        for (;;) {
                cr_assert_eq(gpuipc_stats_fetch(c, &s), 0);
                if ((s->connections == 1 && s->leases == 0) || h_now_ms() > deadline)
                        break;
                gpuipc_stats_free(s);
                h_sleep_ms(20);
        }
        cr_expect_eq(s->leases, 0, "a lease was taken for a closed connection's lookup");
        cr_expect_eq(s->connections, 1);
        gpuipc_stats_free(s);
        cr_expect_eq(gpuipc_client_ping(c), 0);
        gpuipc_client_free(c);
        close(mfd);
}

Test(protocol, list_paging_fields)
{
        int fd = h_raw_connect(h_d.sock), mfd = memfd_with(4096, 1);
        struct h_frame f;
        const msgpack_object *regs;
        uint64_t next = 0, last_id = 0;
        char name[32];

        h_raw_hello(fd, 1);
        for (int i = 0; i < 30; i++) {
                snprintf(name, sizeof(name), "page/%02d", i);
                req_fds(fd, 10 + (uint64_t)i, "register", &mfd, 1, "ssuu", "name", name, "kind", "host",
                        "size", (uint64_t)4096, "fds", (uint64_t)1);
                h_raw_expect_reply(fd, 10 + (uint64_t)i, "");
        }
        /* limit 7: pages of 7, with next, and no next at the end */
        int total = 0, pages = 0;
        for (;;) {
                if (next)
                        req(fd, 100 + (uint64_t)pages, "list", "suu", "prefix", "page", "limit", (uint64_t)7,
                            "after", next);
                else
                        req(fd, 100 + (uint64_t)pages, "list", "su", "prefix", "page", "limit", (uint64_t)7);
                recv_reply(fd, 100 + (uint64_t)pages, "", &f);
                cr_assert_eq(proto_get_array(f.m.root, "regs", &regs), 0);
                cr_assert_leq(regs->via.array.size, 7);
                for (uint32_t i = 0; i < regs->via.array.size; i++) {
                        uint64_t id = get_u64(&regs->via.array.ptr[i], "id");
                        cr_assert_gt(id, last_id, "ids not increasing across pages");
                        last_id = id;
                }
                total += (int)regs->via.array.size;
                pages++;
                if (proto_get_u64(f.m.root, "next", &next) != 0) {
                        h_frame_free(&f);
                        break;
                }
                h_frame_free(&f);
                cr_assert_lt(pages, 20, "list never ends");
        }
        cr_expect_eq(total, 30);
        cr_expect_geq(pages, 5);
        /* limit out of range */
        req(fd, 200, "list", "u", "limit", (uint64_t)0);
        h_raw_expect_reply(fd, 200, "bad_request");
        req(fd, 201, "list", "u", "limit", (uint64_t)1001);
        h_raw_expect_reply(fd, 201, "bad_request");
        close(mfd);
        close(fd);
}

/* ---- configurable limits: each test starts its own daemon ---------------- */

static void limits_fini(void)
{
        h_teardown();
}

TestSuite(limits, .fini = limits_fini, .timeout = 30);

static void start_with(const char *const *args)
{
        signal(SIGPIPE, SIG_IGN);
        h_daemon_start(&h_d, args);
}

Test(limits, max_connections)
{
        static const char *const args[] = { "--max-connections", "4", NULL };
        int fds[5], extra;
        int64_t deadline;

        start_with(args);
        for (int i = 0; i < 4; i++) {
                fds[i] = h_raw_connect(h_d.sock);
                h_raw_hello(fds[i], 1);
        }
        extra = h_raw_connect(h_d.sock);
        h_raw_expect_event(extra, "limit", true);
        h_raw_expect_eof(extra, 3000);
        close(extra);
        /* the others are unaffected */
        for (int i = 0; i < 4; i++) {
                req(fds[i], 2, "ping", "");
                h_raw_expect_reply(fds[i], 2, "");
        }
        close(fds[0]);
        /* a freed slot can be taken again */
        deadline = h_now_ms() + 3000;
        for (;;) {
                struct h_frame f;
                int r;
                fds[0] = h_raw_connect(h_d.sock);
                req(fds[0], 1, "hello", "u", "version", (uint64_t)1);
                r = h_raw_recv(fds[0], 3000, &f);
                cr_assert_eq(r, 1);
                if (f.m.root && proto_get(f.m.root, "seq")) {
                        h_expect_reply(&f, 1, "");
                        h_frame_free(&f);
                        break;
                }
                h_frame_free(&f);
                close(fds[0]);
                cr_assert_lt(h_now_ms(), deadline, "slot of a closed connection never freed");
                h_sleep_ms(20);
        }
        for (int i = 0; i < 4; i++)
                close(fds[i]);
}

Test(limits, small_max_frame)
{
        static const char *const args[] = { "--max-frame", "1024", NULL };
        gpuipc_client *c = NULL;
        gpuipc_list *l = NULL;
        int fd, mfd;
        uint8_t big[1100];
        char name[64];

        start_with(args);
        fd = h_raw_connect(h_d.sock);
        cr_assert_eq(h_raw_hello(fd, 1), 1024);
        /* 1024 is fine (a body without op: bad_request), 1025 is fatal */
        memset(big, 0, sizeof(big));
        /* {"seq": N, "x": bin16}: 11 bytes before the bin's data */
        memcpy(big, "\x82\xa3seq\x05\xa1x\xc5\x03\xf5", 11);      /* bin of 1013 */
        cr_assert_eq(h_raw_send_frame(fd, big, 1024, NULL, 0), 0);
        h_raw_expect_reply(fd, 5, "bad_request");
        memcpy(big, "\x82\xa3seq\x06\xa1x\xc5\x03\xf6", 11);      /* bin of 1014 */
        cr_assert_eq(h_raw_send_frame(fd, big, 1025, NULL, 0), 0);
        h_raw_expect_event(fd, "too_large", true);
        h_raw_expect_eof(fd, 3000);
        close(fd);

        /* the library pages a list whose records do not fit one frame */
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        mfd = memfd_with(4096, 1);
        for (int i = 0; i < 40; i++) {
                snprintf(name, sizeof(name), "small-frame/a-rather-long-name-%03d", i);
                cr_assert_eq(gpuipc_fd_register(c, name, mfd, 0, 4096, NULL, 0, NULL), 0, "%s",
                             gpuipc_errmsg(c));
        }
        cr_assert_eq(gpuipc_list_fetch(c, "small-frame", 0, &l), 0, "%s", gpuipc_errmsg(c));
        cr_expect_eq(gpuipc_list_count(l), 40);
        gpuipc_list_free(l);
        gpuipc_client_free(c);
        close(mfd);
}

Test(limits, max_waits_and_registrations)
{
        static const char *const args[] = { "--max-waits", "2", "--max-registrations", "3", NULL };
        int fd, mfd;

        start_with(args);
        fd = h_raw_connect(h_d.sock);
        h_raw_hello(fd, 1);
        req(fd, 2, "lookup", "su", "name", "w/a", "wait_ms", (uint64_t)5000);
        req(fd, 3, "lookup", "su", "name", "w/b", "wait_ms", (uint64_t)5000);
        req(fd, 4, "lookup", "su", "name", "w/c", "wait_ms", (uint64_t)5000);
        h_raw_expect_reply(fd, 4, "limit");
        mfd = memfd_with(4096, 1);
        for (int i = 0; i < 3; i++) {
                char name[16];
                snprintf(name, sizeof(name), "r/%d", i);
                req_fds(fd, 10 + (uint64_t)i, "register", &mfd, 1, "ssuu", "name", name, "kind", "host",
                        "size", (uint64_t)4096, "fds", (uint64_t)1);
                h_raw_expect_reply(fd, 10 + (uint64_t)i, "");
        }
        req_fds(fd, 20, "register", &mfd, 1, "ssuu", "name", "r/3", "kind", "host", "size",
                (uint64_t)4096, "fds", (uint64_t)1);
        h_raw_expect_reply(fd, 20, "limit");
        close(mfd);
        close(fd);
}

/* Runs fn in a child process as uid/gid 65534; returns its exit code. */
static int as_nobody(int (*fn)(void))
{
        pid_t pid = fork();
        int status;

        cr_assert_geq(pid, 0);
        if (pid == 0) {
                if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
                        _exit(100);
                _exit(fn());
        }
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int nobody_registers(void)
{
        gpuipc_client *c = NULL;
        gpuipc_hostbuf *b = NULL;
        int r;

        if (gpuipc_client_connect(h_d.sock, &c) < 0)
                return 10;
        if (gpuipc_hostbuf_new(4096, &b) < 0)
                return 11;
        r = gpuipc_hostbuf_register(c, "perm/nobody", b, NULL, 0, NULL);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
        return r == 0 ? 0 : 12;
}

static int nobody_unregisters_roots(void)
{
        gpuipc_client *c = NULL;
        gpuipc_view *v = NULL;
        int r, ret = 0;

        if (gpuipc_client_connect(h_d.sock, &c) < 0)
                return 10;
        /* looking up a public name is open to any peer; unregistering is not */
        if (gpuipc_view_lookup(c, "perm/root", 0, 0, &v) < 0)
                ret = 13;
        gpuipc_view_release(v);
        r = gpuipc_name_unregister(c, "perm/root");
        if (!ret)
                ret = r == -EPERM ? 0 : r == 0 ? 14 : 15;
        gpuipc_client_free(c);
        return ret;
}

static int nobody_unregisters_own(void)
{
        gpuipc_client *c = NULL;
        int r;

        if (gpuipc_client_connect(h_d.sock, &c) < 0)
                return 10;
        /* same uid, another connection */
        r = gpuipc_name_unregister(c, "perm/nobody2");
        gpuipc_client_free(c);
        return r == 0 ? 0 : 16;
}

static int nobody_registers2(void)
{
        gpuipc_client *c = NULL;
        gpuipc_hostbuf *b = NULL;
        int r;

        if (gpuipc_client_connect(h_d.sock, &c) < 0 || gpuipc_hostbuf_new(4096, &b) < 0)
                return 10;
        r = gpuipc_hostbuf_register(c, "perm/nobody2", b, NULL, 0, NULL);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
        return r == 0 ? 0 : 12;
}

Test(limits, unregister_permission)
{
        static const char *const args[] = { "--socket-mode", "0666", NULL };
        gpuipc_client *c = NULL;
        gpuipc_hostbuf *b = NULL;

        if (geteuid() != 0)
                cr_skip_test("needs root to act as another uid");
        start_with(args);
        cr_assert_eq(chmod(h_d.dir, 0755), 0);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_assert_eq(gpuipc_client_set_access(c, &(gpuipc_access){ .size = sizeof(gpuipc_access), .public_ = 1 }), 0);
        cr_assert_eq(gpuipc_hostbuf_new(4096, &b), 0);
        cr_assert_eq(gpuipc_hostbuf_register(c, "perm/root", b, NULL, 0, NULL), 0);
        gpuipc_hostbuf_free(b);
        cr_expect_eq(as_nobody(nobody_registers), 0);
        cr_expect_eq(as_nobody(nobody_unregisters_roots), 0,
                     "uid 65534 unregistering root's name: want -EPERM");
        cr_expect_eq(as_nobody(nobody_registers2), 0);
        cr_expect_eq(as_nobody(nobody_unregisters_own), 0, "same uid may unregister");
        /* root may unregister anyone's */
        cr_expect_eq(gpuipc_name_unregister(c, "perm/nobody"), 0, "%s", gpuipc_errmsg(c));
        cr_expect_eq(gpuipc_name_unregister(c, "perm/root"), 0);
        gpuipc_client_free(c);
}

Test(limits, socket_path_too_long)
{
        char dir[] = "/tmp/gpuipc-long-XXXXXX", path[200], log[64];
        pid_t pid;
        int status;
        int64_t deadline;

        cr_assert_not_null(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/%0*d.sock", dir, 110, 0);
        cr_assert_gt(strlen(path), 107);
        snprintf(log, sizeof(log), "%s/log", dir);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                int fd = open(log, O_WRONLY | O_CREAT, 0600);
                dup2(fd, 2);
                unsetenv("NOTIFY_SOCKET");
                execl(h_path("gpuipcd"), "gpuipcd", "--socket", path, (char *)NULL);
                _exit(127);
        }
        deadline = h_now_ms() + 5000;
        while (waitpid(pid, &status, WNOHANG) == 0) {
                if (h_now_ms() > deadline) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &status, 0);
                        cr_assert_fail("gpuipcd kept running with a %zu-byte socket path", strlen(path));
                }
                h_sleep_ms(10);
        }
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) != 0, "status 0x%x", status);
        /* nothing was bound under a truncated name */
        {
                int n = 0;
                DIR *d = opendir(dir);
                struct dirent *e;
                while ((e = readdir(d)))
                        if (strstr(e->d_name, ".sock") || strncmp(e->d_name, "000", 3) == 0)
                                n++;
                closedir(d);
                cr_expect_eq(n, 0, "a socket was created under a truncated path");
        }
        unlink(log);
        rmdir(dir);
}

Test(limits, second_daemon_on_a_live_socket)
{
        pid_t pid;
        int status;
        int64_t deadline;

        start_with(NULL);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                int fd = open("/dev/null", O_WRONLY);
                dup2(fd, 2);
                unsetenv("NOTIFY_SOCKET");
                execl(h_path("gpuipcd"), "gpuipcd", "--socket", h_d.sock, (char *)NULL);
                _exit(127);
        }
        deadline = h_now_ms() + 5000;
        while (waitpid(pid, &status, WNOHANG) == 0) {
                if (h_now_ms() > deadline) {
                        kill(pid, SIGTERM);
                        waitpid(pid, &status, 0);
                        cr_assert_fail("a second gpuipcd took over a live socket");
                }
                h_sleep_ms(10);
        }
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) != 0, "second daemon status 0x%x", status);
        /* the first one still serves, on a socket that still exists */
        {
                int fd = h_raw_connect(h_d.sock);
                h_raw_hello(fd, 1);
                close(fd);
        }
}

Test(limits, stale_socket_replaced)
{
        char dir[] = "/tmp/gpuipc-stale-XXXXXX";
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int s;

        /* a socket file nobody listens on, at the path the daemon will use */
        cr_assert_not_null(mkdtemp(dir));
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/gpuipcd.sock", dir);
        s = socket(AF_UNIX, SOCK_STREAM, 0);
        cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
        close(s);
        {
                const char *args[] = { "--socket", sa.sun_path, NULL };
                start_with(args);
        }
        cr_assert_str_eq(h_d.sock, sa.sun_path);
        {
                int fd = h_raw_connect(sa.sun_path);
                h_raw_hello(fd, 1);
                close(fd);
        }
        /* stops cleanly and removes the socket it replaced */
        h_daemon_stop(&h_d);
        rmdir(dir);
}

Test(limits, sigterm_with_clients_connected)
{
        gpuipc_client *c = NULL;
        gpuipc_hostbuf *b = NULL;
        gpuipc_view *v = NULL;
        int fd;

        start_with(NULL);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        /* The daemon stays down: each call tries to reconnect this long. */
        cr_assert_eq(gpuipc_client_set_reconnect(c, 200), 0);
        cr_assert_eq(gpuipc_hostbuf_new(4096, &b), 0);
        cr_assert_eq(gpuipc_hostbuf_register(c, "term/x", b, NULL, GPUIPC_REGISTER_EPHEMERAL, NULL), 0);
        cr_assert_eq(gpuipc_view_lookup(c, "term/x", 0, 0, &v), 0);
        fd = h_raw_connect(h_d.sock);
        h_raw_hello(fd, 1);
        req(fd, 2, "lookup", "su", "name", "term/never", "wait_ms", (uint64_t)60000);
        h_sleep_ms(50);
        /* stops cleanly (exit 0, socket removed) with all of that in flight */
        h_daemon_stop(&h_d);
        /* the raw client hears the end: a shutting_down reply/event or EOF */
        {
                int64_t deadline = h_now_ms() + 3000;
                for (;;) {
                        struct h_frame f;
                        int r = h_raw_recv(fd, 1000, &f);
                        if (r == 1 && f.m.root) {
                                const msgpack_object *err = NULL;
                                bool ok = proto_get_map(f.m.root, "error", &err) == 0 ||
                                          proto_obj_str_eq(proto_get(f.m.root, "event"), "error");
                                cr_expect(ok, "unexpected frame after SIGTERM");
                        }
                        h_frame_free(&f);
                        if (r == 0)
                                break;
                        cr_assert_lt(h_now_ms(), deadline, "connection open after the daemon exited");
                }
        }
        close(fd);
        /* the library copes with a dead daemon */
        cr_expect_lt(gpuipc_client_ping(c), 0);
        cr_expect_eq(((const uint8_t *)gpuipc_view_data(v))[0], 0, "the view stays readable after the daemon exits");
        gpuipc_view_release(v);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
}

/* ---- meta validation, raw ------------------------------------------------ */

enum meta_case {
        META_OK,
        META_LONG_DTYPE,
        META_33_DIMS,
        META_NEG_SHAPE,
        META_STRIDES_MISMATCH,
        META_LONG_KEY,
        META_LONG_VALUE,
        META_33_USER,
        META_USER_NOT_STR,
        META_NOT_MAP,
};

struct meta_req {
        const char *name;
        enum meta_case mc;
};

static void pack_meta_register(msgpack_packer *pk, void *data)
{
        struct meta_req *m = data;
        char big[1100];
        unsigned dims = m->mc == META_33_DIMS ? 33 : 2;

        memset(big, 'k', sizeof(big));
        proto_pack_kstr(pk, "name", m->name);
        proto_pack_kstr(pk, "kind", "host");
        proto_pack_ku64(pk, "size", 4096);
        proto_pack_ku64(pk, "fds", 1);
        proto_pack_str(pk, "meta");
        if (m->mc == META_NOT_MAP) {
                msgpack_pack_array(pk, 0);
                return;
        }
        msgpack_pack_map(pk, 4);
        proto_pack_str(pk, "dtype");
        proto_pack_strn(pk, big, m->mc == META_LONG_DTYPE ? 33 : 32);
        proto_pack_str(pk, "shape");
        msgpack_pack_array(pk, dims);
        for (unsigned i = 0; i < dims; i++)
                msgpack_pack_int64(pk, m->mc == META_NEG_SHAPE && i == 1 ? -1 : 1);
        proto_pack_str(pk, "strides");
        msgpack_pack_array(pk, m->mc == META_STRIDES_MISMATCH ? dims + 1 : dims);
        for (unsigned i = 0; i < (m->mc == META_STRIDES_MISMATCH ? dims + 1 : dims); i++)
                msgpack_pack_int64(pk, 8);
        proto_pack_str(pk, "user");
        if (m->mc == META_33_USER) {
                msgpack_pack_map(pk, 33);
                for (int i = 0; i < 33; i++) {
                        char k[8];
                        snprintf(k, sizeof(k), "k%d", i);
                        proto_pack_kstr(pk, k, "v");
                }
                return;
        }
        msgpack_pack_map(pk, 1);
        if (m->mc == META_USER_NOT_STR) {
                proto_pack_ku64(pk, "k", 1);
                return;
        }
        proto_pack_strn(pk, big, m->mc == META_LONG_KEY ? 65 : 64);
        proto_pack_strn(pk, big, m->mc == META_LONG_VALUE ? 1025 : 1024);
}

Test(protocol, register_meta_limits)
{
        static const char *const names[] = {
                "ok", "long-dtype", "33-dims", "neg-shape", "strides-mismatch", "long-key",
                "long-value", "33-user", "user-not-str", "meta-not-map",
        };
        int fd = h_raw_connect(h_d.sock), mfd = memfd_with(4096, 1);
        int base;

        h_raw_hello(fd, 1);
        base = h_daemon_fd_count(&h_d);
        for (int mc = META_OK; mc <= META_NOT_MAP; mc++) {
                char name[64];
                struct meta_req m = { name, (enum meta_case)mc };
                struct h_frame f;
                snprintf(name, sizeof(name), "meta/%s", names[mc]);
                cr_assert_eq(h_raw_request(fd, "register", 10 + (uint64_t)mc, 5, pack_meta_register, &m,
                                           &mfd, 1), 0);
                recv_reply(fd, 10 + (uint64_t)mc, mc == META_OK ? "" : "bad_request", &f);
                h_frame_free(&f);
        }
        /* the accepted one holds the memfd and its read-only copy */
        cr_expect_eq(h_daemon_fd_settle(&h_d, base + 2, 2000), base + 2,
                     "refused registrations left fds in the daemon");
        /* the accepted record carries its meta back */
        {
                struct h_frame f;
                const msgpack_object *reg, *meta, *shape;
                const char *s;
                size_t n;
                req(fd, 50, "stat", "s", "name", "meta/ok");
                recv_reply(fd, 50, "", &f);
                cr_assert_eq(proto_get_map(f.m.root, "reg", &reg), 0);
                cr_assert_eq(proto_get_map(reg, "meta", &meta), 0);
                cr_assert_eq(proto_get_str(meta, "dtype", &s, &n), 0);
                cr_expect_eq(n, 32);
                cr_assert_eq(proto_get_array(meta, "shape", &shape), 0);
                cr_expect_eq(shape->via.array.size, 2);
                h_frame_free(&f);
        }
        close(mfd);
        close(fd);
}

Test(limits, max_leases)
{
        static const char *const args[] = { "--max-leases", "2", NULL };
        int fd, mfd;

        start_with(args);
        fd = h_raw_connect(h_d.sock);
        h_raw_hello(fd, 1);
        mfd = memfd_with(4096, 1);
        req_fds(fd, 2, "register", &mfd, 1, "ssuu", "name", "l/x", "kind", "host", "size",
                (uint64_t)4096, "fds", (uint64_t)1);
        h_raw_expect_reply(fd, 2, "");
        for (uint64_t s = 3; s <= 5; s++) {
                struct h_frame f;
                req(fd, s, "lookup", "s", "name", "l/x");
                recv_reply(fd, s, s < 5 ? "" : "limit", &f);
                h_frame_free(&f);
        }
        close(mfd);
        close(fd);
}

Test(limits, slow_reader_is_cut_off)
{
        static const char *const args[] = { "--max-output", "70000", NULL };
        gpuipc_client *c = NULL;
        int fd, mfd, closed_at = -1;
        char name[64];
        int64_t deadline;

        start_with(args);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        mfd = memfd_with(4096, 1);
        for (int i = 0; i < 100; i++) {
                snprintf(name, sizeof(name), "slow/registration-with-a-longish-name-%03d", i);
                cr_assert_eq(gpuipc_fd_register(c, name, mfd, 0, 4096, NULL, 0, NULL), 0);
        }
        close(mfd);
        fd = h_raw_connect(h_d.sock);
        h_raw_hello(fd, 1);
        /* ~20 KB replies, requested without reading: far over 70000 bytes unsent */
        for (int i = 0; i < 400; i++) {
                if (h_raw_request(fd, "list", 10 + (uint64_t)i, 0, NULL, NULL, NULL, 0) < 0) {
                        closed_at = i;
                        break;
                }
        }
        /* the daemon keeps serving others meanwhile */
        cr_expect_eq(gpuipc_client_ping(c), 0);
        /* draining now finds the end of the connection, not 400 replies */
        deadline = h_now_ms() + 5000;
        {
                int replies = 0;
                for (;;) {
                        struct h_frame f;
                        int r = h_raw_recv(fd, 2000, &f);
                        h_frame_free(&f);
                        if (r != 1)
                                break;
                        replies++;
                        cr_assert_lt(h_now_ms(), deadline);
                }
                cr_expect_lt(replies, 400, "a reader that never reads got all %d replies (send stopped at %d)",
                             replies, closed_at);
        }
        cr_expect_eq(gpuipc_client_ping(c), 0);
        close(fd);
        gpuipc_client_free(c);
}

/* Empty strings decode to a NULL pointer with length 0 in msgpack-c; code
 * that hands that pointer to memcmp/memchr/memcpy is undefined behaviour,
 * which the SANITIZE=1 daemon turns into an abort. */
static void pack_empty_meta(msgpack_packer *pk, void *data)
{
        (void)data;
        proto_pack_kstr(pk, "name", "empty/x");
        proto_pack_kstr(pk, "kind", "host");
        proto_pack_ku64(pk, "size", 4096);
        proto_pack_ku64(pk, "fds", 1);
        proto_pack_str(pk, "meta");
        msgpack_pack_map(pk, 2);
        proto_pack_kstr(pk, "dtype", "");
        proto_pack_str(pk, "user");
        msgpack_pack_map(pk, 1);
        proto_pack_kstr(pk, "k", "");
}

Test(protocol, empty_strings)
{
        int fd = h_raw_connect(h_d.sock), mfd = memfd_with(4096, 1);
        struct h_frame f;

        req(fd, 1, "hello", "us", "version", (uint64_t)1, "client", "");
        h_raw_expect_reply(fd, 1, "");
        req(fd, 2, "lookup", "s", "name", "");
        h_raw_expect_reply(fd, 2, "bad_request");
        req(fd, 3, "list", "s", "prefix", "");
        h_raw_expect_reply(fd, 3, "");
        req(fd, 4, "stat", "s", "name", "");
        h_raw_expect_reply(fd, 4, "bad_request");
        cr_assert_eq(h_raw_request(fd, "register", 5, 5, pack_empty_meta, NULL, &mfd, 1), 0);
        recv_reply(fd, 5, "", &f);
        h_frame_free(&f);
        req(fd, 6, "stat", "s", "name", "empty/x");
        recv_reply(fd, 6, "", &f);
        h_frame_free(&f);
        /* an empty key in a request map */
        {
                static const char body[] = "\x83\xa2op\xa4ping\xa3seq\x07\xa0\xa0";
                cr_assert_eq(h_raw_send_frame(fd, body, sizeof(body) - 1, NULL, 0), 0);
        }
        h_raw_expect_reply(fd, 7, "");
        close(mfd);
        close(fd);
        cr_assert(h_daemon_alive(&h_d), "daemon died on empty strings");
}

/* ---- host memfds must be sealed against writes, or shared_write -------- */

/* A 4096-byte memfd with seals (and F_SEAL_SHRINK, _GROW and _SEAL). */
static int memfd_sealed_with(int seals)
{
        int fd = memfd_create("seal", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        cr_assert_geq(fd, 0);
        cr_assert_eq(ftruncate(fd, 4096), 0);
        cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL | seals), 0,
                     "F_ADD_SEALS %#x: %s",
                     seals, strerror(errno));
        return fd;
}

/* The error message of a refused reply f. */
static void expect_message_has(const struct h_frame *f, const char *a, const char *b)
{
        char msg[512];
        size_t n;
        const char *s = h_error_message(f, &n);

        snprintf(msg, sizeof(msg), "%.*s", (int)n, s);
        cr_expect(strstr(msg, a) && strstr(msg, b), "message \"%s\" names neither \"%s\" nor "
                  "\"%s\"", msg, a, b);
}

/* A consumer's lookup fd for name, reopened read-write through /proc the
 * way any holder of a read-only memfd fd can; whether a write lands.  The
 * lease stays until con closes (a release would send the owner an event
 * between its replies). */
static bool reopen_write_lands(int con, uint64_t seq, const char *name)
{
        struct h_frame f;
        char path[64];
        bool landed;
        int rw;

        req(con, seq, "lookup", "s", "name", name);
        recv_reply(con, seq, "", &f);
        cr_assert_eq(f.nfds, 1);
        cr_expect_eq(fcntl(f.fds[0], F_GETFL) & O_ACCMODE, O_RDONLY);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", f.fds[0]);
        rw = open(path, O_RDWR | O_CLOEXEC);
        cr_assert_geq(rw, 0, "reopen %s read-write: %s", path, strerror(errno));
        landed = pwrite(rw, "w", 1, 0) == 1;
        close(rw);
        h_frame_free(&f);
        return landed;
}

Test(protocol, register_wants_a_write_seal_or_shared_write)
{
        int fd = h_raw_connect(h_d.sock), con = h_raw_connect(h_d.sock), base, mfd;
        struct h_frame f;

        h_raw_hello(fd, 1);
        h_raw_hello(con, 1);
        base = h_daemon_fd_count(&h_d);

        /* sealed against shrinking only: refused, the message says what to do */
        mfd = memfd_sealed_with(0);
        req_fds(fd, 2, "register", &mfd, 1, "ssuu", "name", "seal/none", "kind", "host", "size",
                (uint64_t)4096, "fds", (uint64_t)1);
        recv_reply(fd, 2, "bad_fd", &f);
        expect_message_has(&f, "sealed against writes", "shared_write: true");
        h_frame_free(&f);
        req_fds(fd, 3, "register", &mfd, 1, "ssuub", "name", "seal/false", "kind", "host", "size",
                (uint64_t)4096, "fds", (uint64_t)1, "shared_write", 0);
        recv_reply(fd, 3, "bad_fd", &f);
        expect_message_has(&f, "F_SEAL_FUTURE_WRITE", "shared_write");
        h_frame_free(&f);
        cr_expect_eq(h_daemon_fd_settle(&h_d, base, 2000), base, "a refused memfd stayed open");
        /* shared_write of another type */
        req_fds(fd, 4, "register", &mfd, 1, "ssuus", "name", "seal/str", "kind", "host", "size",
                (uint64_t)4096, "fds", (uint64_t)1, "shared_write", "yes");
        h_raw_expect_reply(fd, 4, "bad_request");
        /* the same memfd with shared_write: true is accepted, and is what it
         * says: writable by any consumer through its read-only fd */
        req_fds(fd, 5, "register", &mfd, 1, "ssuub", "name", "seal/shared", "kind", "host", "size",
                (uint64_t)4096, "fds", (uint64_t)1, "shared_write", 1);
        h_raw_expect_reply(fd, 5, "");
        cr_expect(reopen_write_lands(con, 20, "seal/shared"));
        close(mfd);

        /* F_SEAL_WRITE or F_SEAL_FUTURE_WRITE: accepted without the field,
         * and the reopen cannot write */
        mfd = memfd_sealed_with(F_SEAL_WRITE);
        req_fds(fd, 6, "register", &mfd, 1, "ssuu", "name", "seal/write", "kind", "host", "size",
                (uint64_t)4096, "fds", (uint64_t)1);
        h_raw_expect_reply(fd, 6, "");
        cr_expect(!reopen_write_lands(con, 22, "seal/write"));
        close(mfd);
        mfd = memfd_create("probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        cr_assert_geq(mfd, 0);
        if (fcntl(mfd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0) {      /* Linux >= 5.1 */
                close(mfd);
                mfd = memfd_sealed_with(F_SEAL_FUTURE_WRITE);
                req_fds(fd, 7, "register", &mfd, 1, "ssuu", "name", "seal/future", "kind", "host",
                        "size", (uint64_t)4096, "fds", (uint64_t)1);
                h_raw_expect_reply(fd, 7, "");
                cr_expect(!reopen_write_lands(con, 24, "seal/future"));
        }
        close(mfd);
        close(con);
        close(fd);
}

/* ---- hello first, half-close, shutdown ------------------------------------ */

static int hello_conn(void)
{
        int fd = h_raw_connect(h_d.sock);
        h_raw_hello(fd, 1);
        return fd;
}

Test(protocol, unknown_op_before_hello_is_hello_required)
{
        int fd = h_raw_connect(h_d.sock);

        cr_assert_eq(h_raw_request(fd, "frobnicate", 1, 0, NULL, NULL, NULL, 0), 0);
        h_raw_expect_reply(fd, 1, "hello_required");
        h_raw_hello(fd, 2);
        cr_assert_eq(h_raw_request(fd, "frobnicate", 3, 0, NULL, NULL, NULL, 0), 0);
        h_raw_expect_reply(fd, 3, "unknown_op");
        close(fd);
}

Test(protocol, half_close_gets_its_replies)
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

Test(protocol, shutdown_answers_and_announces)
{
        int fd = hello_conn(), idle = hello_conn();
        struct h_frame f;

        req(fd, 5, "lookup", "su", "name", "sd/never", "wait_ms", (uint64_t)60000);
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
        h_daemon_wait(&h_d);            /* exits 0 after the one signal */
}

/* A peer that reads nothing does not hold shutdown up beyond the grace. */
Test(protocol, shutdown_does_not_wait_for_a_stuck_peer)
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

/* ---- records that would not fit a reply; backpressure --------------------- */

/* register big/x with a user meta value of *vlen bytes */
static void pack_big_register(msgpack_packer *pk, void *data)
{
        size_t *vlen = data;
        char *v = malloc(*vlen);

        cr_assert_not_null(v);
        memset(v, 'v', *vlen);
        proto_pack_kstr(pk, "name", "big/x");
        proto_pack_kstr(pk, "kind", "host");
        proto_pack_ku64(pk, "size", 4096);
        proto_pack_ku64(pk, "fds", 1);
        proto_pack_str(pk, "meta");
        msgpack_pack_map(pk, 1);
        proto_pack_str(pk, "user");
        msgpack_pack_map(pk, 1);
        proto_pack_str(pk, "k");
        proto_pack_strn(pk, v, *vlen);
        free(v);
}

Test(limits, register_refuses_records_too_large_for_a_reply)
{
        static const char *const args[] = { "--max-frame", "1024", NULL };
        size_t vlen = 880;
        struct h_frame f;
        int fd, mfd = memfd_with(4096, 0), base;

        start_with(args);
        fd = h_raw_connect(h_d.sock);
        cr_assert_eq(h_raw_hello(fd, 1), 1024);
        base = h_daemon_fd_count(&h_d);
        cr_assert_eq(h_raw_request(fd, "register", 2, 5, pack_big_register, &vlen, &mfd, 1), 0);
        h_raw_expect_reply(fd, 2, "too_large");
        cr_expect_eq(h_daemon_fd_settle(&h_d, base, 2000), base, "the refused memfd stayed open");
        /* the namespace is usable: list answers, and a smaller one registers */
        cr_assert_eq(h_raw_request(fd, "list", 3, 0, NULL, NULL, NULL, 0), 0);
        recv_reply(fd, 3, "", &f);
        h_frame_free(&f);
        vlen = 500;
        cr_assert_eq(h_raw_request(fd, "register", 4, 5, pack_big_register, &vlen, &mfd, 1), 0);
        h_raw_expect_reply(fd, 4, "");
        req(fd, 5, "lookup", "s", "name", "big/x");
        recv_reply(fd, 5, "", &f);
        cr_expect_eq(f.nfds, 1);
        h_frame_free(&f);
        close(mfd);
        close(fd);
}

/* Requests for large replies, sent without reading: the daemon stops
 * reading instead of queueing past --max-output and closing the peer. */
Test(limits, backpressure_instead_of_disconnect)
{
        static const char *const args[] = { "--max-output", "1000000", NULL };
        size_t vlen = 1000, at = 0;
        int fd, mfd = memfd_with(4096, 0);
        const int n = 2000;     /* ~2 MB of replies */
        uint8_t *buf = malloc((size_t)n * 64);
        struct h_frame f;

        cr_assert_not_null(buf);
        start_with(args);
        fd = hello_conn();
        cr_assert_eq(h_raw_request(fd, "register", 2, 5, pack_big_register, &vlen, &mfd, 1), 0);
        h_raw_expect_reply(fd, 2, "");
        close(mfd);
        /* all requests in one write, small enough for the socket buffer */
        for (int i = 0; i < n; i++) {
                struct proto_out o;
                proto_out_init(&o);
                msgpack_pack_map(&o.pk, 3);
                proto_pack_kstr(&o.pk, "op", "stat");
                proto_pack_ku64(&o.pk, "seq", 10 + (uint64_t)i);
                proto_pack_kstr(&o.pk, "name", "big/x");
                cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME), 0);
                cr_assert_leq(o.sb.size, 64);
                memcpy(buf + at, o.sb.data, o.sb.size);
                at += o.sb.size;
                proto_out_free(&o);
        }
        cr_assert_eq(h_raw_send(fd, buf, at, NULL, 0), 0);
        free(buf);
        h_sleep_ms(300);
        cr_assert(h_daemon_alive(&h_d));
        for (int i = 0; i < n; i++) {
                cr_assert_eq(h_raw_recv(fd, 5000, &f), 1, "reply %d of %d missing", i, n);
                h_expect_reply(&f, 10 + (uint64_t)i, "");
                h_frame_free(&f);
        }
        close(fd);
}
