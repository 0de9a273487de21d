/* sd.c: sd_notify and LISTEN_FDS, reimplemented from the documented protocol. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "sd.h"

#define SD_LISTEN_FDS_START 3

int sd_notify_send(const char *state)
{
        const char *path = getenv("NOTIFY_SOCKET");
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t len;
        socklen_t salen;
        ssize_t n;
        int fd, r = 1;

        if (!path || !*path)
                return 0;
        len = strlen(path);
        if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path))
                return -EINVAL;
        memcpy(sa.sun_path, path, len);
        if (path[0] == '@')
                sa.sun_path[0] = '\0';  /* abstract namespace: length is exact */
        salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
                            (path[0] == '@' ? 0 : 1));

        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
        if (n < 0)
                r = -errno;
        close(fd);
        return r;
}

/* A kept datagram socket for messages that carry fds (FDSTORE=1): they
 * come one per registration, so a socket per message would cost. */
static int notify_fd = -1;

int sd_notify_with_fd(const char *state, int fd)
{
        const char *path = getenv("NOTIFY_SOCKET");
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int))];
        } ctl;
        struct iovec iov = { .iov_base = (void *)state, .iov_len = strlen(state) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        struct timeval tv = { .tv_sec = 1 };
        size_t len;

        if (!path || !*path)
                return 0;
        len = strlen(path);
        if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path))
                return -EINVAL;
        if (notify_fd < 0) {
                notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
                if (notify_fd < 0)
                        return -errno;
                /* Blocking, but never for long: systemd reads its notify
                 * socket promptly, and a full queue must not hang the loop. */
                (void)setsockopt(notify_fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        }
        memcpy(sa.sun_path, path, len);
        if (path[0] == '@')
                sa.sun_path[0] = '\0';
        mh.msg_name = &sa;
        mh.msg_namelen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
                                     (path[0] == '@' ? 0 : 1));
        if (fd >= 0) {
                memset(&ctl, 0, sizeof(ctl));
                mh.msg_control = ctl.buf;
                mh.msg_controllen = sizeof(ctl.buf);
                ctl.h.cmsg_level = SOL_SOCKET;
                ctl.h.cmsg_type = SCM_RIGHTS;
                ctl.h.cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(&ctl.h), &fd, sizeof(int));
        }
        if (sendmsg(notify_fd, &mh, MSG_NOSIGNAL) < 0)
                return -errno;
        return 1;
}

void sd_notify_close(void)
{
        if (notify_fd >= 0)
                close(notify_fd);
        notify_fd = -1;
}

static struct sd_fd *stored;
static size_t n_stored;

void sd_take_stored(struct sd_fd **ret, size_t *ret_n)
{
        *ret = stored;
        *ret_n = n_stored;
        stored = NULL;
        n_stored = 0;
}

static void unset_listen_env(void)
{
        unsetenv("LISTEN_PID");
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_FDNAMES");
}

static bool is_listening_unix_stream(int fd)
{
        int v;
        socklen_t len = sizeof(v);

        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) < 0 || !v)
                return false;
        len = sizeof(v);
        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) < 0 || v != AF_UNIX)
                return false;
        len = sizeof(v);
        return getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) == 0 && v == SOCK_STREAM;
}

/* The i-th colon-separated name of names (may be NULL), into buf. */
static void nth_name(const char *names, long i, char *buf, size_t size)
{
        const char *p = names, *end;
        size_t n;

        buf[0] = '\0';
        for (long k = 0; p && k < i; k++) {
                p = strchr(p, ':');
                if (p)
                        p++;
        }
        if (!p)
                return;
        end = strchr(p, ':');
        n = end ? (size_t)(end - p) : strlen(p);
        if (n >= size)
                n = size - 1;
        memcpy(buf, p, n);
        buf[n] = '\0';
}

int sd_listen_fd(int *ret_fd)
{
        const char *pid_s = getenv("LISTEN_PID"), *fds_s = getenv("LISTEN_FDS");
        const char *names = getenv("LISTEN_FDNAMES");
        int listen_fd = -1, flags;
        char *end;
        long pid, nfds;

        if (!pid_s || !fds_s) {
                unset_listen_env();
                return 0;
        }
        errno = 0;
        pid = strtol(pid_s, &end, 10);
        if (errno || end == pid_s || *end || pid != (long)getpid()) {
                unset_listen_env();
                return 0;
        }
        errno = 0;
        nfds = strtol(fds_s, &end, 10);
        if (errno || end == fds_s || *end || nfds < 1 || nfds > INT_MAX - SD_LISTEN_FDS_START) {
                log_warn("ignoring LISTEN_FDS=%s: not a count of fds", fds_s);
                unset_listen_env();
                return 0;
        }
        /* The first listening AF_UNIX stream socket is served; fds from the
         * store (FDSTORE=1) are kept, by name, for restore; other sockets
         * would leak into the daemon's life. */
        stored = calloc((size_t)nfds, sizeof(*stored));
        for (long i = 0; i < nfds; i++) {
                int fd = (int)(SD_LISTEN_FDS_START + i);
                char name[SD_FDNAME_MAX + 1];

                nth_name(names, i, name, sizeof(name));
                if (listen_fd < 0 && is_listening_unix_stream(fd)) {
                        listen_fd = fd;
                        continue;
                }
                if (stored && !is_listening_unix_stream(fd) && name[0]) {
                        (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
                        stored[n_stored].fd = fd;
                        memcpy(stored[n_stored].name, name, sizeof(name));
                        n_stored++;
                        continue;
                }
                log_warn("closing fd %d ('%s') passed by systemd: only one listening socket is "
                         "used", fd, name);
                close(fd);
        }
        unset_listen_env();
        if (listen_fd < 0)
                return n_stored > 0 ? 0 : -ENOTSOCK;
        flags = fcntl(listen_fd, F_GETFD);
        if (flags < 0 || fcntl(listen_fd, F_SETFD, flags | FD_CLOEXEC) < 0)
                return -errno;
        flags = fcntl(listen_fd, F_GETFL);
        if (flags < 0 || fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return -errno;
        *ret_fd = listen_fd;
        return 1;
}
