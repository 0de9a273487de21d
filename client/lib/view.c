/* view.c: consumer-side lookups, leases and views. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "trace.h"

/* Gone already, after a reconnect, means the first attempt did it. */
const struct gpuipc__op gpuipc__op_release = {
        .name = "release", .redo = GPUIPC__REDO_UNLESS_GONE, .keep = GPUIPC__KEEP_RELEASE
};
const struct gpuipc__op gpuipc__op_lookup = {
        .name = "lookup", .redo = GPUIPC__REDO_SEND, .keep = GPUIPC__KEEP_LEASE
};

int gpuipc__lookup_begin(gpuipc_client *c, const char *name, unsigned flags, unsigned allowed,
                         const char *bad_flags, const void *ret_view)
{
        int r;

        if (!c || !ret_view)
                return -EINVAL;
        r = gpuipc__begin_named(c, name);
        if (r < 0)
                return r;
        if (flags & ~allowed)
                return gpuipc__fail(c, -EINVAL, "%s", bad_flags);
        return 0;
}

void gpuipc__lookup_start(gpuipc_client *c, struct gpuipc__req *rq, const char *name,
                          int timeout_ms, uint32_t nextra)
{
        uint64_t wait_ms = timeout_ms < 0 || (uint64_t)timeout_ms > PROTO_WAIT_MAX_MS
                                   ? PROTO_WAIT_MAX_MS : (uint64_t)timeout_ms;
        bool cache = gpuipc__cucache_enabled();

        gpuipc__request(c, rq, &gpuipc__op_lookup,
                        1 + (wait_ms > 0) + cache + (c->lookup_owner >= 0) + nextra);
        proto_pack_kstr(&rq->o.pk, "name", name);
        /* Only that uid's registration will do (gpuipc_client_set_lookup_owner). */
        if (c->lookup_owner >= 0)
                proto_pack_ku64(&rq->o.pk, "owner_uid", (uint64_t)c->lookup_owner);
        if (wait_ms > 0)
                proto_pack_ku64(&rq->o.pk, "wait_ms", wait_ms);
        /* Device mappings may stay open after the view (the cache). */
        if (cache)
                proto_pack_kbool(&rq->o.pk, "cache", true);
}

static int send_release(gpuipc_client *c, uint64_t lease, const uint8_t *event)
{
        struct gpuipc__reply rp;
        struct gpuipc__req rq;
        int r;

        gpuipc__request(c, &rq, &gpuipc__op_release, 1 + (event != NULL));
        rq.lease = lease;
        proto_pack_ku64(&rq.o.pk, "lease", lease);
        if (event) {
                proto_pack_str(&rq.o.pk, "event");
                msgpack_pack_bin_with_body(&rq.o.pk, event, GPUIPC__EVENT_LEN);
        }
        r = gpuipc__call(c, &rq, NULL, 0, &rp);
        if (r == 0)
                gpuipc__reply_free(&rp);
        return r;
}

/* Builds the view from a lookup reply: record, fd, mapping.  *have is the
 * mapping of the view whose lease the lookup sent as `have` (have_id its
 * registration), or NULL; a reply without an fd for that registration
 * takes it over, setting *have to NULL. */
static int view_from_reply(gpuipc_client *c, struct gpuipc__reply *rp, unsigned flags,
                           int device, gpuipc_view *v, uint64_t have_id,
                           struct gpuipc__map **have)
{
        const msgpack_object *reg;
        uint8_t *base;
        int fd, r;

        if (proto_get_map(rp->msg.root, "reg", &reg) < 0 ||
            gpuipc__info_decode(reg, &v->info) < 0)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's lookup reply has no usable record");
        if (v->info->offset > UINT64_MAX - v->info->size)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's record has an impossible range");
        if (v->info->kind == GPUIPC_KIND_BATCH)
                return gpuipc__fail(c, -EMEDIUMTYPE, "%s is a batch: look it up with "
                                    "gpuipc_batch_view_lookup()", v->info->name);
        /* Only device records touch the CUDA driver. */
        TRACE("c.decoded", 0);
        if (v->info->kind != GPUIPC_KIND_HOST) {
                bool held = false;
                (void)proto_get_bool(rp->msg.root, "held", &held);
                return gpuipc__cuview_open(c, reg, rp->fds, rp->nfds, held, flags, device, v);
        }
        if (rp->nfds == 0 && *have && v->info->id == have_id) {
                /* The daemon left the fd out: the hinted view's mapping is
                 * of this very registration. */
                base = gpuipc__map_base(*have, v->info->offset + v->info->size);
                if (!base)
                        return gpuipc__fail(c, -EBADMSG, "the buffer's mapping is smaller "
                                            "than its record says");
                v->map = *have;
                *have = NULL;
                v->data = base + v->info->offset;
                return 0;
        }
        r = gpuipc__reply_take_fd(rp, &fd);
        if (r < 0)
                return gpuipc__fail(c, r, "gpuipcd's lookup reply carries no fd");
        r = gpuipc__map_get(fd, flags & GPUIPC_LOOKUP_WRITABLE,
                            v->info->offset + v->info->size, &v->map, &base);
        close(fd);
        if (r == -EBADMSG)
                return gpuipc__fail(c, r, "the buffer's fd is smaller than its record says");
        /* A write-sealed memfd (F_SEAL_FUTURE_WRITE) refuses writable maps. */
        if (r == -EPERM && (flags & GPUIPC_LOOKUP_WRITABLE))
                return gpuipc__fail(c, r, "cannot map %s writable: it was registered without "
                                    "GPUIPC_REGISTER_SHARED_WRITE", v->info->name);
        if (r < 0)
                return gpuipc__fail(c, r, "cannot map the buffer: %s", gpuipc_strerror(r));
        v->data = base + v->info->offset;
        return 0;
}

