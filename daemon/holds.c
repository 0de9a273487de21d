/* holds.c: allocations consumers keep mapped past their leases; see holds.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "batch.h"
#include "cuda_reg.h"
#include "holds.h"
#include "log.h"

bool holds_apply_part(unsigned kind, const struct reg_cuda *rc)
{
        /* cuda-vmm always: a consumer's cached import keeps the memory
         * alive, which the daemon then tells it to give up (uncache). */
        return kind == PROTO_KIND_CUDA_VMM ||
               ((kind == PROTO_KIND_CUDA_IPC || kind == PROTO_KIND_CUDA_POOL) &&
                rc->alloc->cacheable);
}

bool holds_apply(const struct reg *r)
{
        return r->cuda && holds_apply_part(r->kind, r->cuda);
}

/* {event: name, alloc: id} to c. */
static void send_alloc_event(struct conn *c, const char *name, uint64_t alloc_id)
{
        struct proto_out o;

        if (c->closed)
                return;
        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 2);
        proto_pack_kstr(&o.pk, "event", name);
        proto_pack_ku64(&o.pk, "alloc", alloc_id);
        (void)conn_send(c, &o, NULL);
        proto_out_free(&o);
}

static struct conn *conn_by_id(struct daemon *d, uint64_t id)
{
        for (struct conn *c = d->conns; c && id; c = c->next)
                if (c->id == id)
                        return c;
        return NULL;
}

/* Nobody maps a any more: its owner may free the memory. */
static void tell_unmapped(struct daemon *d, const struct alloc *a)
{
        struct conn *owner = conn_by_id(d, a->owner_conn);

        if (owner)
                send_alloc_event(owner, "unmapped", a->id);
}

/* Room for one more in a connection's list of n allocations (its holds,
 * its lingering ones), at most max: -ENOBUFS past it, -ENOMEM. */
static int room_for_one(struct alloc ***list, uint32_t n, uint32_t *cap, uint32_t max)
{
        struct alloc **p;
        uint32_t want;

        if (n >= max)
                return -ENOBUFS;
        if (n < *cap)
                return 0;
        want = *cap ? *cap * 2 : 8;
        p = realloc(*list, want * sizeof(*p));
        if (!p)
                return -ENOMEM;
        *list = p;
        *cap = want;
        return 0;
}

/* Where allocation id is in a connection's list of n (its holds, its
 * lingering ones), or -1.  Linear: the lists are bounded by max-leases. */
static int64_t index_of(struct alloc *const *list, uint32_t n, uint64_t id)
{
        for (uint32_t i = 0; i < n; i++)
                if (list[i]->id == id)
                        return i;
        return -1;
}

/* a no longer lingers for its producer (if it did). */
static void linger_remove(struct alloc *a)
{
        struct conn *o = a->linger_owner;

        if (!o)
                return;
        for (uint32_t i = 0; i < o->n_lingers; i++)
                if (o->lingers[i] == a) {
                        o->lingers[i] = o->lingers[--o->n_lingers];
                        break;
                }
        a->linger_owner = NULL;
}

/* a, without registrations, stays mapped by its holders until its
 * producer o says `unmap`.  -ENOBUFS past max-leases of them. */
static int linger_add(struct conn *o, struct alloc *a)
{
        int k = room_for_one(&o->lingers, o->n_lingers, &o->cap_lingers, o->d->cfg.max_leases);

        if (k < 0)
                return k;
        o->lingers[o->n_lingers++] = a;
        a->linger_owner = o;
        return 0;
}

/* Every holder of a is to let go of it. */
static void uncache_all(struct alloc *a)
{
        for (uint32_t i = 0; i < a->n_holders; i++)
                send_alloc_event(a->holders[i], "uncache", a->id);
}

/* a has ended: no registration, no holder.  Tells its owner and frees it. */
static void ended(struct daemon *d, struct alloc *a)
{
        linger_remove(a);
        tell_unmapped(d, a);
        alloc_put_ended(&d->allocs, a);
}

int holds_take_part(struct conn *c, unsigned kind, struct reg_cuda *rc)
{
        struct alloc *a;
        int k;

        if (!holds_apply_part(kind, rc))
                return 0;
        a = rc->alloc;
        /* The allocation's holders are few; this connection's holds many. */
        for (uint32_t i = 0; i < a->n_holders; i++)
                if (a->holders[i] == c)
                        return 1;
        k = room_for_one(&c->holds, c->n_holds, &c->cap_holds, c->d->cfg.max_leases);
        if (k < 0)
                return k;
        k = alloc_hold_add(a, c);       /* 1: c was not among its holders */
        if (k < 0)
                return k;
        c->holds[c->n_holds++] = a;
        return 1;
}

int holds_take(struct conn *c, struct reg *r)
{
        return r->cuda ? holds_take_part(c, r->kind, r->cuda) : 0;
}

/* The allocation of a buffer of kind with CUDA data rc, owned by r, is
 * about to lose its last registration. */
static void alloc_freeing(struct daemon *d, const struct reg *r, struct alloc *a)
{
        struct conn *owner = r->owner && !r->owner->detached ? conn_from_party(r->owner) : NULL;

        a->owner_conn = owner ? owner->id : 0;
        linger_remove(a);
        if (a->n_holders == 0) {
                tell_unmapped(d, a);
                return;         /* alloc_put() frees it */
        }
        /* Its producer will say `unmap` before it frees. */
        if (a->linger && owner && !owner->closed && linger_add(owner, a) == 0)
                return;
        uncache_all(a);
}

