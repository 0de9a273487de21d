/* closer.h: closing fds off the event loop.
 *
 * Closing the last reference to a file can take long: the kernel frees a
 * memfd's pages then (137 ms for 1 GiB on a 2-CPU VM), a CUDA VMM export's
 * close may free GPU memory, and a socket with SO_LINGER blocks until its
 * data is gone.  The daemon often holds that last reference: a buffer whose
 * producer exited, a durable registration, an fd a client sent with a bad
 * request and then closed.  Closed on the loop, each would stall every
 * client.  closer_close() hands the close to libuv's thread pool instead;
 * before closer_start(), after closer_stop(), with CLOSER_MAX_PENDING closes
 * in flight already or when memory is short, it closes at once, a socket
 * with its lingering turned off (so that this close cannot wait). */
#ifndef GPUIPCD_CLOSER_H
#define GPUIPCD_CLOSER_H

#include <uv.h>

/* Closes in flight at most; past it the caller closes (and waits).  An fd
 * whose close is in flight still counts against RLIMIT_NOFILE though no
 * budget holds it any more: 64 is what the daemon keeps back for its own
 * files (docs/security.md), and more than the thread pool's 4 workers get
 * through in a burst. */
#define CLOSER_MAX_PENDING 64

/* From now on closer_close() closes on loop's thread pool, and so does
 * proto for the fds it drops (proto_set_fd_closer). */
void closer_start(uv_loop_t *loop);
/* Closes at once from now on (shutdown: the loop is not run again).  The
 * closes in flight keep the loop alive until they are done. */
void closer_stop(void);
/* Closes fd, later or now; fd < 0 is ignored.  The caller must not use fd
 * again. */
void closer_close(int fd);
/* Closes handed to the thread pool and not yet done. */
unsigned closer_pending(void);

#endif
