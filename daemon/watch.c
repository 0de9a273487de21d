/* watch.c: watch subscriptions, owner executables, per-device bytes. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "access.h"
#include "conn.h"
#include "cuda_drv.h"
#include "cuda_reg.h"
#include "daemon.h"
#include "proto.h"
#include "watch.h"

#define CONN_KEY(id) ((id) | (1ull << 63))      /* conn entries beside reg ids */

struct watcher {
        struct watcher *prev, *next;
        struct conn *c;
        uint16_t plen;
        char prefix[PROTO_NAME_MAX + 1];
};

/* An executable path, shared by a connection's entry and the entries of
 * the registrations it made: one copy per connection, not one each. */
struct exe {
        uint32_t refs;
        char s[];
};

/* One per connection that said hello and per registration not yet freed. */
struct entry {
        struct hmap_node node;
        uint64_t key;
        struct exe *exe;                /* a reference; NULL for "" */
        int16_t bytes_slot;             /* registrations: index in bytes[], or -1 */
};

struct bytes_slot {
        unsigned __int128 bytes;        /* exact; reported saturated at UINT64_MAX */
        uint64_t count;                 /* registrations */
        uint8_t kind;
        char device[CUDA_UUID_STR_LEN + 1];
};

static struct watcher *watchers;
static uint32_t n_watchers;
static struct reg_party *actor;
static struct hmap entries;
static bool entries_ready;
static struct bytes_slot bytes[WATCH_DEVICES_MAX];
static unsigned n_bytes;

static struct entry *entry_find(uint64_t key)
{
        uint64_t h = hmap_hash_u64(key);

        if (!entries_ready)
                return NULL;
        for (struct hmap_node *n = hmap_bucket(&entries, h); n; n = n->next) {
                struct entry *e = container_of(n, struct entry, node);
                if (e->key == key)
                        return e;
        }
        return NULL;
}

/* A new exe with one reference, or NULL for "" and when out of memory
 * (best effort: the record then shows ""). */
static struct exe *exe_new(const char *path)
{
        size_t n = strlen(path);
        struct exe *x;

        if (n == 0)
                return NULL;
        x = malloc(sizeof(*x) + n + 1);
        if (!x)
                return NULL;
        x->refs = 1;
        memcpy(x->s, path, n + 1);
        return x;
}

static void exe_unref(struct exe *x)
{
        if (x && --x->refs == 0)
                free(x);
}

static void entry_free(struct entry *e)
{
        exe_unref(e->exe);
        free(e);
}

/* Adds an entry for key holding a reference to exe (may be NULL); best
 * effort. */
static struct entry *entry_add(uint64_t key, struct exe *exe)
{
        struct entry *e;

        if (!entries_ready) {
                hmap_init(&entries);
                entries_ready = true;
        }
        e = malloc(sizeof(*e));
        if (!e)
                return NULL;
        e->key = key;
        e->bytes_slot = -1;
        e->exe = exe;
        if (hmap_insert(&entries, &e->node, hmap_hash_u64(key)) < 0) {
                free(e);
                return NULL;
        }
        if (exe)
                exe->refs++;
        return e;
}

static void entry_drop(uint64_t key)
{
        struct entry *e = entry_find(key);

        if (!e)
                return;
        hmap_remove(&entries, &e->node);
        entry_free(e);
}

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
                w->next = watchers;
                if (watchers)
                        watchers->prev = w;
                watchers = w;
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
        if (w->prev)
                w->prev->next = w->next;
        else
                watchers = w->next;
        if (w->next)
                w->next->prev = w->prev;
        n_watchers--;
        free(w);
        return true;
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

/* ---- executables ------------------------------------------------------- */

void watch_conn_accepted(struct conn *c)
{
        char path[64], exe[WATCH_EXE_MAX + 1];
        struct exe *x;
        ssize_t n;

        if (entry_find(CONN_KEY(c->id)))
                return;
        snprintf(path, sizeof(path), "/proc/%" PRIu32 "/exe", c->party.pid);
        n = readlink(path, exe, sizeof(exe) - 1);
        /* Unreadable (another user's process without CAP_SYS_PTRACE, another
         * PID namespace) or longer than we keep: "" rather than a guess. */
        if (n < 0 || (size_t)n >= sizeof(exe) - 1)
                n = 0;
        exe[n] = '\0';
        x = exe_new(exe);
        (void)entry_add(CONN_KEY(c->id), x);
        exe_unref(x);           /* the entry holds it, or nobody */
}

