/* ops_admin.c: watch, revoke and metrics: the operator's ops. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "access.h"
#include "log.h"
#include "metrics.h"
#include "ops.h"
#include "watch.h"

int op_watch(struct req *q)
{
        const char *prefix = "", *why;
        size_t plen = 0;
        bool stop = false, on;
        struct proto_out o;
        int k;

        k = proto_get_str(q->m, "prefix", &prefix, &plen);
        if (k == -EINVAL)
                return req_fail(q, -EINVAL, "prefix must be a str");
        if (proto_get_bool(q->m, "stop", &stop) == -EINVAL)
                return req_fail(q, -EINVAL, "stop must be a bool");
        while (plen > 0 && prefix[plen - 1] == '/')
                plen--;
        if (plen > 0 && proto_name_check(prefix, plen, &why) < 0)
                return req_fail_name(q, "prefix", prefix, plen, why);
        if (stop) {
                (void)watch_remove(q->c);
                on = false;
        } else {
                k = watch_add(q->c, prefix, plen);
                if (k == -ENOBUFS)
                        return req_fail(q, k, "%u connections already watch", WATCH_MAX);
                if (k == -EDQUOT)
                        return req_fail(q, -ENOBUFS, "uid %u has %u watching connections "
                                        "(max-watches-per-uid)", q->c->party.uid,
                                        q->c->d->cfg.max_watches_per_uid);
                if (k < 0)
                        return req_fail(q, k, "out of memory");
                on = true;
        }
        reply_start(&o, q->seq, 1);
        proto_pack_kbool(&o.pk, "watching", on);
        (void)reply_send(q->c, q->seq, &o, NULL);
        proto_out_free(&o);
        return 0;
}

/* Tells the holder of l that an operator took its lease away. */
static void send_revoked(struct reg *r, struct lease *l, const struct conn *by)
{
        struct conn *h;
        char reason[160];
        struct proto_out o;
        struct proto_map m;

        if (l->holder->detached)
                return;
        h = conn_from_party(l->holder);
        if (h->closed)
                return;
        snprintf(reason, sizeof(reason), "revoked by an administrator (pid %" PRIu32 ", uid %"
                 PRIu32 "); the lease is gone, stop using the view", by->party.pid,
                 by->party.uid);
        conn_pack_reg_event(&o, &m, "revoked", r->id, r->name, r->name_len);
        proto_map_ku64(&m, "lease", l->id);
        proto_map_kstr(&m, "reason", reason);
        proto_map_end(&m);
        (void)conn_send(h, &o, NULL);
        proto_out_free(&o);
}

int op_revoke(struct req *q)
{
        struct registry *R = q->c->d->reg;
        struct proto_out o;
        struct target t;
        struct reg *r;
        uint64_t id;
        uint32_t n;
        bool live;
        int k;

        k = req_target(q, &t);
        if (k < 0)
                return k;
        if (!access_is_admin(q->c))
                return req_fail(q, -EPERM, "revoke needs root or membership in the "
                                "admin-group");
        r = t.by_id ? registry_find_id(R, t.id) : registry_find_name(R, t.name, t.name_len);
        if (!r)
                return t.by_id ? req_fail(q, -ENOENT, "no registration with id %" PRIu64, t.id)
                               : req_fail(q, -ENOENT, "no registration named %.*s",
                                          (int)t.name_len, t.name);
        id = r->id;
        n = r->leases;
        live = r->live;
        log_info("connection %" PRIu64 " (pid %" PRIu32 ", uid %" PRIu32 ") revokes registration %"
                 PRIu64 " (%s) and its %" PRIu32 " leases", q->c->id, q->c->party.pid,
                 q->c->party.uid, id, r->name, n);
        watch_emit_revoked(r, &q->c->party);
        /* Leases first: while r is live they cannot free it.  An unregistered
         * r goes with its last lease, so r is not touched after that. */
        for (uint32_t i = 0; i < n; i++) {
                struct lease *l = r->held;
                bool last = i + 1 == n;
                send_revoked(r, l, q->c);
                (void)registry_release(R, l->holder, l->id);
                if (last && !live)
                        r = NULL;
        }
        if (live)
                (void)registry_unregister(R, r);        /* may free r */
        reply_start(&o, q->seq, 2);
        proto_pack_ku64(&o.pk, "id", id);
        proto_pack_ku64(&o.pk, "leases", n);
        (void)reply_send(q->c, q->seq, &o, NULL);
        proto_out_free(&o);
        return 0;
}

int op_metrics(struct req *q)
{
        struct proto_out o;
        size_t len;
        char *text;
        int k;

        k = metrics_render(q->c->d, &text, &len);
        if (k < 0)
                return req_fail(q, k, "out of memory rendering metrics");
        reply_start(&o, q->seq, 1);
        proto_pack_str(&o.pk, "text");
        proto_pack_strn(&o.pk, text, len);
        free(text);
        (void)reply_send(q->c, q->seq, &o, NULL);
        proto_out_free(&o);
        return 0;
}
