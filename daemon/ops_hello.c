/* ops_hello.c: hello (with resume) and ping. */
#include <errno.h>
#include <inttypes.h>
#include <unistd.h>

#include "log.h"
#include "ops.h"
#include "restart_persist.h"
#include "session.h"

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
