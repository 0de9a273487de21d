/* cuda_reg.h: what a CUDA registration carries beside the registry's
 * fields: its device and allocation, the producer's IPC event, and the IPC
 * events that releases hand back for the owner's next released event. */
#ifndef GPUIPCD_CUDA_REG_H
#define GPUIPCD_CUDA_REG_H

#include <stdbool.h>
#include <stdint.h>

#include "proto.h"

#include "cuda_alloc.h"
#include "registry.h"

/* Events kept for one released event.  Each lease hands back at most one,
 * so the count is bounded by the leases taken since the last released
 * event; this hard cap bounds it when leases come and go while others stay.
 * Past it the newest are kept: waiting on the latest uses of a stream covers
 * the earlier ones more often than the reverse. */
#define REG_CUDA_EVENTS_MAX 64u
#define REG_CUDA_COPIED_MAX 160u        /* bytes of a `copied` reason */

struct reg_cuda {
        struct alloc *alloc;            /* cuda-vmm: the first chunk's */
        /* cuda-vmm over several chunks (n_chunks > 1): every chunk's entry,
         * in address order, chunks[0] == alloc; NULL for one chunk. */
        struct alloc **chunks;
        uint32_t n_chunks;
        /* Why the library copied the buffer into this cuda-vmm memory at
         * register time (GPUIPC_REGISTER_COPY), or NULL; freed with rc. */
        char *copied;
        uint8_t device[PROTO_UUID_LEN];
        uint8_t event[PROTO_IPC_HANDLE_LEN];        /* the producer's, if has_event */
        bool has_event;
        uint8_t (*rel)[PROTO_IPC_HANDLE_LEN];       /* ring of release events */
        uint32_t rel_n, rel_head;               /* count, oldest slot */
        uint32_t rel_dropped;                   /* overwritten since last sent */
};

struct reg_cuda *reg_cuda_new(void);
/* The entry of chunk i (0 <= i < n_chunks, which is at least 1). */
static inline struct alloc *reg_cuda_chunk(const struct reg_cuda *rc, uint32_t i)
{
        return rc->chunks ? rc->chunks[i] : rc->alloc;
}
/* Room for n chunk entries (n >= 2; alloc becomes chunks[0] once set);
 * -ENOMEM. */
int reg_cuda_set_chunks(struct reg_cuda *rc, uint32_t n);
/* The fds a lookup sends, in chunk order, into fds (PROTO_MAX_FDS); how many. */
unsigned reg_cuda_fds(const struct reg_cuda *rc, int *fds);
/* Drops the allocation references and frees rc; NULL-safe. */
void reg_cuda_free(struct alloc_table *T, struct reg_cuda *rc);
/* Keeps a release event for the next released event; -ENOMEM. */
int reg_cuda_push_event(struct reg_cuda *rc, const uint8_t ev[PROTO_IPC_HANDLE_LEN]);
/* Sets rc->copied to a copy of the len bytes at s; -ENOMEM. */
int reg_cuda_set_copied(struct reg_cuda *rc, const char *s, size_t len);

/* Packs the record fields of a CUDA registration into record map m
 * (device, alloc, buffer_id, event, and with_handle, for lookup replies:
 * handle, alloc.key); nothing for a host one. */
void reg_cuda_pack_record(struct proto_map *m, const struct reg *r, bool with_handle);
/* Packs the events array (oldest first) and forgets them.  Returns how many were
 * dropped over the cap since the last call. */
uint32_t reg_cuda_pack_events(msgpack_packer *pk, struct reg_cuda *rc);

#endif
