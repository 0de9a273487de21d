/* integ_client.c: libgpuipc against a scripted daemon, for orderings a real
 * daemon produces only by chance: here the test is the server and writes
 * exactly the bytes, in exactly the reads, that it wants the library to see. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <msgpack.h>

#include "gpuipc.h"
#include "harness.h"
#include "proto.h"

static void no_setup(void)
{
        signal(SIGPIPE, SIG_IGN);
}

TestSuite(client, .init = no_setup, .timeout = 30);

/* Appends to sb one frame (length prefix and body, as proto_out frames
 * them) of a map of nu string/uint pairs, then ns string/string pairs. */
static void frame_append(msgpack_sbuffer *sb, const char *const *ukeys, const uint64_t *uvals,
                         unsigned nu, const char *const *skeys, const char *const *svals,
                         unsigned ns)
{
        struct proto_out o;

        proto_out_init(&o);
        msgpack_pack_map(&o.pk, nu + ns);
        for (unsigned i = 0; i < nu; i++)
                proto_pack_ku64(&o.pk, ukeys[i], uvals[i]);
        for (unsigned i = 0; i < ns; i++)
                proto_pack_kstr(&o.pk, skeys[i], svals[i]);
        if (proto_out_finish(&o, PROTO_MAX_FRAME) < 0)
                abort();        /* a few keys: cannot exceed a frame */
        msgpack_sbuffer_write(sb, o.sb.data, o.sb.size);
        proto_out_free(&o);
}

struct script {
        int lfd;
        uint64_t id;
        int result;             /* 0 once the script ran to its end */
};

/* Answers hello, then a register with its reply and the registration's
 * released event in one write, as a daemon does when the consumer released
 * before the producer read its reply; then waits for the client to go. */
static void *released_with_reply(void *arg)
{
        struct script *s = arg;
        struct h_frame f;
        msgpack_sbuffer sb;
        uint64_t seq = 0;
        int fd;

        s->result = -1;
        fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
                return NULL;
        if (h_raw_recv(fd, 5000, &f) != 1 || proto_get_u64(f.m.root, "seq", &seq) < 0)
                goto out;
        h_frame_free(&f);
        msgpack_sbuffer_init(&sb);
        frame_append(&sb, (const char *[]){ "seq", "version", "max_frame" },
                     (uint64_t[]){ seq, PROTO_VERSION, 65536 }, 3,
                     (const char *[]){ "server" }, (const char *[]){ "scripted" }, 1);
        h_raw_send(fd, sb.data, sb.size, NULL, 0);
        msgpack_sbuffer_clear(&sb);
        if (h_raw_recv(fd, 5000, &f) != 1 || proto_get_u64(f.m.root, "seq", &seq) < 0 ||
            !proto_obj_str_eq(proto_get(f.m.root, "op"), "register"))
                goto out;
        h_frame_free(&f);
        frame_append(&sb, (const char *[]){ "seq", "id" }, (uint64_t[]){ seq, s->id }, 2,
                     (const char *[]){ "name" }, (const char *[]){ "t/buf" }, 1);
        frame_append(&sb, (const char *[]){ "id" }, (uint64_t[]){ s->id }, 1,
                     (const char *[]){ "event", "name" }, (const char *[]){ "released", "t/buf" },
                     2);
        h_raw_send(fd, sb.data, sb.size, NULL, 0);
        msgpack_sbuffer_destroy(&sb);
        /* Nothing more is sent: the library must find the event it has. */
        while (h_raw_recv(fd, 10000, &f) == 1)
                h_frame_free(&f);
        s->result = 0;
out:
        close(fd);
        return NULL;
}

static int listen_at(char *path, size_t len)
{
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        snprintf(path, len, "/tmp/gpuipc-scripted-%d.sock", (int)getpid());
        unlink(path);
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
        cr_assert(fd >= 0);
        cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        cr_assert_eq(listen(fd, 4), 0);
        return fd;
}

/* A released event read in the same recv as the register reply used to sit
 * in the library's buffer while gpuipc_reg_wait_released() polled the socket
 * for the whole timeout. */
Test(client, released_in_the_reply_read)
{
        struct script s = { .id = 42 };
        char path[108];
        gpuipc_client *c = NULL;
        gpuipc_hostbuf *b = NULL;
        pthread_t t;
        uint64_t id = 0;
        int64_t t0;

        s.lfd = listen_at(path, sizeof(path));
        cr_assert_eq(pthread_create(&t, NULL, released_with_reply, &s), 0);
        cr_assert_eq(gpuipc_client_connect(path, &c), 0, "connect: %s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_hostbuf_new(4096, &b), 0);
        cr_assert_eq(gpuipc_hostbuf_register(c, "t/buf", b, NULL, 0, &id), 0, "register: %s",
                     gpuipc_errmsg(c));
        cr_assert_eq(id, 42);
        t0 = h_now_ms();
        cr_expect_eq(gpuipc_reg_wait_released(c, id, 3000), 0, "wait_released: %s",
                     gpuipc_errmsg(c));
        cr_expect_lt(h_now_ms() - t0, 1000, "the event was there: no wait");
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
        pthread_join(t, NULL);
        cr_expect_eq(s.result, 0, "the script ran to its end");
        close(s.lfd);
        unlink(path);
}
