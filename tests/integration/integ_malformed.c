/* integ_malformed.c: hostile peers.  Whatever a raw connection sends, the
 * daemon answers as docs/protocol.md says, keeps serving a well-behaved
 * client connected through the library, and leaks no fds, nor passes the
 * fds of a refused frame on to the next. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"
#include "../lingering.h"

#define GOOD_SIZE 4096u
#define GOOD_SEED 42u

static gpuipc_client *good, *owner;
static int steps;

/* The well-behaved client: a round trip and a lookup with its bytes. */
static void good_check(const char *after)
{
        gpuipc_view *v = NULL;
        const uint8_t *p;
        int r;

        cr_assert(h_daemon_alive(&h_d), "daemon died after %s", after);
        r = gpuipc_client_ping(good);
        cr_assert_eq(r, 0, "good client ping after %s: %s", after, gpuipc_strerror(r));
        r = gpuipc_view_lookup(good, "good/x", 0, 0, &v);
        cr_assert_eq(r, 0, "good client lookup after %s: %s", after, gpuipc_strerror(r));
        p = gpuipc_view_data(v);
        for (size_t i = 0; i < GOOD_SIZE; i++)
                cr_assert_eq(p[i], h_pattern(i, GOOD_SEED), "good/x byte %zu after %s", i, after);
        cr_assert_eq(gpuipc_view_release(v), 0);
        steps++;
}

static void mal_setup(void)
{
        gpuipc_hostbuf *b = NULL;
        uint8_t *p;

        h_setup();
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &owner), 0);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &good), 0);
        cr_assert_eq(gpuipc_hostbuf_new(GOOD_SIZE, &b), 0);
        p = gpuipc_hostbuf_data(b);
        for (size_t i = 0; i < GOOD_SIZE; i++)
                p[i] = h_pattern(i, GOOD_SEED);
        cr_assert_eq(gpuipc_hostbuf_register(owner, "good/x", b, NULL, 0, NULL), 0);
        gpuipc_hostbuf_free(b);
        good_check("setup");
}

static void mal_teardown(void)
{
        good_check("the last step");
        gpuipc_client_free(good);
        gpuipc_client_free(owner);
        good = owner = NULL;
        h_teardown();
}

TestSuite(malformed, .init = mal_setup, .fini = mal_teardown, .timeout = 20);

/* A connection that has said hello. */
static int hello_conn(void)
{
        int fd = h_raw_connect(h_d.sock);
        uint32_t max_frame = h_raw_hello(fd, 1);
        cr_assert_eq(max_frame, PROTO_MAX_FRAME);
        return fd;
}

static void raw_ping_ok(int fd, uint64_t seq)
{
        cr_assert_eq(h_raw_request(fd, "ping", seq, 0, NULL, NULL, NULL, 0), 0);
        h_raw_expect_reply(fd, seq, "");
}

static void send_bytes(int fd, const void *b, size_t n)
{
        cr_assert_eq(h_raw_send(fd, b, n, NULL, 0), 0);
}

#define SEND_FRAME(fd, lit) cr_assert_eq(h_raw_send_frame(fd, lit, sizeof(lit) - 1, NULL, 0), 0)

Test(malformed, truncated_frame_then_close)
{
        int fd = h_raw_connect(h_d.sock);
        send_bytes(fd, "\x00\x00\x00\x64\x84\xa2op\xa5hel", 12);
        close(fd);
        good_check("a truncated frame before hello");

        fd = hello_conn();
        send_bytes(fd, "\x00\x00\x00\x10\x82", 5);
        close(fd);
        good_check("a truncated frame after hello");

        fd = hello_conn();
        send_bytes(fd, "\x00\x00", 2);  /* half a length prefix */
        close(fd);
        good_check("half a length prefix");
}

Test(malformed, length_above_max_frame)
{
        int fd = h_raw_connect(h_d.sock);
        /* before hello: the length is checked before anything else */
        send_bytes(fd, "\x00\x01\x00\x01", 4);
        h_raw_expect_event(fd, "too_large", true);
        h_raw_expect_eof(fd, 3000);
        close(fd);
        good_check("a length of max_frame + 1 before hello");

        fd = hello_conn();
        send_bytes(fd, "\xff\xff\xff\xff\x80", 5);
        h_raw_expect_event(fd, "too_large", true);
        h_raw_expect_eof(fd, 3000);
        close(fd);
        good_check("a length of 2^32-1");

        /* exactly max_frame is fine: a map holding one bin */
        {
                /* {"seq": 9, "x": bin32}: 13 bytes before the bin's data */
                uint8_t *b = malloc(4 + PROTO_MAX_FRAME);
                uint32_t bin = PROTO_MAX_FRAME - 13;
                fd = hello_conn();
                memcpy(b, "\x00\x01\x00\x00\x82\xa3seq\x09\xa1x\xc6", 13);
                b[13] = (uint8_t)(bin >> 24);
                b[14] = (uint8_t)(bin >> 16);
                b[15] = (uint8_t)(bin >> 8);
                b[16] = (uint8_t)bin;
                memset(b + 17, 0xab, bin);
                send_bytes(fd, b, 4 + PROTO_MAX_FRAME);
                free(b);
                /* a request without op: bad_request, but not too_large */
                h_raw_expect_reply(fd, 9, "bad_request");
                raw_ping_ok(fd, 10);
                close(fd);
        }
}

