/* conn.h: one client connection: socket I/O, fds, the output queue.
 *
 * Reads are drained with recvmsg() from a uv_poll_t callback and cut into
 * frames for the daemon's dispatch hook (conn.c).  Replies go to an output
 * queue (outq.c) that is written with sendmsg() at the end of each read
 * batch; the socket is polled for writability only while bytes are left
 * over.  A chunk that carries an fd pins its registration, so the fd stays
 * open until the kernel has it even if the lease or registration ends
 * first. */
#ifndef GPUIPCD_CONN_H
#define GPUIPCD_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "access.h"
#include "daemon.h"
#include "proto.h"
#include "registry.h"

struct waiter;
struct wgroup;

/* Queued output: frames copied end to end.  A frame with an fd starts a
 * chunk of its own, since the fd travels with the chunk's first byte;
 * frames without one are appended to the last chunk while they fit. */
struct chunk {
        struct chunk *next;
        struct reg *pin;                /* keeps fds open; they travel with byte 0 */
        unsigned nfds;                  /* with pin: 1..PROTO_MAX_FDS */
        int fds[PROTO_MAX_FDS];         /* pin->fd, pin->ro_fd, or its chunks' */
        size_t len, off;                /* off: bytes already written */
        size_t cap;                     /* bytes buf has room for */
        uint8_t buf[];
};

struct conn {
        struct reg_party party;         /* this connection, to the registry */
        struct daemon *d;
        struct conn *prev, *next;
        struct conn *hprev, *hnext;     /* accepted, no hello yet: by deadline */
        struct conn *flush_next;        /* in d->to_flush (flush_queued) */
        uint64_t hello_deadline;        /* uv_now() by which hello must come */
        uv_poll_t poll;
        int fd;
        int events;                     /* uv_poll events requested */
        uint64_t id;
        struct proto_reader rd;
        struct proto_fdq fdq;
        struct chunk *out_head, *out_tail;
        uint64_t out_bytes;             /* unsent bytes */
        struct waiter *waits;
        struct alloc **holds;           /* allocations it keeps mapped (holds.c) */
        uint32_t n_holds, cap_holds;
        struct alloc **lingers;         /* its unregistered, still held allocations */
        uint32_t n_lingers, cap_lingers;
        struct wgroup *wgroups;         /* its waiters, by name (waits.c) */
        uint32_t n_waits;
        uint32_t n_groups;
        gid_t groups[PEER_GROUPS_MAX];  /* supplementary, from SO_PEERGROUPS at accept */
        bool hello : 1;
        bool closed : 1;                /* conn_close() ran; freed on uv_close */
        bool doomed : 1;                /* to be closed once it is safe */
        bool busy : 1;                  /* inside its own read callback */
        bool discard : 1;               /* doomed for its backlog: do not flush */
        bool paused : 1;                /* frames left in rd by backpressure */
        bool flush_queued : 1;          /* in d->to_flush */
};

static inline struct conn *conn_from_party(struct reg_party *p)
{
        return container_of(p, struct conn, party);
}

/* Takes ownership of fd (a non-blocking accepted socket).  The peer's
 * credentials, supplementary groups, executable and (with the fd store)
 * start time are read now, as of the accept, not at hello. */
int conn_new(struct daemon *d, int fd, struct conn **ret);
/* c said hello: it no longer has a deadline for it. */
void conn_hello_done(struct conn *c);
/* Ends the connection now: drops its state and closes the socket once
 * libuv lets go of it.  Must not be called from inside registry callbacks;
 * use conn_doom() there. */
void conn_close(struct conn *c);
/* Closes the connection at the next safe point. */
void conn_doom(struct conn *c);
/* Polls c's socket for events (UV_READABLE, UV_WRITABLE). */
void conn_set_events(struct conn *c, int events);

/* Finishes o as a frame and queues it, pinning pin (may be NULL) whose fd
 * goes with the frame.  -EMSGSIZE if the body exceeds max_frame (nothing is
 * queued); -ENOBUFS if the connection exceeded its output limit (it is
 * doomed). */
int conn_send(struct conn *c, struct proto_out *o, struct reg *pin);
/* conn_send() with an fd of pin other than pin->fd (e.g. pin->ro_fd).  On
 * -ENOMEM the connection is doomed, since its peer would wait forever. */
int conn_send_fd(struct conn *c, struct proto_out *o, struct reg *pin, int fd);
/* conn_send_fd() with nfds (1..PROTO_MAX_FDS) fds that pin keeps open. */
int conn_send_fds(struct conn *c, struct proto_out *o, struct reg *pin, const int *fds,
                  unsigned nfds);
/* Starts o as an error event frame (the one place that packs them). */
void conn_pack_error_event(struct proto_out *o, int err, const char *message, bool fatal);
/* Starts o as an event about a registration, {event, id, name}, in map m:
 * the caller adds its fields (released, revoked) and ends m. */
void conn_pack_reg_event(struct proto_out *o, struct proto_map *m, const char *event,
                         uint64_t id, const char *name, size_t name_len);
/* Queues an error event; with fatal, dooms the connection after it. */
void conn_send_error_event(struct conn *c, int err, const char *message, bool fatal);
/* Tells the holder of lease l of r, while it is connected, that the lease
 * is gone: a `revoked` event with reason (and with_lease, the lease's id). */
void conn_send_revoked(const struct reg *r, const struct lease *l, const char *reason,
                       bool with_lease);
/* Writes what the socket takes now. */
void conn_flush(struct conn *c);
/* Daemon shutdown: answers waiting lookups and sends every connection a
 * fatal shutting_down event, writes what the sockets take without blocking,
 * and closes the rest after a short grace period. */
void conns_shutdown(struct daemon *d);

#endif
