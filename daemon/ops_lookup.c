/* ops_lookup.c: lookup and release. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "access.h"
#include "batch.h"
#include "cuda_reg.h"
#include "holds.h"
#include "ops.h"
#include "record.h"
#include "quota.h"
#include "waits.h"

/* A host lookup gets the read-only fd: a read-write one would let any
 * consumer punch holes in, truncate (up to the seals) or seal the producer's
 * memfd.  The read-write fd goes only to the owner's uid and root, who could
 * write the producer's memory anyway.  (CUDA kinds have one fd; writable
 * does not apply to them.) */
static bool may_write(const struct conn *c, const struct reg *r)
{
        return c->party.uid == r->uid || c->party.uid == 0;
}

/* True when the lookup may leave the fd out: the peer named, as `have`, a
 * lease that this connection holds on r, so it was given r's fd (or, by
 * the same rule, the fd of an earlier lease on r) and says it kept what it
 * made of it.  Checking the lease, not just r's id, ties the promise to
 * this connection: ids mean nothing to another daemon or connection. */
static bool peer_has(struct conn *c, const struct reg *r, uint64_t have)
{
        const struct lease *l;

        if (have == 0)
                return false;
        l = registry_find_lease(c->d->reg, have);
        return l && l->holder == &c->party && l->reg == r;
}

/* Whether the owner of r is in another PID namespace than c while r, or
 * a part of it, is legacy CUDA IPC memory, which the driver would refuse
 * to open there (CUDA_ERROR_INVALID_CONTEXT, as in the exporting process). */
static bool ipc_across_pidns(const struct conn *c, const struct reg *r)
{
        bool ipc = r->kind == PROTO_KIND_CUDA_IPC;

        for (uint32_t i = 0; !ipc && r->batch && i < r->batch->n_parts; i++)
                ipc = r->batch->parts[i].kind == PROTO_KIND_CUDA_IPC;
        return ipc && c->party.pidns && r->owner && r->owner->pidns &&
               c->party.pidns != r->owner->pidns;
}

/* The parts of batch r whose allocation c now holds, into the bitmap held
 * (as for a single registration, not holding is not an error). */
static void hold_parts(struct conn *c, struct reg *r, uint8_t *held)
{
        const struct reg_batch *b = r->batch;

        for (uint32_t i = 0; i < b->n_parts; i++)
                if (b->parts[i].cuda &&
                    holds_take_part(c, b->parts[i].kind, b->parts[i].cuda) > 0)
                        held[i / 8] |= (uint8_t)(1u << (i % 8));
}

/* Answers a lookup of r for c: a lease, the record and an fd (for host, the
 * read-only one unless writable, which needs the owner's uid or root; for
 * a batch, every part's fds, each once).  Returns 0 when the reply is queued
 * (or was turned into an error reply by reply_send_fds), else a negative
 * errno with the reason in msg, for the caller to send. */
