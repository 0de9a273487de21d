/* hostbuf.c: producer-side host buffers (memfds), and what registering one
 * needs beyond register.c: the memfd sealed, and the fields of kind host.
 *
 * The live buffers of the process are kept in a table, so that a batch
 * whose Arrow buffers lie inside one can share that memfd in place
 * instead of copying (gpuipc__hostbuf_find). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batchint.h"
#include "trace.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010      /* Linux 5.1 */
#endif

struct gpuipc_hostbuf {
        int fd;
        void *data;
        size_t size;
        gpuipc_hostbuf *prev, *next;    /* in hostbufs, once mapped */
};

static pthread_mutex_t hostbufs_lock = PTHREAD_MUTEX_INITIALIZER;
static gpuipc_hostbuf *hostbufs;

bool gpuipc__hostbuf_find(uint64_t ptr, uint64_t size, int *ret_fd, uint64_t *ret_offset)
{
        const gpuipc_hostbuf *b;
        int fd = -1;

        pthread_mutex_lock(&hostbufs_lock);
        for (b = hostbufs; b; b = b->next) {
                uint64_t start = (uint64_t)(uintptr_t)b->data;
                if (ptr >= start && ptr - start <= b->size && size <= b->size - (ptr - start))
                        break;
        }
        /* The buffer's own fd: the caller keeps the buffer (its memory
         * must stay valid) until it is done with the fd. */
        if (b)
                fd = b->fd;
        if (fd >= 0) {
                *ret_fd = fd;
                *ret_offset = ptr - (uint64_t)(uintptr_t)b->data;
        }
        pthread_mutex_unlock(&hostbufs_lock);
        return fd >= 0;
}

int gpuipc_hostbuf_new(size_t size, gpuipc_hostbuf **ret_buf)
{
        gpuipc_hostbuf *b;
        int r;

        if (!ret_buf || size == 0 || size > (size_t)INT64_MAX)
                return -EINVAL;
        b = calloc(1, sizeof(*b));
        if (!b)
                return -ENOMEM;
        b->data = MAP_FAILED;
        b->size = size;
        b->fd = memfd_create("gpuipc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (b->fd < 0) {
                r = -errno;
                goto fail;
        }
        if (ftruncate(b->fd, (off_t)size) < 0 ||
            fcntl(b->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
                r = -errno;
                goto fail;
        }
        b->data = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
        if (b->data == MAP_FAILED) {
                r = -errno;
                goto fail;
        }
        pthread_mutex_lock(&hostbufs_lock);
        b->next = hostbufs;
        if (hostbufs)
                hostbufs->prev = b;
        hostbufs = b;
        pthread_mutex_unlock(&hostbufs_lock);
        *ret_buf = b;
        return 0;

fail:
        gpuipc_hostbuf_free(b);
        return r;
}

void *gpuipc_hostbuf_data(const gpuipc_hostbuf *b)
{
        return b ? b->data : NULL;
}

size_t gpuipc_hostbuf_size(const gpuipc_hostbuf *b)
{
        return b ? b->size : 0;
}

int gpuipc_hostbuf_fd(const gpuipc_hostbuf *b)
{
        return b ? b->fd : -EINVAL;
}

void gpuipc_hostbuf_free(gpuipc_hostbuf *b)
{
        if (!b)
                return;
        if (b->data != MAP_FAILED && b->data) {
                pthread_mutex_lock(&hostbufs_lock);
                if (b->prev)
                        b->prev->next = b->next;
                else if (hostbufs == b)
                        hostbufs = b->next;
                if (b->next)
                        b->next->prev = b->prev;
                pthread_mutex_unlock(&hostbufs_lock);
                munmap(b->data, b->size);
        }
        if (b->fd >= 0)
                close(b->fd);
        free(b);
}

/* Seals fd as gpuipcd requires before it is registered: F_SEAL_SHRINK and
 * F_SEAL_GROW fix its size (no holder can shrink it under another's mapping,
 * nor reopen /proc/self/fd/N read-write and grow it into memory the daemon
 * then holds and charges to its producer's uid), F_SEAL_FUTURE_WRITE unless
 * *shared_write (mappings that exist stay writable, new writable mappings
 * and write() fail for every holder, so a consumer's read-only fd cannot be
 * reopened read-write through /proc to write it), and last F_SEAL_SEAL, so
 * that no consumer can add seals of its own (F_SEAL_WRITE would lock the
 * producer of a shared_write buffer out).  Kernels before 5.1 lack
 * F_SEAL_FUTURE_WRITE (EINVAL): the buffer is then registered without it,
 * as if GPUIPC_REGISTER_SHARED_WRITE were given (gpuipc.h), and
 * *shared_write is set. */
int gpuipc__seal_for_register(gpuipc_client *c, int fd, uint64_t offset, uint64_t size,
                              bool *shared_write)
{
        struct stat st;
        int seals;

        seals = fcntl(fd, F_GET_SEALS);
        if (seals < 0)
                return gpuipc__fail(c, -EBADF, "fd %d is not a memfd (sealing unsupported)", fd);
        if ((~seals & (F_SEAL_SHRINK | F_SEAL_GROW)) &&
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
                if (errno == EPERM)
                        return gpuipc__fail(c, -EPERM, "the memfd can change size and takes no "
                                            "new seals (F_SEAL_SEAL set, or created without "
                                            "MFD_ALLOW_SEALING)");
                return gpuipc__fail(c, -errno, "cannot seal the memfd against resizing");
        }
        if (fstat(fd, &st) < 0)
                return -errno;
        if ((uint64_t)st.st_size < offset + size)
                return gpuipc__fail(c, -EINVAL, "offset + size (%llu) exceeds the memfd's size (%llu)",
                                    (unsigned long long)(offset + size),
                                    (unsigned long long)st.st_size);
        if (!*shared_write && !(seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) &&
            fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) < 0) {
                if (errno == EINVAL)
                        *shared_write = true;   /* no such seal on this kernel */
                else if (errno == EPERM)
                        return gpuipc__fail(c, -EPERM, "the memfd takes no new seals (F_SEAL_SEAL "
                                            "set), so it cannot be sealed against writes; "
                                            "register it with GPUIPC_REGISTER_SHARED_WRITE to "
                                            "share it writable");
                else
                        return gpuipc__fail(c, -errno, "cannot seal the memfd against writes");
        }
        if (!(seals & F_SEAL_SEAL) && fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) < 0)
                return gpuipc__fail(c, -errno, "cannot seal the memfd against further seals");
        return 0;
}

