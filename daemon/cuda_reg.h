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

/* IPC events that releases handed back, for the owner's next released
 * event: a ring of at most REG_CUDA_EVENTS_MAX, oldest first. */
struct rel_events {
        uint8_t (*ev)[PROTO_IPC_HANDLE_LEN];
        uint32_t n, head;               /* count, oldest slot */
        uint32_t dropped;               /* overwritten since last sent */
};

/* Keeps a release event; -ENOMEM. */
int rel_events_push(struct rel_events *e, const uint8_t ev[PROTO_IPC_HANDLE_LEN]);
/* Forgets the oldest events past the newest fit. */
void rel_events_trim(struct rel_events *e, uint32_t fit);
/* Packs the events array (oldest first) and forgets them.  Returns how many
 * were dropped over the cap (or trimmed) since the last call. */
uint32_t rel_events_pack(msgpack_packer *pk, struct rel_events *e);
void rel_events_done(struct rel_events *e);

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
        struct rel_events rel;                  /* handed back by releases */
};

struct reg_cuda *reg_cuda_new(void);
/* The entry of chunk i (0 <= i < n_chunks, which is at least 1). */
static inline struct alloc *reg_cuda_chunk(const struct reg_cuda *rc, uint32_t i)
{
        return rc->chunks ? rc->chunks[i] : rc->alloc;
}
/* Whether chunk i is the first place of its entry in rc (a chunk's entry
 * may recur, for memory mapped twice in one range). */
static inline bool reg_cuda_chunk_first(const struct reg_cuda *rc, uint32_t i)
{
        for (uint32_t e = 0; e < i; e++)
                if (reg_cuda_chunk(rc, e) == reg_cuda_chunk(rc, i))
                        return false;
        return true;
}
/* Room for n chunk entries (n >= 2; alloc becomes chunks[0] once set);
 * -ENOMEM. */
int reg_cuda_set_chunks(struct reg_cuda *rc, uint32_t n);
/* The fds a lookup sends, in chunk order, into fds (PROTO_MAX_FDS); how many. */
unsigned reg_cuda_fds(const struct reg_cuda *rc, int *fds);
/* Drops the allocation references and frees rc; NULL-safe. */
void reg_cuda_free(struct alloc_table *T, struct reg_cuda *rc);
/* Sets rc->copied to a copy of the len bytes at s; -ENOMEM. */
int reg_cuda_set_copied(struct reg_cuda *rc, const char *s, size_t len);

/* Packs the record fields of a CUDA registration into record map m
 * (device, alloc, buffer_id, event, and with_handle, for lookup replies:
 * handle, alloc.key); nothing for a host one. */
void reg_cuda_pack_record(struct proto_map *m, const struct reg *r, bool with_handle);
/* The same for a buffer of kind with CUDA data rc (a batch's part). */
void reg_cuda_pack(struct proto_map *m, unsigned kind, const struct reg_cuda *rc,
                   bool with_handle);

#endif
