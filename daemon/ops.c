/* ops.c: request dispatch, reply helpers, hello, ping and stats. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "access.h"
#include "cuda_ctx.h"
#include "cuda_reg.h"
#include "holds.h"
#include "log.h"
#include "metrics.h"
#include "ops.h"
#include "persist.h"
#include "session.h"
#include "watch.h"

#define SERVER_NAME "gpuipcd " GPUIPC_VERSION

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
};

int req_fail(struct req *q, int err, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(q->msg, sizeof(q->msg), fmt, ap);
        va_end(ap);
        return err;
}

int req_fail_name(struct req *q, const char *what, const char *name, size_t len,
                  const char *why)
{
        /* Echo at most a valid name's worth of what the peer sent. */
        return req_fail(q, -EINVAL, "%s '%.*s': %s", what,
                        (int)(len > PROTO_NAME_MAX ? PROTO_NAME_MAX : len), name, why);
}

void reply_start(struct proto_out *o, uint64_t seq, uint32_t nfields)
{
        proto_out_init(o);
        msgpack_pack_map(&o->pk, nfields + 1);
        proto_pack_ku64(&o->pk, "seq", seq);
}

void reply_begin(struct proto_out *o, struct proto_map *m, uint64_t seq)
{
        proto_out_init(o);
        proto_map_begin(m, &o->pk);
        proto_map_ku64(m, "seq", seq);
}

void ops_reply_error(struct conn *c, uint64_t seq, int err, const char *message)
{
        struct proto_out o;

        c->d->requests++;
        c->d->errors++;
        reply_start(&o, seq, 1);
        proto_pack_error(&o.pk, err, message);
        (void)conn_send(c, &o, NULL);
        proto_out_free(&o);
}

int reply_send(struct conn *c, uint64_t seq, struct proto_out *o, struct reg *pin)
{
        return reply_send_fd(c, seq, o, pin, pin ? pin->fd : -1);
}

int reply_send_fd(struct conn *c, uint64_t seq, struct proto_out *o, struct reg *pin, int fd)
{
        return reply_send_fds(c, seq, o, pin, &fd, pin ? 1 : 0);
}

int reply_send_fds(struct conn *c, uint64_t seq, struct proto_out *o, struct reg *pin,
                   const int *fds, unsigned nfds)
{
        int r = conn_send_fds(c, o, pin, fds, nfds);

        if (r == -EMSGSIZE) {
                ops_reply_error(c, seq, -EMSGSIZE, "the reply would exceed max_frame");
                return r;
        }
        if (r == 0)
                c->d->requests++;
        return r;
}

void pack_record(msgpack_packer *pk, const struct reg *r)
{
        pack_record_ex(pk, r, false);
}

void pack_record_ex(msgpack_packer *pk, const struct reg *r, bool with_handle)
{
        pack_record_holders(pk, r, with_handle, 0);
}

/* One holders entry per lease, newest first, at most max. */
static void pack_holders(msgpack_packer *pk, const struct reg *r, uint32_t max)
{
        uint32_t n = 0, i = 0;

        for (const struct lease *l = r->held; l && n < max; l = l->rnext)
                n++;
        msgpack_pack_array(pk, n);
        for (const struct lease *l = r->held; l && i < n; l = l->rnext, i++) {
                msgpack_pack_map(pk, 5);
                proto_pack_ku64(pk, "lease", l->id);
                proto_pack_ku64(pk, "pid", l->holder->pid);
                proto_pack_ku64(pk, "uid", l->holder->uid);
                proto_pack_kstr(pk, "exe", watch_party_exe(l->holder));
                proto_pack_ku64(pk, "since_ms", l->since_ms);
        }
}

