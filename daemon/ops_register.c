/* ops_register.c: register and unregister, and buffer metadata. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "closer.h"
#include "cuda_reg.h"
#include "access.h"
#include "host.h"
#include "log.h"
#include "ops.h"
#include "quota.h"
#include "register_part.h"
#include "trace.h"
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
        const char *s;
        size_t len;
        int r, kind;

        r = register_name(q, p);
        if (r < 0)
                return r;
        r = proto_get_str(q->m, "kind", &s, &len);
        if (r < 0)
                return req_fail(q, -EINVAL, r == -ENOENT ? "kind is required" : "kind must be a str");
        kind = proto_kind_from_name(s, len);
        if (kind < 0 || kind >= PROTO_BUFFER_KINDS) {
                char quoted[REQ_QUOTE_SIZE(32)];
                return req_fail(q, -EINVAL, "unknown kind '%s'", req_quote(quoted, s, len, 32));
        }
        p->kind = (unsigned)kind;
        r = register_buffer_fields(q, q->m, p, ret_shared_write);
        if (r < 0)
                return r;
        r = register_ephemeral(q, p, ret_ephemeral_given);
        if (r < 0)
                return r;
        r = proto_get_map(q->m, "meta", ret_meta);
        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "meta must be a map");
        /* The TTL for now; op_register makes it a time. */
        return register_ttl(q, p);
}

/* What a registration of p's kind with the request's fds costs its uid. */
static struct reg_cost single_cost(const struct req *q, const struct reg_params *p)
{
        struct reg_cost c = {
                .fds = quota_fds_of_kind(p->kind, q->nfds),
                .store = quota_store_of_kind(p->kind, q->nfds),
        };

        /* What the fd really pins: a host memfd's size, not the request's. */
        if (proto_kind_held(p->kind))
                c.bytes = p->kind == PROTO_KIND_HOST && q->nfds == 1
                                  ? host_fd_bytes(q->fds[0], p->size) : p->size;
        return c;
}

int op_register(struct req *q)
{
        struct conn *c = q->c;
        struct daemon *d = c->d;
        struct reg_params p = { .fd = -1 };
        const msgpack_object *meta = NULL;
        bool ephemeral_given = false, shared_write = false;
        struct reg_cost cost;
        msgpack_sbuffer sb;
        struct proto_out o;
        struct proto_map m;
        struct reg *r;
        int k, ro_fd = -1;

        if (proto_obj_str_eq(proto_get(q->m, "kind"), "batch"))
                return op_register_batch(q);
        msgpack_sbuffer_init(&sb);
        k = register_params(q, &p, &meta, &ephemeral_given, &shared_write);
        TRACE("r.params", k);
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
        cost = single_cost(q, &p);
        k = register_check_limits(q, &cost);
        if (k < 0)
                goto out;
        if (p.kind == PROTO_KIND_HOST && q->nfds != 1) {
                k = req_fail(q, -EBADF, "a host registration carries exactly one fd (fds: 1)");
                goto out;
        }
        k = register_admit(q, p.name, p.name_len);
        TRACE("r.admitted", k);
        if (k < 0)
                goto out;
        /* Checks the fds; takes the allocation reference (and a cuda-vmm fd). */
        k = register_buffer_attach(q, q->m, q->fds, q->nfds, &p, shared_write, ephemeral_given);
        TRACE("r.attached", k);
        if (k < 0)
                goto out;
        if (p.kind == PROTO_KIND_HOST) {
                ro_fd = host_open_read_only(q->fds[0]);
                if (ro_fd < 0) {
                        k = req_fail(q, ro_fd == -EMFILE || ro_fd == -ENFILE ? -ENOBUFS : -EIO,
                                     "cannot open the memfd read-only: %s", strerror(-ro_fd));
                        goto out;
                }
                p.fd = q->fds[0];
        }
        p.meta = (const uint8_t *)sb.data;
        p.meta_len = sb.size;
        p.created_ms = now_unix_ms();
        if (p.expires_ms)
                p.expires_ms += p.created_ms;
        k = registry_add(d->reg, &c->party, &p, &r);
        TRACE("r.added", k);
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
        k = register_reply_fits(r, d->cfg.max_frame);
        TRACE("r.fits", k);
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
        TRACE("r.woken", r->id);
        reply_begin(&o, &m, q->seq);
        proto_map_ku64(&m, "id", r->id);
        proto_map_kstrn(&m, "name", r->name, r->name_len);
        if (r->cuda)    /* what `unmapped` events name */
                proto_map_ku64(&m, "alloc", r->cuda->alloc->id);
        proto_map_end(&m);
        (void)reply_send(c, q->seq, &o, NULL);
        proto_out_free(&o);
        TRACE("r.replied", r->id);
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
        closer_close(ro_fd);
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
                if (proto_get_present(q->m, "name") || proto_get_present(q->m, "id"))
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