static int lookup_answer(struct conn *c, uint64_t seq, struct reg *r, bool writable,
                         uint64_t have, bool cache, char *msg, size_t msg_len)
{
        struct registry *R = c->d->reg;
        uint8_t held_parts[(PROTO_BATCH_PARTS_MAX + 7) / 8] = { 0 };
        struct proto_out o;
        struct proto_map m;
        /* Batches carry every fd, always: `have` does not apply to them. */
        bool has_fd = r->kind != PROTO_KIND_CUDA_IPC && (r->batch || !peer_has(c, r, have));
        int fds[PROTO_MAX_FDS];
        unsigned nfds = 1;
        bool held = false;
        struct lease *l;
        uint64_t n;
        int k;

        if (writable && r->kind == PROTO_KIND_HOST && !may_write(c, r)) {
                snprintf(msg, msg_len, "%s belongs to uid %u; only that uid or root may "
                         "map it writable", r->name, r->uid);
                return -EPERM;
        }
        if (c->party.n_leases >= c->d->cfg.max_leases) {
                snprintf(msg, msg_len, "this connection holds %u leases (--max-leases)",
                         c->party.n_leases);
                return -ENOBUFS;
        }
        n = quota_of(c->d, c->party.uid).leases;
        if (n >= c->d->cfg.max_leases_per_uid) {
                snprintf(msg, msg_len, "uid %u holds %" PRIu64 " leases "
                         "(--max-leases-per-uid %u)", c->party.uid, n,
                         c->d->cfg.max_leases_per_uid);
                return -ENOBUFS;
        }
        if (ipc_across_pidns(c, r)) {
                /* The driver refuses it: say why before the consumer asks. */
                snprintf(msg, msg_len, "%s %s legacy CUDA IPC (cuda-ipc) memory of a "
                         "process in another PID namespace, and legacy CUDA IPC works only "
                         "within one PID namespace: have the producer share cuda-vmm memory "
                         "(gpuipc_cudabuf_new, or an allocator exporting POSIX fds), adopt "
                         "it (gpuipcctl adopt / gpuipc_name_adopt), or register it with "
                         "GPUIPC_REGISTER_COPY", r->name, r->batch ? "holds" : "is");
                return -ENOTSUP;
        }
        k = registry_lease(R, r, &c->party, &l);
        if (k < 0) {
                snprintf(msg, msg_len, "cannot take a lease: out of memory");
                return k;
        }
        if (r->batch) {
                k = batch_fds(r->batch, fds);
                nfds = k < 0 ? 0 : (unsigned)k;
                has_fd = nfds > 0;
        } else if (r->cuda) {
                nfds = reg_cuda_fds(r->cuda, fds);
        } else {
                fds[0] = writable ? r->fd : r->ro_fd;
        }
        /* Held: the consumer may keep the allocation mapped after this
         * lease, until `uncache` (holds.h).  Not held is not an error: the
         * consumer then closes its mapping with the view. */
        if (cache && r->batch)
                hold_parts(c, r, held_parts);
        else
                held = cache && holds_take(c, r) > 0;
        reply_begin(&o, &m, seq);
        proto_map_ku64(&m, "lease", l->id);
        proto_map_key(&m, "reg");
        pack_record_as(&o.pk, r, RECORD_LOOKUP, 0,
                       &(struct record_lookup){ .held = held_parts, .fds = fds, .nfds = nfds });
        if (has_fd)
                proto_map_ku64(&m, "fds", nfds);
        if (held)
                proto_map_kbool(&m, "held", true);
        proto_map_end(&m);
        /* The queued frame pins r, so the fds outlive a release or an
         * unregister that comes before the kernel has taken them.  A
         * cuda-ipc record carries a handle instead of an fd. */
        k = reply_send_fds(c, seq, &o, has_fd ? r : NULL, fds, has_fd ? nfds : 0);
        proto_out_free(&o);
        if (k < 0)
                registry_lease_undo(R, l);
        return 0;
}

/* A waiting lookup's answer: it answers another registration than any
 * lease held when it was sent, so it always carries the fd. */
static int answer_waited(struct conn *c, uint64_t seq, struct reg *r, bool writable, bool cache,
                         char *msg, size_t msg_len)
{
        return lookup_answer(c, seq, r, writable, 0, cache, msg, msg_len);
}