Test(malformed, zero_length)
{
        int fd = hello_conn();
        send_bytes(fd, "\x00\x00\x00\x00", 4);
        h_raw_expect_event(fd, "too_large", true);
        h_raw_expect_eof(fd, 3000);
        close(fd);
        good_check("a zero length");
}

Test(malformed, body_not_a_map)
{
        int fd = hello_conn();

        SEND_FRAME(fd, "\x01");
        h_raw_expect_event(fd, "bad_frame", false);
        raw_ping_ok(fd, 2);
        SEND_FRAME(fd, "\x93\x01\x02\x03");
        h_raw_expect_event(fd, "bad_frame", false);
        SEND_FRAME(fd, "\xa4ping");
        h_raw_expect_event(fd, "bad_frame", false);
        raw_ping_ok(fd, 3);
        close(fd);
        good_check("bodies that are not maps");
}

Test(malformed, trailing_bytes)
{
        int fd = hello_conn();

        /* {"op":"ping","seq":5} followed by nil */
        SEND_FRAME(fd, "\x82\xa2op\xa4ping\xa3seq\x05\xc0");
        h_raw_expect_event(fd, "bad_frame", false);
        raw_ping_ok(fd, 6);
        close(fd);
        good_check("trailing bytes");
}

Test(malformed, wrong_types)
{
        int fd = hello_conn();

        /* seq as str: no usable seq, so an event */
        SEND_FRAME(fd, "\x82\xa2op\xa4ping\xa3seq\xa1" "5");
        h_raw_expect_event(fd, "bad_request", false);
        /* negative seq */
        SEND_FRAME(fd, "\x82\xa2op\xa4ping\xa3seq\xff");
        h_raw_expect_event(fd, "bad_request", false);
        /* no seq at all */
        SEND_FRAME(fd, "\x81\xa2op\xa4ping");
        h_raw_expect_event(fd, "bad_request", false);
        /* name as int: a reply, it has a seq */
        SEND_FRAME(fd, "\x83\xa2op\xa6lookup\xa3seq\x07\xa4name\x0c");
        h_raw_expect_reply(fd, 7, "bad_request");
        /* op as int */
        SEND_FRAME(fd, "\x82\xa2op\x01\xa3seq\x08");
        h_raw_expect_reply(fd, 8, "bad_request");
        /* wait_ms as str */
        SEND_FRAME(fd, "\x84\xa2op\xa6lookup\xa3seq\x09\xa4name\xa3" "a/b\xa7wait_ms\xa1" "1");
        h_raw_expect_reply(fd, 9, "bad_request");
        /* lookup without name or id */
        SEND_FRAME(fd, "\x82\xa2op\xa6lookup\xa3seq\x0a");
        h_raw_expect_reply(fd, 10, "bad_request");
        /* a name with a NUL byte */
        SEND_FRAME(fd, "\x83\xa2op\xa6lookup\xa3seq\x0b\xa4name\xa3" "a\x00" "b");
        h_raw_expect_reply(fd, 11, "bad_request");
        /* wait_ms above one hour */
        SEND_FRAME(fd, "\x84\xa2op\xa6lookup\xa3seq\x0c\xa4name\xa3" "a/b\xa7wait_ms\xce\x00\x36\xee\x81");
        h_raw_expect_reply(fd, 12, "bad_request");
        raw_ping_ok(fd, 13);
        close(fd);
        good_check("wrong types");
}

Test(malformed, unknown_op)
{
        int fd = hello_conn();
        SEND_FRAME(fd, "\x82\xa2op\xaa" "frobnicate\xa3seq\x11");
        h_raw_expect_reply(fd, 17, "unknown_op");
        SEND_FRAME(fd, "\x82\xa2op\xa0\xa3seq\x12");
        h_raw_expect_reply(fd, 18, "unknown_op");
        raw_ping_ok(fd, 19);
        close(fd);
        good_check("unknown ops");
}

/* Receives the reply seq, expecting code and a message that is printable
 * ASCII and holds want. */
static void expect_message(int fd, uint64_t seq, const char *code, const char *want)
{
        struct h_frame f;
        const char *msg;
        size_t len;

        cr_assert_eq(h_raw_recv(fd, 5000, &f), 1);
        h_expect_reply(&f, seq, code);
        msg = h_error_message(&f, &len);
        for (size_t i = 0; i < len; i++)
                cr_expect((unsigned char)msg[i] >= 0x20 && (unsigned char)msg[i] < 0x7f,
                          "seq %" PRIu64 ": byte %zu of the message is 0x%02x", seq, i,
                          (unsigned char)msg[i]);
        cr_expect(memmem(msg, len, want, strlen(want)) != NULL,
                  "seq %" PRIu64 ": message '%.*s' lacks '%s'", seq, (int)len, msg, want);
        h_frame_free(&f);
}

