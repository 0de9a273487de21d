/* ops_register.c: register and unregister, and buffer metadata. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cuda_reg.h"
#include "access.h"
#include "host.h"
#include "log.h"
#include "ops.h"
#include "record.h"
#include "restart_persist.h"
#include "quota.h"
#include "waits.h"

/* Validates a request's meta map and packs its known keys into sb.  Returns
 * 0 (sb empty when meta has none of them), or -EINVAL with req_fail(). */
static int meta_pack(struct req *q, const msgpack_object *meta, msgpack_sbuffer *sb)
{
        struct proto_meta m;
        msgpack_packer pk;

        if (proto_meta_check(meta, &m, q->msg, sizeof(q->msg)) < 0)
                return -EINVAL;
        if (proto_meta_empty(&m))
                return 0;
        msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
        proto_meta_pack(&pk, &m);
        if (!sb->data)
                return req_fail(q, -ENOMEM, "out of memory packing meta");
        return 0;
}

/* Field checks of register, in the order the protocol lists them. */
static int register_params(struct req *q, struct reg_params *p, const msgpack_object **ret_meta,
                           bool *ret_ephemeral_given, bool *ret_shared_write)
{
        const char *s, *why;
        size_t len;
        int r, kind;

        r = proto_get_str(q->m, "name", &p->name, &p->name_len);
        if (r < 0)
                return req_fail(q, -EINVAL, r == -ENOENT ? "name is required" : "name must be a str");
        if (proto_name_check(p->name, p->name_len, &why) < 0)
                return req_fail_name(q, "name", p->name, p->name_len, why);
        r = proto_get_str(q->m, "kind", &s, &len);
        if (r < 0)
                return req_fail(q, -EINVAL, r == -ENOENT ? "kind is required" : "kind must be a str");
        kind = proto_kind_from_name(s, len);
        if (kind < 0)
                return req_fail(q, -EINVAL, "unknown kind '%.*s'", (int)(len > 32 ? 32 : len), s);
        p->kind = (unsigned)kind;
        r = proto_get_u64(q->m, "size", &p->size);
        if (r < 0 || p->size == 0)
                return req_fail(q, -EINVAL, "size must be a uint >= 1");
        r = proto_get_u64(q->m, "offset", &p->offset);
        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "offset must be a uint");
        if (p->offset > UINT64_MAX - p->size)
                return req_fail(q, -EINVAL, "offset + size overflows");
        r = proto_get_bool(q->m, "ephemeral", &p->ephemeral);
        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "ephemeral must be a bool");
        *ret_ephemeral_given = r == 0;
        r = proto_get_bool(q->m, "shared_write", ret_shared_write);
        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "shared_write must be a bool");
        r = proto_get_map(q->m, "meta", ret_meta);
        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "meta must be a map");
        /* The TTL for now; op_register makes it a time. */
        r = proto_get_u64(q->m, "ttl_ms", &p->expires_ms);
        if (r == -EINVAL || (r == 0 && (p->expires_ms == 0 || p->expires_ms > TTL_MAX_MS)))
                return req_fail(q, -EINVAL, "ttl_ms must be a uint from 1 to %llu",
                                (unsigned long long)TTL_MAX_MS);
        return 0;
}

/* Slack for the lookup reply fields that grow after register: seq and the
 * lease id (packed here at their widest already), the lease and alloc
 * counts, and state "unregistered" instead of "live". */
#define LOOKUP_REPLY_SLACK 32u

/* Whether a lookup reply for r fits max_frame; a registration whose reply
 * does not could never be looked up, nor listed. */
static int lookup_reply_fits(const struct reg *r, uint32_t max_frame)
{
        struct proto_out o;
        bool fits;

        reply_start(&o, UINT64_MAX, 3);
        proto_pack_ku64(&o.pk, "lease", UINT64_MAX);
        proto_pack_str(&o.pk, "reg");
        pack_record_ex(&o.pk, r, true);
        proto_pack_ku64(&o.pk, "fds", 1);
        if (!o.sb.data) {
                proto_out_free(&o);
                return -ENOMEM;
        }
        fits = o.sb.size - PROTO_HDR_LEN + LOOKUP_REPLY_SLACK <= max_frame;
        proto_out_free(&o);
        return fits;
}

