/* listen.h: the listening socket, bound by us or passed by systemd. */
#ifndef GPUIPCD_LISTEN_H
#define GPUIPCD_LISTEN_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <uv.h>

#include "daemon.h"

struct listener {
        struct daemon *d;
        uv_poll_t poll;
        uv_timer_t retry;               /* accept paused after EMFILE and friends */
        int fd;
        bool bound;                     /* we created path, so we unlink it */
        bool started;
        char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

/* Whether the directory of socket path is safe to bind in: owned by the
 * daemon's euid or root, and not writable by group or others unless sticky
 * (then others cannot rename or remove the daemon's socket).  Another
 * writer of the directory could replace the socket, or swap a symlink in.
 * 0, or a negative errno with the reason in why. */
int listen_check_dir(const char *path, char *why, size_t len);
/* bind() of an AF_UNIX socket fd whose file gets mode, set through the
 * socket inode (fchmod) and the umask, never by path. */
int listen_bind_mode(int fd, const struct sockaddr *sa, socklen_t salen, mode_t mode);

/* Binds path (refusing one that does not fit, one in a directory that
 * listen_check_dir refuses, or one another daemon answers on) and listens.
 * Logs the reason on failure. */
int listener_bind(struct listener *l, struct daemon *d, const char *path, mode_t mode);
/* Adopts a listening socket passed by systemd; it is never unlinked. */
int listener_adopt(struct listener *l, struct daemon *d, int fd);
/* Starts accepting connections on the loop. */
int listener_start(struct listener *l);
/* Stops accepting, closes the socket and unlinks it if we bound it.  The
 * handles close asynchronously; the loop must run afterwards. */
void listener_close(struct listener *l);

#endif
