/* helper-rawreg: registers a host buffer over a socket it inherited.
 *
 *   helper-rawreg FD NAME
 *
 * FD is a connection to the daemon that another program opened before it
 * exec'd this one (integ_limits's exe_read_at_accept).  Sends hello and a
 * durable register of a sealed 4 KiB memfd, prints "ok" once both are
 * answered without error (else "fail: ..."), then waits for stdin to close. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <msgpack.h>

#include "proto.h"

static int send_req(int fd, const char *op, uint64_t seq, const char *name, int memfd)
{
        struct proto_out o;
        struct iovec iov;
        ssize_t w;

        proto_out_init(&o);
        if (name) {
                msgpack_pack_map(&o.pk, 6);
                proto_pack_kstr(&o.pk, "op", op);
                proto_pack_ku64(&o.pk, "seq", seq);
                proto_pack_kstr(&o.pk, "name", name);
                proto_pack_kstr(&o.pk, "kind", "host");
                proto_pack_ku64(&o.pk, "size", 4096);
                proto_pack_ku64(&o.pk, "fds", 1);
        } else {
                msgpack_pack_map(&o.pk, 3);
                proto_pack_kstr(&o.pk, "op", op);
                proto_pack_ku64(&o.pk, "seq", seq);
                proto_pack_ku64(&o.pk, "version", 1);
        }
        if (proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT) < 0)
                return -EMSGSIZE;
        iov.iov_base = o.sb.data;
        iov.iov_len = o.sb.size;
        w = proto_send(fd, &iov, 1, memfd >= 0 ? &memfd : NULL, memfd >= 0 ? 1 : 0);
        proto_out_free(&o);
        return w < 0 ? (int)w : 0;
}

/* Reads frames until the reply to seq; 0 when it has no error. */
static int recv_reply(int fd, uint64_t seq, char *why, size_t len)
{
        for (;;) {
                uint8_t hdr[4], *body;
                uint32_t n;
                size_t got = 0;
                struct proto_msg m;
                const char *err = NULL;
                uint64_t s = 0;
                int r;

                while (got < 4) {
                        ssize_t k = read(fd, hdr + got, 4 - got);
                        if (k <= 0)
                                return snprintf(why, len, "connection closed"), -EPIPE;
                        got += (size_t)k;
                }
                n = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 |
                    hdr[3];
                body = malloc(n ? n : 1);
                if (!body)
                        return -ENOMEM;
                for (got = 0; got < n;) {
                        ssize_t k = read(fd, body + got, n - got);
                        if (k <= 0) {
                                free(body);
                                return snprintf(why, len, "connection closed"), -EPIPE;
                        }
                        got += (size_t)k;
                }
                r = proto_decode(body, n, &m, &err);
                if (r < 0) {
                        free(body);
                        return snprintf(why, len, "undecodable frame"), -EPROTO;
                }
                if (proto_get_u64(m.root, "seq", &s) == 0 && s == seq) {
                        r = proto_get(m.root, "error") ? -EIO : 0;
                        if (r < 0)
                                snprintf(why, len, "seq %llu failed", (unsigned long long)seq);
                        proto_msg_free(&m);
                        free(body);
                        return r;
                }
                proto_msg_free(&m);
                free(body);
        }
}

int main(int argc, char **argv)
{
        char why[128] = "", c;
        int fd, memfd;

        if (argc != 3)
                return 2;
        fd = atoi(argv[1]);
        memfd = memfd_create("rawreg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (memfd < 0 || ftruncate(memfd, 4096) < 0 ||
            fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE |
                                      F_SEAL_SEAL) < 0) {
                printf("fail: memfd: %s\n", strerror(errno));
                return 1;
        }
        if (send_req(fd, "hello", 1, NULL, -1) < 0 || recv_reply(fd, 1, why, sizeof(why)) < 0 ||
            send_req(fd, "register", 2, argv[2], memfd) < 0 ||
            recv_reply(fd, 2, why, sizeof(why)) < 0) {
                printf("fail: %s\n", why);
                return 1;
        }
        printf("ok\n");
        fflush(stdout);
        while (read(0, &c, 1) > 0)
                ;
        return 0;
}
