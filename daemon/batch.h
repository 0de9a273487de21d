/* batch.h: what a batch registration holds beside the registry's fields
 * (docs/protocol.md, "Batches"): its parts, each a buffer as a single
 * registration of its kind would hold it, the distinct host memfds they lie
 * in, the arrow description as the producer sent it, the batch's IPC event
 * and the release events for its owner.
 *
 * Pure data and packing, no sockets and no logging.  A batch part's CUDA
 * data is a struct reg_cuda holding references in the allocation table, so
 * parts share allocations with each other and with single registrations;
 * the table's `regs` then counts parts too. */
#ifndef GPUIPCD_BATCH_H
#define GPUIPCD_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "proto.h"

#include "cuda_reg.h"
#include "record.h"
#include "registry.h"

/* A distinct host memfd of the batch: the one the producer attached and a
 * read-only open of it, which lookups send; both the batch's. */
struct batch_memfd {
        int fd, ro_fd;
};

struct batch_part {
        uint64_t size, offset;
        struct reg_cuda *cuda;          /* the CUDA kinds: the part's allocation */
        uint16_t memfd;                 /* host: its index in memfds */
        uint8_t kind;                   /* a PROTO_KIND_* below PROTO_BUFFER_KINDS */
        bool shared_write;              /* host: registered with shared_write */
};

struct reg_batch {
        struct batch_part *parts;
        struct batch_memfd *memfds;
        uint8_t *arrow;                 /* the arrow map, packed */
        uint8_t *lookup_parts;          /* a lookup's parts array, packed, or NULL */
        uint32_t n_parts, n_memfds;
        uint32_t arrow_len, lookup_parts_len;
        bool has_event;
        uint8_t event[PROTO_IPC_HANDLE_LEN];    /* the producer's, for the whole batch */
        struct rel_events rel;          /* handed back by releases (CUDA parts only) */
};

/* A batch of n_parts zeroed parts (1..PROTO_BATCH_PARTS_MAX) and n_memfds
 * memfd slots (0..PROTO_MAX_FDS) set to -1; NULL without memory. */
struct reg_batch *batch_new(uint32_t n_parts, uint32_t n_memfds);
/* Drops the parts' allocation references, closes the memfds and frees b;
 * NULL-safe, and safe on a half-built batch. */
void batch_free(struct alloc_table *T, struct reg_batch *b);
/* Keeps a packed copy of arrow (a checked map); -ENOMEM. */
int batch_set_arrow(struct reg_batch *b, const msgpack_object *arrow);
/* Keeps a packed arrow map of len bytes (restore); -ENOMEM. */
int batch_set_arrow_bytes(struct reg_batch *b, const uint8_t *p, size_t len);

/* Whether any part is of a CUDA kind; whether any is producer-bound
 * (cuda-ipc, cuda-pool), which makes the batch ephemeral and revocable. */
bool batch_has_cuda(const struct reg_batch *b);
bool batch_bound(const struct reg_batch *b);
/* The sum of the parts' sizes, saturated at UINT64_MAX. */
uint64_t batch_size(const struct reg_batch *b);

/* The distinct fds a lookup of b sends, in the order the parts first name
 * them, into fds (PROTO_MAX_FDS): how many, or -E2BIG when there would be
 * more (only a corrupt journal can build such a batch). */
int batch_fds(const struct reg_batch *b, int fds[PROTO_MAX_FDS]);

/* What b costs its owner's uid (docs/protocol.md, "Batches", Quotas): the
 * bytes its memory pins (each memfd's whole size, each cuda-vmm part's
 * size), the fds the daemon holds for it (2 per memfd, 1 per allocation or
 * pool fd) and its fd store entries (1 per memfd and per such fd). */
uint64_t batch_bytes(const struct reg_batch *b);
unsigned batch_fd_cost(const struct reg_batch *b);
unsigned batch_store_cost(const struct reg_batch *b);

/* Calls fn on each allocation entry that keeps an fd (a cuda-vmm chunk, a
 * pool) and that only b's parts use, once each: just created when b is
 * added, about to go when b is freed (the fd store's vmm- entries). */
void batch_each_own_fd(const struct reg_batch *b, void (*fn)(const struct alloc *a));

/* Whether part i is the first of b to use allocation entry a and every
 * registration of a is one of b's parts (a's last user is b). */
bool batch_last_user(const struct reg_batch *b, uint32_t i, const struct alloc *a);

/* The release events of r kept for its owner: a CUDA registration's, or
 * a batch's with a CUDA part; NULL when r keeps none (host). */
struct rel_events *reg_events(struct reg *r);

/* Packs, once, the parts array every lookup of b sends when that array is
 * the same for every lookup (no CUDA part: no handles or holds); without
 * memory the lookups pack it each time. */
void batch_cache_lookup_parts(struct reg_batch *b);

/* Packs the batch fields of a record into record map m (docs/protocol.md,
 * "Records"): n_parts in a list; arrow, event and parts without handles in
 * a stat; handles, keys and fd indexes too in a lookup, where lk (or NULL)
 * gives the held parts and the reply's fds. */
void batch_pack_record(struct proto_map *m, const struct reg_batch *b, enum record_use use,
                       const struct record_lookup *lk);

#endif
