/* harness.h: a real gpuipcd per test, and raw protocol access to it.
 *
 * Every integration test starts its own daemon in its own mkdtemp
 * directory (tests run in parallel, one process each), waits for its
 * READY=1 on a NOTIFY_SOCKET the test owns, and stops it with SIGTERM,
 * asserting a clean exit.  Failures are reported with cr_assert, so these
 * helpers may only be called from a test, its .init or its .fini. */
#ifndef GPUIPC_TEST_HARNESS_H
#define GPUIPC_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto.h"

struct h_daemon {
        pid_t pid;
        char dir[256];          /* the test's mkdtemp directory */
        char sock[300];         /* DIR/gpuipcd.sock */
        char log[300];          /* DIR/daemon.log: its stderr */
        int notify_fd;
};

/* The daemon of the running test, set up by h_setup(), stopped by
 * h_teardown(); use them as .init and .fini. */
extern struct h_daemon h_d;
void h_setup(void);
void h_teardown(void);

/* $GPUIPC_BUILDDIR, default "build". */
const char *h_builddir(void);
/* h_builddir()/rel, in static storage rotating over 4 buffers. */
const char *h_path(const char *rel);

/* Starts gpuipcd with --socket DIR/gpuipcd.sock plus extra args
 * (NULL-terminated, may be NULL; a "--socket PATH" among them replaces the
 * default path) and waits up to 10 s for READY=1. */
void h_daemon_start(struct h_daemon *d, const char *const *extra_args);
/* SIGTERM, waitpid (10 s), asserts exit status 0 and that the socket file
 * is gone; removes the directory.  Prints the daemon's log on failure. */
void h_daemon_stop(struct h_daemon *d);
/* The second half of h_daemon_stop() for a test that sent the signal
 * itself: waits (10 s) for the exit and asserts it, as stop does; the
 * directory stays for stop (a second SIGTERM would find the signal's
 * default action back, and kill the daemon mid-shutdown). */
void h_daemon_wait(struct h_daemon *d);
bool h_daemon_alive(const struct h_daemon *d);
/* Open fds of the daemon (/proc/PID/fd) and its resident memory in KiB. */
int h_daemon_fd_count(const struct h_daemon *d);
long h_daemon_rss_kb(const struct h_daemon *d);
/* Polls until the daemon's fd count is want (up to timeout_ms); returns
 * the last count seen. */
int h_daemon_fd_settle(const struct h_daemon *d, int want, int timeout_ms);

/* Milliseconds on CLOCK_MONOTONIC. */
int64_t h_now_ms(void);
void h_sleep_ms(int ms);
/* Waits up to timeout_ms for child pid to end, its wait status into
 * *ret_status; true when it ended in time, false when it had to be killed
 * (SIGKILL, then reaped: *ret_status is that of the kill). */
bool h_reap(pid_t pid, int timeout_ms, int *ret_status);
int h_self_fd_count(void);

/* ---- raw connections -------------------------------------------------- */

/* Connects without hello; returns the socket (blocking, CLOEXEC). */
int h_raw_connect(const char *sock);
/* Writes n bytes in one sendmsg with fds attached; 0 or -errno. */
int h_raw_send(int fd, const void *buf, size_t n, const int *fds, unsigned nfds);
/* Length prefix + body in one sendmsg. */
int h_raw_send_frame(int fd, const void *body, size_t n, const int *fds, unsigned nfds);

/* A frame read back: body, its decoding (root NULL when it did not
 * decode) and the fds that came with it. */
struct h_frame {
        uint8_t *body;
        uint32_t len;
        struct proto_msg m;
        int fds[PROTO_MAX_FDS];         /* a batch's lookup reply carries up to 64 */
        unsigned nfds;
};
/* Reads one frame within timeout_ms.  Returns 1, 0 at EOF (or ECONNRESET)
 * before any byte of a frame, -ETIMEDOUT, or another -errno. */
int h_raw_recv(int fd, int timeout_ms, struct h_frame *f);
/* Frees the body and closes the fds. */
void h_frame_free(struct h_frame *f);
/* Asserts that the peer closes the connection within timeout_ms, skipping
 * (and returning the number of) frames that arrive first. */
int h_raw_expect_eof(int fd, int timeout_ms);

/* Builds a request map with the given number of extra pairs: the callback
 * packs them.  Sends it with fds.  */
typedef void (*h_pack_fn)(msgpack_packer *pk, void *data);
int h_raw_request(int fd, const char *op, uint64_t seq, unsigned extra_pairs, h_pack_fn fn,
                  void *data, const int *fds, unsigned nfds);
/* hello, asserting success; returns max_frame from the reply. */
uint32_t h_raw_hello(int fd, uint64_t seq);
/* Asserts f is a reply with seq and the given error code ("" for success). */
void h_expect_reply(const struct h_frame *f, uint64_t seq, const char *code);
/* Asserts f is an error event with code and fatal flag. */
void h_expect_event(const struct h_frame *f, const char *code, bool fatal);
/* The message of error reply f, asserting it has one: its bytes (not
 * NUL-terminated), their count in *ret_len. */
const char *h_error_message(const struct h_frame *f, size_t *ret_len);
/* Receive then h_expect_reply, within 5 s. */
void h_raw_expect_reply(int fd, uint64_t seq, const char *code);
void h_raw_expect_event(int fd, const char *code, bool fatal);

/* ---- helper processes -------------------------------------------------- */

struct h_child {
        pid_t pid;
        int in;         /* write end of its stdin, or -1 */
        int out;        /* read end of its stdout, or -1 */
};
/* Spawns h_builddir()/tests/<helper> with argv (argv[0] is set for you;
 * NULL-terminated) and, when pipes is true, pipes for stdin and stdout.
 * GPUIPC_SOCKET is set to the test daemon's socket. */
void h_spawn(struct h_child *c, const char *helper, const char *const *args, bool pipes);
/* Spawns an absolute program path the same way. */
void h_spawn_path(struct h_child *c, const char *path, const char *const *args, bool pipes);
/* Closes its stdin, then waits up to timeout_ms; returns the exit code, 128+signal when killed,
 * and fails the test when it does not end in time (killing it). */
int h_wait(struct h_child *c, int timeout_ms);
/* Reads one line from the child's stdout within timeout_ms into buf;
 * returns its length, or -1 at EOF or timeout. */
int h_read_line(struct h_child *c, char *buf, size_t len, int timeout_ms);

/* ---- data pattern shared with the helpers ---------------------------- */

static inline uint8_t h_pattern(uint64_t i, uint32_t seed)
{
        uint64_t x = (i >> 3) * 0x9e3779b97f4a7c15ull + seed;
        x ^= x >> 29;
        return (uint8_t)(x >> (8 * (i & 7)));
}

#endif
