/* restart_decode.c: allocation entries and batches of journal records,
 * rebuilt against the stored fds. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host.h"
#include "log.h"
#include "restart_codec.h"
#include "restart_decode.h"

struct id_node {
        struct hmap_node node;
        uint64_t id;
};

static bool id_seen(const struct hmap *h, uint64_t id)
{
        uint64_t hash = hmap_hash_u64(id);

        for (struct hmap_node *n = hmap_bucket(h, hash); n; n = n->next)
                if (n->hash == hash && container_of(n, struct id_node, node)->id == id)
                        return true;
        return false;
}

static int id_add(struct hmap *h, uint64_t id)
{
        struct id_node *n = malloc(sizeof(*n));

        if (!n)
                return -ENOMEM;
        n->id = id;
        if (hmap_insert(h, &n->node, hmap_hash_u64(id)) < 0) {
                free(n);
                return -ENOMEM;
        }
        return 0;
}

void restore_ids_free(struct hmap *h)
{
        struct hmap_node *n, *next;

        hmap_for_each_safe(n, next, h)
                free(container_of(n, struct id_node, node));
        hmap_free(h);
}

int restore_stored_fd(struct restore_ctx *x, const char *name)
{
        for (size_t i = 0; i < x->n; i++)
                if (!x->owned[i] && strcmp(x->fds[i].name, name) == 0)
                        return (int)i;
        return -1;
}

/* One allocation entry of a CUDA record (the fields pack_alloc_fields()
 * wrote into m), under its old id where it is new.  pool: the entry of a
 * cuda-pool pointer's pool, else NULL. */
static int decode_entry(struct restore_ctx *x, const msgpack_object *m, uint64_t want_kind,
                        const uint8_t device[], struct alloc *pool, struct alloc **ret)
{
        struct alloc_table *T = &x->d->allocs;
        struct jrec_alloc e;
        uint64_t aid, akind, saved;
        char name[32];
        int i, fd, r;

        if (jrec_decode_alloc(m, &e) < 0 || e.kind != want_kind)
                return -EINVAL;
        aid = e.id;
        akind = e.kind;
        saved = T->next_id;
        T->next_id = aid;
        if (akind == PROTO_KIND_CUDA_IPC) {
                r = alloc_get_ipc(T, device, e.handle, e.buffer_id, e.size, ret);
        } else if (akind == PROTO_KIND_CUDA_POOL) {
                r = alloc_get_pool_ptr(T, pool, e.handle, e.buffer_id, e.size, ret);
        } else if (akind == PROTO_KIND_CUDA_VMM || akind == ALLOC_KIND_POOL) {
                snprintf(name, sizeof(name), "vmm-%" PRIu64, aid);
                i = restore_stored_fd(x, name);
                /* Every registration of the allocation dups the one fd; the
                 * table keeps the first and closes the others. */
                fd = i < 0 ? -1 : dup(x->fds[i].fd);
                r = fd < 0 ? -ENOENT
                    : akind == ALLOC_KIND_POOL
                    ? alloc_get_pool_entry(T, device, e.key, &fd, e.uid, ret)
                    : alloc_get_vmm_as(T, device, e.key, &fd, e.size, e.uid, ret);
                if (fd >= 0)
                        close(fd);
                if (r == 0)
                        x->claimed[i] = true;
        } else {
                r = -EINVAL;
        }
        T->next_id = saved > aid + 1 ? saved : aid + 1;
        if (r < 0)
                return r;
        if ((*ret)->regs == 1) {
                /* A new entry: its id must be new too, or two allocations
                 * would share the id consumers key their mappings by. */
                if ((*ret)->id != aid || id_seen(&x->alloc_ids, aid) ||
                    id_add(&x->alloc_ids, aid) < 0) {
                        alloc_put(T, *ret);
                        return -EINVAL;
                }
        } else if ((*ret)->id != aid) {
                alloc_put(T, *ret);
                return -EINVAL;         /* a known key under another id */
        }
        return 0;
}

/* The allocation of a CUDA record: its device, and for a cuda-pool pointer
 * its pool's entry first. */
int restore_decode_alloc(struct restore_ctx *x, const msgpack_object *m, uint64_t want_kind,
                         uint8_t device[], struct alloc **ret)
{
        const msgpack_object *sub;
        struct alloc *pool;
        int r;

        if (jrec_get_device(m, device) < 0)
                return -EINVAL;
        if (want_kind != PROTO_KIND_CUDA_POOL)
                return decode_entry(x, m, want_kind, device, NULL, ret);
        sub = jrec_get_pool(m);
        if (!sub)
                return -EINVAL;
        r = decode_entry(x, sub, ALLOC_KIND_POOL, device, NULL, &pool);
        if (r < 0)
                return r;
        r = decode_entry(x, m, want_kind, device, pool, ret);
        alloc_put(&x->d->allocs, pool);         /* the pointer holds its own */
        return r;
}

/* The chunks after the first of a cuda-vmm registration over several. */
static int decode_chunks(struct restore_ctx *x, const msgpack_object *a, struct reg_cuda *rc)
{
        uint32_t n = a->via.array.size;
        int r;

        if (n < 1 || n >= PROTO_CHUNKS_MAX)
                return -EINVAL;
        r = reg_cuda_set_chunks(rc, n + 1);
        if (r < 0)
                return r;
        rc->chunks[0] = rc->alloc;
        for (uint32_t i = 0; i < n; i++) {
                r = decode_entry(x, &a->via.array.ptr[i], PROTO_KIND_CUDA_VMM, rc->device, NULL,
                                 &rc->chunks[i + 1]);
                if (r < 0)
                        return r;
        }
        return 0;
}

