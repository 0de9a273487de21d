/* events.c: what the daemon says unasked.
 *
 * Events arrive between replies and are taken in on the way (io.c hands
 * over every one but `error`, which concerns the call in flight).  What a
 * later call asks about is kept in bounded rings on the client: the ids of
 * `released` events and the IPC events that came with them (for
 * gpuipc_reg_wait_released), `revoked` registrations (for views' stream
 * order), `unmapped` allocations (for gpuipc_reg_wait_unmapped); `watch`
 * events queue in admin.c, and `uncache` goes to the mapping cache.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void released_push(gpuipc_client *c, uint64_t id)
{
        if (c->released_n == GPUIPC__RELEASED_MAX) {
                c->released_start = (c->released_start + 1) % GPUIPC__RELEASED_MAX;
                c->released_n--;
        }
        c->released[(c->released_start + c->released_n) % GPUIPC__RELEASED_MAX] = id;
        c->released_n++;
}

bool gpuipc__released_take(gpuipc_client *c, uint64_t id)
{
        for (unsigned i = 0; i < c->released_n; i++) {
                unsigned k = (c->released_start + i) % GPUIPC__RELEASED_MAX;
                if (c->released[k] != id)
                        continue;
                /* Close the gap by moving the later entries down by one. */
                for (unsigned j = i; j + 1 < c->released_n; j++)
                        c->released[(c->released_start + j) % GPUIPC__RELEASED_MAX] =
                                c->released[(c->released_start + j + 1) % GPUIPC__RELEASED_MAX];
                c->released_n--;
                return true;
        }
        return false;
}

/* Keeps the IPC events of a `released` event for wait_released(). */
static void relev_push(gpuipc_client *c, uint64_t id, const msgpack_object *events)
{
        struct gpuipc__relev *e, **pp;
        unsigned n = 0;

        if (!events || events->type != MSGPACK_OBJECT_ARRAY)
                return;
        for (uint32_t i = 0; i < events->via.array.size; i++) {
                const msgpack_object *o = &events->via.array.ptr[i];
                if (o->type == MSGPACK_OBJECT_BIN && o->via.bin.size == GPUIPC__EVENT_LEN)
                        n++;
        }
        if (n == 0)
                return;
        e = malloc(sizeof(*e) + (size_t)n * GPUIPC__EVENT_LEN);
        if (!e)
                return;         /* the wait then only misses the stream order */
        e->id = id;
        e->n = 0;
        for (uint32_t i = 0; i < events->via.array.size; i++) {
                const msgpack_object *o = &events->via.array.ptr[i];
                if (o->type == MSGPACK_OBJECT_BIN && o->via.bin.size == GPUIPC__EVENT_LEN)
                        memcpy(e->handles + (size_t)e->n++ * GPUIPC__EVENT_LEN, o->via.bin.ptr,
                               GPUIPC__EVENT_LEN);
        }
        e->next = c->relev;
        c->relev = e;
        if (++c->relev_n <= GPUIPC__RELEASED_MAX)
                return;
        /* Forget the oldest. */
        for (pp = &c->relev; (*pp)->next; pp = &(*pp)->next)
                ;
        free(*pp);
        *pp = NULL;
        c->relev_n--;
}

void gpuipc__released_events_take(gpuipc_client *c, uint64_t id, uint8_t **ret,
                                  unsigned *ret_n)
{
        for (struct gpuipc__relev **pp = &c->relev; *pp; pp = &(*pp)->next) {
                struct gpuipc__relev *e = *pp;
                uint8_t *h;
                if (e->id != id)
                        continue;
                *pp = e->next;
                c->relev_n--;
                /* The handles move to the front of the block. */
                h = (uint8_t *)e;
                memmove(h, e->handles, (size_t)e->n * GPUIPC__EVENT_LEN);
                *ret_n = e->n;
                *ret = h;
                return;
        }
        *ret = NULL;
        *ret_n = 0;
}

void gpuipc__relev_clear(gpuipc_client *c)
{
        while (c->relev) {
                struct gpuipc__relev *e = c->relev;
                c->relev = e->next;
                free(e);
        }
        c->relev_n = 0;
}

/* Whether v is among the newest max of the pushed values in ring (each
 * push writes ring[pushed++ % max]). */
static bool ring_has(const uint64_t *ring, unsigned pushed, unsigned max, uint64_t v)
{
        unsigned n = pushed < max ? pushed : max;

        for (unsigned i = 0; i < n; i++)
                if (ring[i] == v)
                        return true;
        return false;
}

bool gpuipc__revoked(const gpuipc_client *c, uint64_t id)
{
        return ring_has(c->revoked, c->revoked_n, GPUIPC__REVOKED_MAX, id);
}

bool gpuipc__unmapped_seen(const gpuipc_client *c, uint64_t alloc)
{
        return ring_has(c->unmapped, c->unmapped_n, GPUIPC__UNMAPPED_MAX, alloc);
}

void gpuipc__event_take(gpuipc_client *c, const msgpack_object *root, const msgpack_object *ev)
{
        uint64_t id;

        if (proto_obj_str_eq(ev, "released")) {
                if (proto_get_u64(root, "id", &id) == 0) {
                        id = gpuipc__user_id(c, id);    /* the id the caller knows */
                        released_push(c, id);
                        relev_push(c, id, proto_get(root, "events"));
                }
        } else if (proto_obj_str_eq(ev, "revoked")) {
                /* Views of id check this before they hand out stream order. */
                if (proto_get_u64(root, "id", &id) == 0 && !gpuipc__revoked(c, id))
                        c->revoked[c->revoked_n++ % GPUIPC__REVOKED_MAX] = id;
        } else if (proto_obj_str_eq(ev, "watch")) {
                gpuipc__watch_push(c, root);
        } else if (proto_obj_str_eq(ev, "uncache")) {
                /* The allocation's last registration went: close what the
                 * cache keeps of it, and say so now (the producer may be
                 * waiting to free it while we wait for its next buffer). */
                if (proto_get_u64(root, "alloc", &id) == 0) {
                        gpuipc__cucache_uncache(c, id);
                        gpuipc__send_unholds(c);
                }
        } else if (proto_obj_str_eq(ev, "unmapped")) {
                if (proto_get_u64(root, "alloc", &id) == 0)
                        c->unmapped[c->unmapped_n++ % GPUIPC__UNMAPPED_MAX] = id;
        }
        /* Unknown or reserved events are ignored. */
}
