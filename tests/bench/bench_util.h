/* bench_util.h: shared helpers of the host benchmarks (tests/bench).
 *
 * Timing and statistics, starting and stopping gpuipcd / redis-server / a
 * raw AF_UNIX echo server, and a minimal wire client built on proto/ (for
 * pipelined requests, which the blocking library cannot issue). */
#ifndef GPUIPC_BENCH_UTIL_H
#define GPUIPC_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto.h"

double now_us(void);
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void *xmalloc(size_t n);

/* ---- samples ------------------------------------------------------------ */

struct samples {
        float *v;
        size_t n, cap;
};
void samples_init(struct samples *s, size_t cap);
static inline void samples_add(struct samples *s, double us)
{
        if (s->n < s->cap)
                s->v[s->n++] = (float)us;
}
void samples_merge(struct samples *dst, const struct samples *src);
/* Percentile p (0..100) of the samples, sorting them in place; NAN if none. */
double samples_pct(struct samples *s, double p);
void samples_free(struct samples *s);

double median(double *v, int n);

/* ---- processes ------------------------------------------------------------ */

/* A temporary directory for sockets, removed by tmpdir_remove(). */
const char *tmpdir_get(void);
void tmpdir_remove(void);

/* Connects a blocking AF_UNIX stream socket; -errno. */
int unix_connect(const char *path);
/* Waits up to timeout_ms for path to accept connections. */
int wait_socket(const char *path, int timeout_ms);

/* The fds such a daemon keeps for connections: --max-connections 4096, + 64. */
#define DAEMON_CONN_RESERVE (4096u + 64u)
/* How many host registrations (two daemon fds each) one uid may hold in
 * such a daemon (no --max-fds-per-uid to speak of) with RLIMIT_NOFILE
 * nofile: a uid may take at most half of the fds left after the
 * connection reserve (at most half of nofile). */
uint64_t daemon_host_reg_cap(uint64_t nofile);
/* Starts gpuipcd at socket path with benchmark limits; nofile: the
 * RLIMIT_NOFILE to give it (0: leave as is).  Returns its pid; exits on
 * failure. */
pid_t daemon_start(const char *bin, const char *path, uint64_t nofile, uint64_t *ret_nofile);
void proc_stop(pid_t pid);
/* VmRSS of pid in bytes, or 0. */
uint64_t proc_rss(pid_t pid);

/* ---- raw floor server ----------------------------------------------------- */

/* A blocking server (one thread per connection), forked: each request frame
 * body starts with 1 byte "attach an fd" and a big-endian u32 reply body
 * length; it answers with a frame of that size, carrying a memfd when asked.
 * fds the client attaches are closed. */
pid_t rawsrv_start(const char *path);
/* Builds a raw request frame of total length req_len (>= 9) into buf. */
void rawreq_build(uint8_t *buf, size_t req_len, size_t rep_len, bool rep_fd);

/* ---- frame I/O ------------------------------------------------------------ */

struct conn_rd {
        int sock;
        struct proto_reader r;
        unsigned fds_rx;        /* fds received and closed */
};
void rd_init(struct conn_rd *c, int sock);
void rd_free(struct conn_rd *c);
/* Next frame body (valid until the next call); fds that arrive are closed
 * and counted.  Exits on EOF or error. */
const uint8_t *rd_next(struct conn_rd *c, uint32_t *ret_len);
/* Writes all of buf, attaching fd (if >= 0) to the first byte. */
void send_all(int sock, const void *buf, size_t len, int fd);

/* ---- gpuipcd wire client ---------------------------------------------------- */

/* Connects and says hello; returns the socket reader. */
void wire_connect(struct conn_rd *c, const char *path);
/* Builds requests into o (already finished, frame in o->sb).  The seq is
 * whatever the caller passes. */
void wire_lookup(struct proto_out *o, uint64_t seq, const char *name);
/* A lookup that offers lease `have` (held on this connection): the daemon
 * then leaves the fd out when the name still resolves to its registration. */
void wire_lookup_have(struct proto_out *o, uint64_t seq, const char *name, uint64_t have);
void wire_release(struct proto_out *o, uint64_t seq, uint64_t lease);
void wire_register(struct proto_out *o, uint64_t seq, const char *name, uint64_t offset,
                   uint64_t size, bool ephemeral);
void wire_unregister(struct proto_out *o, uint64_t seq, const char *name);
/* Reads one reply; when it is an error exits with its message; returns the
 * value of key (0 if absent or key is NULL). */
uint64_t wire_reply(struct conn_rd *c, const char *key, uint32_t *ret_len);

/* A sealed memfd of size bytes (4 KiB pages, or hugetlb: -1 when the host
 * has none). */
int memfd_sealed(size_t size, bool huge);

#endif
