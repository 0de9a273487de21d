/* sd.c: sd_notify and LISTEN_FDS, reimplemented from the documented protocol. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

static void unset_listen_env(void)
{
        unsetenv("LISTEN_PID");
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_FDNAMES");
}

int sd_listen_fd(int *ret_fd)
{
        const char *pid_s = getenv("LISTEN_PID"), *fds_s = getenv("LISTEN_FDS");
        int fd = SD_LISTEN_FDS_START, v, flags, r;
        socklen_t len = sizeof(v);
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
        unset_listen_env();
        /* One socket is served; the others would leak into the daemon's
         * life.  (The unit should pass exactly one.) */
        for (long i = 1; i < nfds; i++) {
                log_warn("closing fd %ld passed by systemd: only one listening socket is "
                         "used", SD_LISTEN_FDS_START + i);
                close((int)(SD_LISTEN_FDS_START + i));
        }

        flags = fcntl(fd, F_GETFD);
        if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0)
                return -errno;
        flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return -errno;

        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) < 0)
                return -errno;
        if (v != AF_UNIX)
                return -EAFNOSUPPORT;
        len = sizeof(v);
        r = getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len);
        if (r < 0)
                return -errno;
        if (v != SOCK_STREAM)
                return -EPROTOTYPE;
        len = sizeof(v);
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) < 0)
                return -errno;
        if (!v)
                return -EINVAL;
        *ret_fd = fd;
        return 1;
}
