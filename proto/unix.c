/* unix.c: AF_UNIX send and receive with SCM_RIGHTS. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto.h"

static void (*fd_closer)(int fd);

void proto_set_fd_closer(void (*close_fd)(int fd))
{
        fd_closer = close_fd;
}

void proto_close_fd(int fd)
{
        if (fd_closer)
                fd_closer(fd);
        else
                close(fd);
}

ssize_t proto_recv(int sock, void *buf, size_t len, int *fds, unsigned max_fds, unsigned *ret_nfds)
{
        union {
                char buf[CMSG_SPACE(sizeof(int) * PROTO_MAX_PENDING_FDS)];
                struct cmsghdr align;
        } ctl;
        struct iovec iov = { .iov_base = buf, .iov_len = len };
        struct msghdr msg = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = ctl.buf,
                .msg_controllen = CMSG_SPACE(sizeof(int) * (max_fds ? max_fds : 1)),
        };
        unsigned nfds = 0;
        bool truncated;
        ssize_t n;

        if (max_fds > PROTO_MAX_PENDING_FDS)
                return -EINVAL;
        do
                n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return errno == EWOULDBLOCK ? -EAGAIN : -errno;

        truncated = (msg.msg_flags & MSG_CTRUNC) != 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
                size_t k;
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                /* A header the kernel would not write (a recvmsg() wrapper's,
                 * say): nothing past it is read as fds. */
                if (c->cmsg_len < CMSG_LEN(0) ||
                    (size_t)((char *)c - ctl.buf) + c->cmsg_len > sizeof(ctl.buf)) {
                        truncated = true;
                        break;
                }
                k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        /* CMSG_SPACE() rounds up, so more than max_fds can
                         * fit without MSG_CTRUNC: that is truncation too. */
                        if (nfds < max_fds && !truncated) {
                                fds[nfds++] = fd;
                        } else {
                                proto_close_fd(fd);
                                truncated = true;
                        }
                }
        }
        if (truncated) {
                for (unsigned i = 0; i < nfds; i++)
                        proto_close_fd(fds[i]);
                *ret_nfds = 0;
                return -EMSGSIZE;
        }
        *ret_nfds = nfds;
        return n;
}

ssize_t proto_send(int sock, const struct iovec *iov, int iovcnt, const int *fds, unsigned nfds)
{
        union {
                char buf[CMSG_SPACE(sizeof(int) * PROTO_MAX_FDS)];
                struct cmsghdr align;
        } ctl;
        struct msghdr msg = {
                .msg_iov = (struct iovec *)iov,
                .msg_iovlen = (size_t)iovcnt,
        };
        ssize_t n;

        if (nfds > PROTO_MAX_FDS)
                return -EINVAL;
        if (nfds > 0) {
                struct cmsghdr *c;
                memset(&ctl, 0, sizeof(ctl));
                msg.msg_control = ctl.buf;
                msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                c = CMSG_FIRSTHDR(&msg);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
        }
        do
                n = sendmsg(sock, &msg, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return errno == EWOULDBLOCK ? -EAGAIN : -errno;
        return n;
}

char *proto_sock_dir(const char *path, char *buf, size_t len)
{
        char *slash;

        snprintf(buf, len, "%s", path);
        slash = strrchr(buf, '/');
        if (!slash)
                snprintf(buf, len, ".");
        else if (slash == buf)
                buf[1] = '\0';
        else
                *slash = '\0';
        return buf;
}
