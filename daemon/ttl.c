/* ttl.c: registrations that end at a given time. */
#include <inttypes.h>
#include <stdlib.h>

#include "daemon.h"
#include "log.h"
#include "ttl.h"
#include "watch.h"

static bool before(const struct reg *a, const struct reg *b)
{
        return a->expires_ms < b->expires_ms ||
               (a->expires_ms == b->expires_ms && a->id < b->id);
}

static void place(struct ttl_heap *h, uint32_t i, struct reg *r)
{
        h->v[i] = r;
        r->ttl_slot = i + 1;
}

static void sift_up(struct ttl_heap *h, uint32_t i)
{
        struct reg *r = h->v[i];

        while (i > 0) {
                uint32_t up = (i - 1) / 2;
                if (!before(r, h->v[up]))
                        break;
                place(h, i, h->v[up]);
                i = up;
        }
        place(h, i, r);
}

static void sift_down(struct ttl_heap *h, uint32_t i)
{
        struct reg *r = h->v[i];

        for (;;) {
                uint32_t k = 2 * i + 1;
                if (k >= h->n)
                        break;
                if (k + 1 < h->n && before(h->v[k + 1], h->v[k]))
                        k++;
                if (!before(h->v[k], r))
                        break;
                place(h, i, h->v[k]);
                i = k;
        }
        place(h, i, r);
}

static void take(struct ttl_heap *h, struct reg *r)
{
        uint32_t i = r->ttl_slot - 1;

        r->ttl_slot = 0;
        if (--h->n == i)
                return;
        place(h, i, h->v[h->n]);
        if (i > 0 && before(h->v[i], h->v[(i - 1) / 2]))
                sift_up(h, i);
        else
                sift_down(h, i);
}

static void on_timer(uv_timer_t *t);

/* Points the timer at the earliest expiry, or stops it. */
static void arm(struct daemon *d)
{
        struct ttl_heap *h = &d->ttl;
        uint64_t now, due;

        if (!h->timer || h->stopped)
                return;
        if (h->n == 0) {
                (void)uv_timer_stop(h->timer);
                return;
        }
        now = now_unix_ms();
        due = h->v[0]->expires_ms > now ? h->v[0]->expires_ms - now : 0;
        (void)uv_timer_start(h->timer, on_timer, due, 0);
}

static void on_timer(uv_timer_t *t)
{
        struct daemon *d = t->data;
        struct ttl_heap *h = &d->ttl;
        uint64_t now = now_unix_ms();

        /* Unregistering runs the removed callback, which would take r out
         * again: take it first. */
        while (h->n > 0 && h->v[0]->expires_ms <= now) {
                struct reg *r = h->v[0];
                take(h, r);
                log_info("registration %" PRIu64 " (%s) expired", r->id, r->name);
                watch_set_actor(NULL);
                (void)registry_unregister(d->reg, r);   /* may free r */
        }
        arm(d);
}

void ttl_add(struct daemon *d, struct reg *r)
{
        struct ttl_heap *h = &d->ttl;

        if (!r->expires_ms || !r->live || r->ttl_slot || h->stopped)
                return;
        if (!h->timer) {
                uv_timer_t *t = malloc(sizeof(*t));
                if (!t || uv_timer_init(d->loop, t) < 0) {
                        free(t);
                        goto nomem;
                }
                t->data = d;
                /* Never what keeps the loop running: the listener is. */
                uv_unref((uv_handle_t *)t);
                h->timer = t;
        }
        if (h->n == h->cap) {
                uint32_t cap = h->cap ? h->cap * 2 : 64;
                struct reg **v = realloc(h->v, cap * sizeof(*v));
                if (!v)
                        goto nomem;
                h->v = v;
                h->cap = cap;
        }
        place(h, h->n++, r);
        sift_up(h, h->n - 1);
        if (h->v[0] == r)
                arm(d);
        return;
nomem:
        log_warn("out of memory: registration %" PRIu64 " (%s) will not expire", r->id,
                    r->name);
}

void ttl_remove(struct daemon *d, struct reg *r)
{
        struct ttl_heap *h = &d->ttl;
        bool first;

        if (!r->ttl_slot)
                return;
        first = r->ttl_slot == 1;
        take(h, r);
        if (first)
                arm(d);
}

static void on_closed(uv_handle_t *handle)
{
        free(handle);
}

void ttl_stop(struct daemon *d)
{
        struct ttl_heap *h = &d->ttl;

        h->stopped = true;
        if (h->timer) {
                uv_close((uv_handle_t *)h->timer, on_closed);
                h->timer = NULL;
        }
}

void ttl_done(struct daemon *d)
{
        struct ttl_heap *h = &d->ttl;

        for (uint32_t i = 0; i < h->n; i++)
                h->v[i]->ttl_slot = 0;
        free(h->v);
        h->v = NULL;
        h->n = h->cap = 0;
}