static void pack_name(msgpack_packer *pk, void *data)
{
        const char *name = data;

        proto_pack_str(pk, "name");
        msgpack_pack_str_with_body(pk, name, strlen(name));
}

static int sealed_memfd(size_t size, bool seal);

static void pack_group(msgpack_packer *pk, void *data)
{
        proto_pack_kstr(pk, "name", "mal/group");
        proto_pack_kstr(pk, "kind", "host");
        proto_pack_ku64(pk, "size", 4096);
        proto_pack_ku64(pk, "fds", 1);
        proto_pack_str(pk, "access");
        msgpack_pack_map(pk, 1);
        proto_pack_kstr(pk, "group", data);
}

/* An error message echoes what the peer sent, but quoted: a strict
 * decoder refuses a whole reply over one byte that is not UTF-8, and a
 * terminal runs the escapes of one that is. */
Test(malformed, error_messages_quote_what_the_peer_sent)
{
        int fd = hello_conn();

        SEND_FRAME(fd, "\x82\xa2op\xa3\xff\xfe\x80\xa3seq\x11");
        expect_message(fd, 17, "unknown_op", "unknown op '\\xff\\xfe\\x80'");
        SEND_FRAME(fd, "\x82\xa2op\xa5ping\x00\xa3seq\x12");
        expect_message(fd, 18, "unknown_op", "unknown op 'ping\\x00'");
        cr_assert_eq(h_raw_request(fd, "lookup", 19, 1, pack_name, "a\x1b[31m\xc3", NULL, 0), 0);
        expect_message(fd, 19, "bad_request", "name 'a\\x1b[31m\\xc3'");
        cr_assert_eq(h_raw_request(fd, "stat", 20, 1, pack_name, "back\\slash", NULL, 0), 0);
        expect_message(fd, 20, "bad_request", "name 'back\\x5cslash'");
        {
                /* A long one is cut, and the reason still fits. */
                char longname[201];

                memset(longname, 0xff, 200);
                longname[200] = '\0';
                cr_assert_eq(h_raw_request(fd, "lookup", 21, 1, pack_name, longname, NULL, 0), 0);
                expect_message(fd, 21, "bad_request", "\\xff...': ");
        }
        {
                /* access.group goes through the same quoting */
                int mfd = sealed_memfd(4096, true);

                cr_assert_eq(h_raw_request(fd, "register", 22, 5, pack_group, "\x1b[31mX\n",
                                           &mfd, 1), 0);
                expect_message(fd, 22, "bad_request", "access.group '\\x1b[31mX\\x0a'");
                close(mfd);
        }
        raw_ping_ok(fd, 23);
        close(fd);
        good_check("quoted error messages");
}

Test(malformed, op_before_hello)
{
        int fd = h_raw_connect(h_d.sock);
        SEND_FRAME(fd, "\x82\xa2op\xa4ping\xa3seq\x01");
        h_raw_expect_reply(fd, 1, "hello_required");
        SEND_FRAME(fd, "\x83\xa2op\xa6lookup\xa3seq\x02\xa4name\xa6good/x");
        h_raw_expect_reply(fd, 2, "hello_required");
        /* hello version 0 fails and does not count */
        SEND_FRAME(fd, "\x83\xa2op\xa5hello\xa3seq\x03\xa7version\x00");
        h_raw_expect_reply(fd, 3, "version");
        SEND_FRAME(fd, "\x82\xa2op\xa4ping\xa3seq\x04");
        h_raw_expect_reply(fd, 4, "hello_required");
        /* the connection stays usable */
        cr_assert_eq(h_raw_hello(fd, 5), PROTO_MAX_FRAME);
        raw_ping_ok(fd, 6);
        close(fd);
        good_check("ops before hello");
}

Test(malformed, huge_container_headers)
{
        int fd = hello_conn();
        long rss0 = h_daemon_rss_kb(&h_d), rss1;

        cr_assert_gt(rss0, 0);
        SEND_FRAME(fd, "\xdd\xff\xff\xff\xff");
        h_raw_expect_event(fd, "bad_frame", false);
        SEND_FRAME(fd, "\xdf\xff\xff\xff\xff");
        h_raw_expect_event(fd, "bad_frame", false);
        SEND_FRAME(fd, "\x82\xa2op\xa4ping\xa3seq\xdd\xff\xff\xff\xff");
        h_raw_expect_event(fd, "bad_frame", false);
        SEND_FRAME(fd, "\x82\xa2op\xa4ping\xa1x\xdf\xff\xff\xff\xff");
        h_raw_expect_event(fd, "bad_frame", false);
        SEND_FRAME(fd, "\x82\xa2op\xa4ping\xa1x\xdc\xff\xff");
        h_raw_expect_event(fd, "bad_frame", false);
        /* nesting 9 deep, an ext type, the reserved byte */
        SEND_FRAME(fd, "\x82\xa3seq\x01\xa1x\x91\x91\x91\x91\x91\x91\x91\x91\x01");
        h_raw_expect_event(fd, "bad_frame", false);
        SEND_FRAME(fd, "\x82\xa3seq\x01\xa1x\xd6\xff\x00\x00\x00\x00");
        h_raw_expect_event(fd, "bad_frame", false);
        SEND_FRAME(fd, "\x82\xa3seq\x01\xa1x\xc1");
        h_raw_expect_event(fd, "bad_frame", false);
        raw_ping_ok(fd, 2);
        rss1 = h_daemon_rss_kb(&h_d);
        cr_expect_lt(rss1, rss0 + 64 * 1024, "daemon RSS grew from %ld to %ld KiB", rss0, rss1);
        close(fd);
        good_check("huge container headers");
}

