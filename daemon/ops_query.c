/* ops_query.c: list, stat and stats. */
#include <errno.h>
#include <inttypes.h>
#include <unistd.h>

#include "access.h"
#include "cuda_ctx.h"
#include "ops.h"
#include "record.h"

#define LIST_MAX 1000u
/* Reply bytes besides the records: map header, seq, "regs" with an array
 * header, and "next", each at its widest. */
#define LIST_OVERHEAD 64u

int op_list(struct req *q)
{
        struct conn *c = q->c;
        const char *prefix = "", *why;
        size_t plen = 0, budget = c->d->cfg.max_frame - LIST_OVERHEAD;
        uint64_t after = 0, limit = LIST_MAX;
        const struct reg *r, *last = NULL;
        uint32_t count = 0;
        bool more = false, all = false, holders = false;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        struct proto_out o;
        struct proto_map m;
        int k;

        k = proto_get_str(q->m, "prefix", &prefix, &plen);
        if (k == -EINVAL)
                return req_fail(q, -EINVAL, "prefix must be a str");
        while (plen > 0 && prefix[plen - 1] == '/')
                plen--;
        if (plen > 0 && proto_name_check(prefix, plen, &why) < 0)
                return req_fail_name(q, "prefix", prefix, plen, why);
        k = proto_get_u64(q->m, "after", &after);
        if (k == -EINVAL)
                return req_fail(q, -EINVAL, "after must be a uint");
        k = proto_get_u64(q->m, "limit", &limit);
        if (k == -EINVAL || limit < 1 || limit > LIST_MAX)
                return req_fail(q, -EINVAL, "limit must be a uint from 1 to %u", LIST_MAX);
        if (proto_get_bool(q->m, "all", &all) == -EINVAL)
                return req_fail(q, -EINVAL, "all must be a bool");
        if (proto_get_bool(q->m, "holders", &holders) == -EINVAL)
                return req_fail(q, -EINVAL, "holders must be a bool");

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        for (r = registry_iter_ex(c->d->reg, NULL, after, prefix, plen, all); r;
             r = registry_iter_ex(c->d->reg, r, 0, prefix, plen, all)) {
                size_t before = sb.size;
                if (!access_may_see(c, r))
                        continue;
                if (count == limit) {
                        more = true;
                        break;
                }
                pack_record_as(&pk, r, RECORD_LIST, holders ? HOLDERS_MAX : 0, NULL);
                if (sb.size > budget && holders && before == 0) {
                        /* Alone too large with its holders: without them. */
                        sb.size = before;
                        pack_record_as(&pk, r, RECORD_LIST, 0, NULL);
                }
                if (sb.size > budget) {
                        sb.size = before;       /* drop the record that did not fit */
                        if (before > 0) {
                                more = true;
                                break;
                        }
                        /* register refuses records this large, so this is
                         * only a guard: one that fits no reply must not
                         * stop paging forever.  Skip it; next moves on. */
                        last = r;
                        continue;
                }
                count++;
                last = r;
        }
        /* Only skipped records: next still moves the cursor past them. */
        more = more || (count == 0 && last);
        if (count > 0 && !sb.data) {
                msgpack_sbuffer_destroy(&sb);
                return req_fail(q, -ENOMEM, "out of memory listing registrations");
        }

        reply_begin(&o, &m, q->seq);
        proto_map_key(&m, "regs");
        msgpack_pack_array(&o.pk, count);
        if (count > 0)
                msgpack_sbuffer_write(&o.sb, sb.data, sb.size);
        if (more)
                proto_map_ku64(&m, "next", last->id);
        proto_map_end(&m);
        msgpack_sbuffer_destroy(&sb);
        (void)reply_send(c, q->seq, &o, NULL);
        proto_out_free(&o);
        return 0;
}

int op_stat(struct req *q)
{
        struct proto_out o;
        struct reg *r;
        int k;

        k = req_target_find(q, false, "registration", &r);
        if (k < 0)
                return k;
        reply_start(&o, q->seq, 1);
        proto_pack_str(&o.pk, "reg");
        pack_record_as(&o.pk, r, RECORD_STAT, HOLDERS_MAX, NULL);
        if (o.sb.size - PROTO_HDR_LEN > q->c->d->cfg.max_frame) {
                /* The holders made it too large: the record alone fits. */
                proto_out_free(&o);
                reply_start(&o, q->seq, 1);
                proto_pack_str(&o.pk, "reg");
                pack_record_as(&o.pk, r, RECORD_STAT, 0, NULL);
        }
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
