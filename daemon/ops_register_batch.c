/* ops_register_batch.c: register of kind batch (docs/protocol.md,
 * "Batches").  Each part is checked and attached by the code that checks a
 * single registration's buffer (register_part.c), with the frame fds it
 * names; what is the batch's own is how parts name fds, the memfds they
 * share, the arrow description and the batch's event. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "access.h"
#include "batch.h"
#include "closer.h"
#include "host.h"
#include "log.h"
#include "ops.h"
#include "register_part.h"
#include "waits.h"

/* How the frame's fds are used: by which kind of part first, for which
 * allocation entry (cuda-vmm chunk, pool) and, for host, which memfd of
 * the batch. */
struct fd_use {
        int8_t kind;                    /* -1: named by no part yet */
        int16_t memfd;                  /* host: its index in the batch's memfds */
        uint16_t part;                  /* the first part naming it */
        const struct alloc *alloc;      /* what it stands for, once attached */
};

/* A part's kind and the frame fds it names, as scan_fds() read them. */
struct part_fds {
        uint8_t kind, n;
        uint8_t idx[PROTO_MAX_FDS];
};

struct build {
        struct req *q;
        const msgpack_object *parts;
        struct fd_use use[PROTO_MAX_FDS];
        struct part_fds pf[PROTO_BATCH_PARTS_MAX];
        uint32_t n_memfds;
        struct reg_batch *b;
};

/* Rewrites q's message, a part's error, as "parts[i]: message". */
static int part_fail(struct req *q, uint32_t i, int err)
{
        char msg[REQ_MSG_MAX];

        snprintf(msg, sizeof(msg), "%s", q->msg);
        return req_fail(q, err, "parts[%u]: %s", i, msg);
}

/* Part i's kind and its fd indexes into x->pf[i]. */
static int part_fds(struct build *x, uint32_t i)
{
        struct part_fds *pf = &x->pf[i];
        struct req *q = x->q;
        const msgpack_object *m = &x->parts->via.array.ptr[i], *a;
        const char *s;
        size_t len;
        int k, kind;

        if (m->type != MSGPACK_OBJECT_MAP)
                return req_fail(q, -EINVAL, "parts[%u] must be a map", i);
        k = proto_get_str(m, "kind", &s, &len);
        if (k < 0)
                return req_fail(q, -EINVAL, "parts[%u].kind must be a str (host, cuda-ipc, "
                                "cuda-vmm or cuda-pool)", i);
        kind = proto_kind_from_name(s, len);
        if (kind < 0 || kind >= PROTO_BUFFER_KINDS) {
                char quoted[REQ_QUOTE_SIZE(32)];
                return req_fail(q, -EINVAL, "parts[%u]: unknown part kind '%s' (host, "
                                "cuda-ipc, cuda-vmm or cuda-pool)", i,
                                req_quote(quoted, s, len, 32));
        }
        if (proto_get_present(m, "event"))
                return req_fail(q, -EINVAL, "parts[%u]: a part has no event; a batch has one, "
                                "at its top level", i);
        k = proto_get_array(m, "fds", &a);
        if (k == -EINVAL || (k == 0 && a->via.array.size > PROTO_MAX_FDS))
                return req_fail(q, -EINVAL, "parts[%u].fds must be an array of at most %u fd "
                                "indexes", i, PROTO_MAX_FDS);
        pf->n = k == 0 ? (uint8_t)a->via.array.size : 0;
        for (unsigned j = 0; j < pf->n; j++) {
                uint64_t v;
                if (proto_obj_u64(&a->via.array.ptr[j], &v) < 0 || v >= q->nfds)
                        return req_fail(q, -EINVAL, "parts[%u].fds[%u] must be the index of "
                                        "an fd of the frame (0 to %d; it carries %u)", i, j,
                                        (int)q->nfds - 1, q->nfds);
                pf->idx[j] = (uint8_t)v;
        }
        pf->kind = (uint8_t)kind;
        return 0;
}

/* The first pass over the parts: each fd index stands for one kind of
 * object, every fd is named, and each distinct memfd gets a slot; each
 * part's kind and fds are kept in x->pf for build_part(). */
