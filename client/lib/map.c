/* map.c: the per-process cache of buffer mappings.
 *
 * A lookup brings a fresh duplicate of the registered memfd (unless the
 * daemon left it out for `have`, below), but the buffer behind it is the
 * same file, so (st_dev, st_ino) names it.  Mapping
 * it once per process and protection keeps address space and page tables
 * small when many views of one buffer are open, and is what the API
 * promises.  Clients in several threads share this table, hence the mutex.
 *
 * The same lock guards the hints: for each client, name and protection, the
 * host views open now, newest first.  A lookup of a name that has one sends
 * the newest view's lease as `have`, and a daemon that sees this connection
 * holds that lease on the registration the name resolves to answers without
 * an fd: the view's mapping serves the new view too.  That saves the fd's
 * passing, fstat() and close() on every repeated lookup.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "internal.h"

struct gpuipc__map {
        struct gpuipc__map *next;
        dev_t dev;
        ino_t ino;
        bool writable;
        uint8_t *base;
        size_t length;                  /* the whole file, at mapping time */
        unsigned refs;
};

struct gpuipc__hint {
        struct gpuipc__hint *next;      /* bucket chain */
        const gpuipc_client *c;
        gpuipc_view *views;             /* newest first, through hprev/hnext */
        uint32_t hash;
        bool writable;
        size_t name_len;
        char name[];
};

#define HINT_BUCKETS 1024u

static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gpuipc__map *maps;
static struct gpuipc__hint *hints[HINT_BUCKETS];

int gpuipc__map_get(int fd, bool writable, uint64_t need, struct gpuipc__map **ret_map,
                    uint8_t **ret_base)
{
        struct gpuipc__map *m;
        struct stat st;
        void *p;
        int r = 0;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || st.st_size <= 0)
                return -EBADF;
        /* A daemon bug must not hand out a pointer past the mapping. */
        if ((uint64_t)st.st_size < need || (uint64_t)st.st_size > SIZE_MAX)
                return -EBADMSG;

        pthread_mutex_lock(&maps_lock);
        /* A file that grew since it was mapped needs a mapping that covers
         * the new range; the old one stays for the views that use it. */
        for (m = maps; m; m = m->next)
                if (m->dev == st.st_dev && m->ino == st.st_ino && m->writable == writable &&
                    m->length >= need)
                        break;
        if (m) {
                m->refs++;
                goto out;
        }
        m = calloc(1, sizeof(*m));
        if (!m) {
                r = -ENOMEM;
                goto out;
        }
        p = mmap(NULL, (size_t)st.st_size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED,
                 fd, 0);
        if (p == MAP_FAILED) {
                r = -errno;
                free(m);
                m = NULL;
                goto out;
        }
        m->dev = st.st_dev;
        m->ino = st.st_ino;
        m->writable = writable;
        m->base = p;
        m->length = (size_t)st.st_size;
        m->refs = 1;
        m->next = maps;
        maps = m;
out:
        pthread_mutex_unlock(&maps_lock);
        if (r < 0)
                return r;
        *ret_map = m;
        *ret_base = m->base;
        return 0;
}

void gpuipc__map_put(struct gpuipc__map *m)
{
        struct gpuipc__map **pp;

        if (!m)
                return;
        pthread_mutex_lock(&maps_lock);
        if (--m->refs > 0) {
                pthread_mutex_unlock(&maps_lock);
                return;
        }
        for (pp = &maps; *pp; pp = &(*pp)->next)
                if (*pp == m) {
                        *pp = m->next;
                        break;
                }
        pthread_mutex_unlock(&maps_lock);
        munmap(m->base, m->length);
        free(m);
}

/* ---- hints ------------------------------------------------------------- */

static uint32_t hint_hash(const gpuipc_client *c, const char *name, size_t len, bool writable)
{
        uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)(uintptr_t)c ^ writable;

        /* FNV-1a: names are short and the table is the process's own. */
        for (size_t i = 0; i < len; i++)
                h = (h ^ (uint8_t)name[i]) * 0x100000001b3ull;
        return (uint32_t)(h ^ (h >> 32));
}

static struct gpuipc__hint **hint_slot(const gpuipc_client *c, const char *name, size_t len,
                                       bool writable, uint32_t hash)
{
        struct gpuipc__hint **pp;

        for (pp = &hints[hash % HINT_BUCKETS]; *pp; pp = &(*pp)->next) {
                struct gpuipc__hint *h = *pp;
                if (h->hash == hash && h->c == c && h->writable == writable &&
                    h->name_len == len && memcmp(h->name, name, len) == 0)
                        break;
        }
        return pp;
}

bool gpuipc__hint_get(const gpuipc_client *c, const char *name, bool writable,
                      uint64_t *ret_lease, uint64_t *ret_id, struct gpuipc__map **ret_map)
{
        size_t len = strlen(name);
        struct gpuipc__hint *h;
        gpuipc_view *v;

        pthread_mutex_lock(&maps_lock);
        h = *hint_slot(c, name, len, writable, hint_hash(c, name, len, writable));
        v = h ? h->views : NULL;
        /* A lease of an earlier epoch was taken from a daemon whose state
         * is gone: its id may name another lease now.  Views are newest
         * first, so if the newest is stale, all are. */
        if (v && v->epoch != c->epoch)
                v = NULL;
        if (v) {
                v->map->refs++;
                *ret_lease = v->lease;
                *ret_id = v->info->id;
                *ret_map = v->map;
        }
        pthread_mutex_unlock(&maps_lock);
        return v != NULL;
}

void gpuipc__hint_add(gpuipc_view *v, const char *name, bool writable)
{
        size_t len = strlen(name);
        uint32_t hash = hint_hash(v->c, name, len, writable);
        struct gpuipc__hint **pp, *h;

        pthread_mutex_lock(&maps_lock);
        pp = hint_slot(v->c, name, len, writable, hash);
        h = *pp;
        if (!h) {
                /* Best effort: without a hint, lookups carry the fd. */
                h = malloc(sizeof(*h) + len);
                if (!h)
                        goto out;
                h->next = NULL;
                h->c = v->c;
                h->views = NULL;
                h->hash = hash;
                h->writable = writable;
                h->name_len = len;
                memcpy(h->name, name, len);
                *pp = h;
        }
        v->hint = h;
        v->hprev = NULL;
        v->hnext = h->views;
        if (h->views)
                h->views->hprev = v;
        h->views = v;
out:
        pthread_mutex_unlock(&maps_lock);
}

void gpuipc__hint_del(gpuipc_view *v)
{
        struct gpuipc__hint *h = v->hint, **pp;

        if (!h)
                return;
        pthread_mutex_lock(&maps_lock);
        if (v->hprev)
                v->hprev->hnext = v->hnext;
        else
                h->views = v->hnext;
        if (v->hnext)
                v->hnext->hprev = v->hprev;
        v->hint = NULL;
        if (!h->views) {
                for (pp = &hints[h->hash % HINT_BUCKETS]; *pp != h; pp = &(*pp)->next)
                        ;
                *pp = h->next;
                free(h);
        }
        pthread_mutex_unlock(&maps_lock);
}

uint8_t *gpuipc__map_base(const struct gpuipc__map *m, uint64_t need)
{
        return m->length >= need ? m->base : NULL;
}

uint64_t gpuipc__map_length(const struct gpuipc__map *m)
{
        return m->length;
}