void pack_record_holders(msgpack_packer *pk, const struct reg *r, bool with_handle,
                         uint32_t holders_max)
{
        struct proto_map m;

        proto_map_begin(&m, pk);
        proto_map_ku64(&m, "id", r->id);
        proto_map_kstrn(&m, "name", r->name, r->name_len);
        proto_map_kstr(&m, "kind", proto_kind_name(r->kind));
        proto_map_ku64(&m, "size", r->size);
        proto_map_ku64(&m, "offset", r->offset);
        if (r->meta) {
                /* Validated and packed once, at register time. */
                proto_map_key(&m, "meta");
                pk->callback(pk->data, (const char *)r->meta, r->meta_len);
        }
        proto_map_key(&m, "owner");
        msgpack_pack_map(pk, 5);
        proto_pack_ku64(pk, "pid", r->pid);
        proto_pack_ku64(pk, "uid", r->uid);
        proto_pack_ku64(pk, "gid", r->gid);
        proto_pack_kbool(pk, "connected", r->owner != NULL);
        proto_pack_kstr(pk, "exe", watch_reg_exe(r->id));
        proto_map_ku64(&m, "created_ms", r->created_ms);
        proto_map_ku64(&m, "leases", r->leases);
        proto_map_kbool(&m, "ephemeral", r->ephemeral);
        proto_map_kstr(&m, "state", r->live ? "live" : "unregistered");
        if (r->expires_ms)
                proto_map_ku64(&m, "expires_ms", r->expires_ms);
        if (holders_max > 0) {
                proto_map_key(&m, "holders");
                pack_holders(pk, r, holders_max);
        }
        proto_map_key(&m, "access");
        proto_access_pack(pk, r->access);
        reg_cuda_pack_record(&m, r, with_handle);
        proto_map_end(&m);
}

int req_target(struct req *q, struct target *ret)
{
        struct target t = { 0 };
        const char *why;
        int rn, ri;

        rn = proto_get_str(q->m, "name", &t.name, &t.name_len);
        ri = proto_get_u64(q->m, "id", &t.id);
        if (rn == -EINVAL)
                return req_fail(q, -EINVAL, "name must be a str");
        if (ri == -EINVAL)
                return req_fail(q, -EINVAL, "id must be a uint");
        if (rn == 0 && ri == 0)
                return req_fail(q, -EINVAL, "give either name or id, not both");
        if (rn < 0 && ri < 0)
                return req_fail(q, -EINVAL, "name or id is required");
        if (rn == 0 && proto_name_check(t.name, t.name_len, &why) < 0)
                return req_fail_name(q, "name", t.name, t.name_len, why);
        t.by_id = ri == 0;
        *ret = t;
        return 0;
}

/* Most ids one of the resume lists carries: both fit a frame. */
static uint32_t resume_list_cap(const struct conn *c)
{
        return (c->d->cfg.max_frame - 512) / 20;
}

/* The regs and leases lists of a resumed hello's reply: a list that does
 * not fit is left out whole, since a client reads a missing id as gone. */
static void pack_resumed(struct proto_map *m, const struct conn *c)
{
        if (c->party.n_live <= resume_list_cap(c)) {
                proto_map_key(m, "regs");
                msgpack_pack_array(m->pk, c->party.n_live);
                for (const struct reg *r = c->party.owned; r; r = r->own_next)
                        if (r->live)
                                msgpack_pack_uint64(m->pk, r->id);
        }
        if (c->party.n_leases <= resume_list_cap(c)) {
                proto_map_key(m, "leases");
                msgpack_pack_array(m->pk, c->party.n_leases);
                for (const struct lease *l = c->party.leases; l; l = l->next)
                        msgpack_pack_uint64(m->pk, l->id);
        }
}

int op_hello(struct req *q)
{
        struct conn *c = q->c;
        const char *client = "";
        size_t client_len = 0, token_len = 0;
        const uint8_t *token = NULL;
        bool want_resume, resumed = false;
        struct session_missed *missed = NULL;
        struct proto_out o;
        struct proto_map m;
        uint64_t v;
        int r;

        r = proto_get_u64(q->m, "version", &v);
        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "version must be a uint");
        if (r == -ENOENT || v == 0)
                return req_fail(q, -EPROTONOSUPPORT,
                                "version must be at least 1; this daemon speaks version %u",
                                PROTO_VERSION);
        r = proto_get_str(q->m, "client", &client, &client_len);
        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "client must be a str");
        if (r == 0 && client_len > 64)
                return req_fail(q, -EINVAL, "client is longer than 64 bytes");

        r = proto_get_bin(q->m, "resume", &token, &token_len);
        if (r == -EINVAL || (r == 0 && token_len != PROTO_SESSION_LEN))
                return req_fail(q, -EINVAL, "resume must be a bin of %u bytes", PROTO_SESSION_LEN);
        want_resume = r == 0;
        if (!c->hello) {
                if (want_resume && session_resume(c->d, c, token, &missed)) {
                        resumed = true;
                } else if (session_new_token(&c->party) < 0) {
                        return req_fail(q, -EIO, "no random bytes for a session token");
                } else {
                        /* start_time was read at accept (conn_new). */
                        persist_session(c->d, &c->party);
                }
        }

        reply_begin(&o, &m, q->seq);
        proto_map_ku64(&m, "version", v < PROTO_VERSION ? v : PROTO_VERSION);
        proto_map_kstr(&m, "server", SERVER_NAME);
        proto_map_ku64(&m, "max_frame", c->d->cfg.max_frame);
        proto_map_ku64(&m, "max_fds", PROTO_MAX_FDS);
        proto_map_ku64(&m, "pid", (uint64_t)getpid());
        proto_map_kbin(&m, "session", c->party.session, PROTO_SESSION_LEN);
        proto_map_kbool(&m, "fdstore", persist_enabled());
        if (want_resume)
                proto_map_kbool(&m, "resumed", resumed);
        if (resumed)
                pack_resumed(&m, c);
        proto_map_end(&m);
        r = reply_send(c, q->seq, &o, NULL);
        proto_out_free(&o);
        /* What the session missed while detached follows the reply. */
        session_send_missed(c, missed);
        if (r == 0 && !c->hello) {
                c->hello = true;
                conn_hello_done(c);
                log_debug("connection %" PRIu64 " (pid %u): hello, client '%.*s'", c->id,
                          c->party.pid, (int)client_len, client);
        }
        return 0;
}