int gpuipc_fd_register(gpuipc_client *c, const char *name, int fd, uint64_t offset, uint64_t size,
                       const gpuipc_meta *meta, unsigned flags, uint64_t *ret_id)
{
        bool args_ok = fd >= 0 && size != 0 && offset <= UINT64_MAX - size &&
                       !(flags & ~(GPUIPC_REGISTER_EPHEMERAL | GPUIPC_REGISTER_SHARED_WRITE));
        struct gpuipc__regargs a = {
                .name = name, .meta = meta,
                .ephemeral = flags & GPUIPC_REGISTER_EPHEMERAL,
                .shared_write = flags & GPUIPC_REGISTER_SHARED_WRITE,
        };
        struct gpuipc__req rq;
        int r;

        r = gpuipc__register_begin(c, name, meta, args_ok, "invalid fd, size, offset or flags");
        if (r < 0)
                return r;
        r = gpuipc__seal_for_register(c, fd, offset, size, &a.shared_write);
        if (r < 0)
                return gpuipc__end(c, r);
        gpuipc__register_start(c, &rq, &a, 4);
        proto_pack_kstr(&rq.o.pk, "kind", "host");
        proto_pack_ku64(&rq.o.pk, "size", size);
        proto_pack_ku64(&rq.o.pk, "offset", offset);
        proto_pack_ku64(&rq.o.pk, "fds", 1);
        return gpuipc__register_finish(c, &rq, &a, &fd, 1, ret_id);
}

int gpuipc_hostbuf_register(gpuipc_client *c, const char *name, const gpuipc_hostbuf *b,
                         const gpuipc_meta *meta, unsigned flags, uint64_t *ret_id)
{
        TRACE("c.hostreg", 0);
        if (!c || !b)
                return -EINVAL;
        return gpuipc_fd_register(c, name, b->fd, 0, b->size, meta, flags, ret_id);
}
