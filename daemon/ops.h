/* ops.h: the handler contract: a request, the reply helpers (reply.c)
 * and the operation handlers (ops_*.c, holds.c).
 *
 * dispatch.c decodes a frame, checks seq, op, hello and fds, and calls a
 * handler from its table.  A handler either queues its own reply and
 * returns 0, or returns a negative errno after req_fail() set the message,
 * and the dispatcher sends the error reply. */
#ifndef GPUIPCD_OPS_H
#define GPUIPCD_OPS_H

#include <stdint.h>

#include "conn.h"
#include "proto.h"
#include "registry.h"

#define REQ_MSG_MAX 512
#define SERVER_NAME "gpuipcd " GPUIPC_VERSION    /* hello's and stats' server */

struct req {
        struct conn *c;
        const msgpack_object *m;        /* the request map */
        uint64_t seq;
        int fds[PROTO_MAX_FDS];         /* set an entry to -1 to keep that fd */
        unsigned nfds;
        uint64_t end;                   /* stream offset just past the frame */
        const char *op;                 /* the op table's name, once found */
        char msg[REQ_MSG_MAX];
};

/* Formats the error message of q and returns err. */
int req_fail(struct req *q, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Up to max bytes of s[0..len), bytes a peer sent, fit for an error
 * message: printable ASCII as it is, any other byte (and the backslash) as
 * \xNN, "..." after a cut.  buf holds REQ_QUOTE_SIZE(max) bytes; returns
 * buf. */
#define REQ_QUOTE_SIZE(max) (4 * (max) + 4)
const char *req_quote(char *buf, const char *s, size_t len, size_t max);
/* req_fail() with -EINVAL for an invalid name (or prefix) what: echoes at
 * most REQ_NAME_ECHO_MAX bytes of it, quoted (so that the reason why still
 * fits REQ_MSG_MAX), and why. */
#define REQ_NAME_ECHO_MAX 96
int req_fail_name(struct req *q, const char *what, const char *name, size_t len,
                  const char *why);

/* Starts a reply map of nfields fields besides seq, and packs seq. */
void reply_start(struct proto_out *o, uint64_t seq, uint32_t nfields);
/* reply_start() for a reply whose fields the caller counts into m (with
 * the proto_map_k* helpers), then ends with proto_map_end(m). */
void reply_begin(struct proto_out *o, struct proto_map *m, uint64_t seq);
/* Replies to q with the uints k1: v1 and k2: v2; returns 0. */
int reply_counts(struct req *q, const char *k1, uint64_t v1, const char *k2, uint64_t v2);
/* Sends a finished reply, counting it; a reply over max_frame is turned
 * into a too_large error. */
int reply_send(struct conn *c, uint64_t seq, struct proto_out *o, struct reg *pin);
/* reply_send() with an fd of pin other than pin->fd (its ro_fd). */
int reply_send_fd(struct conn *c, uint64_t seq, struct proto_out *o, struct reg *pin, int fd);
/* reply_send_fd() with nfds fds (0 without pin). */
int reply_send_fds(struct conn *c, uint64_t seq, struct proto_out *o, struct reg *pin,
                   const int *fds, unsigned nfds);
void ops_reply_error(struct conn *c, uint64_t seq, int err, const char *message);


/* Name or id of a request that takes one of them. */
struct target {
        const char *name;
        size_t name_len;
        uint64_t id;
        bool by_id;
};
int req_target(struct req *q, struct target *ret);
/* The registration t names, if q's connection may see it (with live, only
 * a live one), else -ENOENT with "no WHAT with id N" or "no registration
 * named NAME": what it may not see is not revealed. */
int req_find(struct req *q, const struct target *t, bool live, const char *what,
             struct reg **ret);
/* req_target() then req_find(). */
int req_target_find(struct req *q, bool live, const char *what, struct reg **ret);

/* ops_hello.c */
int op_hello(struct req *q);
int op_ping(struct req *q);
int op_register(struct req *q);
/* The CUDA part of register (ops_register_cuda.c): checks the kind's fields
 * in m (the request, or a batch's part) and takes the allocation reference
 * with the buffer's nfds fds (fds[i] is set to -1 when the allocation table
 * took or closed it), filling p->cuda, p->fd, p->ephemeral and p->revocable.
 * On failure nothing is left to undo but the fds still set. */
int register_cuda_params(struct req *q, const msgpack_object *m, int *fds, unsigned nfds,
                         struct reg_params *p, bool ephemeral_given);
/* ops_register_batch.c: register of kind batch. */
int op_register_batch(struct req *q);
int op_adopt(struct req *q);
int op_lookup(struct req *q);
int op_release(struct req *q);
int op_unregister(struct req *q);
int op_list(struct req *q);
int op_stat(struct req *q);
int op_stats(struct req *q);
/* ops_admin.c */
int op_watch(struct req *q);
int op_revoke(struct req *q);
int op_metrics(struct req *q);

#endif
