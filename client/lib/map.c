/* map.c: the per-process cache of buffer mappings.
 *
 * Every lookup brings a fresh duplicate of the registered memfd, but the
 * buffer behind it is the same file, so (st_dev, st_ino) names it.  Mapping
 * it once per process and protection keeps address space and page tables
 * small when many views of one buffer are open, and is what the API
 * promises.  Clients in several threads share this table, hence the mutex.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
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

static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gpuipc__map *maps;

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