void watch_conn_closed(struct conn *c)
{
        watch_remove(c);
        entry_drop(CONN_KEY(c->id));
}

const char *watch_party_exe(const struct reg_party *p)
{
        const struct entry *e;

        if (!p || p->detached)
                return "";
        e = entry_find(CONN_KEY(conn_from_party((struct reg_party *)p)->id));
        return e && e->exe ? e->exe->s : "";
}

const char *watch_reg_exe(uint64_t id)
{
        struct entry *e = entry_find(id);

        return e && e->exe ? e->exe->s : "";
}

/* ---- bytes per device -------------------------------------------------- */

static int bytes_slot(unsigned kind, const char *device)
{
        for (unsigned i = 0; i < n_bytes; i++)
                if (bytes[i].kind == kind && strcmp(bytes[i].device, device) == 0)
                        return (int)i;
        if (n_bytes == WATCH_DEVICES_MAX)
                return -1;
        bytes[n_bytes].kind = (uint8_t)kind;
        snprintf(bytes[n_bytes].device, sizeof(bytes[0].device), "%s", device);
        bytes[n_bytes].bytes = bytes[n_bytes].count = 0;
        return (int)n_bytes++;
}

void watch_bytes_each(void (*fn)(unsigned kind, const char *device, uint64_t count,
                                 uint64_t b, void *data),
                      void *data)
{
        for (unsigned i = 0; i < n_bytes; i++)
                if (bytes[i].count > 0)
                        fn(bytes[i].kind, bytes[i].device, bytes[i].count,
                           bytes[i].bytes > UINT64_MAX ? UINT64_MAX : (uint64_t)bytes[i].bytes,
                           data);
}

/* ---- registry callbacks ------------------------------------------------ */

static const char *restored_exe;

void watch_set_restored_exe(const char *exe)
{
        restored_exe = exe;
}

void watch_on_added(struct reg *r, void *userdata)
{
        const struct entry *ce = r->owner && !r->owner->detached
                ? entry_find(CONN_KEY(conn_from_party(r->owner)->id)) : NULL;
        /* A restored registration brings its own path: one copy each. */
        struct exe *own = restored_exe ? exe_new(restored_exe) : NULL;
        char device[CUDA_UUID_STR_LEN + 1] = "";
        struct entry *e;
        int slot;

        if (r->cuda)
                cuda_uuid_format(r->cuda->device, device);
        e = entry_add(r->id, restored_exe ? own : ce ? ce->exe : NULL);
        restored_exe = NULL;
        exe_unref(own);         /* the entry holds it, or nobody */
        slot = bytes_slot(r->kind, device);
        if (e && slot >= 0) {
                e->bytes_slot = (int16_t)slot;
                bytes[slot].bytes += r->size;
                bytes[slot].count++;
        }
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

void watch_reg_freed(struct reg *r)
{
        struct entry *e = entry_find(r->id);

        if (e && e->bytes_slot >= 0) {
                bytes[e->bytes_slot].bytes -= bytes[e->bytes_slot].bytes < r->size
                                                      ? bytes[e->bytes_slot].bytes : r->size;
                bytes[e->bytes_slot].count--;
        }
        entry_drop(r->id);
}

void watch_done(void)
{
        struct hmap_node *n, *next;

        while (watchers)
                watch_remove(watchers->c);
        if (!entries_ready)
                return;
        /* Every registration was freed through watch_reg_freed and every
         * connection closed; anything left is freed bucket by bucket. */
        hmap_for_each_safe(n, next, &entries) {
                hmap_remove(&entries, n);
                entry_free(container_of(n, struct entry, node));
        }
        hmap_free(&entries);
        entries_ready = false;
}