static int sealed_memfd(size_t size, bool seal)
{
        int fd = memfd_create("integ", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        cr_assert_geq(fd, 0);
        cr_assert_eq(ftruncate(fd, (off_t)size), 0);
        if (seal)
                cr_assert_eq(fcntl(fd, F_ADD_SEALS,
                                   F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL), 0);
        return fd;
}

Test(malformed, unclaimed_fds_are_closed)
{
        int fd = hello_conn(), mfd = sealed_memfd(4096, true), fds[8];
        int base = h_daemon_fd_count(&h_d), now;

        cr_assert_gt(base, 0);
        /* a ping carrying a memfd */
        cr_assert_eq(h_raw_request(fd, "ping", 2, 0, NULL, NULL, &mfd, 1), 0);
        h_raw_expect_reply(fd, 2, "");
        /* fds declaring "fds": 0 explicitly, 8 of them */
        for (int i = 0; i < 8; i++)
                fds[i] = mfd;
        {
                static const char body[] = "\x83\xa2op\xa4ping\xa3seq\x03\xa3" "fds\x00";
                cr_assert_eq(h_raw_send_frame(fd, body, sizeof(body) - 1, fds, 8), 0);
        }
        h_raw_expect_reply(fd, 3, "");
        raw_ping_ok(fd, 4);
        now = h_daemon_fd_settle(&h_d, base, 2000);
        cr_expect_eq(now, base, "daemon holds %d fds, %d before the unclaimed ones", now, base);
        close(mfd);
        close(fd);
        good_check("unclaimed fds");
}

struct reg_args {
        const char *name;
        uint64_t size, offset, fds;
};

static void pack_register(msgpack_packer *pk, void *data)
{
        struct reg_args *a = data;
        proto_pack_kstr(pk, "name", a->name);
        proto_pack_kstr(pk, "kind", "host");
        proto_pack_ku64(pk, "size", a->size);
        proto_pack_ku64(pk, "offset", a->offset);
        proto_pack_ku64(pk, "fds", a->fds);
}

static void raw_register(int fd, uint64_t seq, const char *name, uint64_t size, uint64_t offset,
                         uint64_t declared, const int *fds, unsigned nfds, const char *code)
{
        struct reg_args a = { name, size, offset, declared };
        int before = h_daemon_fd_count(&h_d), now;

        cr_assert_eq(h_raw_request(fd, "register", seq, 5, pack_register, &a, fds, nfds), 0);
        h_raw_expect_reply(fd, seq, code);
        if (*code) {
                /* refused: whatever fd came with it is closed */
                now = h_daemon_fd_settle(&h_d, before, 1000);
                cr_expect_eq(now, before, "register %s (refused with %s): daemon fds %d -> %d", name,
                             code, before, now);
        }
}

Test(malformed, register_bad_fds)
{
        int fd = hello_conn(), base, p[2], ffd, mfd, now;
        char path[320];

        base = h_daemon_fd_count(&h_d);
        /* declares one fd, sends none */
        raw_register(fd, 2, "bad/none", 4096, 0, 1, NULL, 0, "bad_fd");
        /* a pipe */
        cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
        raw_register(fd, 3, "bad/pipe", 4096, 0, 1, &p[0], 1, "bad_fd");
        close(p[0]);
        close(p[1]);
        /* a regular file of the right size */
        snprintf(path, sizeof(path), "%s/regular", h_d.dir);
        ffd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        cr_assert_geq(ffd, 0);
        cr_assert_eq(ftruncate(ffd, 4096), 0);
        raw_register(fd, 4, "bad/file", 4096, 0, 1, &ffd, 1, "bad_fd");
        close(ffd);
        /* an unsealed memfd, with and without sealing allowed */
        mfd = memfd_create("unsealed", MFD_CLOEXEC);
        cr_assert_eq(ftruncate(mfd, 4096), 0);
        raw_register(fd, 5, "bad/unsealed", 4096, 0, 1, &mfd, 1, "bad_fd");
        close(mfd);
        mfd = sealed_memfd(4096, false);
        raw_register(fd, 6, "bad/sealable", 4096, 0, 1, &mfd, 1, "bad_fd");
        close(mfd);
        /* sealed, but too small for size or offset + size */
        mfd = sealed_memfd(4096, true);
        raw_register(fd, 7, "bad/small", 8192, 0, 1, &mfd, 1, "bad_fd");
        raw_register(fd, 8, "bad/offset", 4096, 1, 1, &mfd, 1, "bad_fd");
        /* size 0 and a bad name are bad requests */
        raw_register(fd, 9, "bad/zero", 0, 0, 1, &mfd, 1, "bad_request");
        raw_register(fd, 10, "bad//name", 4096, 0, 1, &mfd, 1, "bad_request");
        /* declaring more than PROTO_MAX_FDS: the fd that came may wait
         * for the next frame, but no longer */
        {
                struct reg_args a = { "bad/nine", 4096, 0, PROTO_MAX_FDS + 1 };
                cr_assert_eq(h_raw_request(fd, "register", 11, 5, pack_register, &a, &mfd, 1), 0);
                h_raw_expect_reply(fd, 11, "bad_request");
                raw_ping_ok(fd, 111);
                now = h_daemon_fd_settle(&h_d, base, 1000);
                cr_expect_eq(now, base, "register declaring %u fds: daemon fds %d -> %d",
                     PROTO_MAX_FDS + 1, base, now);
        }
        now = h_daemon_fd_settle(&h_d, base, 2000);
        cr_expect_eq(now, base, "daemon holds %d fds after refused registrations, %d before", now, base);
        /* the same memfd is fine when it fits: the refusals were about the fd */
        raw_register(fd, 12, "bad/fine", 4096, 0, 1, &mfd, 1, "");
        raw_register(fd, 13, "bad/fine-offset", 2048, 2048, 1, &mfd, 1, "");
        close(mfd);
        /* each host registration holds its fd and a read-only copy */
        now = h_daemon_fd_settle(&h_d, base + 4, 2000);
        cr_expect_eq(now, base + 4, "daemon holds %d fds with 2 registrations, %d before", now, base);
        close(fd);
        good_check("registrations with bad fds");
}

/* A cuda-vmm registration over chunks, refused after some chunks were
 * taken; the fields say how. */
struct chunk_args {
        const char *name;
        uint64_t alloc_size, sizes[2];
        unsigned key_len1;      /* chunks[1]'s key length (16 is right) */
        bool same_key;
        uint8_t tag;            /* the keys' bytes: a new allocation each request */
};

static void pack_vmm_chunks(msgpack_packer *pk, void *data)
{
        const struct chunk_args *a = data;
        uint8_t key[2][16];

        memset(key[0], a->tag, sizeof(key[0]));
        memset(key[1], a->same_key ? a->tag : a->tag ^ 0xff, sizeof(key[1]));
        proto_pack_kstr(pk, "name", a->name);
        proto_pack_kstr(pk, "kind", "cuda-vmm");
        proto_pack_ku64(pk, "size", 4096);
        proto_pack_kstr(pk, "device", "GPU-2f1c7a9e-0b3d-4e5f-8a6b-1c2d3e4f5a6b");
        proto_pack_ku64(pk, "alloc_size", a->alloc_size);
        proto_pack_ku64(pk, "fds", 2);
        proto_pack_str(pk, "chunks");
        msgpack_pack_array(pk, 2);
        for (int i = 0; i < 2; i++) {
                msgpack_pack_map(pk, 2);
                proto_pack_str(pk, "key");
                msgpack_pack_bin(pk, i ? a->key_len1 : 16);
                msgpack_pack_bin_body(pk, key[i], i ? a->key_len1 : 16);
                proto_pack_ku64(pk, "size", a->sizes[i]);
        }
}

/* Each way a chunk list can be refused once chunk 0 is taken: the chunks
 * taken so far are let go, with their fds.  A leak here let any user run
 * the daemon out of fds, one refused request at a time. */
Test(malformed, refused_vmm_chunks_keep_no_fds)
{
        const struct chunk_args cases[] = {
                /* the sizes add up to less than alloc_size */
                { .name = "mal/short", .alloc_size = 9000, .sizes = { 4096, 4096 },
                  .key_len1 = 16 },
                /* chunk 1 runs past it */
                { .name = "mal/over", .alloc_size = 6000, .sizes = { 4096, 4096 }, .key_len1 = 16 },
                /* chunks[1] is malformed */
                { .name = "mal/badkey", .alloc_size = 8192, .sizes = { 4096, 4096 },
                  .key_len1 = 3 },
                /* one key twice */
                { .name = "mal/twice", .alloc_size = 8192, .sizes = { 4096, 4096 }, .key_len1 = 16,
                  .same_key = true },
        };
        int fd = hello_conn(), base = h_daemon_fd_count(&h_d), now;

        for (unsigned k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
                for (int round = 0; round < 3; round++) {
                        int fds[2] = { sealed_memfd(8192, false), sealed_memfd(8192, false) };
                        uint64_t seq = 10 * k + (uint64_t)round + 2;
                        struct chunk_args a = cases[k];

                        a.tag = (uint8_t)seq;
                        cr_assert_eq(h_raw_request(fd, "register", seq, 7, pack_vmm_chunks,
                                                   &a, fds, 2), 0);
                        h_raw_expect_reply(fd, seq, "bad_request");
                        close(fds[0]);
                        close(fds[1]);
                }
                now = h_daemon_fd_settle(&h_d, base, 2000);
                cr_expect_eq(now, base, "%s, refused 3 times: daemon fds %d -> %d",
                             cases[k].name, base, now);
        }
        raw_ping_ok(fd, 99);
        close(fd);
        good_check("refused cuda-vmm chunk lists");
}

static void pack_vmm_copied(msgpack_packer *pk, void *data)
{
        const char *copied = data;
        uint8_t key[16];

        memset(key, copied[0], sizeof(key));    /* one allocation per text */
        proto_pack_kstr(pk, "name", "mal/copied");
        proto_pack_kstr(pk, "kind", "cuda-vmm");
        proto_pack_ku64(pk, "size", 4096);
        proto_pack_kstr(pk, "device", "GPU-2f1c7a9e-0b3d-4e5f-8a6b-1c2d3e4f5a6b");
        proto_pack_ku64(pk, "alloc_size", 4096);
        proto_pack_ku64(pk, "fds", 1);
        proto_pack_str(pk, "alloc_key");
        msgpack_pack_bin_with_body(pk, key, sizeof(key));
        proto_pack_str(pk, "copied");
        msgpack_pack_str_with_body(pk, copied, strlen(copied));
}

/* copied is text that other clients and gpuipcctl show: UTF-8 without
 * control characters, or refused. */
Test(malformed, copied_is_text)
{
        static const char *const bad[] = {
                "ok\n<3>FORGED", "bell\a", "del\x7f", "bad\xc3\x28",
                "csi\xc2\x9b" "31m", "rlo\xe2\x80\xae" "evil",
        };
        int fd = hello_conn(), base = h_daemon_fd_count(&h_d), mfd;
        uint64_t seq = 2;

        for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                mfd = sealed_memfd(4096, false);
                cr_assert_eq(h_raw_request(fd, "register", seq, 8, pack_vmm_copied,
                                           (void *)bad[i], &mfd, 1), 0);
                expect_message(fd, seq++, "bad_request", "copied must be a str");
                close(mfd);
        }
        cr_expect_eq(h_daemon_fd_settle(&h_d, base, 2000), base, "a refused copied kept its fd");
        mfd = sealed_memfd(4096, false);
        cr_assert_eq(h_raw_request(fd, "register", seq, 8, pack_vmm_copied,
                                   "Gr\xc3\xb6\xc3\x9f" "e: copied", &mfd, 1), 0);
        h_raw_expect_reply(fd, seq++, "");
        close(mfd);
        /* nil is the same as an absent key: a prefix with name and id nil */
        SEND_FRAME(fd, "\x85\xa2op\xaaunregister\xa3seq\x30\xa6prefix\xa3mal\xa4name\xc0\xa2id\xc0");
        for (;;) {      /* the owner hears that no consumer maps the copy */
                struct h_frame f;

                cr_assert_eq(h_raw_recv(fd, 5000, &f), 1);
                if (!proto_get(f.m.root, "event")) {
                        h_expect_reply(&f, 48, "");
                        h_frame_free(&f);
                        break;
                }
                cr_expect(proto_obj_str_eq(proto_get(f.m.root, "event"), "unmapped"));
                h_frame_free(&f);
        }
        cr_expect_eq(h_daemon_fd_settle(&h_d, base, 2000), base, "the copy's fd outlived it");
        close(fd);
        good_check("copied texts");
}

