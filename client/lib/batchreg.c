/* batchreg.c: registering a batch: its parts, their fds, and the one
 * request that carries them (docs/protocol.md, "Batches").
 *
 * Host buffers inside a gpuipc_hostbuf of this process are parts at
 * offsets of that memfd; the other host buffers are copied, 64-byte
 * aligned, into one new memfd per register, each a part at its offset of
 * it.  Device buffers are parts as cudabatch.c shares them.  The frame
 * names each attached fd once, however many parts use it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "batchint.h"

#define COPIED_HOST "host memory outside a gpuipc_hostbuf, copied at register"

/* Where each buffer of the batch went. */
struct rpart {
        bool device;
        bool copied;                    /* host: into the copy memfd (arrow.copied) */
        bool shared_write;              /* host: its memfd took no write seal */
        uint32_t fd;                    /* host: index into fds */
        uint64_t offset;                /* host: in that memfd */
        uint32_t dev;                   /* device: index in the device parts */
};

struct reg {
        gpuipc_client *c;
        const gpuipc_batch *b;
        struct rpart *parts;
        int fds[GPUIPC__BATCH_FDS_MAX];
        bool fd_sw[GPUIPC__BATCH_FDS_MAX];      /* fds[i] is shared writable */
        unsigned nfds;
        int copy_fd;
        struct gpuipc__cuparts *cp;
};

/* The index of fd among the frame's fds, adding it. */
static int fd_index(struct reg *x, int fd, uint32_t *ret)
{
        for (unsigned i = 0; i < x->nfds; i++)
                if (x->fds[i] == fd) {
                        *ret = i;
                        return 0;
                }
        if (x->nfds == GPUIPC__BATCH_FDS_MAX)
                return gpuipc__fail(x->c, -E2BIG, "the batch needs more than %u fds (memfds "
                                    "and exported allocations, each counted once)",
                                    GPUIPC__BATCH_FDS_MAX);
        x->fds[x->nfds] = fd;
        *ret = x->nfds++;
        return 0;
}

/* Copies the host buffers marked copied into one new sealed memfd. */
static int copy_host(struct reg *x, uint64_t total)
{
        const gpuipc_batch *b = x->b;
        bool sw = false;
        uint8_t *p;
        uint32_t idx;
        int r;

        x->copy_fd = memfd_create("gpuipc-batch", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (x->copy_fd < 0)
                return gpuipc__fail(x->c, -errno, "memfd_create for the batch's copy: %s",
                                    gpuipc_strerror(-errno));
        if (ftruncate(x->copy_fd, (off_t)total) < 0)
                return gpuipc__fail(x->c, -errno, "cannot size the batch's copy to %llu bytes",
                                    (unsigned long long)total);
        p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, x->copy_fd, 0);
        if (p == MAP_FAILED)
                return gpuipc__fail(x->c, -errno, "cannot map the batch's copy");
        for (uint32_t i = 0; i < b->n_bufs; i++)
                if (x->parts[i].copied)
                        memcpy(p + x->parts[i].offset, (const void *)(uintptr_t)b->bufs[i].ptr,
                               b->bufs[i].size);
        munmap(p, total);
        r = gpuipc__seal_for_register(x->c, x->copy_fd, 0, total, &sw);
        if (r == 0)
                r = fd_index(x, x->copy_fd, &idx);
        if (r < 0)
                return r;
        x->fd_sw[idx] = sw;
        for (uint32_t i = 0; i < b->n_bufs; i++)
                if (x->parts[i].copied)
                        x->parts[i].fd = idx;
        return 0;
}

/* Host buffers: in place in their gpuipc_hostbuf, else into the copy. */
static int host_parts(struct reg *x)
{
        const gpuipc_batch *b = x->b;
        uint64_t total = 0;
        int fd, r;

        for (uint32_t i = 0; i < b->n_bufs; i++) {
                const struct gpuipc__bbuf *u = &b->bufs[i];
                struct rpart *p = &x->parts[i];
                bool sw = false;
                if (u->device >= 0)
                        continue;
                if (!gpuipc__hostbuf_find(u->ptr, u->size, &fd, &p->offset)) {
                        p->copied = true;
                        p->offset = (total + GPUIPC__BATCH_ALIGN - 1) &
                                    ~(uint64_t)(GPUIPC__BATCH_ALIGN - 1);
                        if (p->offset > INT64_MAX - u->size)
                                return gpuipc__fail(x->c, -E2BIG, "the batch's host buffers "
                                                    "exceed 2^63 bytes");
                        total = p->offset + u->size;
                        continue;
                }
                /* Sealed as gpuipc_hostbuf_register() seals it. */
                r = gpuipc__seal_for_register(x->c, fd, p->offset, u->size, &sw);
                if (r == 0)
                        r = fd_index(x, fd, &p->fd);
                if (r < 0)
                        return r;
                x->fd_sw[p->fd] |= sw;
        }
        return total > 0 ? copy_host(x, total) : 0;
}

