/* register_part.c: the checks every registration passes, a single one or
 * a batch, and the checks of one buffer, which a batch runs per part. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "access.h"
#include "batch.h"
#include "host.h"
#include "quota.h"
#include "size.h"
#include "record.h"
#include "register_part.h"
#include "restart_persist.h"

int register_name(struct req *q, struct reg_params *p)
{
        const char *why;
        int r;

        r = proto_get_str(q->m, "name", &p->name, &p->name_len);
        if (r < 0)
                return req_fail(q, -EINVAL, r == -ENOENT ? "name is required" : "name must be a str");
        if (proto_name_check(p->name, p->name_len, &why) < 0)
                return req_fail_name(q, "name", p->name, p->name_len, why);
        return 0;
}

int register_ephemeral(struct req *q, struct reg_params *p, bool *ret_given)
{
        int r = proto_get_bool(q->m, "ephemeral", &p->ephemeral);

        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "ephemeral must be a bool");
        *ret_given = r == 0;
        return 0;
}

int register_ttl(struct req *q, struct reg_params *p)
{
        int r = proto_get_u64(q->m, "ttl_ms", &p->expires_ms);

        if (r == -EINVAL || (r == 0 && (p->expires_ms == 0 || p->expires_ms > TTL_MAX_MS)))
                return req_fail(q, -EINVAL, "ttl_ms must be a uint from 1 to %llu",
                                (unsigned long long)TTL_MAX_MS);
        if (r == -ENOENT)
                p->expires_ms = 0;
        return 0;
}

int register_buffer_fields(struct req *q, const msgpack_object *m, struct reg_params *p,
                           bool *ret_shared_write)
{
        int r;

        r = proto_get_u64(m, "size", &p->size);
        if (r < 0 || p->size == 0)
                return req_fail(q, -EINVAL, "size must be a uint >= 1");
        r = proto_get_u64(m, "offset", &p->offset);
        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "offset must be a uint");
        if (r == -ENOENT)
                p->offset = 0;
        if (p->offset > UINT64_MAX - p->size)
                return req_fail(q, -EINVAL, "offset + size overflows");
        *ret_shared_write = false;
        r = proto_get_bool(m, "shared_write", ret_shared_write);
        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "shared_write must be a bool");
        return 0;
}

int register_buffer_attach(struct req *q, const msgpack_object *m, int *fds, unsigned nfds,
                           struct reg_params *p, bool shared_write, bool ephemeral_given)
{
        const char *why;
        int k;

        if (p->kind == PROTO_KIND_HOST) {
                /* Unsealed against writes only when the producer says it
                 * means to share the buffer writable. */
                k = host_check_fd(fds[0], p->offset, p->size,
                                  shared_write ? HOST_SHARED_WRITE : 0, &why);
                return k < 0 ? req_fail(q, k, "%s", why) : 0;
        }
        /* Every chunk's fd; cuda-pool fds are not checked: what the real
         * driver exports for a pool has not been measured. */
        for (unsigned i = 0; p->kind == PROTO_KIND_CUDA_VMM && i < nfds; i++) {
                k = host_check_vmm_fd(fds[i], &why);
                if (k < 0)
                        return req_fail(q, k, "fd %u: %s", i, why);
        }
        /* Takes the allocation reference (and a cuda-vmm fd). */
        return register_cuda_params(q, m, fds, nfds, p, ephemeral_given);
}

/* Whether a uid holding `held` of a pool of which `used` are taken may take
 * `cost` more: the pool must have them, and what the uid holds afterwards
 * may not pass what is left free for everyone else, so that no uid can
 * take the last of a shared pool (it can take at most half of it). */
static bool pool_share_ok(uint64_t held, uint64_t used, uint64_t pool, uint64_t cost)
{
        if (used > pool || cost > pool - used)
                return false;
        return held + cost <= pool - used - cost;
}

/* The daemon's fds that registrations may use: RLIMIT_NOFILE less a
 * reserve for connections (max-connections + 64, at most half the limit),
 * so that a flood of registrations never keeps clients from connecting. */
static uint64_t reg_fd_pool(const struct config *cfg, uint64_t *ret_limit, uint64_t *ret_reserve)
{
        struct rlimit rl;
        uint64_t lim, reserve;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
                rl.rlim_cur = 1u << 20;
        lim = (uint64_t)rl.rlim_cur;
        reserve = (uint64_t)cfg->max_connections + 64;
        if (reserve > lim / 2)
                reserve = lim / 2;
        *ret_limit = lim;
        *ret_reserve = reserve;
        return lim - reserve;
}

/* The per-uid limits: registrations (durable ones of ended connections
 * included, so orphans cannot fill the daemon's fd table), bytes held, the
 * fds the daemon holds for the uid and its fd store entries. */
