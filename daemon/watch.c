/* watch.c: watch subscriptions and their events. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "access.h"
#include "conn.h"
#include "daemon.h"
#include "list.h"
#include "proto.h"
#include "watch.h"

struct watcher {
        struct watcher *prev, *next;
        struct conn *c;
        uint16_t plen;
        char prefix[PROTO_NAME_MAX + 1];
};

static struct watcher *watchers;
static uint32_t n_watchers;
static struct reg_party *actor;

/* ---- subscriptions ------------------------------------------------------ */

static struct watcher *watcher_of(const struct conn *c)
{
        for (struct watcher *w = watchers; w; w = w->next)
                if (w->c == c)
                        return w;
        return NULL;
}

int watch_add(struct conn *c, const char *prefix, size_t plen)
{
        struct watcher *w = watcher_of(c);

        assert(plen <= PROTO_NAME_MAX);
        if (!w) {
                uint32_t of_uid = 0;

                if (n_watchers >= WATCH_MAX)
                        return -ENOBUFS;
                /* At most 64 watchers: counting them is cheap. */
                for (w = watchers; w; w = w->next)
                        of_uid += w->c->party.uid == c->party.uid;
                if (of_uid >= c->d->cfg.max_watches_per_uid)
                        return -EDQUOT;
                w = calloc(1, sizeof(*w));
                if (!w)
                        return -ENOMEM;
                w->c = c;
                LIST_PREPEND(watchers, w, prev, next);
                n_watchers++;
        }
        memcpy(w->prefix, prefix, plen);
        w->prefix[plen] = '\0';
        w->plen = (uint16_t)plen;
        return 0;
}

bool watch_remove(struct conn *c)
{
        struct watcher *w = watcher_of(c);

        if (!w)
                return false;
        LIST_REMOVE(watchers, w, prev, next);
        n_watchers--;
        free(w);
        return true;
}

void watch_conn_closed(struct conn *c)
{
        watch_remove(c);
}

uint32_t watch_count(void)
{
        return n_watchers;
}

void watch_set_actor(struct reg_party *p)
{
        actor = p;
}

static bool in_prefix(const struct watcher *w, const struct reg *r)
{
        if (w->plen == 0)
                return true;
        if (r->name_len < w->plen || memcmp(r->name, w->prefix, w->plen) != 0)
                return false;
        return r->name_len == w->plen || r->name[w->plen] == '/';
}

/* Sends one event to every subscriber whose prefix covers r.  Runs inside
 * registry calls: conn_send only queues (and dooms a watcher that does not
 * read, like any client over its output limit). */
static void emit(const char *type, const struct reg *r, const struct lease *l, uint32_t pid,
                 uint32_t uid, uint32_t leases)
{
        struct proto_out o;
        struct proto_map m;
        bool packed = false;

        for (struct watcher *w = watchers; w; w = w->next) {
                if (w->c->closed || w->c->party.detached || !in_prefix(w, r) ||
                    !access_may_see(w->c, r))
                        continue;
                if (!packed) {
                        proto_out_init(&o);
                        proto_map_begin(&m, &o.pk);
                        proto_map_kstr(&m, "event", "watch");
                        proto_map_kstr(&m, "type", type);
                        proto_map_ku64(&m, "id", r->id);
                        proto_map_kstrn(&m, "name", r->name, r->name_len);
                        proto_map_kstr(&m, "kind", proto_kind_name(r->kind));
                        proto_map_ku64(&m, "size", r->size);
                        proto_map_ku64(&m, "leases", leases);
                        proto_map_ku64(&m, "pid", pid);
                        proto_map_ku64(&m, "uid", uid);
                        proto_map_ku64(&m, "time_ms", now_unix_ms());
                        if (l)
                                proto_map_ku64(&m, "lease", l->id);
                        proto_map_end(&m);
                        packed = true;
                }
                /* conn_send finishes o in place: send a copy to each. */
                {
                        struct proto_out one;
                        proto_out_init(&one);
                        msgpack_sbuffer_write(&one.sb, o.sb.data + PROTO_HDR_LEN,
                                              o.sb.size - PROTO_HDR_LEN);
                        (void)conn_send(w->c, &one, NULL);
                        proto_out_free(&one);
                }
        }
        if (packed)
                proto_out_free(&o);
}

void watch_emit_revoked(struct reg *r, const struct reg_party *by)
{
        emit("revoked", r, NULL, by ? by->pid : r->pid, by ? by->uid : r->uid, r->leases);
}

/* ---- registry callbacks ------------------------------------------------ */

void watch_on_added(struct reg *r, void *userdata)
{
        emit("registered", r, NULL, r->pid, r->uid, r->leases);
}

void watch_on_removed(struct reg *r, void *userdata)
{
        const struct reg_party *by = actor ? actor : NULL;

        /* Between requests it is the owner's connection ending. */
        emit("unregistered", r, NULL, by ? by->pid : r->pid, by ? by->uid : r->uid, r->leases);
}

void watch_on_leased(struct reg *r, struct lease *l, void *userdata)
{
        emit("leased", r, l, l->holder->pid, l->holder->uid, r->leases);
}

void watch_on_unleased(struct reg *r, struct lease *l, void *userdata)
{
        /* Runs before the registry drops it: count what remains. */
        emit("released", r, l, l->holder->pid, l->holder->uid, r->leases - 1);
}

void watch_done(void)
{
        while (watchers)
                watch_remove(watchers->c);
}
