/* dispatch.c: a request frame to its handler: decoding, seq, op, hello
 * and fds, the op table, and the error reply when a handler fails. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "closer.h"
#include "dispatch.h"
#include "holds.h"
#include "log.h"
#include "metrics.h"
#include "ops.h"
#include "trace.h"
#include "watch.h"

static const struct op {
        const char *name;
        int (*fn)(struct req *q);
        bool needs_hello;
} ops[] = {
        { "hello",      op_hello,      false },
        { "ping",       op_ping,       true },
        { "register",   op_register,   true },
        { "lookup",     op_lookup,     true },
        { "release",    op_release,    true },
        { "unregister", op_unregister, true },
        { "list",       op_list,       true },
        { "stat",       op_stat,       true },
        { "stats",      op_stats,      true },
        { "adopt",      op_adopt,      true },
        { "watch",      op_watch,      true },
        { "revoke",     op_revoke,     true },
        { "metrics",    op_metrics,    true },
        { "unhold",     op_unhold,     true },
        { "unmap",      op_unmap,      true },
};

static void error_event(struct conn *c, int err, const char *why)
{
        log_debug("connection %" PRIu64 " (pid %u): %s: %s", c->id, c->party.pid,
                  proto_code_from_errno(err), why);
        conn_send_error_event(c, err, why, false);
}

static const struct op *find_op(const char *name, size_t len)
{
        for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
                if (strlen(ops[i].name) == len && memcmp(ops[i].name, name, len) == 0)
                        return &ops[i];
        return NULL;
}

/* Everything up to the handler: returns the handler's result, or an error
 * with q->msg set. */
static int prepare_and_run(struct req *q, uint64_t off)
{
        struct conn *c = q->c;
        const struct op *op;
        const char *name;
        size_t len;
        uint64_t nfds = 0;
        int r;

        r = proto_get_u64(q->m, "fds", &nfds);
        if (r == -EINVAL || nfds > PROTO_MAX_FDS) {
                proto_fdq_drop_frame(&c->fdq, off, q->end);
                return req_fail(q, -EINVAL, "fds must be a uint from 0 to %u", PROTO_MAX_FDS);
        }
        if (nfds > 0) {
                r = proto_fdq_take(&c->fdq, off, q->end, (unsigned)nfds, q->fds);
                if (r < 0)
                        return req_fail(q, -EBADF, "the frame declares %" PRIu64
                                        " fds but fewer arrived with it", nfds);
                q->nfds = (unsigned)nfds;
        }

        r = proto_get_str(q->m, "op", &name, &len);
        if (r < 0)
                return req_fail(q, -EINVAL, "op must be a str");
        op = find_op(name, len);
        q->op = op ? op->name : NULL;
        /* Before hello, even an unknown op is hello_required, as documented. */
        if ((!op || op->needs_hello) && !c->hello)
                return req_fail(q, -EPROTO, "the first request must be hello");
        if (!op) {
                char quoted[REQ_QUOTE_SIZE(64)];
                return req_fail(q, -ENOSYS, "unknown op '%s'", req_quote(quoted, name, len, 64));
        }
        return op->fn(q);
}

/* A frame refused before dispatch must not leave its fds for the next
 * frame to claim: closes the fds it declares, or when that is unknown,
 * every fd that arrived with its bytes. */
static void drop_refused_fds(struct req *q, uint64_t off)
{
        uint64_t n;

        if (q->m && proto_get_u64(q->m, "fds", &n) == 0 && n <= PROTO_MAX_FDS) {
                if (n > 0 && proto_fdq_take(&q->c->fdq, off, q->end, (unsigned)n, q->fds) == 0)
                        q->nfds = (unsigned)n;  /* closed on the way out */
                return;
        }
        proto_fdq_drop_frame(&q->c->fdq, off, q->end);
}

void ops_dispatch(struct conn *c, const uint8_t *body, uint32_t len, uint64_t off)
{
        struct req q = { .c = c, .end = off + PROTO_HDR_LEN + len };
        struct proto_msg m;
        const char *why = "malformed frame";
        uint64_t t0;
        int r;

        TRACE("d.frame", c->id);
        r = proto_decode(body, len, &m, &why);
        TRACE("d.decoded", r);
        if (r < 0) {
                drop_refused_fds(&q, off);
                error_event(c, r == -ENOMEM ? -ENOMEM : -EBADMSG,
                            r == -ENOMEM ? "out of memory decoding the frame" : why);
                goto out;
        }
        q.m = m.root;
        if (proto_get_u64(q.m, "seq", &q.seq) < 0) {
                drop_refused_fds(&q, off);
                error_event(c, -EINVAL, "request has no uint seq");
                goto out;
        }
        /* Requests are timed from here: decoding is the same for all. */
        t0 = uv_hrtime();
        watch_set_actor(&c->party);
        TRACE("d.run", c->id);
        r = prepare_and_run(&q, off);
        TRACE("d.ran", c->id);
        watch_set_actor(NULL);
        metrics_request(q.op, r, uv_hrtime() - t0);
        if (r < 0) {
                log_debug("connection %" PRIu64 " (pid %u): seq %" PRIu64 ": %s: %s", c->id,
                          c->party.pid, q.seq, proto_code_from_errno(r), q.msg);
                ops_reply_error(c, q.seq, r, q.msg);
        }
out:
        for (unsigned i = 0; i < q.nfds; i++)
                closer_close(q.fds[i]);
        proto_msg_free(&m);
}