/* Whether chunk c of rc, about to lose its last registration, needs
 * alloc_freeing(): chunk 0 always, as any buffer's allocation.  Holds are
 * taken on a buffer's first chunk, but a later chunk may be the first of
 * another registration, which consumers hold and its producer may wait
 * on; other later chunks have nobody to tell. */
static bool chunk_told(const struct reg_cuda *rc, uint32_t c)
{
        const struct alloc *a = reg_cuda_chunk(rc, c);

        if (!reg_cuda_chunk_first(rc, c))
                return false;   /* told for its earlier place */
        return c == 0 || a->n_holders > 0 || a->linger;
}

void holds_reg_freeing(struct daemon *d, struct reg *r)
{
        const struct reg_batch *b = r->batch;
        const struct reg_cuda *rc = r->cuda;

        if (rc && holds_apply(r))
                for (uint32_t c = 0; c < rc->n_chunks; c++)
                        if (reg_cuda_chunk(rc, c)->regs == 1 && chunk_told(rc, c))
                                alloc_freeing(d, r, reg_cuda_chunk(rc, c));
        for (uint32_t i = 0; b && i < b->n_parts; i++) {
                const struct batch_part *p = &b->parts[i];
                if (!p->cuda || !holds_apply_part(p->kind, p->cuda))
                        continue;
                /* Once per allocation, when only this batch's parts use it. */
                for (uint32_t c = 0; c < p->cuda->n_chunks; c++)
                        if (batch_last_user(b, i, reg_cuda_chunk(p->cuda, c)) &&
                            chunk_told(p->cuda, c))
                                alloc_freeing(d, r, reg_cuda_chunk(p->cuda, c));
        }
}

/* Drops c's hold on its i-th allocation. */
static void drop(struct conn *c, uint32_t i)
{
        struct alloc *a = c->holds[i];

        c->holds[i] = c->holds[--c->n_holds];
        if (alloc_hold_drop(a, c))
                ended(c->d, a);
}

void holds_conn_closed(struct conn *c)
{
        /* Its lingering allocations first: dropping holds may end them.
         * One registered again is told when that registration goes. */
        while (c->n_lingers > 0) {
                struct alloc *a = c->lingers[--c->n_lingers];
                a->linger_owner = NULL;  /* linger_remove() without the search */
                if (a->regs == 0)
                        uncache_all(a);
        }
        free(c->lingers);
        c->lingers = NULL;
        c->cap_lingers = 0;
        while (c->n_holds > 0)
                drop(c, c->n_holds - 1);
        free(c->holds);
        c->holds = NULL;
        c->cap_holds = 0;
}

int op_unhold(struct req *q)
{
        const msgpack_object *ids;
        struct proto_out o;
        struct conn *c = q->c;
        uint64_t n = 0;
        int k;

        k = proto_get_array(q->m, "allocs", &ids);
        if (k < 0)
                return req_fail(q, -EINVAL, "allocs must be an array of uint (allocation ids)");
        /* Each id is looked for among this connection's holds: bounded, so
         * that one request cannot stall the loop. */
        if (ids->via.array.size > PROTO_UNHOLD_MAX)
                return req_fail(q, -EINVAL, "allocs has more than %u ids", PROTO_UNHOLD_MAX);
        for (uint32_t j = 0; j < ids->via.array.size; j++) {
                const msgpack_object *v = &ids->via.array.ptr[j];
                if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                        return req_fail(q, -EINVAL, "allocs[%u] is not a uint", j);
        }
        /* Unknown ids are ignored: the hold may have gone with a restart. */
        for (uint32_t j = 0; j < ids->via.array.size; j++) {
                int64_t i = index_of(c->holds, c->n_holds, ids->via.array.ptr[j].via.u64);
                if (i >= 0) {
                        drop(c, (uint32_t)i);
                        n++;
                }
        }
        reply_start(&o, q->seq, 1);
        proto_pack_ku64(&o.pk, "dropped", n);
        (void)reply_send(c, q->seq, &o, NULL);
        proto_out_free(&o);
        log_debug("connection %" PRIu64 ": %" PRIu64 " holds dropped", c->id, n);
        return 0;
}

int op_unmap(struct req *q)
{
        struct conn *c = q->c;
        struct alloc *a;
        struct proto_out o;
        uint64_t id, n = 0;
        int64_t i;

        if (proto_get_u64(q->m, "alloc", &id) < 0)
                return req_fail(q, -EINVAL, "alloc must be a uint (an allocation id)");
        i = index_of(c->lingers, c->n_lingers, id);
        a = i >= 0 ? c->lingers[i] : NULL;
        /* Not lingering here: ended already (`unmapped` was sent), its
         * holders were told, or not this connection's.  Nothing to do. */
        if (a && a->regs > 0)
                return req_fail(q, -EEXIST, "allocation %" PRIu64 " is registered again; "
                                "unregister it before freeing it", id);
        if (a) {
                linger_remove(a);
                uncache_all(a);
                n = a->n_holders;
        }
        reply_start(&o, q->seq, 1);
        proto_pack_ku64(&o.pk, "holders", n);
        (void)reply_send(c, q->seq, &o, NULL);
        proto_out_free(&o);
        return 0;
}
