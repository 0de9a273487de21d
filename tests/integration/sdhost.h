/* sdhost.h: the test process plays systemd for one gpuipcd.
 *
 * Like a gpuipcd.socket + gpuipcd.service pair: the test creates and
 * listens on DIR/gpuipcd.sock itself and hands it to the daemon as fd 3
 * (LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID), binds DIR/notify.sock as
 * NOTIFY_SOCKET and keeps a file descriptor store fed by the daemon's
 * FDSTORE=1 / FDSTOREREMOVE=1 notifications.  A restart passes the stored
 * fds back after the socket (fd 4 on), named in LISTEN_FDNAMES, as systemd
 * does: newest first, duplicates of an fd already stored dropped (systemd
 * compares open file descriptions), the store kept across the restart.
 *
 * A background thread reads the notifications.  Failures are reported with
 * cr_assert, so these helpers may only be called from a test, its .init or
 * its .fini, and from the thread that called h_sd_start(). */
#ifndef GPUIPC_TEST_SDHOST_H
#define GPUIPC_TEST_SDHOST_H

#include <stdbool.h>
#include <sys/types.h>

struct h_sd_state;

struct h_sd {
        pid_t pid;              /* the running daemon, or -1 (0: never started) */
        char dir[256];          /* mkdtemp directory; "" when stopped */
        char sock[300];         /* DIR/gpuipcd.sock: the listening socket's path */
        char log[300];          /* DIR/daemon.log: stderr of every start, appended */
        unsigned starts;        /* daemons started so far */
        bool may_fail;          /* h_sd_try_start_again() is waiting */
        int failed_status;      /* its wait status when the daemon died */
        struct h_sd_state *st;  /* notify thread and store; internal */
};

/* Creates the directory, the listening socket and the notify socket, starts
 * the notify thread and gpuipcd (--no-config, then extra_args, which is
 * NULL-terminated and may be NULL; copied for later starts), and waits up to
 * 10 s for READY=1.  Points h_d.sock at s->sock, so h_spawn() children and
 * the harness's raw helpers reach this daemon. */
void h_sd_start(struct h_sd *s, const char *const *extra_args);
/* Starts the daemon again, like h_sd_start_again(), for a start that may
 * fail: 0 when it reported READY=1, else -1 with s->failed_status (the
 * daemon was reaped; the store is kept for the next start). */
int h_sd_try_start_again(struct h_sd *s);
/* Sends sig and reaps the daemon (10 s, else SIGKILL and fail).  SIGTERM:
 * asserts exit status 0, that STOPPING=1 came and that the socket file is
 * still there (a socket systemd passed is never unlinked); other signals:
 * asserts death by that signal.  Then takes in every notification the
 * daemon sent before it died.  The store stays. */
void h_sd_kill(struct h_sd *s, int sig);
/* Starts the daemon again with the same arguments, the listening socket
 * and the stored fds, and waits for READY=1. */
void h_sd_start_again(struct h_sd *s);
/* h_sd_kill(s, sig), then h_sd_start_again(s). */
void h_sd_restart(struct h_sd *s, int sig);
/* SIGTERM with a clean exit (when running), then stops the thread, closes
 * the store and the sockets and removes the directory.  Does nothing for a
 * zeroed or stopped struct, so it suits a .fini. */
void h_sd_stop(struct h_sd *s);
bool h_sd_alive(struct h_sd *s);

/* The store, as of now (notifications already queued are taken in first):
 * how many fds it holds whose name starts with prefix ("" for all), or is
 * exactly name. */
int h_sd_stored(struct h_sd *s, const char *prefix);
int h_sd_stored_name(struct h_sd *s, const char *name);
/* Polls h_sd_stored(s, prefix) until it is want, up to timeout_ms; returns
 * the last count. */
int h_sd_stored_settle(struct h_sd *s, const char *prefix, int want, int timeout_ms);
/* The same for an exact name. */
int h_sd_stored_name_settle(struct h_sd *s, const char *name, int want, int timeout_ms);
/* The stored names in store order, space-separated ("(empty)" when none),
 * for messages; static storage rotating over 4 buffers. */
const char *h_sd_store_str(struct h_sd *s);

/* What the notify thread saw since h_sd_start(): fds pushed that were
 * already stored (dropped, as systemd does), and protocol mistakes (fds
 * without FDSTORE=1, a bad or missing FDNAME, truncated fds), each also
 * logged on stderr with the message. */
unsigned h_sd_dups(struct h_sd *s);
unsigned h_sd_errors(struct h_sd *s);

/* Prints the tail of the daemon's log on stderr. */
void h_sd_dump_log(const struct h_sd *s);

#endif
