/* listen.c: binding, stale-socket recovery and accepting. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access.h"
#include "conn.h"
#include "listen.h"
#include "log.h"
#include "quota.h"

/* The kernel caps it at net.core.somaxconn (4096 since Linux 5.4). */
#define BACKLOG SOMAXCONN
#define ACCEPT_RETRY_MS 100

static void listener_init(struct listener *l, struct daemon *d)
{
        memset(l, 0, sizeof(*l));
        l->d = d;
        l->fd = -1;
}

/* Creates the socket's directory when it is missing (one level only: a
 * missing grandparent is a configuration error worth reporting). */
static int make_parent(const char *path)
{
        char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
        char *slash;

        snprintf(dir, sizeof(dir), "%s", path);
        slash = strrchr(dir, '/');
        if (!slash || slash == dir)
                return 0;
        *slash = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

int listen_check_dir(const char *path, char *why, size_t len)
{
        char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
        struct stat st;
        uid_t me = geteuid();

        if (stat(proto_sock_dir(path, dir, sizeof(dir)), &st) < 0) {
                snprintf(why, len, "cannot stat %s: %s", dir, strerror(errno));
                return -errno;
        }
        if (!S_ISDIR(st.st_mode)) {
                snprintf(why, len, "%s is not a directory", dir);
                return -ENOTDIR;
        }
        if (st.st_uid != me && st.st_uid != 0) {
                snprintf(why, len, "%s belongs to uid %u, neither this daemon's (%u) nor root: "
                         "that uid could replace the socket", dir, (unsigned)st.st_uid,
                         (unsigned)me);
                return -EPERM;
        }
        if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
                snprintf(why, len, "%s is %s-writable without the sticky bit (mode %04o): "
                         "other uids could replace the socket", dir,
                         (st.st_mode & S_IWOTH) ? "world" : "group",
                         (unsigned)(st.st_mode & 07777));
                return -EPERM;
        }
        return 0;
}

int listen_bind_mode(int fd, const struct sockaddr *sa, socklen_t salen, mode_t mode)
{
        mode_t old;
        int r;

        /* bind() creates the file with the socket inode's mode less the
         * umask: set both, so that no chmod by path (which would follow a
         * symlink swapped in meanwhile) is needed. */
        (void)fchmod(fd, mode);         /* the umask alone suffices: its inode is 0777 */
        old = umask(~mode & 0777);
        r = bind(fd, sa, salen) < 0 ? -errno : 0;
        umask(old);
        return r;
}

/* Decides what to do with something already at path: 0 when it was a dead
 * socket (now unlinked) or nothing, else a negative errno, logged. */
static int clear_stale(const char *path, const struct sockaddr_un *sa, socklen_t salen)
{
        struct stat st;
        int fd, r;

        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : (log_error("cannot stat %s: %m", path), -errno);
        if (!S_ISSOCK(st.st_mode)) {
                log_error("%s exists and is not a socket; refusing to replace it", path);
                return -EEXIST;
        }
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return log_error("socket(): %m"), -errno;
        r = connect(fd, (const struct sockaddr *)sa, salen);
        r = r < 0 ? -errno : 0;
        close(fd);
        if (r == -ECONNREFUSED) {
                log_info("removing stale socket %s", path);
                if (unlink(path) < 0 && errno != ENOENT)
                        return log_error("cannot remove stale socket %s: %m", path), -errno;
                return 0;
        }
        if (r == 0 || r == -EAGAIN) {
                log_error("another gpuipcd is listening on %s", path);
                return -EADDRINUSE;
        }
        log_error("%s exists and cannot be probed: %s", path, strerror(-r));
        return r;
}

int listener_bind(struct listener *l, struct daemon *d, const char *path, mode_t mode)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t len = strlen(path);
        socklen_t salen;
        int fd = -1, r;

        listener_init(l, d);
        if (len == 0 || len >= sizeof(sa.sun_path)) {
                log_error("socket path is %zu bytes; it must be 1 to %zu", len,
                          sizeof(sa.sun_path) - 1);
                return -ENAMETOOLONG;
        }
        memcpy(sa.sun_path, path, len + 1);
        salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);

        r = make_parent(path);
        if (r < 0) {
                log_error("cannot create the directory of %s: %s", path, strerror(-r));
                return r;
        }
        {
                char why[256];
                r = listen_check_dir(path, why, sizeof(why));
                if (r < 0) {
                        log_error("refusing socket %s: %s", path, why);
                        return r;
                }
        }
        r = clear_stale(path, &sa, salen);
        if (r < 0)
                return r;
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                r = -errno;
                log_error("socket(): %m");
                return r;
        }
        /* The file is created with its mode: nobody connects under a
         * wider one, and nothing is done to the path after bind(). */
        r = listen_bind_mode(fd, (struct sockaddr *)&sa, salen, mode);
        if (r < 0) {
                log_error("cannot bind %s (mode %04o): %s", path, (unsigned)mode, strerror(-r));
                goto fail;
        }
        l->bound = true;
        memcpy(l->path, path, len + 1);
        if (listen(fd, BACKLOG) < 0) {
                r = -errno;
                log_error("cannot listen on %s: %m", path);
                goto fail;
        }
        l->fd = fd;
        return 0;
fail:
        if (l->bound)
                unlink(path);
        l->bound = false;
        close(fd);
        return r;
}