static int scan_fds(struct build *x)
{
        struct req *q = x->q;
        const uint8_t *idx;
        unsigned kind, n;
        int k;

        for (unsigned f = 0; f < PROTO_MAX_FDS; f++)
                x->use[f] = (struct fd_use){ .kind = -1, .memfd = -1 };
        for (uint32_t i = 0; i < x->parts->via.array.size; i++) {
                k = part_fds(x, i);
                if (k < 0)
                        return k;
                kind = x->pf[i].kind;
                n = x->pf[i].n;
                idx = x->pf[i].idx;
                if (kind == PROTO_KIND_HOST && n != 1)
                        return req_fail(q, -EBADF, "parts[%u]: a host part names exactly one "
                                        "fd, its memfd (fds: [index])", i);
                if (kind == PROTO_KIND_CUDA_IPC && n != 0)
                        return req_fail(q, -EINVAL, "parts[%u]: a cuda-ipc part names no fds",
                                        i);
                for (unsigned j = 0; j < n; j++) {
                        struct fd_use *u = &x->use[idx[j]];
                        if (u->kind >= 0 && (unsigned)u->kind != kind)
                                return req_fail(q, -EINVAL, "parts[%u].fds[%u]: fd %u is "
                                                "parts[%u]'s, a %s part's; one fd stands "
                                                "for one object", i, j, idx[j], u->part,
                                                proto_kind_name((unsigned)u->kind));
                        if (u->kind < 0) {
                                u->kind = (int8_t)kind;
                                u->part = (uint16_t)i;
                                if (kind == PROTO_KIND_HOST)
                                        u->memfd = (int16_t)x->n_memfds++;
                        }
                }
        }
        for (unsigned f = 0; f < q->nfds; f++)
                if (x->use[f].kind < 0)
                        return req_fail(q, -EINVAL, "fd %u of the frame is named by no part "
                                        "(every attached fd must be)", f);
        return 0;
}

/* Whether the fds of part i stand for the allocation entries it got, and
 * no fd for two of them. */
static int claim_allocs(struct build *x, uint32_t i, const uint8_t *idx, unsigned n)
{
        const struct batch_part *p = &x->b->parts[i];
        const struct alloc *a;

        for (unsigned j = 0; j < n; j++) {
                struct fd_use *u = &x->use[idx[j]];
                a = p->kind == PROTO_KIND_CUDA_POOL ? p->cuda->alloc->pool
                                                    : reg_cuda_chunk(p->cuda, j);
                if (u->alloc && u->alloc != a)
                        return req_fail(x->q, -EINVAL, "parts[%u].fds[%u]: fd %u stands for "
                                        "another %s in parts[%u]; one fd stands for one "
                                        "object", i, j, idx[j], p->kind == PROTO_KIND_CUDA_POOL
                                        ? "pool (pool_key)" : "allocation (alloc_key)", u->part);
                u->alloc = a;
                u->part = (uint16_t)i;
        }
        return 0;
}

/* Checks part i (its kind and fds checked by scan_fds()) and attaches its
 * memory, as a single registration's. */
static int build_part(struct build *x, uint32_t i)
{
        struct req *q = x->q;
        const msgpack_object *m = &x->parts->via.array.ptr[i];
        struct batch_part *bp = &x->b->parts[i];
        struct reg_params p = { .fd = -1 };
        const uint8_t *idx = x->pf[i].idx;
        unsigned kind = x->pf[i].kind, n = x->pf[i].n;
        int fds[PROTO_MAX_FDS];
        bool shared_write;
        int k;

        for (unsigned j = 0; j < PROTO_MAX_FDS; j++)
                fds[j] = -1;
        p.kind = kind;
        k = register_buffer_fields(q, m, &p, &shared_write);
        if (k < 0)
                return part_fail(q, i, k);
        /* The allocation table takes (or closes) the fds of the CUDA
         * kinds: each part gets copies, so that parts may share one. */
        for (unsigned j = 0; j < n; j++) {
                fds[j] = kind == PROTO_KIND_HOST ? q->fds[idx[j]] : dup(q->fds[idx[j]]);
                if (fds[j] < 0) {
                        k = req_fail(q, errno == EMFILE || errno == ENFILE ? -ENOBUFS : -EIO,
                                     "cannot duplicate fd %u: %s", idx[j], strerror(errno));
                        goto out;
                }
        }
        k = register_buffer_attach(q, m, fds, n, &p, shared_write, false);
        if (k < 0) {
                k = part_fail(q, i, k);
                goto out;
        }
        bp->size = p.size;
        bp->offset = p.offset;
        bp->cuda = p.cuda;
        bp->kind = (uint8_t)kind;
        bp->shared_write = kind == PROTO_KIND_HOST && shared_write;
        if (kind == PROTO_KIND_HOST)
                bp->memfd = (uint16_t)x->use[idx[0]].memfd;
        else if (kind != PROTO_KIND_CUDA_IPC)
                k = claim_allocs(x, i, idx, n);
out:
        for (unsigned j = 0; kind != PROTO_KIND_HOST && j < n; j++)
                closer_close(fds[j]);
        return k;
}

