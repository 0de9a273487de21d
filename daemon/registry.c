/* registry.c: registrations, names and leases. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "list.h"
#include "proto.h"
#include "registry.h"

struct registry {
        struct hmap names;              /* live registrations by name */
        struct hmap ids;                /* every registration by id */
        struct hmap leases;             /* leases by id */
        struct reg *head, *tail;        /* every registration, by id */
        uint64_t next_id, next_lease;
        struct registry_counters cnt;
        /* The exact sums behind cnt.bytes, which saturate at UINT64_MAX:
         * 2^64 registrations of 2^64 bytes still fit. */
        unsigned __int128 bytes[REGISTRY_KINDS];
        struct registry_callbacks cb;
        void *userdata;
        struct lease *spare;            /* freed leases kept for reuse */
        unsigned n_spare;
};

#define LEASE_SPARE_MAX 256u

static uint64_t unix_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int registry_new(const struct registry_callbacks *cb, void *userdata, struct registry **ret)
{
        struct registry *R = calloc(1, sizeof(*R));

        if (!R)
                return -ENOMEM;
        hmap_init(&R->names);
        hmap_init(&R->ids);
        hmap_init(&R->leases);
        R->next_id = 1;
        R->next_lease = 1;
        if (cb)
                R->cb = *cb;
        R->userdata = userdata;
        *ret = R;
        return 0;
}

/* Adds (or with add false takes away) r's bytes to its kind's counter. */
static void count_bytes(struct registry *R, const struct reg *r, bool add)
{
        unsigned __int128 *b = &R->bytes[r->kind];

        if (add)
                *b += r->size;
        else
                *b -= *b < r->size ? *b : r->size;
        R->cnt.bytes[r->kind] = *b > UINT64_MAX ? UINT64_MAX : (uint64_t)*b;
}

const struct registry_counters *registry_counters(const struct registry *R)
{
        return &R->cnt;
}

void reg_party_init(struct reg_party *p, uint32_t pid, uint32_t uid, uint32_t gid)
{
        memset(p, 0, sizeof(*p));
        p->pid = pid;
        p->uid = uid;
        p->gid = gid;
}

static void reg_destroy(struct registry *R, struct reg *r)
{
        if (R->cb.freed)
                R->cb.freed(r, R->userdata);
        hmap_remove(&R->ids, &r->by_id);
        LIST_REMOVE_TAIL(R->head, R->tail, r, prev, next);
        if (r->owner)
                LIST_REMOVE(r->owner->owned, r, own_prev, own_next);
        R->cnt.registrations--;
        count_bytes(R, r, false);
        free(r->access);
        free(r);
}

/* Frees r once nothing needs it any more. */
static void reg_maybe_free(struct registry *R, struct reg *r)
{
        if (!r->live && r->leases == 0 && r->pins == 0)
                reg_destroy(R, r);
}

static void lease_destroy_ex(struct registry *R, struct lease *l, bool quiet)
{
        struct reg *r = l->reg;
        struct reg_party *h = l->holder;
        bool marks_done = false;

        if (R->cb.unleased)
                R->cb.unleased(r, l, R->userdata);
        hmap_remove(&R->leases, &l->by_id);
        LIST_REMOVE(h->leases, l, prev, next);
        LIST_REMOVE(r->held, l, rprev, rnext);
        if (r->marked > 0 && l->id < r->lease_mark)
                marks_done = --r->marked == 0;
        h->n_leases--;
        R->cnt.leases--;
        if (R->n_spare < LEASE_SPARE_MAX) {
                l->next = R->spare;
                R->spare = l;
                R->n_spare++;
        } else {
                free(l);
        }

        assert(r->leases > 0);
        if (--r->leases == 0) {
                if (r->owner && R->cb.released && !quiet)
                        R->cb.released(r, R->userdata);
                reg_maybe_free(R, r);
        } else if (marks_done && r->owner && R->cb.released && !quiet) {
                R->cb.released(r, R->userdata);
        }
}