int op_lookup(struct req *q)
{
        struct conn *c = q->c;
        struct registry *R = c->d->reg;
        struct target t;
        uint64_t wait_ms = 0, have = 0, owner = 0;
        int64_t owner_uid = -1;
        bool writable = false, cache = false;
        char msg[PROTO_NAME_MAX + 128];
        struct reg *r;
        int k;

        k = req_target(q, &t);
        if (k < 0)
                return k;
        k = proto_get_u64(q->m, "wait_ms", &wait_ms);
        if (k == -EINVAL)
                return req_fail(q, -EINVAL, "wait_ms must be a uint");
        if (wait_ms > PROTO_WAIT_MAX_MS)
                return req_fail(q, -EINVAL, "wait_ms is above %u", PROTO_WAIT_MAX_MS);
        k = proto_get_bool(q->m, "writable", &writable);
        if (k == -EINVAL)
                return req_fail(q, -EINVAL, "writable must be a bool");
        k = proto_get_u64(q->m, "have", &have);
        if (k == -EINVAL)
                return req_fail(q, -EINVAL, "have must be a uint");
        k = proto_get_u64(q->m, "owner_uid", &owner);
        if (k == -EINVAL || (k == 0 && owner >= UINT32_MAX))
                return req_fail(q, -EINVAL, "owner_uid must be a uint below 2^32-1");
        if (k == 0)
                owner_uid = (int64_t)owner;
        k = proto_get_bool(q->m, "cache", &cache);
        if (k == -EINVAL)
                return req_fail(q, -EINVAL, "cache must be a bool");
        /* What the peer may not look up is answered as if it did not
         * exist, and a waiting lookup keeps waiting for it. */
        if (t.by_id) {
                r = registry_find_id(R, t.id);
                if (r && owner_uid >= 0 && r->uid != owner_uid)
                        r = NULL;       /* not the owner asked for: as if absent */
                if (!r || !r->live || !access_may_lookup(c, r))
                        return req_fail(q, -ENOENT, "no live registration with id %" PRIu64,
                                        t.id);
        } else {
                r = registry_find_name(R, t.name, t.name_len);
                if (r && (!access_may_lookup(c, r) ||
                          (owner_uid >= 0 && r->uid != owner_uid)))
                        r = NULL;
                if (!r && wait_ms == 0)
                        return req_fail(q, -ENOENT, "no registration named %.*s",
                                        (int)t.name_len, t.name);
                if (!r) {
                        k = waits_add(c, q->seq, t.name, t.name_len, wait_ms, writable, cache,
                                      owner_uid, answer_waited);
                        if (k == -ENOBUFS)
                                return req_fail(q, k, "this connection has %u waiting "
                                                "lookups (--max-waits)", c->n_waits);
                        if (k < 0)
                                return req_fail(q, k, "cannot wait: %s", strerror(-k));
                        return 0;
                }
        }
        k = lookup_answer(c, q->seq, r, writable, have, cache, msg, sizeof(msg));
        return k < 0 ? req_fail(q, k, "%s", msg) : 0;
}

int op_release(struct req *q)
{
        struct registry *R = q->c->d->reg;
        const uint8_t *ev = NULL;
        struct proto_out o;
        struct lease *l;
        size_t ev_len = 0;
        uint64_t id;
        int k;

        k = proto_get_u64(q->m, "lease", &id);
        if (k < 0)
                return req_fail(q, -EINVAL, k == -ENOENT ? "lease is required"
                                                         : "lease must be a uint");
        k = proto_get_bin(q->m, "event", &ev, &ev_len);
        if (k == -EINVAL || (k == 0 && ev_len != PROTO_IPC_HANDLE_LEN))
                return req_fail(q, -EINVAL, "event must be a bin of %u bytes",
                                PROTO_IPC_HANDLE_LEN);
        l = registry_find_lease(R, id);
        if (!l || l->holder != &q->c->party)
                return req_fail(q, -ENOENT, "no lease %" PRIu64 " held by this connection", id);
        /* Host buffers (and host-only batches) have no use for an event:
         * it is ignored. */
        if (ev && reg_events(l->reg) && rel_events_push(reg_events(l->reg), ev) < 0)
                return req_fail(q, -ENOMEM, "out of memory keeping the release event");
        k = registry_release(R, &q->c->party, id);
        if (k < 0)
                return req_fail(q, k, "no lease %" PRIu64 " held by this connection", id);
        reply_start(&o, q->seq, 0);
        (void)reply_send(q->c, q->seq, &o, NULL);
        proto_out_free(&o);
        return 0;
}
