/* sd.h: the two pieces of the systemd service protocol that gpuipcd needs,
 * without libsystemd: readiness notification and socket activation. */
#ifndef GPUIPCD_SD_H
#define GPUIPCD_SD_H

/* Sends state (e.g. "READY=1\nSTATUS=...") to $NOTIFY_SOCKET.  Returns 1 when
 * sent, 0 when no notify socket is set, or a negative errno. */
int sd_notify_send(const char *state);

#define SD_FDNAME_MAX 255u

/* An fd systemd passed back from its file descriptor store, by FDNAME. */
struct sd_fd {
        int fd;
        char name[SD_FDNAME_MAX + 1];
};

/* Takes what systemd passed when $LISTEN_PID is our pid: the first
 * listening AF_UNIX stream socket (made close-on-exec and non-blocking),
 * and the named fds of the store, kept for sd_take_stored().  Other fds are
 * closed.  Unsets the LISTEN_* variables either way.  Returns 1 and the
 * socket, 0 when no socket was passed, or -ENOTSOCK when fds were passed
 * but none is a listening AF_UNIX stream socket or a stored fd. */
int sd_listen_fd(int *ret_fd);
/* The stored fds sd_listen_fd() kept: an array (free() it) now the
 * caller's, with the fds. */
void sd_take_stored(struct sd_fd **ret, size_t *ret_n);

/* Sends state over $NOTIFY_SOCKET with fd (or none, with -1) attached, on
 * a socket kept open for the purpose: FDSTORE=1 / FDSTOREREMOVE=1.  1 when
 * sent, 0 without a notify socket, or a negative errno. */
int sd_notify_with_fd(const char *state, int fd);
void sd_notify_close(void);

#endif