static void lease_destroy(struct registry *R, struct lease *l)
{
        lease_destroy_ex(R, l, false);
}

void registry_lease_undo(struct registry *R, struct lease *l)
{
        lease_destroy_ex(R, l, true);
}

struct registry *registry_free(struct registry *R)
{
        struct hmap_node *n, *next;

        if (!R)
                return NULL;
        /* Parties may already be gone, so touch neither their lists nor
         * them: free the leases outright, then every registration. */
        hmap_for_each_safe(n, next, &R->leases)
                free(container_of(n, struct lease, by_id));
        while (R->head) {
                struct reg *r = R->head;
                R->head = r->next;
                if (R->cb.freed)
                        R->cb.freed(r, R->userdata);
                free(r->access);
                free(r);
        }
        while (R->spare) {
                struct lease *l = R->spare;
                R->spare = l->next;
                free(l);
        }
        hmap_free(&R->names);
        hmap_free(&R->ids);
        hmap_free(&R->leases);
        free(R);
        return NULL;
}

int registry_add(struct registry *R, struct reg_party *owner, const struct reg_params *p,
                 struct reg **ret)
{
        uint64_t h;
        struct reg *r;
        int k;

        if (p->kind >= REGISTRY_KINDS || p->name_len == 0 || p->name_len > PROTO_NAME_MAX ||
            p->meta_len > UINT32_MAX)
                return -EINVAL;
        if (registry_find_name(R, p->name, p->name_len))
                return -EEXIST;

        r = malloc(sizeof(*r) + p->name_len + 1 + p->meta_len);
        if (!r)
                return -ENOMEM;
        memset(r, 0, sizeof(*r));
        memcpy(r->name, p->name, p->name_len);
        r->name[p->name_len] = '\0';
        r->name_len = (uint16_t)p->name_len;
        if (p->meta_len > 0) {
                memcpy(r->name + p->name_len + 1, p->meta, p->meta_len);
                r->meta = (const uint8_t *)r->name + p->name_len + 1;
                r->meta_len = (uint32_t)p->meta_len;
        }
        r->kind = (uint8_t)p->kind;
        r->size = p->size;
        r->offset = p->offset;
        r->created_ms = p->created_ms;
        r->expires_ms = p->expires_ms;
        r->ephemeral = p->ephemeral;
        r->revocable = p->revocable;
        r->cuda = p->cuda;
        r->batch = p->batch;
        r->access = p->access;
        r->fd = p->fd;
        r->ro_fd = -1;                  /* set by the caller, which opens it */
        r->id = p->id ? p->id : R->next_id;
        if (p->id && registry_find_id(R, p->id)) {
                k = -EEXIST;
                goto fail;
        }

        h = hmap_hash_str(r->name, r->name_len);
        k = hmap_insert(&R->names, &r->by_name, h);
        if (k < 0)
                goto fail;
        k = hmap_insert(&R->ids, &r->by_id, hmap_hash_u64(r->id));
        if (k < 0) {
                hmap_remove(&R->names, &r->by_name);
                goto fail;
        }
        if (r->id >= R->next_id)
                R->next_id = r->id + 1;
        r->live = true;
        LIST_APPEND(R->head, R->tail, r, prev, next);
        if (owner) {
                r->owner = owner;
                r->pid = owner->pid;
                r->uid = owner->uid;
                r->gid = owner->gid;
                LIST_PREPEND(owner->owned, r, own_prev, own_next);
                owner->n_live++;
        } else {
                r->pid = p->pid;
                r->uid = p->uid;
                r->gid = p->gid;
        }
        R->cnt.registrations++;
        R->cnt.live++;
        count_bytes(R, r, true);
        if (R->cb.added)
                R->cb.added(r, R->userdata);
        *ret = r;
        return 0;
fail:
        free(r);
        return k;
}

