/* call.c: requests, and calls that send one and wait for its reply.
 *
 * A call sends its request through io.c and, when the connection drops
 * because the daemon went away, lets resume.c reconnect and complete it;
 * once it succeeded, resume.c records what a later reconnect re-establishes.
 */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

uint64_t gpuipc__request(gpuipc_client *c, struct proto_out *o, const char *op, uint32_t nfields)
{
        proto_out_init(o);
        msgpack_pack_map(&o->pk, 2 + nfields);
        proto_pack_kstr(&o->pk, "op", op);
        proto_pack_ku64(&o->pk, "seq", ++c->seq);
        c->cur_op = op;
        return c->seq;
}

int gpuipc__call(gpuipc_client *c, struct proto_out *o, uint64_t seq, const int *fds,
                 unsigned nfds, struct gpuipc__reply *ret_reply)
{
        struct gpuipc__reply rp = {};
        uint8_t *buf = NULL;
        size_t len;
        int r;

        r = proto_out_finish(o, c->max_frame);
        if (r == -EMSGSIZE) {
                proto_out_free(o);
                return gpuipc__fail(c, r, "request is larger than the daemon's frame limit (%u bytes)",
                                    c->max_frame);
        }
        if (r < 0) {
                proto_out_free(o);
                return r;
        }
        buf = proto_out_release(o, &len);
        proto_out_free(o);
        if (!buf)
                return -ENOMEM;
        r = gpuipc__send_wait(c, buf, len, seq, fds, nfds, &rp);
        if (r < 0 && gpuipc__may_reconnect(c, r))
                r = gpuipc__recover(c, buf, len, seq, fds, nfds, &rp);
        if (r == 0)
                r = gpuipc__reply_error(c, &rp);
        if (r == 0) {
                gpuipc__reply_move(ret_reply, &rp);
                gpuipc__track(c, buf, len, fds, nfds, ret_reply);
        }
        free(buf);
        return r;
}

int gpuipc__call_op(gpuipc_client *c, const char *op, struct gpuipc__reply *ret_reply)
{
        struct proto_out o;
        uint64_t seq;
        int r;

        r = gpuipc__begin(c);
        if (r < 0)
                return r;
        seq = gpuipc__request(c, &o, op, 0);
        r = gpuipc__call(c, &o, seq, NULL, 0, ret_reply);
        return r < 0 ? gpuipc__end(c, r) : 0;
}

int gpuipc__name_op(gpuipc_client *c, const char *op, const char *name, uint64_t *ret_leases)
{
        struct gpuipc__reply rp;
        struct proto_out o;
        uint64_t seq, n = 0;
        int r;

        if (!c)
                return -EINVAL;
        r = gpuipc__begin_named(c, name);
        if (r < 0)
                return r;
        seq = gpuipc__request(c, &o, op, 1);
        proto_pack_kstr(&o.pk, "name", name);
        r = gpuipc__call(c, &o, seq, NULL, 0, &rp);
        if (r < 0)
                return gpuipc__end(c, r);
        r = proto_get_u64(rp.msg.root, "leases", &n);
        gpuipc__reply_free(&rp);
        if (r == -EINVAL)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's %s reply has an unusable leases field",
                                    op);
        if (ret_leases)
                *ret_leases = n;
        return 0;
}

void gpuipc__send_unholds(gpuipc_client *c)
{
        struct proto_out o;
        uint64_t *ids;
        unsigned n = gpuipc__cucache_take_unholds(c, &ids);

        /* Not waited for: the reply, when it comes, is dropped as one to a
         * request nobody waits for.  PROTO_UNHOLD_MAX ids a frame (9 bytes
         * each) stay far below any max_frame. */
        for (unsigned at = 0; at < n && gpuipc__client_usable(c); at += PROTO_UNHOLD_MAX) {
                unsigned k = n - at < PROTO_UNHOLD_MAX ? n - at : PROTO_UNHOLD_MAX;
                proto_out_init(&o);
                msgpack_pack_map(&o.pk, 3);
                proto_pack_kstr(&o.pk, "op", "unhold");
                proto_pack_ku64(&o.pk, "seq", ++c->seq);
                proto_pack_str(&o.pk, "allocs");
                msgpack_pack_array(&o.pk, k);
                for (unsigned i = 0; i < k; i++)
                        msgpack_pack_uint64(&o.pk, ids[at + i]);
                if (proto_out_finish(&o, c->max_frame) == 0)
                        (void)gpuipc__send(c, (const uint8_t *)o.sb.data, o.sb.size, NULL, 0);
                proto_out_free(&o);
        }
        free(ids);
}