static void too_many_fds(unsigned n)
{
        int base = h_daemon_fd_count(&h_d), fd, mfd = sealed_memfd(4096, true), fds[128], now;

        fd = hello_conn();
        for (unsigned i = 0; i < n; i++)
                fds[i] = mfd;
        cr_assert_eq(h_raw_request(fd, "ping", 2, 0, NULL, NULL, fds, n), 0);
        h_raw_expect_event(fd, "limit", true);
        h_raw_expect_eof(fd, 3000);
        close(fd);
        close(mfd);
        now = h_daemon_fd_settle(&h_d, base, 2000);
        cr_expect_eq(now, base, "%u fds in one message: daemon holds %d fds, %d before", n, now, base);
}

Test(malformed, thirty_two_fds_in_one_message)
{
        too_many_fds(PROTO_MAX_PENDING_FDS + 32);
        good_check("PROTO_MAX_PENDING_FDS + 32 fds in one sendmsg");
        too_many_fds(PROTO_MAX_PENDING_FDS + 1);
        good_check("PROTO_MAX_PENDING_FDS + 1 fds in one sendmsg");
}

Test(malformed, too_many_unclaimed_fds)
{
        int base = h_daemon_fd_count(&h_d), fd, mfd = sealed_memfd(4096, true), fds[32], now;
        bool closed = false;

        fd = hello_conn();
        for (int i = 0; i < 32; i++)
                fds[i] = mfd;
        /* 3 x 32 fds attached to the bytes of one frame that declares none */
        send_bytes(fd, "\x00\x00\x00\x0b", 4);
        cr_assert_eq(h_raw_send(fd, "\x82\xa2op", 4, fds, 32), 0);
        cr_assert_eq(h_raw_send(fd, "\xa4ping", 5, fds, 32), 0);
        if (h_raw_send(fd, "\xa3seq\x02", 5, fds, 32) < 0)
                closed = true;
        /* more than PROTO_MAX_PENDING_FDS (72) unclaimed: a fatal limit */
        if (!closed) {
                h_raw_expect_event(fd, "limit", true);
                h_raw_expect_eof(fd, 3000);
        }
        close(fd);
        close(mfd);
        now = h_daemon_fd_settle(&h_d, base, 2000);
        cr_expect_eq(now, base, "daemon holds %d fds, %d before", now, base);
}