struct reg *registry_find_name(const struct registry *R, const char *name, size_t len)
{
        uint64_t h = hmap_hash_str(name, len);

        for (struct hmap_node *n = hmap_bucket(&R->names, h); n; n = n->next) {
                struct reg *r = container_of(n, struct reg, by_name);
                if (n->hash == h && r->name_len == len && memcmp(r->name, name, len) == 0)
                        return r;
        }
        return NULL;
}

static struct reg *find_id_any(const struct registry *R, uint64_t id)
{
        struct hmap_node *n = hmap_find_u64(&R->ids, id);

        return n ? container_of(n, struct reg, by_id) : NULL;
}

struct reg *registry_find_id(const struct registry *R, uint64_t id)
{
        struct reg *r = find_id_any(R, id);

        /* One kept only by a pin is on its way out. */
        return r && (r->live || r->leases > 0) ? r : NULL;
}

int registry_unregister(struct registry *R, struct reg *r)
{
        if (!r->live)
                return -ENOENT;
        if (R->cb.removed)
                R->cb.removed(r, R->userdata);
        hmap_remove(&R->names, &r->by_name);
        r->live = false;
        R->cnt.live--;
        if (r->owner)
                r->owner->n_live--;
        reg_maybe_free(R, r);
        return 0;
}

int registry_lease(struct registry *R, struct reg *r, struct reg_party *holder,
                   struct lease **ret)
{
        return registry_lease_id(R, r, holder, 0, ret);
}

int registry_lease_id(struct registry *R, struct reg *r, struct reg_party *holder,
                      uint64_t lease_id, struct lease **ret)
{
        struct lease *l;
        int k;

        if (lease_id && registry_find_lease(R, lease_id))
                return -EEXIST;
        l = R->spare;
        if (l) {
                R->spare = l->next;
                R->n_spare--;
                memset(l, 0, sizeof(*l));
        } else {
                l = calloc(1, sizeof(*l));
                if (!l)
                        return -ENOMEM;
        }
        l->id = lease_id ? lease_id : R->next_lease;
        l->reg = r;
        l->holder = holder;
        l->since_ms = unix_ms();
        k = hmap_insert(&R->leases, &l->by_id, hmap_hash_u64(l->id));
        if (k < 0) {
                free(l);
                return k;
        }
        if (l->id >= R->next_lease)
                R->next_lease = l->id + 1;
        LIST_PREPEND(holder->leases, l, prev, next);
        LIST_PREPEND(r->held, l, rprev, rnext);
        holder->n_leases++;
        r->leases++;
        R->cnt.leases++;
        if (R->cb.leased)
                R->cb.leased(r, l, R->userdata);
        *ret = l;
        return 0;
}

struct lease *registry_find_lease(const struct registry *R, uint64_t lease_id)
{
        struct hmap_node *n = hmap_find_u64(&R->leases, lease_id);

        return n ? container_of(n, struct lease, by_id) : NULL;
}

int registry_release(struct registry *R, struct reg_party *holder, uint64_t lease_id)
{
        struct lease *l = registry_find_lease(R, lease_id);

        if (!l || l->holder != holder)
                return -ENOENT;
        lease_destroy(R, l);
        return 0;
}

void registry_party_gone(struct registry *R, struct reg_party *p)
{
        /* Detach the owned registrations first, so that dropping p's own
         * leases below sends no released event back to p. */
        while (p->owned) {
                struct reg *r = p->owned;
                p->owned = r->own_next;
                r->own_prev = r->own_next = NULL;
                r->owner = NULL;
                /* Also when already unregistered: its leases still map
                 * the owner's memory. */
                if (r->revocable && R->cb.revoked)
                        for (struct lease *l = r->held; l; l = l->rnext)
                                R->cb.revoked(r, l, R->userdata);
                if (r->live) {
                        p->n_live--;
                        if (r->ephemeral)
                                registry_unregister(R, r);
                }
        }
        while (p->leases)
                lease_destroy(R, p->leases);
}

