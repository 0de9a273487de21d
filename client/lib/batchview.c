/* batchview.c: looking a batch up, its parts mapped, and giving it back.
 *
 * One lookup brings the record and every part's fds.  Host parts map
 * each memfd once (map.c shares mappings across views too); device parts
 * open as device views do (cudamap.c: once per allocation, through the
 * mapping cache), each part a gpuipc_view of its own inside the batch
 * view.  The view lives while the caller holds it or an exported Arrow
 * array does (batchexport.c); the last to let go unmaps it and gives the
 * lease back, or, in a release callback, queues the lease on the client,
 * whose next call sends it (a client is used from one thread at a time).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batchint.h"

/* ---- the deferred releases ------------------------------------------------ */

static void deferred_push(gpuipc_client *c, uint64_t lease, uint32_t epoch)
{
        pthread_mutex_lock(&c->deferred_lock);
        /* After gpuipc_client_free() the connection, and the lease with
         * it, is gone. */
        if (!c->freed && gpuipc__grow((void **)&c->deferred, &c->cap_deferred,
                                      c->n_deferred + 1, sizeof(*c->deferred)) == 0) {
                c->deferred[c->n_deferred].id = lease;
                c->deferred[c->n_deferred].epoch = epoch;
                __atomic_store_n(&c->n_deferred, c->n_deferred + 1, __ATOMIC_RELEASE);
        }
        /* Out of memory: the lease lasts until the connection ends. */
        pthread_mutex_unlock(&c->deferred_lock);
}

/* Releases lease without waiting for the reply: the daemon serves a
 * connection's requests in order, so what the caller does next sees the
 * lease gone, and a lookup and its release cost one round trip, not two.
 * The lease is forgotten now; should the daemon restart before it reads
 * the request, the resumed session gives back leases the client does not
 * know (resume.c). */
static int release_nowait(gpuipc_client *c, uint64_t lease)
{
        struct gpuipc__req rq;

        gpuipc__request(c, &rq, &gpuipc__op_release, 1);
        rq.lease = lease;
        proto_pack_ku64(&rq.o.pk, "lease", lease);
        (void)gpuipc__lease_drop(c, lease);
        return gpuipc__send_nowait(c, &rq);
}

void gpuipc__deferred_send(gpuipc_client *c)
{
        struct gpuipc__lease *l;
        unsigned n;

        pthread_mutex_lock(&c->deferred_lock);
        l = c->deferred;
        n = c->n_deferred;
        c->deferred = NULL;
        c->cap_deferred = 0;
        __atomic_store_n(&c->n_deferred, 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&c->deferred_lock);
        for (unsigned i = 0; i < n; i++)
                if (gpuipc__client_usable(c) && gpuipc__lease_held(c, l[i].id, l[i].epoch))
                        (void)release_nowait(c, l[i].id);
        free(l);
}

/* ---- lifetime --------------------------------------------------------------- */

/* Unmaps everything and frees v; device parts first, as CUDA wants the
 * importer's mappings closed before the exporter may free. */
static void view_free(gpuipc_batch_view *v)
{
        uint32_t n = v->parts ? v->desc->n_parts : 0;

        for (uint32_t i = 0; i < n; i++) {
                gpuipc_view *dv = v->parts[i].dv;
                if (!dv)
                        continue;
                gpuipc__cuview_close(dv);
                free(dv->info);
                free(dv);
        }
        gpuipc__cuda_event_close(v->event, v->event_device);
        for (unsigned i = 0; i < GPUIPC__BATCH_FDS_MAX; i++)
                gpuipc__map_put(v->maps[i]);
        free(v->parts);
        free(v->info);
        free(v);
}

