/* waits.c: waiting lookups. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "conn.h"
#include "list.h"
#include "ops.h"
#include "waits.h"

/* The waiters of one name, grouped by connection: whether a waiter may
 * look a registration up depends only on its connection (uid and groups),
 * so a register checks each waiting connection once, not each waiter, and
 * costs O(connections waiting for that name) plus the answers it sends. */
struct waitq {
        struct hmap_node node;
        struct wgroup *head, *tail;     /* by arrival of their first waiter */
        size_t name_len;
        char name[];
};

struct wgroup {
        struct wgroup *qnext, *qprev;   /* the name's groups */
        struct wgroup *cnext, *cprev;   /* the connection's groups */
        struct waitq *q;
        struct conn *c;
        struct waiter *head, *tail;     /* in arrival order */
};

struct waiter {
        struct waiter *gnext, *gprev;   /* the group's waiters */
        struct waiter *cnext, *cprev;   /* the connection's waiters */
        struct wgroup *g;
        struct conn *c;
        uint64_t seq;
        bool writable;                  /* the lookup asked for the read-write fd */
        int64_t owner_uid;              /* the owner it asked for, or -1: any */
        bool cache;                     /* and to keep the allocation mapped (holds.h) */
        waits_answer_fn *answer;
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

/* c's group in q: a connection has at most max-waits groups, and the one it
 * used last is checked first. */
static struct wgroup *wgroup_find(struct conn *c, const struct waitq *q)
{
        for (struct wgroup *g = c->wgroups; g; g = g->cnext)
                if (g->q == q)
                        return g;
        return NULL;
}

static void wgroup_link(struct conn *c, struct waitq *q, struct wgroup *g)
{
        g->q = q;
        g->c = c;
        LIST_APPEND(q->head, q->tail, g, qprev, qnext);
        LIST_PREPEND(c->wgroups, g, cprev, cnext);
}

/* Unlinks an empty group, and its name's queue with its last group. */
static void wgroup_end(struct daemon *d, struct wgroup *g)
{
        struct waitq *q = g->q;
        struct conn *c = g->c;

        LIST_REMOVE_TAIL(q->head, q->tail, g, qprev, qnext);
        if (!q->head) {
                hmap_remove(&d->waits, &q->node);
                free(q);
        }
        LIST_REMOVE(c->wgroups, g, cprev, cnext);
        free(g);
}

static void on_timer_closed(uv_handle_t *h)
{
        free(h->data);
}

/* Unlinks w from its group and its connection and frees it (once the timer
 * handle has closed); an emptied group and queue go with it. */
static void waiter_end(struct daemon *d, struct waiter *w)
{
        struct wgroup *g = w->g;
        struct conn *c = w->c;

        LIST_REMOVE_TAIL(g->head, g->tail, w, gprev, gnext);
        if (!g->head)
                wgroup_end(d, g);
        LIST_REMOVE(c->waits, w, cprev, cnext);
        c->n_waits--;
        w->g = NULL;
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
                 (int)w->g->q->name_len, w->g->q->name);
        waiter_end(c->d, w);
        ops_reply_error(c, seq, -ETIMEDOUT, msg);
}

int waits_add(struct conn *c, uint64_t seq, const char *name, size_t len, uint64_t ms,
              bool writable, bool cache, int64_t owner_uid, waits_answer_fn *answer)
{
        struct daemon *d = c->d;
        uint64_t h = hmap_hash_str(name, len);
        struct waitq *q;
        struct wgroup *g = NULL;
        struct waiter *w;
        bool new_q = false;
        int r;

        if (c->n_waits >= d->cfg.max_waits)
                return -ENOBUFS;
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        q = waitq_find(d, name, len, h);
        if (q)
                g = wgroup_find(c, q);
        if (!q) {
                q = calloc(1, sizeof(*q) + len + 1);
                if (!q)
                        goto fail_w;
                memcpy(q->name, name, len);
                q->name_len = len;
                r = hmap_insert(&d->waits, &q->node, h);
                if (r < 0) {
                        free(q);
                        goto fail_w;
                }
                new_q = true;
        }
        if (!g) {
                g = calloc(1, sizeof(*g));
                if (!g)
                        goto fail_q;
                wgroup_link(c, q, g);
        }
        r = uv_timer_init(d->loop, &w->timer);
        if (r < 0) {
                if (!g->head)
                        wgroup_end(d, g);       /* frees a new q with it */
                free(w);
                return -ENOMEM;
        }
        w->timer.data = w;
        /* Fails only for a NULL callback. */
        (void)uv_timer_start(&w->timer, on_timeout, ms, 0);
        w->seq = seq;
        w->writable = writable;
        w->owner_uid = owner_uid;
        w->cache = cache;
        w->answer = answer;
        w->c = c;
        w->g = g;
        LIST_APPEND(g->head, g->tail, w, gprev, gnext);
        LIST_PREPEND(c->waits, w, cprev, cnext);
        c->n_waits++;
        return 0;
fail_q:
        if (new_q) {
                hmap_remove(&d->waits, &q->node);
                free(q);
        }
fail_w:
        free(w);
        return -ENOMEM;
}

void waits_wake(struct daemon *d, struct reg *r)
{
        struct waitq *q = waitq_find(d, r->name, r->name_len,
                                     hmap_hash_str(r->name, r->name_len));
        struct wgroup *g = q ? q->head : NULL;

        /* Each answer may end its group, and the last one the queue: the
         * next group is read first, and the loop stops with the queue.  A
         * waiter's lease keeps r alive, and r stays live meanwhile.  The
         * waiters of a connection that may not look r up keep waiting, as
         * if r were not there. */
        while (g) {
                struct wgroup *next = g->qnext;
                bool last = !next;
                struct conn *c = g->c;

                if (access_may_lookup(c, r)) {
                        /* The group ends with its last waiter: stop then.
                         * A waiter that asked for another owner (owner_uid)
                         * keeps waiting, as if r were not there. */
                        struct waiter *w = g->head;
                        while (w) {
                                struct waiter *wn = w->gnext;
                                uint64_t seq = w->seq;
                                bool writable = w->writable, cache = w->cache;
                                waits_answer_fn *answer = w->answer;
                                char msg[PROTO_NAME_MAX + 128];
                                int k;

                                if (w->owner_uid < 0 || w->owner_uid == r->uid) {
                                        waiter_end(d, w);
                                        k = answer(c, seq, r, writable, cache, msg, sizeof(msg));
                                        if (k < 0)
                                                ops_reply_error(c, seq, k, msg);
                                }
                                w = wn;
                        }
                }
                if (last)
                        break;
                g = next;
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