int op_ping(struct req *q)
{
        struct proto_out o;

        reply_start(&o, q->seq, 0);
        (void)reply_send(q->c, q->seq, &o, NULL);
        proto_out_free(&o);
        return 0;
}

int op_stats(struct req *q)
{
        struct daemon *d = q->c->d;
        const struct registry_counters *k = registry_counters(d->reg);
        struct proto_map bytes, gpu;
        struct proto_out o;
        const char *reason;
        int driver;
        bool cuda;

        cuda = gpu_available(d->gpu, &reason, &driver);
        reply_start(&o, q->seq, 13);
        proto_pack_kstr(&o.pk, "server", SERVER_NAME);
        proto_pack_ku64(&o.pk, "version", PROTO_VERSION);
        proto_pack_ku64(&o.pk, "pid", (uint64_t)getpid());
        proto_pack_ku64(&o.pk, "uptime_ms", uv_now(d->loop) - d->start_ms);
        proto_pack_ku64(&o.pk, "connections", d->n_conns);
        proto_pack_ku64(&o.pk, "registrations", k->registrations);
        proto_pack_ku64(&o.pk, "leases", k->leases);
        proto_pack_str(&o.pk, "bytes");
        proto_map_begin(&bytes, &o.pk);
        for (unsigned i = 0; i < _PROTO_KIND_MAX; i++)
                if (i == PROTO_KIND_HOST || k->bytes[i] > 0)
                        proto_map_ku64(&bytes, proto_kind_name(i), k->bytes[i]);
        proto_map_end(&bytes);
        proto_pack_ku64(&o.pk, "requests", d->requests);
        proto_pack_ku64(&o.pk, "errors", d->errors);
        proto_pack_ku64(&o.pk, "copies", d->copies);
        proto_pack_ku64(&o.pk, "copied_bytes", d->copied_bytes);
        proto_pack_str(&o.pk, "cuda");
        proto_map_begin(&gpu, &o.pk);
        proto_map_kbool(&gpu, "available", cuda);
        if (!cuda && reason)
                proto_map_kstr(&gpu, "reason", reason);
        if (cuda && driver > 0)
                proto_map_ku64(&gpu, "driver_version", (uint64_t)driver);
        proto_map_end(&gpu);
        (void)reply_send(q->c, q->seq, &o, NULL);
        proto_out_free(&o);
        return 0;
}

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
        if (!op)
                return req_fail(q, -ENOSYS, "unknown op '%.*s'", (int)(len > 64 ? 64 : len),
                                name);
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

        r = proto_decode(body, len, &m, &why);
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
        r = prepare_and_run(&q, off);
        watch_set_actor(NULL);
        metrics_request(q.op, r, uv_hrtime() - t0);
        if (r < 0) {
                log_debug("connection %" PRIu64 " (pid %u): seq %" PRIu64 ": %s: %s", c->id,
                          c->party.pid, q.seq, proto_code_from_errno(r), q.msg);
                ops_reply_error(c, q.seq, r, q.msg);
        }
out:
        for (unsigned i = 0; i < q.nfds; i++)
                if (q.fds[i] >= 0)
                        close(q.fds[i]);
        proto_msg_free(&m);
}
