/* call.c: requests, and calls that send one and wait for its reply.
 *
 * A call sends its request through io.c and, when the connection drops
 * because the daemon went away, lets resume_reconnect.c reconnect and
 * complete it; once it succeeded, resume_track.c records what a later
 * reconnect re-establishes.
 * Both do as the request's kind (struct gpuipc__op) says: each operation
 * defines its own beside its code.
 */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

void gpuipc__request(gpuipc_client *c, struct gpuipc__req *rq, const struct gpuipc__op *op,
                     uint32_t nfields)
{
        rq->seq = ++c->seq;
        rq->op = op;
        rq->name = rq->prefix = NULL;
        rq->lease = 0;
        proto_out_init(&rq->o);
        msgpack_pack_map(&rq->o.pk, 2 + nfields);
        proto_pack_kstr(&rq->o.pk, "op", op->name);
        proto_pack_ku64(&rq->o.pk, "seq", rq->seq);
}

int gpuipc__call(gpuipc_client *c, struct gpuipc__req *rq, const int *fds, unsigned nfds,
                 struct gpuipc__reply *ret_reply)
{
        struct gpuipc__reply rp = {};
        uint8_t *buf = NULL;
        size_t len;
        int r;

        r = proto_out_finish(&rq->o, c->max_frame);
        if (r == -EMSGSIZE) {
                proto_out_free(&rq->o);
                return gpuipc__fail(c, r, "request is larger than the daemon's frame limit (%u bytes)",
                                    c->max_frame);
        }
        if (r < 0) {
                proto_out_free(&rq->o);
                return r;
        }
        buf = proto_out_release(&rq->o, &len);
        proto_out_free(&rq->o);
        if (!buf)
                return -ENOMEM;
        r = gpuipc__send_wait(c, buf, len, rq->seq, fds, nfds, &rp);
        if (r < 0 && gpuipc__may_reconnect(c, r))
                r = gpuipc__recover(c, rq, buf, len, fds, nfds, &rp);
        if (r == 0)
                r = gpuipc__reply_error(c, &rp);
        if (r == 0) {
                gpuipc__reply_move(ret_reply, &rp);
                gpuipc__track(c, rq, buf, len, fds, nfds, ret_reply);
        }
        free(buf);
        return r;
}

int gpuipc__call_op(gpuipc_client *c, const struct gpuipc__op *op,
                    struct gpuipc__reply *ret_reply)
{
        struct gpuipc__req rq;
        int r;

        r = gpuipc__begin(c);
        if (r < 0)
                return r;
        gpuipc__request(c, &rq, op, 0);
        r = gpuipc__call(c, &rq, NULL, 0, ret_reply);
        return r < 0 ? gpuipc__end(c, r) : 0;
}

int gpuipc__name_op(gpuipc_client *c, const struct gpuipc__op *op, const char *name,
                    uint64_t *ret_leases)
{
        struct gpuipc__reply rp;
        struct gpuipc__req rq;
        uint64_t n = 0;
        int r;

        r = gpuipc__begin_named(c, name);
        if (r < 0)
                return r;
        gpuipc__request(c, &rq, op, 1);
        proto_pack_kstr(&rq.o.pk, "name", name);
        r = gpuipc__call(c, &rq, NULL, 0, &rp);
        if (r < 0)
                return gpuipc__end(c, r);
        r = proto_get_u64(rp.msg.root, "leases", &n);
        gpuipc__reply_free(&rp);
        if (r == -EINVAL)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's %s reply has an unusable leases field",
                                    op->name);
        if (ret_leases)
                *ret_leases = n;
        return 0;
}

int gpuipc__send_nowait(gpuipc_client *c, struct gpuipc__req *rq)
{
        int r = proto_out_finish(&rq->o, c->max_frame);

        /* The reply, when it comes, is dropped as one to a request nobody
         * waits for. */
        if (r == 0)
                r = gpuipc__client_usable(c)
                    ? gpuipc__send(c, (const uint8_t *)rq->o.sb.data, rq->o.sb.size, NULL, 0)
                    : -ENOTCONN;
        proto_out_free(&rq->o);
        return r;
}

void gpuipc__send_unholds(gpuipc_client *c)
{
        static const struct gpuipc__op op_unhold = { .name = "unhold" };
        struct gpuipc__req rq;
        uint64_t *ids;
        unsigned n = gpuipc__cucache_take_unholds(c, &ids);

        /* Not waited for.  PROTO_UNHOLD_MAX ids a frame (9 bytes each)
         * stay far below any max_frame. */
        for (unsigned at = 0; at < n && gpuipc__client_usable(c); at += PROTO_UNHOLD_MAX) {
                unsigned k = n - at < PROTO_UNHOLD_MAX ? n - at : PROTO_UNHOLD_MAX;
                gpuipc__request(c, &rq, &op_unhold, 1);
                proto_pack_str(&rq.o.pk, "allocs");
                msgpack_pack_array(&rq.o.pk, k);
                for (unsigned i = 0; i < k; i++)
                        msgpack_pack_uint64(&rq.o.pk, ids[at + i]);
                (void)gpuipc__send_nowait(c, &rq);
        }
        free(ids);
}