static int view_unref(gpuipc_batch_view *v, bool now)
{
        gpuipc_client *c = v->c;
        uint64_t lease = v->lease;
        uint32_t epoch = v->epoch;
        int r = 0;

        if (__atomic_sub_fetch(&v->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return 0;
        view_free(v);
        if (!now) {
                deferred_push(c, lease, epoch);
        } else if (!c->freed) {
                r = gpuipc__begin(c);
                if (r == 0 && gpuipc__lease_held(c, lease, epoch))
                        r = gpuipc__end(c, release_nowait(c, lease));
        }
        gpuipc__client_unref(c);
        return r;
}

void gpuipc__batch_view_unref(gpuipc_batch_view *v, bool now)
{
        (void)view_unref(v, now);
}

int gpuipc_batch_view_release(gpuipc_batch_view *v)
{
        return v ? view_unref(v, true) : 0;
}

/* ---- lookup --------------------------------------------------------------- */

/* What cudamap.c reads of a device part's record. */
static int part_info(const msgpack_object *pm, const gpuipc_info *batch,
                     const gpuipc_batch_part *dp, gpuipc_info **ret)
{
        const msgpack_object *copied;
        gpuipc_info *pi = calloc(1, sizeof(*pi));

        if (!pi)
                return -ENOMEM;
        pi->name = batch->name;
        pi->kind = dp->kind;
        pi->size = dp->size;
        pi->device = dp->device;
        if (proto_get_u64(pm, "offset", &pi->offset) == -EINVAL ||
            pi->offset > UINT64_MAX - pi->size ||
            gpuipc__info_cuda(pm, pi, &copied) < 0) {
                free(pi);
                return -EBADMSG;
        }
        *ret = pi;
        return 0;
}

/* The fds part pm names, from the reply's. */
static int part_fds(const msgpack_object *pm, const struct gpuipc__reply *rp, int *fds,
                    unsigned *ret_n)
{
        const msgpack_object *a;
        uint64_t idx;

        *ret_n = 0;
        if (proto_get_array(pm, "fds", &a) < 0)
                return proto_get(pm, "fds") ? -EBADMSG : 0;
        if (a->via.array.size > GPUIPC__BATCH_FDS_MAX)
                return -EBADMSG;
        for (uint32_t i = 0; i < a->via.array.size; i++) {
                if (proto_obj_u64(&a->via.array.ptr[i], &idx) < 0 || idx >= rp->nfds)
                        return -EBADMSG;
                fds[i] = rp->fds[idx];
        }
        *ret_n = a->via.array.size;
        return 0;
}

/* Host part i at its offset of the reply's fd: mapped once per fd, the
 * mapping covering every part of it (need[fd]). */
static int map_host(gpuipc_client *c, gpuipc_batch_view *v, struct gpuipc__reply *rp,
                    uint32_t i, const uint64_t *need)
{
        struct gpuipc__bpart *p = &v->parts[i];
        uint8_t *base;
        int r;

        if (!v->maps[p->fd]) {
                r = gpuipc__map_get(rp->fds[p->fd], false, need[p->fd], &v->maps[p->fd], &base);
                if (r == -EBADMSG)
                        return gpuipc__fail(c, r, "a part's memfd is smaller than the record "
                                            "says");
                if (r < 0)
                        return gpuipc__fail(c, r, "cannot map a part of the batch: %s",
                                            gpuipc_strerror(r));
        }
        p->data = gpuipc__map_base(v->maps[p->fd], need[p->fd]) + p->offset;
        p->device = -1;
        return 0;
}

static int open_device(gpuipc_client *c, gpuipc_batch_view *v, struct gpuipc__reply *rp,
                       const msgpack_object *pm, uint32_t i, unsigned flags)
{
        int fds[GPUIPC__BATCH_FDS_MAX];
        gpuipc_view *dv;
        unsigned nfds;
        bool held = false;
        int r;

        if (part_fds(pm, rp, fds, &nfds) < 0)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's batch part %u names unknown fds", i);
        dv = calloc(1, sizeof(*dv));
        if (!dv)
                return gpuipc__fail(c, -ENOMEM, "out of memory");
        dv->device = -1;
        v->parts[i].dv = dv;
        r = part_info(pm, v->info, &v->desc->parts[i], &dv->info);
        if (r < 0)
                return gpuipc__fail(c, r, "gpuipcd's batch part %u is malformed", i);
        (void)proto_get_bool(pm, "held", &held);
        /* The parts have no events of their own: the batch's is below. */
        r = gpuipc__cuview_open(c, pm, fds, nfds, held, flags, -1, dv);
        if (r < 0)
                return r;
        v->parts[i].data = dv->data;
        v->parts[i].device = dv->device;
        return 0;
}

/* The batch's event, opened on the device of its first device part. */
static int open_event(gpuipc_client *c, gpuipc_batch_view *v, const msgpack_object *reg,
                      unsigned flags)
{
        const uint8_t *h;
        bool own = false;
        size_t n;
        int dev = -1;

        if (proto_get_bin(reg, "event", &h, &n) < 0)
                return 0;
        if (n != GPUIPC__EVENT_LEN)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's batch record has a malformed event");
        for (uint32_t i = 0; i < v->desc->n_parts; i++)
                if (v->parts[i].dv) {
                        if (dev < 0)
                                dev = v->parts[i].device;
                        own |= gpuipc__cuview_own(v->parts[i].dv);
                }
        if (dev < 0)
                return 0;       /* host parts only: nothing to order */
        v->event_device = dev;
        return gpuipc__cuda_event_open(c, h, dev, own, flags, &v->event);
}

static int view_from_reply(gpuipc_client *c, struct gpuipc__reply *rp, unsigned flags,
                           gpuipc_batch_view *v)
{
        uint64_t need[GPUIPC__BATCH_FDS_MAX] = { 0 };
        const msgpack_object *reg, *parts;
        int r;

        if (proto_get_map(rp->msg.root, "reg", &reg) < 0 ||
            gpuipc__info_decode(reg, &v->info) < 0)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's lookup reply has no usable record");
        if (v->info->kind != GPUIPC_KIND_BATCH)
                return gpuipc__fail(c, -EMEDIUMTYPE, "%s is not a batch: look it up with "
                                    "gpuipc_view_lookup()", v->info->name);
        v->desc = v->info->batch;
        if (!v->desc->parts || proto_get_array(reg, "parts", &parts) < 0 ||
            rp->nfds > GPUIPC__BATCH_FDS_MAX)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's batch record has no parts");
        v->parts = calloc(v->desc->n_parts, sizeof(*v->parts));
        if (!v->parts)
                return gpuipc__fail(c, -ENOMEM, "out of memory");
        /* Host parts: each memfd's extent first, so that it maps once. */
        for (uint32_t i = 0; i < v->desc->n_parts; i++) {
                static const struct proto_key keys[] = { PROTO_KEY("fds"),
                                                         PROTO_KEY("offset") };
                const msgpack_object *k[2];
                struct gpuipc__bpart *p = &v->parts[i];
                uint64_t idx;
                p->size = v->desc->parts[i].size;
                if (v->desc->parts[i].kind != GPUIPC_KIND_HOST)
                        continue;
                proto_get_n(&parts->via.array.ptr[i], keys, 2, k);
                if (!k[0] || k[0]->type != MSGPACK_OBJECT_ARRAY || k[0]->via.array.size != 1 ||
                    proto_obj_u64(&k[0]->via.array.ptr[0], &idx) < 0 || idx >= rp->nfds ||
                    (k[1] && proto_obj_u64(k[1], &p->offset) < 0) ||
                    p->offset > UINT64_MAX - p->size)
                        return gpuipc__fail(c, -EBADMSG, "gpuipcd's batch part %u has no "
                                            "usable fd or offset", i);
                p->fd = (uint32_t)idx;
                if (need[idx] < p->offset + p->size)
                        need[idx] = p->offset + p->size;
        }
        for (uint32_t i = 0; i < v->desc->n_parts; i++) {
                if (v->desc->parts[i].kind != GPUIPC_KIND_HOST)
                        r = open_device(c, v, rp, &parts->via.array.ptr[i], i, flags);
                else
                        r = map_host(c, v, rp, i, need);
                if (r < 0)
                        return r;
                if (i == 0)
                        v->device = v->parts[i].device;
                else if (v->device != v->parts[i].device)
                        v->device = -2;
        }
        return open_event(c, v, reg, flags);
}

int gpuipc_batch_view_lookup(gpuipc_client *c, const char *name, int timeout_ms, unsigned flags,
                        gpuipc_batch_view **ret_view)
{
        struct gpuipc__reply rp;
        struct gpuipc__req rq;
        gpuipc_batch_view *v;
        int r;

        r = gpuipc__lookup_begin(c, name, flags, GPUIPC_LOOKUP_NO_SYNC,
                                 "batches take GPUIPC_LOOKUP_NO_SYNC only", ret_view);
        if (r < 0)
                return r;
        v = calloc(1, sizeof(*v));
        if (!v)
                return gpuipc__end(c, -ENOMEM);
        v->refs = 1;
        v->event_device = -1;
        gpuipc__lookup_start(c, &rq, name, timeout_ms, 0);
        r = gpuipc__call(c, &rq, NULL, 0, &rp);
        if (r < 0) {
                free(v);
                return gpuipc__end(c, r);
        }
        v->epoch = c->epoch;
        if (proto_get_u64(rp.msg.root, "lease", &v->lease) < 0) {
                gpuipc__reply_free(&rp);
                free(v);
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's lookup reply has no lease");
        }
        r = view_from_reply(c, &rp, flags, v);
        gpuipc__reply_free(&rp);
        if (r < 0) {
                /* A lease we cannot use goes back (no reply to read: the
                 * error text stays). */
                if (gpuipc__client_usable(c))
                        (void)release_nowait(c, v->lease);
                view_free(v);
                return gpuipc__end(c, r);
        }
        v->c = gpuipc__client_ref(c);
        *ret_view = v;
        return 0;
}

/* ---- accessors ------------------------------------------------------------ */

uint64_t gpuipc_batch_view_rows(const gpuipc_batch_view *v)
{
        return v ? v->desc->rows : 0;
}

size_t gpuipc_batch_view_columns(const gpuipc_batch_view *v)
{
        return v ? v->desc->n_columns : 0;
}

const char *gpuipc_batch_view_column_name(const gpuipc_batch_view *v, size_t i)
{
        const gpuipc_batch_node *n = v ? gpuipc_info_batch_column(v->info, i) : NULL;

        return n ? n->name : NULL;
}

int gpuipc_batch_view_column_index(const gpuipc_batch_view *v, const char *name)
{
        if (!v || !name)
                return -EINVAL;
        for (uint32_t i = 0; i < v->desc->n_columns; i++)
                if (strcmp(v->desc->nodes[v->desc->columns[i]].name, name) == 0)
                        return (int)i;
        return -ENOENT;
}

int gpuipc_batch_view_node_buffer(const gpuipc_batch_view *v, size_t node, unsigned buffer,
                                  void **ret_data, uint64_t *ret_size, int *ret_device)
{
        const gpuipc_batch_node *n;
        const struct gpuipc__bpart *p = NULL;
        int32_t k;

        if (!v || node >= v->desc->n_nodes)
                return -EINVAL;
        n = &v->desc->nodes[node];
        if (buffer >= n->n_buffers)
                return -EINVAL;
        k = n->buffers[buffer];
        if (k >= 0)
                p = &v->parts[k];
        if (ret_data)
                *ret_data = p ? p->data : NULL;
        if (ret_size)
                *ret_size = p ? p->size : 0;
        if (ret_device)
                *ret_device = p ? p->device : -1;
        return 0;
}

/* The mapping part p lies in: a device part's opened allocation, a host
 * part's memfd from its start; a device copy, or a part the library did
 * not map, is itself. */
static void part_extent(const gpuipc_batch_view *v, const struct gpuipc__bpart *p,
                        uint8_t **ret_base, uint64_t *ret_size)
{
        *ret_base = p->data;
        *ret_size = p->size;
        if (p->dv)
                gpuipc__cuview_extent(p->dv, ret_base, ret_size);
        else if (p->device < 0 && v->maps[p->fd]) {
                *ret_base = p->data - p->offset;
                *ret_size = gpuipc__map_length(v->maps[p->fd]);
        }
}

int gpuipc_batch_view_part_mapping(const gpuipc_batch_view *v, size_t part, void **ret_base,
                                   uint64_t *ret_size)
{
        uint8_t *base;
        uint64_t size;

        if (!v || part >= v->desc->n_parts)
                return -EINVAL;
        part_extent(v, &v->parts[part], &base, &size);
        if (ret_base)
                *ret_base = base;
        if (ret_size)
                *ret_size = size;
        return 0;
}

/* Bytes per value when a node is validity plus one buffer of fixed-width
 * values with no children; else 0. */
static uint32_t values_width(const gpuipc_batch_node *n)
{
        struct gpuipc__arrow_layout l;
        const char *why;

        if (n->n_buffers != 2 || n->n_children ||
            gpuipc__arrow_layout(n->format, &l, &why) < 0 ||
            l.n_buffers != 2 || l.buf[1] != GPUIPC__AB_FIXED)
                return 0;
        return l.width;
}

int gpuipc_batch_view_values(const gpuipc_batch_view *v, size_t first, size_t n,
                             gpuipc_batch_values *ret)
{
        if (!v || !ret || first > v->desc->n_columns || n > v->desc->n_columns - first)
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                uint32_t node = v->desc->columns[first + i];
                const gpuipc_batch_node *nd = &v->desc->nodes[node];
                gpuipc_batch_values *o = &ret[i];
                int32_t k;

                *o = (gpuipc_batch_values){ .name = nd->name, .format = nd->format,
                                            .node = node, .length = nd->length,
                                            .null_count = nd->null_count,
                                            .device = -1, .part = -1 };
                o->width = values_width(nd);
                k = o->width ? nd->buffers[1] : -1;
                if (k >= 0) {
                        const struct gpuipc__bpart *p = &v->parts[k];
                        uint8_t *base;

                        part_extent(v, p, &base, &o->map_size);
                        o->map = base;
                        o->data = p->data + (uint64_t)nd->offset * o->width;
                        o->device = p->device;
                        o->part = k;
                }
        }
        return 0;
}

int gpuipc_batch_view_buffer(const gpuipc_batch_view *v, size_t column, unsigned buffer,
                             void **ret_data, uint64_t *ret_size, int *ret_device)
{
        if (!v || column >= v->desc->n_columns)
                return -EINVAL;
        return gpuipc_batch_view_node_buffer(v, v->desc->columns[column], buffer, ret_data,
                                             ret_size, ret_device);
}

const gpuipc_info *gpuipc_batch_view_info(const gpuipc_batch_view *v)
{
        return v ? v->info : NULL;
}
