/* daemon_fixture.h: a daemon in this process, for the unit tests of the
 * modules that need its state and connections: a libuv loop and
 * daemon_init() as daemon/main.c does, and connections through socketpairs
 * (conn_new(), as listen.c does after accept4) whose other end the test
 * reads replies and events from.  tests/fuzz/fuzz-ops.c builds the same
 * for its inputs.  Use fx_setup and fx_teardown as .init and .fini. */
#ifndef GPUIPC_TEST_DAEMON_FIXTURE_H
#define GPUIPC_TEST_DAEMON_FIXTURE_H

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <uv.h>

#include "conn.h"
#include "daemon.h"
#include "ledger.h"
#include "log.h"
#include "proto.h"
#include "ttl.h"
#include "watch.h"

static struct daemon fx_d;
static uv_loop_t fx_loop;

static inline void fx_setup(void)
{
        /* No driver: cuda_load() fails fast, as on a host without a GPU. */
        setenv("GPUIPC_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
        log_set_level(0);
        memset(&fx_d, 0, sizeof(fx_d));
        cr_assert_eq(uv_loop_init(&fx_loop), 0);
        fx_d.loop = &fx_loop;
        config_defaults(&fx_d.cfg);
        fx_d.cfg.log_level = 0;
        cr_assert_eq(daemon_init(&fx_d), 0);
}

static inline void fx_teardown(void)
{
        while (fx_d.conns)
                conn_close(fx_d.conns);
        ttl_stop(&fx_d);
        uv_run(&fx_loop, UV_RUN_DEFAULT);
        daemon_done(&fx_d);
        watch_done();
        ledger_done();
        cr_expect_eq(uv_loop_close(&fx_loop), 0, "handles left in the loop");
}

/* A connection as accepted, of this process (its pid and uid), that said
 * hello; *ret_peer is the test's end, which the test closes. */
static inline struct conn *fx_conn(int *ret_peer)
{
        struct conn *c = NULL;
        int sv[2];

        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        cr_assert_eq(conn_new(&fx_d, sv[1], &c), 0);
        /* As if it said hello: no hello deadline. */
        c->hello = true;
        conn_hello_done(c);
        *ret_peer = sv[0];
        return c;
}

/* A frame the daemon sent: its body and the decoding, which points into it. */
struct fx_frame {
        uint8_t *body;
        struct proto_msg m;
};

static inline void fx_frame_free(struct fx_frame *f)
{
        proto_msg_free(&f->m);
        free(f->body);
        f->body = NULL;
}

/* Runs the loop until peer has a frame, up to timeout_ms: 1 with it in *f
 * (fx_frame_free it), 0 when none came. */
static inline int fx_recv(int peer, struct fx_frame *f, int timeout_ms)
{
        uint8_t hdr[4];
        uint32_t n;

        for (int waited = 0;; waited += 5) {
                struct pollfd p = { .fd = peer, .events = POLLIN };

                uv_run(&fx_loop, UV_RUN_NOWAIT);
                if (poll(&p, 1, 5) == 1)
                        break;
                if (waited >= timeout_ms)
                        return 0;
        }
        cr_assert_eq(recv(peer, hdr, 4, MSG_WAITALL), 4, "a frame's length");
        n = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
        f->body = malloc(n ? n : 1);
        cr_assert_not_null(f->body);
        cr_assert_eq(recv(peer, f->body, n, MSG_WAITALL), (ssize_t)n, "a frame of %u bytes", n);
        cr_assert_eq(proto_decode(f->body, n, &f->m, NULL), 0,
                     "the daemon sent a frame that does not decode");
        return 1;
}

/* The frame's string field key ("" when absent), in buf. */
static inline const char *fx_str(const struct fx_frame *f, const char *key, char *buf, size_t len)
{
        const char *s;
        size_t n;

        buf[0] = '\0';
        if (proto_get_str(f->m.root, key, &s, &n) == 0 && n < len) {
                memcpy(buf, s, n);
                buf[n] = '\0';
        }
        return buf;
}

/* The frame's uint field key, UINT64_MAX when absent. */
static inline uint64_t fx_u64(const struct fx_frame *f, const char *key)
{
        uint64_t v = UINT64_MAX;

        (void)proto_get_u64(f->m.root, key, &v);
        return v;
}

/* The error code of a reply ("" for a success). */
static inline const char *fx_code(const struct fx_frame *f, char *buf, size_t len)
{
        const msgpack_object *e = NULL;
        const char *s;
        size_t n;

        buf[0] = '\0';
        if (proto_get_map(f->m.root, "error", &e) == 0 && proto_get_str(e, "code", &s, &n) == 0 &&
            n < len) {
                memcpy(buf, s, n);
                buf[n] = '\0';
        }
        return buf;
}

#endif
