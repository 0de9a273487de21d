/* encode.c: building frames with msgpack-c's packer. */
#include <errno.h>
#include <string.h>

#include "proto.h"

/* One buffer of the packer's first size, kept by proto_out_free() for the
 * next proto_out_init(): a daemon or client that builds one frame at a time
 * then allocates nothing per frame.  Threads swap it atomically; the one
 * that loses frees its own. */
static char *spare_buf;

void proto_out_init(struct proto_out *o)
{
        static const char zero[PROTO_HDR_LEN];
        char *buf = __atomic_exchange_n(&spare_buf, NULL, __ATOMIC_ACQUIRE);

        msgpack_sbuffer_init(&o->sb);
        if (buf) {
                o->sb.data = buf;
                o->sb.alloc = MSGPACK_SBUFFER_INIT_SIZE;
        }
        msgpack_packer_init(&o->pk, &o->sb, msgpack_sbuffer_write);
        msgpack_sbuffer_write(&o->sb, zero, sizeof(zero));
}

int proto_out_finish(struct proto_out *o, uint32_t max_frame)
{
        size_t body;

        /* msgpack-c's packer drops write errors; a buffer without even the
         * prefix means its first allocation failed. */
        if (!o->sb.data || o->sb.size < PROTO_HDR_LEN)
                return -ENOMEM;
        body = o->sb.size - PROTO_HDR_LEN;
        if (body == 0 || body > max_frame)
                return -EMSGSIZE;
        o->sb.data[0] = (char)(body >> 24);
        o->sb.data[1] = (char)(body >> 16);
        o->sb.data[2] = (char)(body >> 8);
        o->sb.data[3] = (char)body;
        return 0;
}

uint8_t *proto_out_release(struct proto_out *o, size_t *ret_len)
{
        *ret_len = o->sb.size;
        return (uint8_t *)msgpack_sbuffer_release(&o->sb);
}

void proto_out_free(struct proto_out *o)
{
        if (!o)
                return;
        if (o->sb.data && o->sb.alloc == MSGPACK_SBUFFER_INIT_SIZE)
                free(__atomic_exchange_n(&spare_buf, o->sb.data, __ATOMIC_ACQ_REL));
        else
                msgpack_sbuffer_destroy(&o->sb);
        msgpack_sbuffer_init(&o->sb);
}

void proto_pack_strn(msgpack_packer *pk, const char *s, size_t n)
{
        /* An empty body may come with a NULL pointer (from msgpack-c). */
        if (n == 0)
                msgpack_pack_str(pk, 0);
        else
                msgpack_pack_str_with_body(pk, s, n);
}

void proto_pack_str(msgpack_packer *pk, const char *s)
{
        proto_pack_strn(pk, s, strlen(s));
}

void proto_pack_kstr(msgpack_packer *pk, const char *key, const char *val)
{
        proto_pack_str(pk, key);
        proto_pack_str(pk, val);
}

void proto_pack_ku64(msgpack_packer *pk, const char *key, uint64_t val)
{
        proto_pack_str(pk, key);
        msgpack_pack_uint64(pk, val);
}

void proto_pack_ki64(msgpack_packer *pk, const char *key, int64_t val)
{
        proto_pack_str(pk, key);
        msgpack_pack_int64(pk, val);
}

void proto_pack_kbool(msgpack_packer *pk, const char *key, bool val)
{
        proto_pack_str(pk, key);
        if (val)
                msgpack_pack_true(pk);
        else
                msgpack_pack_false(pk);
}

void proto_pack_error(msgpack_packer *pk, int err, const char *message)
{
        proto_pack_str(pk, "error");
        msgpack_pack_map(pk, 2);
        proto_pack_kstr(pk, "code", proto_code_from_errno(err));
        proto_pack_kstr(pk, "message", message ? message : "");
}
