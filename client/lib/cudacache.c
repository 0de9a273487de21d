/* cudacache.c: the open-once table of device allocations mapped in this
 * process, and the mapping cache: an entry whose last view went stays
 * mapped when that is safe (cuda-vmm, or held producer-bound memory; see
 * docs/protocol.md, "The mapping cache"), least recently used closed first
 * beyond the budget.  One lock serialises the table, the cache and the
 * imports of cudaimport.c. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cudaint.h"

#ifdef GPUIPC_HAVE_CUDA_H

static pthread_mutex_t cumaps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gpuipc__cumap *cumaps;

/* ---- the cache ---------------------------------------------------------- */

static struct {
        struct gpuipc__cumap *head, *tail;      /* unreferenced entries, oldest first */
        uint64_t bytes, max_bytes;
        unsigned n, max_n;
        bool init;
} cache;

#define CACHE_BYTES_DEFAULT   (16ull << 30)
#define CACHE_ENTRIES_DEFAULT 1024u

/* Lock held. */
static void cache_init(void)
{
        const char *b, *n;

        if (cache.init)
                return;
        b = getenv("GPUIPC_MAP_CACHE_BYTES");
        n = getenv("GPUIPC_MAP_CACHE_ENTRIES");
        cache.max_bytes = b && *b ? strtoull(b, NULL, 0) : CACHE_BYTES_DEFAULT;
        cache.max_n = n && *n ? (unsigned)strtoul(n, NULL, 0) : CACHE_ENTRIES_DEFAULT;
        cache.init = true;
}

bool gpuipc__cucache_enabled(void)
{
        bool on;

        pthread_mutex_lock(&cumaps_lock);
        cache_init();
        on = cache.max_bytes > 0 && cache.max_n > 0;
        pthread_mutex_unlock(&cumaps_lock);
        return on;
}

static void lru_remove(struct gpuipc__cumap *m)
{
        if (m->lprev)
                m->lprev->lnext = m->lnext;
        else
                cache.head = m->lnext;
        if (m->lnext)
                m->lnext->lprev = m->lprev;
        else
                cache.tail = m->lprev;
        m->lprev = m->lnext = NULL;
        cache.bytes -= m->size;
        cache.n--;
}

static void lru_append(struct gpuipc__cumap *m)
{
        m->lprev = cache.tail;
        m->lnext = NULL;
        if (cache.tail)
                cache.tail->lnext = m;
        else
                cache.head = m;
        cache.tail = m;
        cache.bytes += m->size;
        cache.n++;
}

static bool holds(const struct gpuipc__cumap *m, const gpuipc_client *c)
{
        for (unsigned i = 0; i < m->n_holders; i++)
                if (m->holders[i] == c)
                        return true;
        return false;
}

/* Queues `unhold` of alloc on c, sent at c's next call; best effort under
 * memory pressure (the hold then lasts until c disconnects). */
static void queue_unhold(gpuipc_client *c, uint64_t alloc)
{
        if (c->n_unholds == c->cap_unholds) {
                unsigned cap = c->cap_unholds ? c->cap_unholds * 2 : 16;
                uint64_t *p = realloc(c->unholds, cap * sizeof(*p));
                if (!p)
                        return;
                c->unholds = p;
                c->cap_unholds = cap;
        }
        c->unholds[c->n_unholds++] = alloc;
}

/* Unlinks, closes and frees m (unreferenced, out of the LRU list), and
 * queues the unholds of its holders.  Lock held: a lookup racing with this
 * must not find the key again before the mapping is gone. */
static void entry_drop(struct cuda *cu, struct gpuipc__cumap *m)
{
        struct gpuipc__cumap **pp;
        CUcontext saved;

        for (pp = &cumaps; *pp; pp = &(*pp)->next)
                if (*pp == m) {
                        *pp = m->next;
                        break;
                }
        if (gpuipc__cu_enter(NULL, cu, m->ordinal, &saved) == 0) {
                gpuipc__cumap_close(cu, m);
                gpuipc__cu_leave(cu, saved);
        }
        for (unsigned i = 0; i < m->n_holders; i++)
                queue_unhold(m->holders[i], m->alloc_id);
        free(m->holders);
        gpuipc__cumap_free(m);
}

/* Lock held.  Closes the oldest unreferenced entries over the limits. */
static void cache_evict(struct cuda *cu)
{
        while (cache.head && (cache.bytes > cache.max_bytes || cache.n > cache.max_n)) {
                struct gpuipc__cumap *m = cache.head;
                lru_remove(m);
                entry_drop(cu, m);
        }
}

static int add_holder(struct gpuipc__cumap *m, gpuipc_client *c)
{
        gpuipc_client **p;

        if (holds(m, c))
                return 0;
        p = realloc(m->holders, (m->n_holders + 1) * sizeof(*p));
        if (!p)
                return -ENOMEM;
        m->holders = p;
        m->holders[m->n_holders++] = c;
        return 0;
}

/* The entry for k with a reference taken, or NULL; the lock is held.
 * held: the lookup reply says c holds k's allocation. */
static struct gpuipc__cumap *entry_take(gpuipc_client *c, const struct gpuipc__cumap *k,
                                        bool held)
{
        struct gpuipc__cumap *m;

        for (m = cumaps; m; m = m->next)
                if (gpuipc__cumap_key_eq(m, k))
                        break;
        if (!m)
                return NULL;
        if (m->refs++ == 0)
                lru_remove(m);  /* a warm lookup: out of the cache */
        if (held) {
                m->doomed = false;      /* registered again and held */
                m->alloc_id = k->alloc_id;
                if (add_holder(m, c) < 0)
                        queue_unhold(c, k->alloc_id);
        }
        return m;
}