int gpuipc_view_lookup(gpuipc_client *c, const char *name, int timeout_ms, unsigned flags,
                  gpuipc_view **ret_view)
{
        return gpuipc_view_lookup_device(c, name, timeout_ms, flags, -1, ret_view);
}

int gpuipc_view_lookup_device(gpuipc_client *c, const char *name, int timeout_ms, unsigned flags,
                         int device, gpuipc_view **ret_view)
{
        struct gpuipc__reply rp;
        struct gpuipc__map *have_map = NULL;
        struct gpuipc__req rq;
        gpuipc_view *v;
        uint64_t have = 0, have_id = 0;
        bool writable = flags & GPUIPC_LOOKUP_WRITABLE;
        int r;

        TRACE("c.lookup", 0);
        r = gpuipc__lookup_begin(c, name, flags, GPUIPC_LOOKUP_WRITABLE | GPUIPC_LOOKUP_NO_SYNC |
                                 GPUIPC_LOOKUP_COPY_TO_DEVICE, "unknown lookup flags", ret_view);
        if (r < 0)
                return r;
        if (device < -1)
                return gpuipc__fail(c, -EINVAL, "invalid consumer device %d", device);
        v = calloc(1, sizeof(*v));
        if (!v)
                return gpuipc__end(c, -ENOMEM);
        v->device = -1;
        /* A host view of this name open already: offer its lease, so that
         * the daemon may leave the fd out (an older one sends it anyway). */
        if (!gpuipc__hint_get(c, name, writable, &have, &have_id, &have_map))
                have = 0;
        gpuipc__lookup_start(c, &rq, name, timeout_ms, writable + (have > 0));
        /* The daemon hands out a read-only fd unless asked (and allowed). */
        if (writable)
                proto_pack_kbool(&rq.o.pk, "writable", true);
        if (have > 0)
                proto_pack_ku64(&rq.o.pk, "have", have);
        r = gpuipc__call(c, &rq, NULL, 0, &rp);
        if (r < 0) {
                gpuipc__map_put(have_map);
                free(v);
                return gpuipc__end(c, r);
        }
        v->epoch = c->epoch;
        if (proto_get_u64(rp.msg.root, "lease", &v->lease) < 0) {
                gpuipc__reply_free(&rp);
                gpuipc__map_put(have_map);
                free(v);
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's lookup reply has no lease");
        }
        TRACE("c.lookup_reply", 0);
        r = view_from_reply(c, &rp, flags, device, v, have_id, &have_map);
        TRACE("c.lookup_view", r);
        gpuipc__reply_free(&rp);
        gpuipc__map_put(have_map);
        if (r < 0) {
                /* We hold a lease we cannot use: give it back, keeping the
                 * error text that explains the failure. */
                char saved[GPUIPC__ERRMSG_MAX];
                memcpy(saved, c->errmsg, sizeof(saved));
                if (gpuipc__client_usable(c))
                        (void)send_release(c, v->lease, NULL);
                memcpy(c->errmsg, saved, sizeof(saved));
                gpuipc__cuview_close(v);
                gpuipc__map_put(v->map);
                free(v->info);
                free(v);
                return gpuipc__end(c, r);
        }
        v->c = gpuipc__client_ref(c);
        if (v->map)
                gpuipc__hint_add(v, name, writable);
        *ret_view = v;
        return 0;
}

void *gpuipc_view_data(const gpuipc_view *v)
{
        return v ? v->data : NULL;
}

int gpuipc_view_copied(const gpuipc_view *v)
{
        return v && v->copy ? 1 : 0;
}

size_t gpuipc_view_size(const gpuipc_view *v)
{
        return v ? (size_t)v->info->size : 0;
}

const gpuipc_info *gpuipc_view_info(const gpuipc_view *v)
{
        return v ? v->info : NULL;
}

int gpuipc_view_release(gpuipc_view *v)
{
        return gpuipc__view_release(v, NULL);
}

int gpuipc__view_release(gpuipc_view *v, const uint8_t *event)
{
        gpuipc_client *c;
        int r = 0;

        if (!v)
                return 0;
        c = v->c;
        /* First, so that no lookup offers a lease that is going away. */
        gpuipc__hint_del(v);
        /* Unmapped before the release: a cuda-ipc or cuda-pool producer
         * frees its memory once told that the last lease went, and CUDA
         * wants importers closed (or freed) before that. */
        gpuipc__cuview_close(v);
        /* After gpuipc_client_free() the daemon has dropped the lease with
         * the connection; only the mapping is left to undo. */
        if (!c->freed) {
                r = gpuipc__begin(c);
                /* A lease the daemon forgot in a restart (it kept no state):
                 * releasing its id could drop a newer lease that reuses it. */
                if (r == 0 && gpuipc__lease_held(c, v->lease, v->epoch))
                        r = gpuipc__end(c, send_release(c, v->lease, event));
        }
        gpuipc__map_put(v->map);
        free(v->info);
        free(v);
        gpuipc__client_unref(c);
        return r;
}
