/* cuda_reg.c: CUDA registration data and its part of records and events. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/driver.h"
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
        rel_events_done(&rc->rel);
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

int rel_events_push(struct rel_events *e, const uint8_t ev[PROTO_IPC_HANDLE_LEN])
{
        uint32_t slot;

        if (!e->ev) {
                e->ev = malloc(REG_CUDA_EVENTS_MAX * sizeof(*e->ev));
                if (!e->ev)
                        return -ENOMEM;
        }
        if (e->n == REG_CUDA_EVENTS_MAX) {
                /* Full: the oldest slot takes the new event. */
                slot = e->head;
                e->head = (e->head + 1) % REG_CUDA_EVENTS_MAX;
                e->dropped++;
        } else {
                slot = (e->head + e->n) % REG_CUDA_EVENTS_MAX;
                e->n++;
        }
        memcpy(e->ev[slot], ev, PROTO_IPC_HANDLE_LEN);
        return 0;
}

void rel_events_trim(struct rel_events *e, uint32_t fit)
{
        uint32_t k;

        if (e->n <= fit)
                return;
        k = e->n - fit;
        e->head = (e->head + k) % REG_CUDA_EVENTS_MAX;
        e->n -= k;
        e->dropped += k;
}

uint32_t rel_events_pack(msgpack_packer *pk, struct rel_events *e)
{
        uint32_t dropped = e->dropped;

        msgpack_pack_array(pk, e->n);
        for (uint32_t i = 0; i < e->n; i++)
                msgpack_pack_bin_with_body(pk, e->ev[(e->head + i) % REG_CUDA_EVENTS_MAX],
                                           PROTO_IPC_HANDLE_LEN);
        e->n = e->head = e->dropped = 0;
        return dropped;
}

void rel_events_done(struct rel_events *e)
{
        free(e->ev);
        *e = (struct rel_events){ 0 };
}

/* Entry a as records show it; with_key: its key (lookup replies). */
static struct proto_cuda_alloc rec_alloc(const struct alloc *a, bool with_key)
{
        return (struct proto_cuda_alloc){
                .id = a->id,
                .size = a->size,
                .regs = a->regs,
                .cacheable = a->cacheable,
                .key = !with_key ? NULL : a->pool ? a->pool->key : a->key,
        };
}

void reg_cuda_pack_record(struct proto_map *m, const struct reg *r, bool with_handle)
{
        if (r->cuda)
                reg_cuda_pack(m, r->kind, r->cuda, with_handle);
}

void reg_cuda_pack(struct proto_map *m, unsigned kind, const struct reg_cuda *rc,
                   bool with_handle)
{
        struct proto_cuda_alloc chunks[PROTO_CHUNKS_MAX];
        char uuid[CUDA_UUID_STR_LEN + 1];
        struct proto_cuda_rec c;
        bool by_handle = kind == PROTO_KIND_CUDA_IPC || kind == PROTO_KIND_CUDA_POOL;

        cuda_uuid_format(rc->device, uuid);
        c = (struct proto_cuda_rec){
                .device = uuid,
                .alloc = rec_alloc(rc->alloc, with_handle && kind != PROTO_KIND_CUDA_IPC),
                .chunks = chunks,
                .n_chunks = rc->n_chunks,
                .copied = rc->copied,
                .has_buffer_id = by_handle,
                .buffer_id = rc->alloc->buffer_id,
                .handle = by_handle && with_handle ? rc->alloc->handle : NULL,
                .event = rc->has_event ? rc->event : NULL,
        };
        for (uint32_t i = 0; rc->n_chunks > 1 && i < rc->n_chunks; i++)
                chunks[i] = rec_alloc(rc->chunks[i], with_handle);
        proto_cuda_pack(m, &c);
}