/* Device buffers, and the batch's event. */
static int device_parts(struct reg *x, unsigned flags)
{
        const gpuipc_batch *b = x->b;
        const struct gpuipc__bbuf **dev;
        unsigned n = 0;
        int r;

        for (uint32_t i = 0; i < b->n_bufs; i++)
                n += b->bufs[i].device >= 0;
        if (n == 0 && !b->event)
                return 0;
        dev = calloc(n ? n : 1, sizeof(*dev));
        if (!dev)
                return gpuipc__fail(x->c, -ENOMEM, "out of memory");
        n = 0;
        for (uint32_t i = 0; i < b->n_bufs; i++)
                if (b->bufs[i].device >= 0) {
                        x->parts[i].device = true;
                        x->parts[i].dev = n;
                        dev[n++] = &b->bufs[i];
                }
        r = gpuipc__cuparts_new(x->c, dev, n, b->event, b->event_device, flags, &x->cp);
        free(dev);
        for (uint32_t i = 0; r == 0 && i < b->n_bufs; i++) {
                const int *fds;
                uint32_t idx;
                unsigned k;
                if (!x->parts[i].device)
                        continue;
                k = gpuipc__cuparts_fds(x->cp, x->parts[i].dev, &fds);
                for (unsigned j = 0; j < k && r == 0; j++)
                        r = fd_index(x, fds[j], &idx);
        }
        return r;
}

/* A map of str -> str, the form of metadata on the wire. */
static void pack_meta(msgpack_packer *pk, const struct gpuipc__meta *m)
{
        struct proto_map map;

        proto_map_begin(&map, pk);
        for (uint32_t i = 0; i < m->n; i++)
                proto_map_kstr(&map, m->keys[i], m->values[i]);
        proto_map_end(&map);
}

static void pack_part(struct reg *x, msgpack_packer *pk, uint32_t i)
{
        const struct rpart *p = &x->parts[i];
        uint32_t idx[GPUIPC__BATCH_FDS_MAX];
        struct proto_map m;
        const int *fds;
        unsigned k;

        if (p->device) {
                k = gpuipc__cuparts_fds(x->cp, p->dev, &fds);
                for (unsigned j = 0; j < k; j++)
                        (void)fd_index(x, fds[j], &idx[j]);     /* added already */
                gpuipc__cuparts_pack(pk, x->cp, p->dev, x->b->bufs[i].size, idx);
                return;
        }
        proto_map_begin(&m, pk);
        proto_map_kstr(&m, "kind", "host");
        proto_map_ku64(&m, "size", x->b->bufs[i].size);
        proto_map_ku64(&m, "offset", p->offset);
        proto_map_key(&m, "fds");
        msgpack_pack_array(pk, 1);
        msgpack_pack_uint32(pk, p->fd);
        if (x->fd_sw[p->fd])
                proto_map_kbool(&m, "shared_write", true);
        proto_map_end(&m);
}

static void pack_node(msgpack_packer *pk, const struct gpuipc__bnode *n)
{
        struct proto_map m;

        proto_map_begin(&m, pk);
        proto_map_kstr(&m, "name", n->name);
        proto_map_kstr(&m, "format", n->format);
        if (n->flags)
                proto_map_ku64(&m, "flags", (uint64_t)n->flags);
        proto_map_ku64(&m, "length", (uint64_t)n->length);
        proto_map_ki64(&m, "null_count", n->null_count);
        if (n->offset)
                proto_map_ku64(&m, "offset", (uint64_t)n->offset);
        if (n->n_children)
                proto_map_ku64(&m, "children", n->n_children);
        proto_map_key(&m, "buffers");
        msgpack_pack_array(pk, n->n_buffers);
        for (unsigned i = 0; i < n->n_buffers; i++)
                msgpack_pack_int32(pk, n->buf[i]);
        if (n->meta.n) {
                proto_map_key(&m, "metadata");
                pack_meta(pk, &n->meta);
        }
        proto_map_end(&m);
}

static void pack_arrow(struct reg *x, msgpack_packer *pk)
{
        const gpuipc_batch *b = x->b;
        struct proto_map m;

        proto_map_begin(&m, pk);
        proto_map_ku64(&m, "rows", (uint64_t)b->rows);
        /* The daemon keeps keys of its own in `arrow` as they are: the
         * record says so to every reader (gpuipc_info.copied). */
        if (x->copy_fd >= 0)
                proto_map_kstr(&m, "copied", COPIED_HOST);
        if (b->meta.n) {
                proto_map_key(&m, "metadata");
                pack_meta(pk, &b->meta);
        }
        proto_map_key(&m, "columns");
        msgpack_pack_array(pk, b->n_nodes);
        for (uint32_t i = 0; i < b->n_nodes; i++)
                pack_node(pk, &b->nodes[i]);
        proto_map_end(&m);
}