/* The batch's memfds: the attached fds the host parts name, each with a
 * read-only open, taken from the request. */
static int take_memfds(struct build *x)
{
        struct req *q = x->q;
        int ro;

        for (unsigned f = 0; f < q->nfds; f++) {
                struct batch_memfd *mf;
                if (x->use[f].kind != PROTO_KIND_HOST)
                        continue;
                ro = host_open_read_only(q->fds[f]);
                if (ro < 0)
                        return req_fail(q, ro == -EMFILE || ro == -ENFILE ? -ENOBUFS : -EIO,
                                        "cannot open fd %u, a memfd, read-only: %s", f,
                                        strerror(-ro));
                mf = &x->b->memfds[x->use[f].memfd];
                mf->fd = q->fds[f];
                mf->ro_fd = ro;
                q->fds[f] = -1;         /* the batch's now */
        }
        return 0;
}

/* The batch-level fields: parts, arrow, event; then every part. */
static int build_batch(struct build *x, const msgpack_object *arrow)
{
        struct req *q = x->q;
        const uint8_t *ev;
        size_t ev_len = 0;
        uint32_t n = x->parts->via.array.size;
        int k;

        k = scan_fds(x);
        if (k < 0)
                return k;
        x->b = batch_new(n, x->n_memfds);
        if (!x->b)
                return req_fail(q, -ENOMEM, "out of memory");
        k = proto_get_bin(q->m, "event", &ev, &ev_len);
        if (k == -EINVAL || (k == 0 && ev_len != PROTO_IPC_HANDLE_LEN))
                return req_fail(q, -EINVAL, "event must be a bin of exactly %u bytes (an IPC "
                                "event handle)", PROTO_IPC_HANDLE_LEN);
        if (k == 0) {
                memcpy(x->b->event, ev, PROTO_IPC_HANDLE_LEN);
                x->b->has_event = true;
        }
        if (batch_set_arrow(x->b, arrow) < 0)
                return req_fail(q, -ENOMEM, "out of memory");
        for (uint32_t i = 0; i < n; i++) {
                k = build_part(x, i);
                if (k < 0)
                        return k;
        }
        k = take_memfds(x);
        if (k == 0)
                batch_cache_lookup_parts(x->b);
        return k;
}

/* The request's own fields, before any part: name, lifetime, access,
 * parts and arrow (checked against the number of parts). */
static int batch_fields(struct req *q, struct reg_params *p, bool *ret_ephemeral_given,
                        const msgpack_object **ret_parts, const msgpack_object **ret_arrow)
{
        char why[REQ_MSG_MAX - 16];
        uint32_t n;
        int k;

        k = register_name(q, p);
        if (k == 0)
                k = register_ephemeral(q, p, ret_ephemeral_given);
        if (k == 0)
                k = register_ttl(q, p);
        if (k < 0)
                return k;
        if (proto_get_present(q->m, "meta"))
                return req_fail(q, -EINVAL, "a batch has no meta: the schema's metadata goes "
                                "in arrow.metadata");
        k = proto_get_array(q->m, "parts", ret_parts);
        n = k == 0 ? (*ret_parts)->via.array.size : 0;
        if (k < 0 || n == 0 || n > PROTO_BATCH_PARTS_MAX)
                return req_fail(q, -EINVAL, "parts must be an array of 1 to %u parts%s",
                                PROTO_BATCH_PARTS_MAX, k == 0 ? " (got more or none)" : "");
        k = proto_get_map(q->m, "arrow", ret_arrow);
        if (k < 0)
                return req_fail(q, -EINVAL, "arrow must be a map (the table's description; it "
                                "is required)");
        if (proto_arrow_check(*ret_arrow, n, NULL, why, sizeof(why)) < 0)
                return req_fail(q, -EINVAL, "%s", why);
        return access_parse(q->m, &p->access, q->msg, sizeof(q->msg));
}