struct gpuipc__cumap *gpuipc__cumap_take(gpuipc_client *c, const struct gpuipc__cumap *k,
                                         bool held)
{
        struct gpuipc__cumap *m;

        pthread_mutex_lock(&cumaps_lock);
        m = entry_take(c, k, held);
        pthread_mutex_unlock(&cumaps_lock);
        return m;
}

/* The shared entry for key k (filled in by the caller), opening it on first
 * use.  The context of k->ordinal is current. */
int gpuipc__cumap_get(gpuipc_client *c, struct cuda *cu, const int *fds, struct gpuipc__cumap *k,
                     bool held, struct gpuipc__cumap **ret)
{
        struct gpuipc__cumap *m;
        int r = 0;

        pthread_mutex_lock(&cumaps_lock);
        m = entry_take(c, k, held);
        if (m)
                goto out;
        m = malloc(sizeof(*m));
        if (!m) {
                r = -ENOMEM;
                goto out;
        }
        /* The entry takes k's arrays. */
        *m = *k;
        k->keys = NULL;
        k->sizes = NULL;
        r = gpuipc__cumap_open(c, cu, fds, m);
        if (r < 0) {
                gpuipc__cumap_free(m);
                goto out;
        }
        if (held && add_holder(m, c) < 0)
                queue_unhold(c, k->alloc_id);
        m->refs = 1;
        m->next = cumaps;
        cumaps = m;
out:
        pthread_mutex_unlock(&cumaps_lock);
        if (r < 0)
                return r;
        *ret = m;
        return 0;
}

/* Whether m may stay mapped without views: cuda-vmm memory lives while we
 * hold the import; producer-bound memory only while held. */
static bool cacheable(const struct gpuipc__cumap *m)
{
        return !m->own && !m->doomed && (m->kind == GPUIPC_KIND_CUDA_VMM || m->n_holders > 0) &&
               cache.max_bytes > 0 && cache.max_n > 0 && m->size <= cache.max_bytes;
}

void gpuipc__cumap_put(struct cuda *cu, struct gpuipc__cumap *m)
{
        pthread_mutex_lock(&cumaps_lock);
        cache_init();
        if (--m->refs == 0) {
                if (cacheable(m)) {
                        lru_append(m);
                        cache_evict(cu);
                } else {
                        entry_drop(cu, m);
                }
        }
        pthread_mutex_unlock(&cumaps_lock);
}

void gpuipc__cucache_uncache(gpuipc_client *c, uint64_t alloc)
{
        struct gpuipc__cumap *m, *next;
        struct cuda *cu;

        cu = gpuipc__cu_loaded();
        if (!cu)
                return;         /* nothing was ever mapped */
        pthread_mutex_lock(&cumaps_lock);
        for (m = cumaps; m; m = next) {
                next = m->next;
                if (m->alloc_id != alloc || !holds(m, c))
                        continue;
                m->doomed = true;
                if (m->refs == 0) {
                        lru_remove(m);
                        entry_drop(cu, m);
                }
        }
        pthread_mutex_unlock(&cumaps_lock);
}

void gpuipc__cucache_conn_lost(gpuipc_client *c)
{
        struct gpuipc__cumap *m, *next;
        struct cuda *cu;

        /* Never loading the driver here: a host-only client ends too. */
        cu = gpuipc__cu_loaded();
        if (!cu)
                return;         /* never loaded: nothing is mapped */
        pthread_mutex_lock(&cumaps_lock);
        for (m = cumaps; m; m = next) {
                next = m->next;
                if (!holds(m, c))
                        continue;
                for (unsigned i = 0; i < m->n_holders; i++)
                        if (m->holders[i] == c) {
                                m->holders[i] = m->holders[--m->n_holders];
                                break;
                        }
                /* Producer-bound memory nobody holds may be freed now. */
                if (m->kind == GPUIPC_KIND_CUDA_VMM || m->n_holders > 0)
                        continue;
                m->doomed = true;
                if (m->refs == 0) {
                        lru_remove(m);
                        entry_drop(cu, m);
                }
        }
        free(c->unholds);       /* the daemon dropped them with the connection */
        c->unholds = NULL;
        c->n_unholds = c->cap_unholds = 0;
        pthread_mutex_unlock(&cumaps_lock);
}

unsigned gpuipc__cucache_take_unholds(gpuipc_client *c, uint64_t **ret)
{
        unsigned n;

        pthread_mutex_lock(&cumaps_lock);
        n = c->n_unholds;
        *ret = c->unholds;
        c->unholds = NULL;
        c->n_unholds = c->cap_unholds = 0;
        pthread_mutex_unlock(&cumaps_lock);
        return n;
}

int gpuipc_cache_set_limits(uint64_t max_bytes, unsigned max_entries)
{
        struct cuda *cu;

        pthread_mutex_lock(&cumaps_lock);
        cache_init();
        cache.max_bytes = max_bytes;
        cache.max_n = max_entries;
        if (cache.head && (cu = gpuipc__cu_loaded()))
                cache_evict(cu);
        pthread_mutex_unlock(&cumaps_lock);
        return 0;
}

int gpuipc_cache_trim(gpuipc_client *c)
{
        struct cuda *cu;
        int n = 0;

        pthread_mutex_lock(&cumaps_lock);
        if (cache.head && (cu = gpuipc__cu_loaded()))
                while (cache.head) {
                        struct gpuipc__cumap *m = cache.head;
                        lru_remove(m);
                        entry_drop(cu, m);
                        n++;
                }
        pthread_mutex_unlock(&cumaps_lock);
        if (c) {
                int r = gpuipc__begin(c);       /* sends the unholds */
                if (r < 0)
                        return r;
        }
        return n;
}

#endif
