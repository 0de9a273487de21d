/* cuda_reg.c: CUDA registration data and its part of records and events. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_drv.h"
#include "cuda_reg.h"
#include "proto.h"

struct reg_cuda *reg_cuda_new(void)
{
        return calloc(1, sizeof(struct reg_cuda));
}

void reg_cuda_free(struct alloc_table *T, struct reg_cuda *rc)
{
        if (!rc)
                return;
        alloc_put(T, rc->alloc);
        free(rc->rel);
        free(rc);
}

int reg_cuda_push_event(struct reg_cuda *rc, const uint8_t ev[ALLOC_HANDLE_LEN])
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
        memcpy(rc->rel[slot], ev, ALLOC_HANDLE_LEN);
        return 0;
}

uint32_t reg_cuda_record_fields(const struct reg *r, bool with_handle)
{
        const struct reg_cuda *rc = r->cuda;

        if (!rc)
                return 0;
        return 2 + (r->kind == PROTO_KIND_CUDA_IPC) * (1 + with_handle) + rc->has_event;
}

void reg_cuda_pack_record(msgpack_packer *pk, const struct reg *r, bool with_handle)
{
        const struct reg_cuda *rc = r->cuda;
        char uuid[CUDA_UUID_STR_LEN + 1];

        if (!rc)
                return;
        cuda_uuid_format(rc->device, uuid);
        proto_pack_kstr(pk, "device", uuid);
        proto_pack_str(pk, "alloc");
        msgpack_pack_map(pk, 3 + (with_handle && r->kind == PROTO_KIND_CUDA_VMM));
        proto_pack_ku64(pk, "id", rc->alloc->id);
        proto_pack_ku64(pk, "size", rc->alloc->size);
        proto_pack_ku64(pk, "regs", rc->alloc->regs);
        if (with_handle && r->kind == PROTO_KIND_CUDA_VMM) {
                /* What consumers key their imports by: the fd cannot. */
                proto_pack_str(pk, "key");
                msgpack_pack_bin_with_body(pk, rc->alloc->key, ALLOC_KEY_LEN);
        }
        if (r->kind == PROTO_KIND_CUDA_IPC) {
                proto_pack_ku64(pk, "buffer_id", rc->alloc->buffer_id);
                if (with_handle) {
                        proto_pack_str(pk, "handle");
                        msgpack_pack_bin_with_body(pk, rc->alloc->handle, ALLOC_HANDLE_LEN);
                }
        }
        if (rc->has_event) {
                proto_pack_str(pk, "event");
                msgpack_pack_bin_with_body(pk, rc->event, ALLOC_HANDLE_LEN);
        }
}

uint32_t reg_cuda_pack_events(msgpack_packer *pk, struct reg_cuda *rc)
{
        uint32_t dropped = rc->rel_dropped;

        proto_pack_str(pk, "events");
        msgpack_pack_array(pk, rc->rel_n);
        for (uint32_t i = 0; i < rc->rel_n; i++)
                msgpack_pack_bin_with_body(pk, rc->rel[(rc->rel_head + i) % REG_CUDA_EVENTS_MAX],
                                           ALLOC_HANDLE_LEN);
        rc->rel_n = rc->rel_head = rc->rel_dropped = 0;
        return dropped;
}