Test(malformed, random_junk)
{
        uint8_t buf[8192];
        unsigned seed = 12345;
        int base = h_daemon_fd_count(&h_d), now;

        for (int c = 0; c < 40; c++) {
                int fd = c % 2 ? hello_conn() : h_raw_connect(h_d.sock);
                for (size_t i = 0; i < sizeof(buf); i++)
                        buf[i] = (uint8_t)rand_r(&seed);
                /* whatever happens, the daemon may close on us */
                (void)h_raw_send(fd, buf, sizeof(buf), NULL, 0);
                shutdown(fd, SHUT_WR);
                {
                        struct h_frame f;
                        int64_t deadline = h_now_ms() + 2000;
                        while (h_now_ms() < deadline && h_raw_recv(fd, 200, &f) == 1)
                                h_frame_free(&f);
                }
                close(fd);
        }
        good_check("random junk streams");

        /* junk bodies behind valid length prefixes keep the stream in step */
        {
                int fd = hello_conn();
                bool got = false;
                for (int k = 0; k < 300; k++) {
                        size_t n = 1 + (size_t)rand_r(&seed) % 200;
                        for (size_t i = 0; i < n; i++)
                                buf[i] = (uint8_t)rand_r(&seed);
                        /* a few start like a map, so they get past the first check */
                        if (k % 3 == 0)
                                buf[0] = (uint8_t)(0x80 | (buf[0] & 0x0f));
                        cr_assert_eq(h_raw_send_frame(fd, buf, n, NULL, 0), 0);
                }
                cr_assert_eq(h_raw_request(fd, "ping", 999999, 0, NULL, NULL, NULL, 0), 0);
                for (int k = 0; k < 1000 && !got; k++) {
                        struct h_frame f;
                        uint64_t seq;
                        int r = h_raw_recv(fd, 5000, &f);
                        cr_assert_eq(r, 1, "stream of junk frames: connection ended (%d)", r);
                        if (f.m.root && proto_get_u64(f.m.root, "seq", &seq) == 0 && seq == 999999)
                                got = true;
                        h_frame_free(&f);
                }
                cr_expect(got, "no reply to the ping after the junk frames");
                close(fd);
        }
        now = h_daemon_fd_settle(&h_d, base, 2000);
        cr_expect_eq(now, base, "daemon holds %d fds, %d before", now, base);
        good_check("junk frames");
}