int listener_adopt(struct listener *l, struct daemon *d, int fd)
{
        struct sockaddr_un sa;
        socklen_t salen = sizeof(sa);

        listener_init(l, d);
        l->fd = fd;
        memset(&sa, 0, sizeof(sa));
        if (getsockname(fd, (struct sockaddr *)&sa, &salen) == 0 && sa.sun_path[0])
                snprintf(l->path, sizeof(l->path), "%.*s", (int)sizeof(sa.sun_path),
                         sa.sun_path);
        else
                snprintf(l->path, sizeof(l->path), "(socket activation)");
        return 0;
}

/* A connection over --max-connections gets one fatal event and is closed;
 * its socket buffer is empty, so the small frame fits without waiting. */
static void refuse(struct listener *l, int fd, const char *why)
{
        struct proto_out o;
        int r;

        conn_pack_error_event(&o, -ENOBUFS, why, true);
        r = proto_out_finish(&o, l->d->cfg.max_frame);
        if (r == 0) {
                struct iovec iov = { .iov_base = o.sb.data, .iov_len = o.sb.size };
                (void)proto_send(fd, &iov, 1, NULL, 0);
        }
        proto_out_free(&o);
        close(fd);
}

static void on_accept(uv_poll_t *h, int status, int events);

/* The connection slots of max-connections kept for root and admin-group:
 * reserved-connections, at most half of max-connections. */
static uint32_t reserved_slots(const struct config *cfg)
{
        uint32_t half = cfg->max_connections / 2;

        return cfg->reserved_connections < half ? cfg->reserved_connections : half;
}

/* Whether the peer of fd may have one more connection: false with why
 * when the daemon is full (all of max-connections, or all but the reserve
 * for a peer that is not an administrator) or its uid has
 * max-connections-per-uid open already. */
static bool admit(struct daemon *d, int fd, char *why, size_t len)
{
        const struct config *cfg = &d->cfg;
        struct ucred cred;
        socklen_t clen = sizeof(cred);
        gid_t groups[PEER_GROUPS_MAX];
        uint64_t n;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0)
                return true;    /* conn_new fails on it too */
        /* Only the reserved slots are left: the peer's groups decide. */
        if (d->n_conns >= cfg->max_connections ||
            (d->n_conns >= cfg->max_connections - reserved_slots(cfg) &&
             !access_peer_is_admin(cred.uid, cred.gid, groups,
                                   access_read_groups(fd, groups)))) {
                snprintf(why, len, "too many connections: %u open (max-connections %u, of "
                         "which %u are kept for root and admin-group)", d->n_conns,
                         cfg->max_connections, reserved_slots(cfg));
                return false;
        }
        n = quota_of(d, cred.uid).conns;
        if (n < cfg->max_connections_per_uid)
                return true;
        snprintf(why, len, "too many connections: uid %u has %llu open "
                 "(max-connections-per-uid %u)", (unsigned)cred.uid, (unsigned long long)n,
                 cfg->max_connections_per_uid);
        return false;
}

static void on_retry(uv_timer_t *t)
{
        struct listener *l = t->data;

        if (!l->d->stopping)
                uv_poll_start(&l->poll, UV_READABLE, on_accept);
}

static void on_accept(uv_poll_t *h, int status, int events)
{
        struct listener *l = h->data;
        struct daemon *d = l->d;
        char why[192];

        for (;;) {
                struct conn *c;
                int r, fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

                if (fd < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                return;
                        /* Out of fds or memory: the socket stays readable, so
                         * pause instead of spinning. */
                        log_warn("accept(): %m; pausing new connections for %d ms",
                                 ACCEPT_RETRY_MS);
                        uv_poll_stop(&l->poll);
                        uv_timer_start(&l->retry, on_retry, ACCEPT_RETRY_MS, 0);
                        return;
                }
                if (!admit(d, fd, why, sizeof(why))) {
                        log_info("refusing a connection: %s", why);
                        refuse(l, fd, why);
                        continue;
                }
                r = conn_new(d, fd, &c);
                if (r < 0) {
                        log_warn("cannot set up a connection: %s", strerror(-r));
                        close(fd);
                }
        }
}

int listener_start(struct listener *l)
{
        int r = uv_poll_init(l->d->loop, &l->poll, l->fd);

        if (r < 0)
                return r;
        l->poll.data = l;
        r = uv_timer_init(l->d->loop, &l->retry);
        if (r < 0) {
                uv_close((uv_handle_t *)&l->poll, NULL);
                return r;
        }
        l->retry.data = l;
        l->started = true;
        return uv_poll_start(&l->poll, UV_READABLE, on_accept);
}

static void on_listener_closed(uv_handle_t *h)
{
        struct listener *l = h->data;

        if (l->fd >= 0)
                close(l->fd);
        l->fd = -1;
}

void listener_close(struct listener *l)
{
        if (l->bound) {
                /* Unlink first: a new daemon may bind the path at once. */
                unlink(l->path);
                l->bound = false;
        }
        if (l->started) {
                l->started = false;
                uv_close((uv_handle_t *)&l->retry, NULL);
                uv_close((uv_handle_t *)&l->poll, on_listener_closed);
        } else if (l->fd >= 0) {
                close(l->fd);
                l->fd = -1;
        }
}
