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

int op_revoke(struct req *q)
{
        struct registry *R = q->c->d->reg;
        struct target t;
        struct reg *r;
        char reason[160];
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
        /* An administrator may see every registration. */
        k = req_find(q, &t, false, "registration", &r);
        if (k < 0)
                return k;
        id = r->id;
        n = r->leases;
        live = r->live;
        log_info("connection %" PRIu64 " (pid %" PRIu32 ", uid %" PRIu32 ") revokes registration %"
                 PRIu64 " (%s) and its %" PRIu32 " leases", q->c->id, q->c->party.pid,
                 q->c->party.uid, id, r->name, n);
        watch_emit_revoked(r, &q->c->party);
        /* Leases first: while r is live they cannot free it.  An unregistered
         * r goes with its last lease, so r is not touched after that. */
        snprintf(reason, sizeof(reason), "revoked by an administrator (pid %" PRIu32 ", uid %"
                 PRIu32 "); the lease is gone, stop using the view", q->c->party.pid,
                 q->c->party.uid);
        for (uint32_t i = 0; i < n; i++) {
                struct lease *l = r->held;
                bool last = i + 1 == n;
                conn_send_revoked(r, l, reason, true);
                (void)registry_release(R, l->holder, l->id);
                if (last && !live)
                        r = NULL;
        }
        if (live)
                (void)registry_unregister(R, r);        /* may free r */
        return reply_counts(q, "id", id, "leases", n);
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