/* "1.5 GiB", "512 B": a byte count for people. */
static const char *size_text(uint64_t n, char *buf, size_t len)
{
        static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
        double v = (double)n;
        size_t u = 0;

        if (n < 1024) {
                snprintf(buf, len, "%" PRIu64 " B", n);
                return buf;
        }
        v /= 1024;
        while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
                v /= 1024;
                u++;
        }
        snprintf(buf, len, "%.1f %s", v, units[u]);
        return buf;
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
static int check_uid_limits(struct req *q, const struct reg_params *p)
{
        struct daemon *d = q->c->d;
        const struct config *cfg = &d->cfg;
        uint32_t uid = q->c->party.uid;
        struct uid_use u = quota_of(d, uid);
        uint64_t fds = quota_fds_of_kind(p->kind, q->nfds), lim, reserve, pool, used;
        uint64_t st = quota_store_of_kind(p->kind, q->nfds);
        /* What the fd really pins: a host memfd's size, not the request's. */
        uint64_t bytes = p->kind == PROTO_KIND_HOST && q->nfds == 1
                                 ? host_fd_bytes(q->fds[0], p->size) : p->size;
        char held[32], more[32], max[32];

        if (u.regs >= cfg->max_registrations_per_uid)
                return req_fail(q, -ENOBUFS, "uid %u has %" PRIu64 " registrations "
                                "(--max-registrations-per-uid %u)", uid, u.regs,
                                cfg->max_registrations_per_uid);
        if (cfg->max_bytes_per_uid > 0 && proto_kind_held(p->kind) &&
            (bytes > cfg->max_bytes_per_uid || u.bytes > cfg->max_bytes_per_uid - bytes))
                return req_fail(q, -ENOBUFS, "uid %u holds %" PRIu64 " bytes (%s); %s more "
                                "would pass --max-bytes-per-uid %s", uid, u.bytes,
                                size_text(u.bytes, held, sizeof(held)),
                                size_text(bytes, more, sizeof(more)),
                                size_text(cfg->max_bytes_per_uid, max, sizeof(max)));
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

int op_register(struct req *q)
{
        struct conn *c = q->c;
        struct daemon *d = c->d;
        struct reg_params p = { .fd = -1 };
        const msgpack_object *meta = NULL;
        bool ephemeral_given = false, shared_write = false;
        msgpack_sbuffer sb;
        struct proto_out o;
        struct proto_map m;
        struct reg *existing, *r;
        const char *why;
        int k, ro_fd = -1;

        msgpack_sbuffer_init(&sb);
        k = register_params(q, &p, &meta, &ephemeral_given, &shared_write);
        if (k < 0)
                goto out;
        if (meta) {
                k = meta_pack(q, meta, &sb);
                if (k < 0)
                        goto out;
        }
        k = access_parse(q->m, &p.access, q->msg, sizeof(q->msg));
        if (k < 0)
                goto out;
        k = check_uid_limits(q, &p);
        if (k < 0)
                goto out;
        if (p.kind == PROTO_KIND_HOST && q->nfds != 1) {
                k = req_fail(q, -EBADF, "a host registration carries exactly one fd (fds: 1)");
                goto out;
        }
        if (c->party.n_live >= d->cfg.max_registrations) {
                k = req_fail(q, -ENOBUFS, "this connection has %u registrations "
                             "(--max-registrations)", c->party.n_live);
                goto out;
        }
        existing = registry_find_name(d->reg, p.name, p.name_len);
        if (existing) {
                /* The name is taken whoever may see it; its id is not told. */
                k = access_may_see(c, existing)
                        ? req_fail(q, -EEXIST, "%.*s is already registered (id %" PRIu64 ")",
                                   (int)p.name_len, p.name, existing->id)
                        : req_fail(q, -EEXIST, "%.*s is already registered",
                                   (int)p.name_len, p.name);
                goto out;
        }
        if (p.kind == PROTO_KIND_HOST) {
                /* Unsealed against writes only when the producer says it
                 * means to share the buffer writable. */
                k = host_check_fd(q->fds[0], p.offset, p.size,
                                  shared_write ? HOST_SHARED_WRITE : 0, &why);
                if (k < 0) {
                        k = req_fail(q, k, "%s", why);
                        goto out;
                }
                ro_fd = host_open_read_only(q->fds[0]);
                if (ro_fd < 0) {
                        k = req_fail(q, ro_fd == -EMFILE || ro_fd == -ENFILE ? -ENOBUFS : -EIO,
                                     "cannot open the memfd read-only: %s", strerror(-ro_fd));
                        goto out;
                }
                p.fd = q->fds[0];
        } else {
                /* Every chunk's fd; cuda-pool fds are not checked: what the
                 * real driver exports for a pool has not been measured. */
                for (unsigned i = 0; p.kind == PROTO_KIND_CUDA_VMM && i < q->nfds; i++) {
                        k = host_check_vmm_fd(q->fds[i], &why);
                        if (k < 0) {
                                k = req_fail(q, k, "fd %u: %s", i, why);
                                goto out;
                        }
                }
                /* Takes the allocation reference (and a cuda-vmm fd). */
                k = register_cuda_params(q, &p, ephemeral_given);
                if (k < 0)
                        goto out;
        }
        p.meta = (const uint8_t *)sb.data;
        p.meta_len = sb.size;
        p.created_ms = now_unix_ms();
        if (p.expires_ms)
                p.expires_ms += p.created_ms;
        k = registry_add(d->reg, &c->party, &p, &r);
        if (k == 0)
                p.access = NULL;        /* r's now */
        if (k < 0) {
                reg_cuda_free(&d->allocs, p.cuda);
                k = req_fail(q, k, "cannot add the registration: %s", strerror(-k));
                goto out;
        }
        if (p.kind == PROTO_KIND_HOST) {
                q->fds[0] = -1;         /* the registration owns them now */
                r->ro_fd = ro_fd;
                ro_fd = -1;
        }
        k = lookup_reply_fits(r, d->cfg.max_frame);
        if (k <= 0) {
                registry_unregister(d->reg, r);         /* frees r, closing its fds */
                k = k < 0 ? req_fail(q, k, "out of memory")
                          : req_fail(q, -EMSGSIZE, "the record of %.*s (name, meta) would not "
                                     "fit a lookup reply within max_frame (%u)",
                                     (int)p.name_len, p.name, d->cfg.max_frame);
                goto out;
        }

        /* The waiting lookups first: the consumer's answer is what a handoff
         * waits for; the producer only learns its id.  Nothing the consumers
         * do next (a release) is read before this handler returns, so the
         * producer's reply still comes before any event about r. */
        waits_wake(d, r);
        reply_begin(&o, &m, q->seq);
        proto_map_ku64(&m, "id", r->id);
        proto_map_kstrn(&m, "name", r->name, r->name_len);
        if (r->cuda)    /* what `unmapped` events name */
                proto_map_ku64(&m, "alloc", r->cuda->alloc->id);
        proto_map_end(&m);
        (void)reply_send(c, q->seq, &o, NULL);
        proto_out_free(&o);
        log_debug("registered %s (id %" PRIu64 ", %" PRIu64 " bytes) for pid %u", r->name,
                  r->id, r->size, c->party.pid);
        if (r->cuda && r->cuda->copied) {
                d->copies++;
                d->copied_bytes += r->size;
                log_info("%s (%" PRIu64 " bytes) was registered as a copy: %s", r->name, r->size,
                         r->cuda->copied);
        }
        k = 0;
out:
        free(p.access);
        if (ro_fd >= 0)
                close(ro_fd);
        msgpack_sbuffer_destroy(&sb);
        return k;
}

static bool may_unregister(const struct conn *c, const struct reg *r)
{
        return r->owner == &c->party || c->party.uid == r->uid || c->party.uid == 0;
}

/* unregister with prefix: every live registration in the namespace prefix
 * that the peer may see and unregister; counts those it may not. */
static int unregister_prefix(struct req *q, const char *prefix, size_t plen)
{
        struct conn *c = q->c;
        struct registry *R = c->d->reg;
        uint64_t removed = 0, skipped = 0;
        const char *why;
        struct reg *r, *next;

        while (plen > 0 && prefix[plen - 1] == '/')
                plen--;
        if (plen == 0)
                return req_fail(q, -EINVAL, "prefix must name a namespace");
        if (proto_name_check(prefix, plen, &why) < 0)
                return req_fail_name(q, "prefix", prefix, plen, why);
        for (r = registry_iter(R, NULL, 0, prefix, plen); r; r = next) {
                /* Unregistering frees at most r itself. */
                next = registry_iter(R, r, 0, prefix, plen);
                if (!access_may_see(c, r))
                        continue;
                if (!may_unregister(c, r)) {
                        skipped++;
                        continue;
                }
                registry_unregister(R, r);
                removed++;
        }
        return reply_counts(q, "removed", removed, "skipped", skipped);
}

int op_unregister(struct req *q)
{
        struct conn *c = q->c;
        struct registry *R = c->d->reg;
        struct reg *r;
        uint64_t id, leases;
        const char *prefix;
        size_t plen;
        int k;

        k = proto_get_str(q->m, "prefix", &prefix, &plen);
        if (k == -EINVAL)
                return req_fail(q, -EINVAL, "prefix must be a str");
        if (k == 0) {
                if (proto_get(q->m, "name") || proto_get(q->m, "id"))
                        return req_fail(q, -EINVAL, "prefix excludes name and id");
                return unregister_prefix(q, prefix, plen);
        }
        k = req_target_find(q, true, "registration", &r);
        if (k < 0)
                return k;
        if (!may_unregister(c, r))
                return req_fail(q, -EPERM, "%s belongs to uid %u; only its connection, that "
                                "uid or root may unregister it", r->name, r->uid);
        id = r->id;
        leases = r->leases;
        registry_unregister(R, r);      /* may free r */
        return reply_counts(q, "id", id, "leases", leases);
}
