/* quota.c: per-uid counts, kept in a hash map by uid. */
#include <stdlib.h>

#include "batch.h"
#include "daemon.h"
#include "host.h"
#include "proto.h"
#include "cuda_reg.h"
#include "quota.h"

struct uid_entry {
        struct hmap_node node;
        uint32_t uid;
        struct uid_use use;
};

static struct uid_entry *find(const struct daemon *d, uint32_t uid)
{
        struct hmap_node *n = hmap_find_u64(&d->uids, uid);

        return n ? container_of(n, struct uid_entry, node) : NULL;
}

static struct uid_entry *get(struct daemon *d, uint32_t uid)
{
        struct uid_entry *e = find(d, uid);

        if (e)
                return e;
        e = calloc(1, sizeof(*e));
        if (!e)
                return NULL;
        e->uid = uid;
        if (hmap_insert(&d->uids, &e->node, hmap_hash_u64(uid)) < 0) {
                free(e);
                return NULL;
        }
        return e;
}

static void put(struct daemon *d, struct uid_entry *e)
{
        if (e->use.regs || e->use.leases || e->use.bytes || e->use.conns || e->use.fds ||
            e->use.stored)
                return;
        hmap_remove(&d->uids, &e->node);
        free(e);
}

struct uid_use quota_of(const struct daemon *d, uint32_t uid)
{
        const struct uid_entry *e = find(d, uid);

        return e ? e->use : (struct uid_use){ 0 };
}

/* Decrements never go below zero: an increment lost to ENOMEM must not
 * wrap the count. */
#define ADD(field, delta) ((field) = (delta) < 0 && (field) < (uint64_t)-(delta) ? 0 \
                                                        : (field) + (delta))

/* Adds delta to *field, one of e's counts, and drops e if it holds nothing now. */
static void add(struct daemon *d, struct uid_entry *e, uint64_t *field, int delta)
{
        ADD(*field, delta);
        put(d, e);
}

void quota_conn(struct daemon *d, uint32_t uid, int delta)
{
        struct uid_entry *e = delta > 0 ? get(d, uid) : find(d, uid);

        if (e)
                add(d, e, &e->use.conns, delta);
}

void quota_lease(struct daemon *d, uint32_t uid, int delta)
{
        struct uid_entry *e = delta > 0 ? get(d, uid) : find(d, uid);

        if (e)
                add(d, e, &e->use.leases, delta);
}

void quota_reg(struct daemon *d, uint32_t uid, int delta)
{
        struct uid_entry *e = delta > 0 ? get(d, uid) : find(d, uid);

        if (e)
                add(d, e, &e->use.regs, delta);
}

uint64_t quota_bytes_of(const struct reg *r)
{
        /* What the fd pins: a host memfd's whole size (its seals fix it),
         * whatever part of it the registration names. */
        if (r->kind == PROTO_KIND_HOST && r->fd >= 0)
                return host_fd_bytes(r->fd, r->size);
        if (r->batch)
                return batch_bytes(r->batch);
        return r->size;
}

void quota_charge(struct daemon *d, struct reg *r)
{
        struct uid_entry *e;
        uint64_t n;

        /* cuda-ipc and cuda-pool memory stays the producer's: the daemon
         * holds none. */
        if (r->charged || (!proto_kind_held(r->kind) && !r->batch))
                return;
        e = get(d, r->uid);
        if (!e)
                return;
        /* Saturates: charged is what was added, so that giving it back
         * keeps the count exact. */
        n = quota_bytes_of(r);
        if (n > UINT64_MAX - e->use.bytes)
                n = UINT64_MAX - e->use.bytes;
        e->use.bytes += n;
        r->charged = n;
}

void quota_uncharge(struct daemon *d, struct reg *r)
{
        struct uid_entry *e = find(d, r->uid);

        if (e && r->charged) {
                e->use.bytes -= e->use.bytes < r->charged ? e->use.bytes : r->charged;
                put(d, e);
        }
        r->charged = 0;
}

unsigned quota_fds_of_kind(unsigned kind, unsigned nfds)
{
        if (kind == PROTO_KIND_HOST)
                return 2;       /* the memfd and its read-only open */
        return kind == PROTO_KIND_CUDA_IPC ? 0 : nfds ? nfds : 1;
}

unsigned quota_store_of_kind(unsigned kind, unsigned nfds)
{
        if (kind == PROTO_KIND_HOST)
                return 1;
        return kind == PROTO_KIND_CUDA_IPC ? 0 : nfds ? nfds : 1;
}

/* The fds r's request carried: one per chunk for cuda-vmm. */
static unsigned fds_of(const struct reg *r)
{
        return r->cuda && r->kind == PROTO_KIND_CUDA_VMM ? r->cuda->n_chunks : 1;
}

/* What r costs in fds and fd store entries. */
static unsigned fd_cost(const struct reg *r)
{
        return r->batch ? batch_fd_cost(r->batch) : quota_fds_of_kind(r->kind, fds_of(r));
}

static unsigned store_cost(const struct reg *r)
{
        return r->batch ? batch_store_cost(r->batch) : quota_store_of_kind(r->kind, fds_of(r));
}

void quota_fds_charge(struct daemon *d, struct reg *r, bool store)
{
        unsigned fds = fd_cost(r);
        unsigned want_st = store && !r->store_charged ? store_cost(r) : 0;
        bool st = want_st > 0;
        struct uid_entry *e;

        if (r->fds_charged >= fds)
                fds = 0;        /* charged already (adopt charges what it adds) */
        else
                fds -= r->fds_charged;
        if (fds == 0 && !st)
                return;
        e = get(d, r->uid);
        if (!e)
                return;
        e->use.fds += fds;
        d->reg_fds += fds;
        r->fds_charged = (uint8_t)(r->fds_charged + fds);
        if (st) {
                e->use.stored += want_st;
                r->store_charged = (uint8_t)want_st;
        }
}

void quota_fds_uncharge(struct daemon *d, struct reg *r)
{
        struct uid_entry *e = find(d, r->uid);

        d->reg_fds -= d->reg_fds < r->fds_charged ? d->reg_fds : r->fds_charged;
        if (e) {
                ADD(e->use.fds, -(int)r->fds_charged);
                if (r->store_charged)
                        ADD(e->use.stored, -(int)r->store_charged);
                put(d, e);
        }
        r->fds_charged = 0;
        r->store_charged = 0;
}

void quota_done(struct daemon *d)
{
        struct hmap_node *n, *next;

        hmap_for_each_safe(n, next, &d->uids)
                free(container_of(n, struct uid_entry, node));
        hmap_free(&d->uids);
}