Test(malformed, abrupt_connections)
{
        int base = h_daemon_fd_count(&h_d), now, mfd = sealed_memfd(4096, true);
        static const char hello[] = "\x00\x00\x00\x24\x84\xa2op\xa5hello\xa3seq\x01\xa7version\x01"
                                    "\xa6" "client\xa4" "demo";
        gpuipc_stats *s = NULL;
        int64_t deadline;

        for (int i = 0; i < 200; i++) {
                int fd = h_raw_connect(h_d.sock);
                switch (i % 4) {
                case 0:
                        break;
                case 1:
                        send_bytes(fd, hello, 3 + (size_t)i % 30);
                        break;
                case 2:
                        send_bytes(fd, hello, sizeof(hello) - 1);
                        send_bytes(fd, "\x00\x00\x00\x40\x86\xa2op", 8);
                        break;
                case 3:
                        /* a register whose fd has arrived but whose body has not */
                        send_bytes(fd, hello, sizeof(hello) - 1);
                        cr_assert_eq(h_raw_send(fd, "\x00\x00\x00\x40\x86", 5, &mfd, 1), 0);
                        break;
                }
                close(fd);
        }
        close(mfd);
        good_check("200 abrupt connections");
        deadline = h_now_ms() + 3000;
        for (;;) {
                cr_assert_eq(gpuipc_stats_fetch(good, &s), 0);
                if (s->connections == 2 || h_now_ms() > deadline)
                        break;
                gpuipc_stats_free(s);
                h_sleep_ms(20);
        }
        cr_expect_eq(s->connections, 2, "stats still count %llu connections",
                     (unsigned long long)s->connections);
        gpuipc_stats_free(s);
        now = h_daemon_fd_settle(&h_d, base, 2000);
        cr_expect_eq(now, base, "daemon holds %d fds, %d before", now, base);
}

static void pack_allocs(msgpack_packer *pk, void *data)
{
        unsigned n = *(unsigned *)data;

        proto_pack_str(pk, "allocs");
        msgpack_pack_array(pk, n);
        for (unsigned i = 0; i < n; i++)
                msgpack_pack_uint64(pk, i + 1);
}

/* unhold: ids it does not hold are ignored, past PROTO_UNHOLD_MAX refused,
 * and neither harms the connection. */
