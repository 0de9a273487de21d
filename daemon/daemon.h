/* daemon.h: state shared by the daemon's modules: configuration, the
 * registry, open connections and counters.  One instance, owned by main. */
#ifndef GPUIPCD_DAEMON_H
#define GPUIPCD_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <uv.h>

#include "cuda_alloc.h"
#include "config.h"
#include "hmap.h"
#include "registry.h"
#include "ttl.h"

struct conn;
struct gpu;

struct daemon {
        uv_loop_t *loop;
        struct config cfg;
        struct registry *reg;
        struct alloc_table allocs;      /* CUDA allocations behind registrations */
        struct gpu *gpu;                /* the CUDA driver, as far as it is usable */
        struct conn *conns;             /* open connections */
        uint32_t n_conns;
        uint64_t next_conn_id;
        struct hmap waits;              /* name -> struct waitq */
        struct hmap uids;               /* uid -> what it holds (quota.c) */
        uint64_t reg_fds;               /* fds held for registrations, all uids */
        uint64_t requests, errors;      /* replies sent, and those that failed */
        uint64_t copies, copied_bytes;  /* registrations the library copied (`copied`) */
        uint64_t start_ms;              /* uv_now() at startup */
        struct hmap detached;           /* token -> detached session (session.c) */
        uint32_t n_detached;
        bool restoring;                 /* replaying the journal (restart_replay.c) */
        bool stopping;
        uv_timer_t *grace;              /* shutdown: ends connections slow to flush */
        struct conn *prehello, *prehello_tail; /* no hello yet, oldest first */
        /* Inside a connection's read callback, the others that frames were
         * queued for: flushed before the callback returns (conn.c). */
        struct conn *to_flush;
        bool in_read;
        uv_timer_t *hello_timer;        /* for the oldest one's deadline */
        uint64_t out_total;             /* unsent reply bytes of all connections */
        uint64_t out_peak;              /* out_total's high-water mark since the last trim */
        struct ttl_heap ttl;            /* registrations with an expiry (ttl.c) */
        /* What conn.c hands each complete frame to: ops_dispatch(), set by
         * daemon_init(), so that connections need not know the handlers
         * that use them. */
        void (*dispatch)(struct conn *c, const uint8_t *body, uint32_t len, uint64_t off);
};

/* Unix time in milliseconds. */
static inline uint64_t now_unix_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Creates the registry and tables; d->loop and d->cfg must be set. */
int daemon_init(struct daemon *d);
/* Shuts every connection down: a fatal shutting_down event, then closing
 * once flushed or after a short grace period (handles finish in the loop). */
void daemon_close_connections(struct daemon *d);
/* Frees the registry and tables once the loop has no handles left. */
void daemon_done(struct daemon *d);

#endif
