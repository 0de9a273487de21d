/* cuda_reg.c: CUDA registration data and its part of records and events. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_drv.h"
#include "cuda_reg.h"
#include "proto.h"

struct reg_cuda *reg_cuda_new(void)
{
        struct reg_cuda *rc = calloc(1, sizeof(struct reg_cuda));

        if (rc)
                rc->n_chunks = 1;
        return rc;
}

void reg_cuda_free(struct alloc_table *T, struct reg_cuda *rc)
{
        if (!rc)
                return;
        if (rc->chunks) {
                /* chunks[0] is alloc; unset tails of a half-built one are NULL. */
                for (uint32_t i = 1; i < rc->n_chunks; i++)
                        alloc_put(T, rc->chunks[i]);
                free(rc->chunks);
        }
        alloc_put(T, rc->alloc);
        free(rc->copied);
        free(rc->rel);
        free(rc);
}

int reg_cuda_set_copied(struct reg_cuda *rc, const char *s, size_t len)
{
        rc->copied = strndup(s, len);
        return rc->copied ? 0 : -ENOMEM;
}

int reg_cuda_set_chunks(struct reg_cuda *rc, uint32_t n)
{
        rc->chunks = calloc(n, sizeof(*rc->chunks));
        if (!rc->chunks)
                return -ENOMEM;
        rc->n_chunks = n;
        return 0;
}

unsigned reg_cuda_fds(const struct reg_cuda *rc, int *fds)
{
        const struct alloc *a = rc->alloc;

        if (a->kind == PROTO_KIND_CUDA_POOL) {
                fds[0] = a->pool->fd;
                return 1;
        }
        for (uint32_t i = 0; i < rc->n_chunks; i++)
                fds[i] = reg_cuda_chunk(rc, i)->fd;
        return rc->n_chunks;
}

int reg_cuda_push_event(struct reg_cuda *rc, const uint8_t ev[PROTO_IPC_HANDLE_LEN])
{
        uint32_t slot;

        if (!rc->rel) {
                rc->rel = malloc(REG_CUDA_EVENTS_MAX * sizeof(*rc->rel));
                if (!rc->rel)
                        return -ENOMEM;
        }
        if (rc->rel_n == REG_CUDA_EVENTS_MAX) {
                /* Full: the oldest slot takes the new event. */
                slot = rc->rel_head;
                rc->rel_head = (rc->rel_head + 1) % REG_CUDA_EVENTS_MAX;
                rc->rel_dropped++;
        } else {
                slot = (rc->rel_head + rc->rel_n) % REG_CUDA_EVENTS_MAX;
                rc->rel_n++;
        }
        memcpy(rc->rel[slot], ev, PROTO_IPC_HANDLE_LEN);
        return 0;
}

/* {id, size, regs} of entry a, and with_key its key. */
static void pack_alloc(msgpack_packer *pk, const struct alloc *a, bool with_key)
{
        struct proto_map m;

        proto_map_begin(&m, pk);
        if (a->cacheable)
                proto_map_kbool(&m, "cacheable", true);
        proto_map_ku64(&m, "id", a->id);
        proto_map_ku64(&m, "size", a->size);
        proto_map_ku64(&m, "regs", a->regs);
        /* What consumers key their imports by: the fd cannot. */
        if (with_key)
                proto_map_kbin(&m, "key", a->pool ? a->pool->key : a->key, PROTO_ALLOC_KEY_LEN);
        proto_map_end(&m);
}

void reg_cuda_pack_record(struct proto_map *m, const struct reg *r, bool with_handle)
{
        const struct reg_cuda *rc = r->cuda;
        char uuid[CUDA_UUID_STR_LEN + 1];

        if (!rc)
                return;
        cuda_uuid_format(rc->device, uuid);
        proto_map_kstr(m, "device", uuid);
        proto_map_key(m, "alloc");
        pack_alloc(m->pk, rc->alloc, with_handle && r->kind != PROTO_KIND_CUDA_IPC);
        if (rc->n_chunks > 1) {
                proto_map_key(m, "chunks");
                msgpack_pack_array(m->pk, rc->n_chunks);
                for (uint32_t i = 0; i < rc->n_chunks; i++)
                        pack_alloc(m->pk, rc->chunks[i], with_handle);
        }
        if (rc->copied)
                proto_map_kstr(m, "copied", rc->copied);
        if (r->kind == PROTO_KIND_CUDA_IPC || r->kind == PROTO_KIND_CUDA_POOL) {
                proto_map_ku64(m, "buffer_id", rc->alloc->buffer_id);
                if (with_handle)
                        proto_map_kbin(m, "handle", rc->alloc->handle, PROTO_IPC_HANDLE_LEN);
        }
        if (rc->has_event)
                proto_map_kbin(m, "event", rc->event, PROTO_IPC_HANDLE_LEN);
}

uint32_t reg_cuda_pack_events(msgpack_packer *pk, struct reg_cuda *rc)
{
        uint32_t dropped = rc->rel_dropped;

        msgpack_pack_array(pk, rc->rel_n);
        for (uint32_t i = 0; i < rc->rel_n; i++)
                msgpack_pack_bin_with_body(pk, rc->rel[(rc->rel_head + i) % REG_CUDA_EVENTS_MAX],
                                           PROTO_IPC_HANDLE_LEN);
        rc->rel_n = rc->rel_head = rc->rel_dropped = 0;
        return dropped;
}
