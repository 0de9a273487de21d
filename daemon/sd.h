/* sd.h: the two pieces of the systemd service protocol that gpuipcd needs,
 * without libsystemd: readiness notification and socket activation. */
#ifndef GPUIPCD_SD_H
#define GPUIPCD_SD_H

/* Sends state (e.g. "READY=1\nSTATUS=...") to $NOTIFY_SOCKET.  Returns 1 when
 * sent, 0 when no notify socket is set, or a negative errno. */
int sd_notify_send(const char *state);

/* Takes the listening socket systemd passed (fd 3) when $LISTEN_PID is our
 * pid: makes it close-on-exec and non-blocking and checks that it is a
 * listening AF_UNIX stream socket.  Unsets the LISTEN_* variables either
 * way.  Returns 1 and the fd, 0 when nothing was passed, or a negative errno
 * (-ENOTSOCK, -EPROTOTYPE, -EINVAL when it is not listening). */
int sd_listen_fd(int *ret_fd);

#endif