int register_check_limits(struct req *q, const struct reg_cost *cost)
{
        struct daemon *d = q->c->d;
        const struct config *cfg = &d->cfg;
        uint32_t uid = q->c->party.uid;
        struct uid_use u = quota_of(d, uid);
        uint64_t bytes = cost->bytes, fds = cost->fds, st = cost->store;
        uint64_t lim, reserve, pool, used;
        char held[32], more[32], max[32];

        if (u.regs >= cfg->max_registrations_per_uid)
                return req_fail(q, -ENOBUFS, "uid %u has %" PRIu64 " registrations "
                                "(--max-registrations-per-uid %u)", uid, u.regs,
                                cfg->max_registrations_per_uid);
        if (cfg->max_bytes_per_uid > 0 && bytes > 0 &&
            (bytes > cfg->max_bytes_per_uid || u.bytes > cfg->max_bytes_per_uid - bytes))
                return req_fail(q, -ENOBUFS, "uid %u holds %" PRIu64 " bytes (%s); %s more "
                                "would pass --max-bytes-per-uid %s", uid, u.bytes,
                                proto_size_text(u.bytes, held, sizeof(held)),
                                proto_size_text(bytes, more, sizeof(more)),
                                proto_size_text(cfg->max_bytes_per_uid, max, sizeof(max)));
        if (fds > 0) {
                if (u.fds + fds > cfg->max_fds_per_uid)
                        return req_fail(q, -ENOBUFS, "fd budget: uid %u has %" PRIu64 " fds "
                                        "held by the daemon; %" PRIu64 " more would pass "
                                        "--max-fds-per-uid %u", uid, u.fds, fds,
                                        cfg->max_fds_per_uid);
                pool = reg_fd_pool(cfg, &lim, &reserve);
                if (!pool_share_ok(u.fds, d->reg_fds, pool, fds))
                        return req_fail(q, -ENOBUFS, "fd budget: the daemon holds %" PRIu64
                                        " fds for registrations, %" PRIu64 " of them uid "
                                        "%u's, of %" PRIu64 " it may (RLIMIT_NOFILE %" PRIu64
                                        " less %" PRIu64 " kept for connections); one uid "
                                        "may not hold more than is left for the others",
                                        d->reg_fds, u.fds, uid, pool, lim, reserve);
        }
        if (st > 0 && persist_enabled()) {
                if (u.stored + st > cfg->max_fdstore_per_uid)
                        return req_fail(q, -ENOBUFS, "fd store budget: uid %u has %" PRIu64
                                        " entries in the fd store (--max-fdstore-per-uid %u)",
                                        uid, u.stored, cfg->max_fdstore_per_uid);
                if (persist_store_room(&used, &pool) &&
                    !pool_share_ok(u.stored, used, pool, st))
                        return req_fail(q, -ENOBUFS, "fd store budget: the fd store holds "
                                        "%" PRIu64 " entries, %" PRIu64 " of them uid %u's, "
                                        "of %" PRIu64 " registrations may take ($FDSTORE less "
                                        "%u kept); one uid may not hold more than is left "
                                        "for the others", used, u.stored, uid, pool,
                                        PERSIST_STORE_RESERVE);
        }
        return 0;
}

int register_admit(struct req *q, const char *name, size_t len)
{
        struct conn *c = q->c;
        struct reg *existing;

        if (c->party.n_live >= c->d->cfg.max_registrations)
                return req_fail(q, -ENOBUFS, "this connection has %u registrations "
                                "(--max-registrations)", c->party.n_live);
        existing = registry_find_name(c->d->reg, name, len);
        if (!existing)
                return 0;
        /* The name is taken whoever may see it; its id is not told. */
        return access_may_see(c, existing)
                ? req_fail(q, -EEXIST, "%.*s is already registered (id %" PRIu64 ")",
                           (int)len, name, existing->id)
                : req_fail(q, -EEXIST, "%.*s is already registered", (int)len, name);
}

/* Slack for the lookup reply fields that grow after register: seq and the
 * lease id (packed here at their widest already), the lease and alloc
 * counts, and state "unregistered" instead of "live". */
#define LOOKUP_REPLY_SLACK 32u
/* The growth of one allocation map's regs count: fixint to uint32. */
#define ALLOC_REGS_SLACK 4u

int register_reply_fits(const struct reg *r, uint32_t max_frame)
{
        uint8_t held[(PROTO_BATCH_PARTS_MAX + 7) / 8];
        size_t slack = LOOKUP_REPLY_SLACK;
        struct proto_out o;
        bool fits;

        /* A batch's: every part held, every allocation's count at its widest. */
        memset(held, 0xff, sizeof(held));
        for (uint32_t i = 0; r->batch && i < r->batch->n_parts; i++) {
                const struct reg_cuda *rc = r->batch->parts[i].cuda;
                if (rc)
                        slack += ALLOC_REGS_SLACK * (rc->n_chunks + 1);
        }
        reply_start(&o, UINT64_MAX, 3);
        proto_pack_ku64(&o.pk, "lease", UINT64_MAX);
        proto_pack_str(&o.pk, "reg");
        pack_record_as(&o.pk, r, RECORD_LOOKUP, 0, &(struct record_lookup){ .held = held });
        proto_pack_ku64(&o.pk, "fds", PROTO_MAX_FDS);
        if (!o.sb.data) {
                proto_out_free(&o);
                return -ENOMEM;
        }
        fits = o.sb.size - PROTO_HDR_LEN + slack <= max_frame;
        proto_out_free(&o);
        return fits;
}