int restore_decode_cuda(struct restore_ctx *x, const msgpack_object *m, uint64_t kind,
                        struct reg_cuda **ret)
{
        struct reg_cuda *rc = reg_cuda_new();
        const msgpack_object *chunks;
        const char *copied;
        size_t len;
        int r;

        if (!rc)
                return -ENOMEM;
        r = restore_decode_alloc(x, m, kind, rc->device, &rc->alloc);
        if (r < 0) {
                free(rc);
                return r;
        }
        rc->has_event = jrec_get_event(m, rc->event);
        if (jrec_get_cacheable(m))
                rc->alloc->cacheable = true;
        r = jrec_get_chunks(m, &chunks);
        if (r == 0)
                r = kind == PROTO_KIND_CUDA_VMM ? decode_chunks(x, chunks, rc) : -EINVAL;
        else if (r == -ENOENT)
                r = 0;
        if (r == 0 && jrec_get_copied(m, &copied, &len) == 0) {
                if (len == 0 || len > REG_CUDA_COPIED_MAX)
                        r = -EINVAL;
                else if (!proto_text_valid(copied, len))
                        /* An older daemon took it: the buffer is fine, its note is not. */
                        log_warn("restore: a registration's copied note is not text now "
                                 "(UTF-8 without control characters); restored without it");
                else
                        r = reg_cuda_set_copied(rc, copied, len);
        }
        if (r < 0) {
                reg_cuda_free(&x->d->allocs, rc);
                return r;
        }
        *ret = rc;
        return 0;
}


/* Batch memfd i of registration id: a copy of its stored fd, checked. */
static int decode_memfd(struct restore_ctx *x, uint64_t id, uint32_t i, struct batch_memfd *mf,
                        int *ret_stored)
{
        char name[48];
        int k;

        snprintf(name, sizeof(name), "batch-%" PRIu64 "-%" PRIu32, id, i);
        k = restore_stored_fd(x, name);
        if (k < 0)
                return -ENOENT;         /* most often freed before the restart */
        *ret_stored = k;
        mf->fd = fcntl(x->fds[k].fd, F_DUPFD_CLOEXEC, 3);
        if (mf->fd < 0)
                return -errno;
        mf->ro_fd = host_open_read_only(mf->fd);
        return mf->ro_fd < 0 ? mf->ro_fd : 0;
}

/* Part i of batch b from its journal map m. */
static int decode_part(struct restore_ctx *x, const msgpack_object *m, struct reg_batch *b,
                       uint32_t i)
{
        struct batch_part *p = &b->parts[i];
        struct jrec_part j;
        const char *why;
        int k;

        if (jrec_decode_part(m, b->n_memfds, &j) < 0)
                return -EINVAL;
        p->kind = (uint8_t)j.kind;
        p->size = j.size;
        p->offset = j.offset;
        if (j.kind == PROTO_KIND_HOST) {
                /* As a restored host registration is checked. */
                k = host_check_fd(b->memfds[j.memfd].fd, j.offset, j.size, HOST_RESTORED, &why);
                if (k < 0)
                        return k;
                p->memfd = (uint16_t)j.memfd;
                p->shared_write = j.shared_write;
                return 0;
        }
        return restore_decode_cuda(x, j.cuda, j.kind, &p->cuda);
}

int restore_decode_batch(struct restore_ctx *x, const msgpack_object *m,
                         const struct reg_params *p, struct reg_batch **ret)
{
        uint64_t id = p->id;
        bool p_ephemeral = p->ephemeral, p_revocable = p->revocable;
        int fds[PROTO_MAX_FDS], stored[PROTO_MAX_FDS];
        struct proto_msg arrow;
        struct jrec_batch j;
        struct reg_batch *b;
        char why[256];
        int k = 0;

        if (jrec_decode_batch(m, &j) < 0)
                return -EINVAL;
        b = batch_new(j.parts->via.array.size, j.n_memfds);
        if (!b)
                return -ENOMEM;
        for (uint32_t i = 0; i < b->n_memfds && k == 0; i++)
                k = decode_memfd(x, id, i, &b->memfds[i], &stored[i]);
        for (uint32_t i = 0; i < b->n_parts && k == 0; i++)
                k = decode_part(x, &j.parts->via.array.ptr[i], b, i);
        /* The description goes out as it is: it must pass register's checks. */
        if (k == 0)
                k = proto_decode(j.arrow, j.arrow_len, &arrow, NULL);
        if (k == 0) {
                k = proto_arrow_check(arrow.root, b->n_parts, NULL, why, sizeof(why));
                proto_msg_free(&arrow);
                if (k < 0)      /* e.g. an older daemon's record, before a check was added */
                        log_warn("restore: batch %.*s (id %" PRIu64 ") is not restored: %s",
                                 (int)p->name_len, p->name, id, why);
        }
        if (k == 0)
                k = batch_set_arrow_bytes(b, j.arrow, j.arrow_len);
        if (k == 0 && batch_fds(b, fds) < 0)
                k = -EINVAL;            /* more fds than a lookup reply carries */
        if (k == 0)
                batch_cache_lookup_parts(b);
        /* Producer-bound memory ends with its producer, as register made it. */
        if (k == 0 && batch_bound(b) && !(p_ephemeral && p_revocable))
                k = -EINVAL;
        if (k < 0) {
                batch_free(&x->d->allocs, b);
                return k == -ENOMEM || k == -ENOENT ? k : -EINVAL;
        }
        /* The stored memfds stay in the store; the batch has copies. */
        for (uint32_t i = 0; i < b->n_memfds; i++)
                x->claimed[stored[i]] = true;
        if (j.event) {
                memcpy(b->event, j.event, PROTO_IPC_HANDLE_LEN);
                b->has_event = true;
        }
        *ret = b;
        return 0;
}
