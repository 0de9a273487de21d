/* waits.c: waiting lookups. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "conn.h"
#include "ops.h"
#include "waits.h"

struct waitq {
        struct hmap_node node;
        struct waiter *head, *tail;
        size_t name_len;
        char name[];
};

struct waiter {
        struct waiter *qnext, *qprev;   /* the name's queue */
        struct waiter *cnext, *cprev;   /* the connection's waiters */
        struct waitq *q;
        struct conn *c;
        uint64_t seq;
        bool writable;                  /* the lookup asked for the read-write fd */
        int64_t owner_uid;              /* the owner it asked for, or -1: any */
        uv_timer_t timer;
};

static struct waitq *waitq_find(struct daemon *d, const char *name, size_t len, uint64_t h)
{
        for (struct hmap_node *n = hmap_bucket(&d->waits, h); n; n = n->next) {
                struct waitq *q = container_of(n, struct waitq, node);
                if (n->hash == h && q->name_len == len && memcmp(q->name, name, len) == 0)
                        return q;
        }
        return NULL;
}

static void on_timer_closed(uv_handle_t *h)
{
        free(h->data);
}

/* Unlinks w from its queue and its connection and frees it (once the timer
 * handle has closed). */
static void waiter_end(struct daemon *d, struct waiter *w)
{
        struct waitq *q = w->q;
        struct conn *c = w->c;

        if (w->qprev)
                w->qprev->qnext = w->qnext;
        else
                q->head = w->qnext;
        if (w->qnext)
                w->qnext->qprev = w->qprev;
        else
                q->tail = w->qprev;
        if (!q->head) {
                hmap_remove(&d->waits, &q->node);
                free(q);
        }
        if (w->cprev)
                w->cprev->cnext = w->cnext;
        else
                c->waits = w->cnext;
        if (w->cnext)
                w->cnext->cprev = w->cprev;
        c->n_waits--;
        w->q = NULL;
        w->c = NULL;
        uv_close((uv_handle_t *)&w->timer, on_timer_closed);
}

static void on_timeout(uv_timer_t *t)
{
        struct waiter *w = t->data;
        struct conn *c = w->c;
        uint64_t seq = w->seq;
        char msg[PROTO_NAME_MAX + 64];

        snprintf(msg, sizeof(msg), "no registration named %.*s appeared in time",
                 (int)w->q->name_len, w->q->name);
        waiter_end(c->d, w);
        ops_reply_error(c, seq, -ETIMEDOUT, msg);
}

int waits_add(struct conn *c, uint64_t seq, const char *name, size_t len, uint64_t ms,
              bool writable, int64_t owner_uid)
{
        struct daemon *d = c->d;
        uint64_t h = hmap_hash_str(name, len);
        struct waitq *q;
        struct waiter *w;
        bool new_q = false;
        int r;

        if (c->n_waits >= d->cfg.max_waits)
                return -ENOBUFS;
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        q = waitq_find(d, name, len, h);
        if (!q) {
                q = calloc(1, sizeof(*q) + len + 1);
                if (!q) {
                        free(w);
                        return -ENOMEM;
                }
                memcpy(q->name, name, len);
                q->name_len = len;
                r = hmap_insert(&d->waits, &q->node, h);
                if (r < 0) {
                        free(q);
                        free(w);
                        return r;
                }
                new_q = true;
        }
        r = uv_timer_init(d->loop, &w->timer);
        if (r < 0) {
                if (new_q) {
                        hmap_remove(&d->waits, &q->node);
                        free(q);
                }
                free(w);
                return -ENOMEM;
        }
        w->timer.data = w;
        /* Fails only for a NULL callback. */
        (void)uv_timer_start(&w->timer, on_timeout, ms, 0);
        w->seq = seq;
        w->writable = writable;
        w->owner_uid = owner_uid;
        w->c = c;
        w->q = q;
        w->qprev = q->tail;
        if (q->tail)
                q->tail->qnext = w;
        else
                q->head = w;
        q->tail = w;
        w->cnext = c->waits;
        if (c->waits)
                c->waits->cprev = w;
        c->waits = w;
        c->n_waits++;
        return 0;
}

void waits_wake(struct daemon *d, struct reg *r)
{
        struct waitq *q = waitq_find(d, r->name, r->name_len,
                                     hmap_hash_str(r->name, r->name_len));

        /* Each answer may end the queue; stop once it is gone.  A waiter's
         * lease keeps r alive, and r stays live meanwhile.  A waiter that
         * may not look r up keeps waiting, as if r were not there. */
        struct waiter *w = q ? q->head : NULL;

        while (w) {
                struct waiter *next = w->qnext;
                struct conn *c = w->c;
                uint64_t seq = w->seq;
                bool writable = w->writable;

                if (access_may_lookup(c, r) && (w->owner_uid < 0 || w->owner_uid == r->uid)) {
                        waiter_end(d, w);       /* frees q with its last waiter */
                        ops_lookup_answer(c, seq, r, writable);
                }
                w = next;
        }
}

void waits_cancel_conn(struct conn *c)
{
        while (c->waits)
                waiter_end(c->d, c->waits);
}

void waits_shutdown_conn(struct conn *c)
{
        while (c->waits) {
                uint64_t seq = c->waits->seq;

                waiter_end(c->d, c->waits);
                ops_reply_error(c, seq, -ESHUTDOWN, "the daemon is shutting down");
        }
}