/* `allocs` (when there are any): the distinct allocations of b's parts
 * that consumers may keep mapped (cacheable), what `unmapped` events name,
 * in the order of their first part. */
static void pack_cacheable_allocs(struct proto_map *m, const struct reg_batch *b)
{
        uint64_t ids[PROTO_BATCH_PARTS_MAX];
        uint32_t n = 0;

        for (uint32_t i = 0; i < b->n_parts; i++) {
                const struct reg_cuda *rc = b->parts[i].cuda;
                uint32_t j = 0;

                if (!rc || !rc->alloc->cacheable)
                        continue;
                while (j < n && ids[j] != rc->alloc->id)
                        j++;
                if (j == n)
                        ids[n++] = rc->alloc->id;
        }
        if (n == 0)
                return;
        proto_map_key(m, "allocs");
        msgpack_pack_array(m->pk, n);
        for (uint32_t j = 0; j < n; j++)
                msgpack_pack_uint64(m->pk, ids[j]);
}

int op_register_batch(struct req *q)
{
        struct conn *c = q->c;
        struct daemon *d = c->d;
        struct reg_params p = { .fd = -1, .kind = PROTO_KIND_BATCH };
        struct build x = { .q = q };
        const msgpack_object *arrow;
        bool ephemeral_given = false;
        struct reg_cost cost;
        struct proto_out o;
        struct proto_map m;
        struct reg *r;
        int k;

        k = batch_fields(q, &p, &ephemeral_given, &x.parts, &arrow);
        if (k == 0)
                k = register_admit(q, p.name, p.name_len);
        if (k == 0)
                k = build_batch(&x, arrow);
        if (k < 0)
                goto out;
        if (batch_bound(x.b)) {
                /* The memory of a cuda-ipc or cuda-pool part stays the producer's. */
                if (ephemeral_given && !p.ephemeral) {
                        k = req_fail(q, -EINVAL, "a batch with a cuda-ipc or cuda-pool part is "
                                     "ephemeral: that memory is the producer's");
                        goto out;
                }
                p.ephemeral = p.revocable = true;
        }
        cost = (struct reg_cost){
                .bytes = batch_bytes(x.b),
                .fds = batch_fd_cost(x.b),
                .store = batch_store_cost(x.b),
        };
        k = register_check_limits(q, &cost);
        if (k < 0)
                goto out;
        p.size = batch_size(x.b);
        p.batch = x.b;
        p.created_ms = now_unix_ms();
        if (p.expires_ms)
                p.expires_ms += p.created_ms;
        k = registry_add(d->reg, &c->party, &p, &r);
        if (k < 0) {
                k = req_fail(q, k, "cannot add the registration: %s", strerror(-k));
                goto out;
        }
        p.access = NULL;        /* r's now, and so is the batch */
        x.b = NULL;
        k = register_reply_fits(r, d->cfg.max_frame);
        if (k <= 0) {
                registry_unregister(d->reg, r);         /* frees r and its parts */
                k = k < 0 ? req_fail(q, k, "out of memory")
                          : req_fail(q, -EMSGSIZE, "the lookup reply of batch %.*s (its "
                                     "record, parts and arrow description) would not fit "
                                     "max_frame (%u)", (int)p.name_len, p.name,
                                     d->cfg.max_frame);
                goto out;
        }
        waits_wake(d, r);               /* as op_register: consumers first */
        reply_begin(&o, &m, q->seq);
        proto_map_ku64(&m, "id", r->id);
        proto_map_kstrn(&m, "name", r->name, r->name_len);
        pack_cacheable_allocs(&m, r->batch);
        proto_map_end(&m);
        (void)reply_send(c, q->seq, &o, NULL);
        proto_out_free(&o);
        for (uint32_t i = 0; i < r->batch->n_parts; i++) {
                const struct batch_part *bp = &r->batch->parts[i];
                if (bp->cuda && bp->cuda->copied) {
                        d->copies++;
                        d->copied_bytes += bp->size;
                }
        }
        log_debug("registered batch %s (id %" PRIu64 ", %u parts, %" PRIu64 " bytes) for pid "
                  "%u", r->name, r->id, r->batch->n_parts, r->size, c->party.pid);
        k = 0;
out:
        batch_free(&d->allocs, x.b);
        free(p.access);
        return k;
}
