/* reply.c: the handlers' side of a request: error messages, replies and
 * their sending, and the name-or-id target most requests carry. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "access.h"
#include "ops.h"

int req_fail(struct req *q, int err, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(q->msg, sizeof(q->msg), fmt, ap);
        va_end(ap);
        return err;
}

const char *req_quote(char *buf, const char *s, size_t len, size_t max)
{
        static const char hex[] = "0123456789abcdef";
        char *o = buf;

        for (size_t i = 0; i < len && i < max; i++) {
                unsigned char ch = (unsigned char)s[i];

                if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
                        *o++ = (char)ch;
                        continue;
                }
                *o++ = '\\';
                *o++ = 'x';
                *o++ = hex[ch >> 4];
                *o++ = hex[ch & 15];
        }
        if (len > max) {
                memcpy(o, "...", 3);
                o += 3;
        }
        *o = '\0';
        return buf;
}

int req_fail_name(struct req *q, const char *what, const char *name, size_t len,
                  const char *why)
{
        char quoted[REQ_QUOTE_SIZE(REQ_NAME_ECHO_MAX)];

        return req_fail(q, -EINVAL, "%s '%s': %s", what,
                        req_quote(quoted, name, len, REQ_NAME_ECHO_MAX), why);
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
        char ascii[REQ_MSG_MAX];
        struct proto_out o;
        size_t i;

        /* The message goes out as a str, and strict decoders refuse a
         * whole reply over one bad byte: a byte of the peer's that got past
         * req_quote() becomes '?' (the daemon's own text is ASCII). */
        for (i = 0; message[i] && i < sizeof(ascii) - 1; i++)
                ascii[i] = (unsigned char)message[i] < 0x20 || (unsigned char)message[i] >= 0x7f
                                   ? '?' : message[i];
        ascii[i] = '\0';
        message = ascii;

        c->d->requests++;
        c->d->errors++;
        reply_start(&o, seq, 1);
        proto_pack_error(&o.pk, err, message);
        (void)conn_send(c, &o, NULL);
        proto_out_free(&o);
}

int reply_counts(struct req *q, const char *k1, uint64_t v1, const char *k2, uint64_t v2)
{
        struct proto_out o;

        reply_start(&o, q->seq, 2);
        proto_pack_ku64(&o.pk, k1, v1);
        proto_pack_ku64(&o.pk, k2, v2);
        (void)reply_send(q->c, q->seq, &o, NULL);
        proto_out_free(&o);
        return 0;
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

int req_find(struct req *q, const struct target *t, bool live, const char *what,
             struct reg **ret)
{
        struct registry *R = q->c->d->reg;
        struct reg *r = t->by_id ? registry_find_id(R, t->id)
                                 : registry_find_name(R, t->name, t->name_len);

        if (!r || !access_may_see(q->c, r) || (live && !r->live))
                return t->by_id ? req_fail(q, -ENOENT, "no %s with id %" PRIu64, what, t->id)
                                : req_fail(q, -ENOENT, "no registration named %.*s",
                                           (int)t->name_len, t->name);
        *ret = r;
        return 0;
}

int req_target_find(struct req *q, bool live, const char *what, struct reg **ret)
{
        struct target t;
        int k = req_target(q, &t);

        return k < 0 ? k : req_find(q, &t, live, what, ret);
}