Test(malformed, unhold_bounds)
{
        int fd = hello_conn();
        unsigned ok = PROTO_UNHOLD_MAX, over = PROTO_UNHOLD_MAX + 1;

        cr_assert_eq(h_raw_request(fd, "unhold", 2, 1, pack_allocs, &ok, NULL, 0), 0);
        h_raw_expect_reply(fd, 2, "");
        cr_assert_eq(h_raw_request(fd, "unhold", 3, 1, pack_allocs, &over, NULL, 0), 0);
        h_raw_expect_reply(fd, 3, "bad_request");
        raw_ping_ok(fd, 4);
        close(fd);
        good_check("unhold past its bound");
}

static void pack_unmap(msgpack_packer *pk, void *data)
{
        proto_pack_str(pk, "alloc");
        if (data)
                msgpack_pack_uint64(pk, *(uint64_t *)data);
        else
                proto_pack_str(pk, "one");
}

/* unmap: an id that does not linger here changes nothing; a non-uint one is
 * refused; neither harms the connection. */
Test(malformed, unmap_of_nothing)
{
        int fd = hello_conn();
        uint64_t id = 77;

        cr_assert_eq(h_raw_request(fd, "unmap", 2, 1, pack_unmap, &id, NULL, 0), 0);
        h_raw_expect_reply(fd, 2, "");
        cr_assert_eq(h_raw_request(fd, "unmap", 3, 1, pack_unmap, NULL, NULL, 0), 0);
        h_raw_expect_reply(fd, 3, "bad_request");
        raw_ping_ok(fd, 4);
        close(fd);
        good_check("unmap of nothing");
}

/* ---- the fds of a frame refused before dispatch --------------------------- */

static void pack_stolen(msgpack_packer *pk, void *data)
{
        proto_pack_kstr(pk, "name", "mal/stolen");
        proto_pack_kstr(pk, "kind", "host");
        proto_pack_ku64(pk, "size", 4096);
        proto_pack_ku64(pk, "fds", 1);
}

/* A frame the daemon refuses (with event) carries an fd; a register that
 * follows at once, without one, must not get it (docs/protocol.md, "File
 * descriptors": an fd goes with the bytes of its own frame alone). */
static void refused_then_register(const void *first, size_t first_len, const char *event)
{
        int fd = hello_conn(), mfd = sealed_memfd(4096, true), base = h_daemon_fd_count(&h_d);

        cr_assert_eq(h_raw_send_frame(fd, first, first_len, &mfd, 1), 0);
        cr_assert_eq(h_raw_request(fd, "register", 9, 4, pack_stolen, NULL, NULL, 0), 0);
        h_raw_expect_event(fd, event, false);
        h_raw_expect_reply(fd, 9, "bad_fd");
        close(mfd);
        cr_expect_eq(h_daemon_fd_settle(&h_d, base, 2000), base, "the refused frame's fd leaked");
        close(fd);
}

Test(malformed, no_seq_frame_fds_are_not_taken_by_the_next)
{
        /* {"op": "ping", "fds": 1} */
        static const char body[] = "\x82\xa2op\xa4ping\xa3" "fds\x01";
        refused_then_register(body, sizeof(body) - 1, "bad_request");
}

Test(malformed, undecodable_frame_fds_are_not_taken_by_the_next)
{
        static const char body[] = "\xc1\xc1\xc1";
        refused_then_register(body, sizeof(body) - 1, "bad_frame");
}

/* The daemon holds the last reference to many fds (a buffer whose producer
 * exited, an fd sent with a refused request), and the last close can take
 * long: a GiB memfd's pages are freed then, a lingering socket waits.  One
 * client's such fd must not stall the daemon for another (daemon/closer.h). */
Test(malformed, an_fd_slow_to_close_does_not_stall_other_clients)
{
        /* {"op": "ping", "fds": 1}: no seq, refused, its fd dropped. */
        static const uint8_t frame[] = "\0\0\0\x0e\x82\xa2op\xa4ping\xa3" "fds\x01";
        int fd = hello_conn(), base = h_daemon_fd_count(&h_d), peer;
        int s = lingering_socket(4, &peer);
        gpuipc_client *c = NULL;
        int64_t t0, took;

        /* The fd rides on the frame's first byte; the daemon queues it until
         * the frame is whole, and by then holds its last reference. */
        cr_assert_eq(h_raw_send(fd, frame, 1, &s, 1), 0);
        close(s);
        cr_assert_eq(h_daemon_fd_settle(&h_d, base + 1, 2000), base + 1, "the fd did not arrive");
        cr_assert_eq(h_raw_send(fd, frame + 1, sizeof(frame) - 2, NULL, 0), 0);
        h_sleep_ms(200);        /* the daemon has the frame: it drops the fd */
        t0 = h_now_ms();
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        cr_assert_eq(gpuipc_client_ping(c), 0);
        took = h_now_ms() - t0;
        gpuipc_client_free(c);
        cr_expect_lt(took, 1500, "another client waited %lld ms for the daemon, which closed "
                     "a lingering socket on its loop", (long long)took);
        h_raw_expect_event(fd, "bad_request", false);
        raw_ping_ok(fd, 10);
        close(peer);    /* the unsent data goes: the close in the pool ends */
        cr_expect_eq(h_daemon_fd_settle(&h_d, base, 6000), base, "the socket's fd leaked");
        close(fd);
}