/* The allocations of cacheable batch id, from its register reply's
 * `allocs`, for gpuipc_reg_wait_unmapped(). */
static void remember_allocs(gpuipc_client *c, uint64_t id, const msgpack_object *root)
{
        const msgpack_object *a;
        uint32_t n;

        if (proto_get_array(root, "allocs", &a) < 0)
                return;
        n = a->via.array.size;
        if (n > PROTO_BATCH_PARTS_MAX)
                return;
        for (uint32_t i = 0; i < n; i++)
                if (a->via.array.ptr[i].type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                        gpuipc__cached_add(c, id, a->via.array.ptr[i].via.u64, n);
}

static int send_batch(struct reg *x, const char *name, unsigned flags, uint64_t *ret_id)
{
        gpuipc_client *c = x->c;
        const uint8_t *event = x->cp ? gpuipc__cuparts_event(x->cp) : NULL;
        bool ephemeral = (flags & GPUIPC_REGISTER_EPHEMERAL) ||
                         (x->cp && gpuipc__cuparts_bound(x->cp));
        struct gpuipc__reply rp;
        struct gpuipc__req rq;
        uint64_t id;
        int r;

        gpuipc__request(c, &rq, &gpuipc__op_register, 5 + ephemeral + (event != NULL) +
                        gpuipc__access_keys(c));
        rq.name = name;
        proto_pack_kstr(&rq.o.pk, "name", name);
        proto_pack_kstr(&rq.o.pk, "kind", "batch");
        proto_pack_str(&rq.o.pk, "parts");
        msgpack_pack_array(&rq.o.pk, x->b->n_bufs);
        for (uint32_t i = 0; i < x->b->n_bufs; i++)
                pack_part(x, &rq.o.pk, i);
        proto_pack_str(&rq.o.pk, "arrow");
        pack_arrow(x, &rq.o.pk);
        proto_pack_ku64(&rq.o.pk, "fds", x->nfds);
        if (ephemeral)
                proto_pack_kbool(&rq.o.pk, "ephemeral", true);
        if (event) {
                proto_pack_str(&rq.o.pk, "event");
                msgpack_pack_bin_with_body(&rq.o.pk, event, GPUIPC__EVENT_LEN);
        }
        gpuipc__access_pack(&rq.o.pk, c);
        r = gpuipc__call(c, &rq, x->fds, x->nfds, &rp);
        if (r < 0)
                return gpuipc__end(c, r);
        r = proto_get_u64(rp.msg.root, "id", &id);
        if (r == 0 && (flags & GPUIPC_REGISTER_CACHEABLE))
                remember_allocs(c, id, rp.msg.root);
        gpuipc__reply_free(&rp);
        if (r < 0)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's register reply has no id");
        if (ret_id)
                *ret_id = id;
        return 0;
}

int gpuipc_batch_register(gpuipc_client *c, const char *name, gpuipc_batch *b, unsigned flags,
                          uint64_t *ret_id)
{
        struct reg x = { .c = c, .b = b, .copy_fd = -1 };
        int r;

        if (!c)
                return -EINVAL;
        r = gpuipc__begin_named(c, name);
        if (r < 0)
                return r;
        if (!b || b->n_columns == 0 || b->n_bufs == 0)
                return gpuipc__fail(c, -EINVAL, "%s", !b ? "the batch is NULL"
                                    : "the batch has no columns, or no buffers");
        if (flags & ~(GPUIPC_REGISTER_EPHEMERAL | GPUIPC_REGISTER_CUDA_IPC |
                      GPUIPC_REGISTER_COPY | GPUIPC_REGISTER_CACHEABLE))
                return gpuipc__fail(c, -EINVAL, "invalid flags for a batch");
        x.parts = calloc(b->n_bufs, sizeof(*x.parts));
        if (!x.parts)
                return gpuipc__end(c, -ENOMEM);
        /* Device parts first: their event is waited for there, before any
         * host memory it orders (CUDA_HOST) is copied. */
        r = device_parts(&x, flags);
        if (r == 0)
                r = host_parts(&x);
        if (r == 0)
                r = send_batch(&x, name, flags, ret_id);
        else
                r = gpuipc__end(c, r);
        /* The daemon holds what it needs through its own fds. */
        if (x.copy_fd >= 0)
                close(x.copy_fd);
        gpuipc__cuparts_free(x.cp);
        free(x.parts);
        return r;
}
