/* register.c: registering buffers of every kind, unregistering, adopt.
 *
 * Every register request has one shape: the name, the fields of the kind
 * (hostbuf.c packs a sealed memfd's, cudareg.c those of exported device
 * memory), then what any kind may carry: ephemeral, shared_write, the
 * metadata, the access rule and TTL of the client (access.c).  Its reply
 * gives the id.  The kind's public function checks its own arguments
 * between gpuipc__register_begin() and the request, and does its own
 * work (sealing, exporting) before gpuipc__register_start().
 */
#include <errno.h>

#include "internal.h"

/* After a reconnect, a name this process holds already means the first
 * attempt did it. */
const struct gpuipc__op gpuipc__op_register = {
        .name = "register", .redo = GPUIPC__REDO_REGISTER, .keep = GPUIPC__KEEP_REGISTER
};

int gpuipc__register_begin(gpuipc_client *c, const char *name, const gpuipc_meta *meta,
                           bool args_ok, const char *bad_args)
{
        const char *why;
        int r;

        r = gpuipc__begin_named(c, name);
        if (r < 0)
                return r;
        if (!args_ok)
                return gpuipc__fail(c, -EINVAL, "%s", bad_args);
        r = gpuipc__meta_check(meta, &why);
        if (r < 0)
                return gpuipc__fail(c, r, "invalid metadata: %s", why);
        return 0;
}

void gpuipc__register_start(gpuipc_client *c, struct gpuipc__req *rq,
                            const struct gpuipc__regargs *a, uint32_t nkind)
{
        gpuipc__request(c, rq, &gpuipc__op_register, 1 + nkind + a->ephemeral + a->shared_write +
                        (gpuipc__meta_keys(a->meta) > 0) + gpuipc__access_keys(c));
        rq->name = a->name;
        proto_pack_kstr(&rq->o.pk, "name", a->name);
}

void gpuipc__cached_add(gpuipc_client *c, uint64_t id, uint64_t alloc, unsigned n)
{
        unsigned k = c->cached_regs_n++ % GPUIPC__UNMAPPED_MAX;

        c->cached_regs[k].id = id;
        c->cached_regs[k].alloc = alloc;
        c->cached_regs[k].n = n;
}

int gpuipc__register_finish(gpuipc_client *c, struct gpuipc__req *rq,
                            const struct gpuipc__regargs *a, const int *fds, unsigned nfds,
                            uint64_t *ret_id)
{
        struct gpuipc__reply rp;
        uint64_t id, alloc;
        int r;

        if (a->ephemeral)
                proto_pack_kbool(&rq->o.pk, "ephemeral", true);
        /* The daemon accepts a memfd without a write seal only then. */
        if (a->shared_write)
                proto_pack_kbool(&rq->o.pk, "shared_write", true);
        if (gpuipc__meta_keys(a->meta) > 0) {
                proto_pack_str(&rq->o.pk, "meta");
                gpuipc__meta_pack(&rq->o.pk, a->meta);
        }
        gpuipc__access_pack(&rq->o.pk, c);      /* issue 7: access rule, see access.c */
        r = gpuipc__call(c, rq, fds, nfds, &rp);
        if (r < 0)
                return gpuipc__end(c, r);
        r = proto_get_u64(rp.msg.root, "id", &id);
        if (r == 0 && a->cacheable && proto_get_u64(rp.msg.root, "alloc", &alloc) == 0)
                gpuipc__cached_add(c, id, alloc, 1);
        gpuipc__reply_free(&rp);
        if (r < 0)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's register reply has no id");
        if (ret_id)
                *ret_id = id;
        return 0;
}

/* ---- unregister, adopt ------------------------------------------------- */

/* Gone already, after a reconnect, means the first attempt did it. */
static const struct gpuipc__op op_unregister = {
        .name = "unregister", .redo = GPUIPC__REDO_UNLESS_GONE, .keep = GPUIPC__KEEP_FORGET
};

int gpuipc_name_unregister(gpuipc_client *c, const char *name)
{
        return gpuipc__name_op(c, &op_unregister, name, NULL);
}

int gpuipc_prefix_unregister(gpuipc_client *c, const char *prefix, uint64_t *ret_removed,
                             uint64_t *ret_skipped)
{
        struct gpuipc__reply rp;
        struct gpuipc__req rq;
        uint64_t removed = 0, skipped = 0;
        int r;

        if (!c || !prefix || !prefix[0])
                return -EINVAL;
        r = gpuipc__begin(c);
        if (r < 0)
                return r;
        gpuipc__request(c, &rq, &op_unregister, 1);
        rq.prefix = prefix;
        proto_pack_kstr(&rq.o.pk, "prefix", prefix);
        r = gpuipc__call(c, &rq, NULL, 0, &rp);
        if (r < 0)
                return gpuipc__end(c, r);
        r = proto_get_u64(rp.msg.root, "removed", &removed);
        if (r == 0 && proto_get_u64(rp.msg.root, "skipped", &skipped) == -EINVAL)
                r = -EINVAL;
        gpuipc__reply_free(&rp);
        if (r < 0)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's unregister reply has no removed "
                                    "count (a daemon without unregister by prefix?)");
        if (ret_removed)
                *ret_removed = removed;
        if (ret_skipped)
                *ret_skipped = skipped;
        return 0;
}

/* adopt needs no driver in this process: the daemon does the copy.  The
 * registration is the daemon's then, nothing a reconnect gives back. */
static const struct gpuipc__op op_adopt = {
        .name = "adopt", .redo = GPUIPC__REDO_NEVER, .keep = GPUIPC__KEEP_FORGET
};

int gpuipc_name_adopt(gpuipc_client *c, const char *name, uint32_t *ret_leases)
{
        uint64_t n = 0;
        int r = gpuipc__name_op(c, &op_adopt, name, &n);

        if (r < 0)
                return r;
        if (n > UINT32_MAX)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's adopt reply has no usable leases");
        if (ret_leases)
                *ret_leases = (uint32_t)n;
        return 0;
}