void registry_set_kind(struct registry *R, struct reg *r, unsigned kind)
{
        assert(kind < REGISTRY_KINDS);
        count_bytes(R, r, false);
        r->kind = (uint8_t)kind;
        count_bytes(R, r, true);
}

uint32_t registry_mark_leases(struct registry *R, struct reg *r)
{
        r->lease_mark = R->next_lease;
        r->marked = r->leases;
        return r->marked;
}

void registry_pin(struct reg *r)
{
        r->pins++;
}

void registry_unpin(struct registry *R, struct reg *r)
{
        assert(r->pins > 0);
        r->pins--;
        reg_maybe_free(R, r);
}

/* Paging cursor probes: see first_after(). */
#define ITER_PROBES 256u

/* The first registration with an id above after, which is gone.  Ids are
 * handed out in order, so the ids just above a recent cursor mostly name
 * registrations still there: probing the id table for after+1, after+2, ...
 * costs O(1) per id freed since, without walking the list.  Only a gap of
 * more than ITER_PROBES freed ids falls back to a walk, from whichever end of
 * the list is nearer by id (ids are dense enough for that to be a fair guess). */
static struct reg *first_after(const struct registry *R, uint64_t after)
{
        struct reg *r;

        if (after < R->head->id)
                return R->head;
        for (uint64_t id = after + 1; id - after <= ITER_PROBES && id <= R->tail->id; id++) {
                r = find_id_any(R, id);
                if (r)
                        return r;
        }
        if (after - R->head->id < R->tail->id - after) {
                for (r = R->head; r->id <= after; r = r->next)
                        ;
        } else {
                for (r = R->tail; r->prev && r->prev->id > after; r = r->prev)
                        ;
        }
        return r;
}

struct reg *registry_iter(const struct registry *R, const struct reg *prev, uint64_t after,
                          const char *prefix, size_t prefix_len)
{
        return registry_iter_ex(R, prev, after, prefix, prefix_len, false);
}

struct reg *registry_iter_ex(const struct registry *R, const struct reg *prev, uint64_t after,
                             const char *prefix, size_t prefix_len, bool leased_too)
{
        struct reg *r;

        if (prev) {
                r = prev->next;
        } else {
                r = find_id_any(R, after);
                if (r) {
                        r = r->next;
                } else if (!R->tail || R->tail->id <= after) {
                        r = NULL;
                } else {
                        r = first_after(R, after);
                }
        }
        for (; r; r = r->next)
                if ((r->live || (leased_too && r->leases > 0)) &&
                    proto_name_in(r->name, r->name_len, prefix, prefix_len))
                        return r;
        return NULL;
}

void registry_party_move(struct registry *R, struct reg_party *from, struct reg_party *to)
{
        (void)R;
        while (from->owned) {
                struct reg *r = from->owned;
                from->owned = r->own_next;
                r->owner = to;
                LIST_PREPEND(to->owned, r, own_prev, own_next);
        }
        while (from->leases) {
                struct lease *l = from->leases;
                from->leases = l->next;
                l->holder = to;
                LIST_PREPEND(to->leases, l, prev, next);
        }
        to->n_live += from->n_live;
        to->n_leases += from->n_leases;
        from->n_live = from->n_leases = 0;
}

void registry_next_ids(const struct registry *R, uint64_t *ret_id, uint64_t *ret_lease)
{
        *ret_id = R->next_id;
        *ret_lease = R->next_lease;
}

void registry_raise_ids(struct registry *R, uint64_t next_id, uint64_t next_lease)
{
        if (next_id > R->next_id)
                R->next_id = next_id;
        if (next_lease > R->next_lease)
                R->next_lease = next_lease;
}

const struct reg *registry_first(const struct registry *R)
{
        return R->head;
}
