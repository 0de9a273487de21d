/* cuda_rec.c: the CUDA fields of a registration record (docs/protocol.md,
 * "Records"): the daemon packs them, libgpuipc reads them back. */
#include <errno.h>
#include <string.h>

#include "proto.h"

/* {[cacheable], id, size, regs, [key]}. */
static void pack_alloc(msgpack_packer *pk, const struct proto_cuda_alloc *a)
{
        struct proto_map m;

        proto_map_begin(&m, pk);
        if (a->cacheable)
                proto_map_kbool(&m, "cacheable", true);
        proto_map_ku64(&m, "id", a->id);
        proto_map_ku64(&m, "size", a->size);
        proto_map_ku64(&m, "regs", a->regs);
        /* What consumers key their imports by: the fd cannot. */
        if (a->key)
                proto_map_kbin(&m, "key", a->key, PROTO_ALLOC_KEY_LEN);
        proto_map_end(&m);
}

void proto_cuda_pack(struct proto_map *m, const struct proto_cuda_rec *c)
{
        proto_map_kstr(m, "device", c->device);
        proto_map_key(m, "alloc");
        pack_alloc(m->pk, &c->alloc);
        if (c->n_chunks > 1) {
                proto_map_key(m, "chunks");
                msgpack_pack_array(m->pk, c->n_chunks);
                for (uint32_t i = 0; i < c->n_chunks; i++)
                        pack_alloc(m->pk, &c->chunks[i]);
        }
        if (c->copied)
                proto_map_kstr(m, "copied", c->copied);
        if (c->has_buffer_id) {
                proto_map_ku64(m, "buffer_id", c->buffer_id);
                if (c->handle)
                        proto_map_kbin(m, "handle", c->handle, PROTO_IPC_HANDLE_LEN);
        }
        if (c->event)
                proto_map_kbin(m, "event", c->event, PROTO_IPC_HANDLE_LEN);
}

/* An optional uint no wider than max. */
static int opt_uint(const msgpack_object *map, const char *key, uint64_t max, uint64_t *ret)
{
        uint64_t v = 0;
        int r = proto_get_u64(map, key, &v);

        if (r == -EINVAL || v > max)
                return -EBADMSG;
        if (r == 0)
                *ret = v;
        return 0;
}

/* An optional value of type t (nil counts as absent): *ret, or NULL. */
static int opt_typed(const msgpack_object *map, const char *key, msgpack_object_type t,
                     const msgpack_object **ret)
{
        *ret = proto_get_present(map, key);
        return *ret && (*ret)->type != t ? -EBADMSG : 0;
}

/* The chunks of a cuda-vmm record over several: 2 to PROTO_CHUNKS_MAX
 * maps, each with a size, that add up without overflow. */
static int decode_chunks(const msgpack_object *chunks, struct proto_cuda_view *v)
{
        uint64_t total = 0, size;

        if (chunks->via.array.size < 2 || chunks->via.array.size > PROTO_CHUNKS_MAX)
                return -EBADMSG;
        for (uint32_t i = 0; i < chunks->via.array.size; i++) {
                const msgpack_object *c = &chunks->via.array.ptr[i];
                if (c->type != MSGPACK_OBJECT_MAP || proto_get_u64(c, "size", &size) < 0 ||
                    size == 0 || size > UINT64_MAX - total)
                        return -EBADMSG;
                total += size;
        }
        v->chunks = chunks;
        v->n_chunks = chunks->via.array.size;
        v->chunks_size = total;
        return 0;
}

int proto_cuda_decode(const msgpack_object *reg, bool vmm, struct proto_cuda_view *v)
{
        const msgpack_object *alloc, *chunks, *o;
        uint64_t regs = 0;

        memset(v, 0, sizeof(*v));
        if (proto_get_map(reg, "alloc", &alloc) == 0 &&
            (opt_uint(alloc, "id", UINT64_MAX, &v->alloc_id) < 0 ||
             opt_uint(alloc, "size", UINT64_MAX, &v->alloc_size) < 0 ||
             opt_uint(alloc, "regs", UINT32_MAX, &regs) < 0))
                return -EBADMSG;
        v->alloc_regs = (uint32_t)regs;
        if (vmm) {
                v->n_chunks = 1;
                if (proto_get_array(reg, "chunks", &chunks) == 0 && decode_chunks(chunks, v) < 0)
                        return -EBADMSG;
        }
        if (opt_typed(reg, "copied", MSGPACK_OBJECT_STR, &v->copied) < 0 ||
            opt_uint(reg, "buffer_id", UINT64_MAX, &v->buffer_id) < 0 ||
            opt_typed(reg, "event", MSGPACK_OBJECT_BIN, &o) < 0)
                return -EBADMSG;
        v->has_event = o != NULL;
        return 0;
}
