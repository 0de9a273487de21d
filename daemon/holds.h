/* holds.h: consumers that keep a producer-bound allocation mapped after
 * their leases (libgpuipc's mapping cache), and what the producer is told.
 *
 * A cuda-ipc or cuda-pool allocation whose producer registered it with
 * `cacheable`, and any cuda-vmm allocation, may stay mapped in a consumer
 * after the consumer's last lease: a lookup with `cache: true` makes that
 * connection a holder of the allocation (for cuda-vmm, of its first
 * chunk's).  When the allocation's last registration goes, every holder
 * gets `uncache {alloc}` and answers with `unhold`; once no holder is left
 * the producer gets `unmapped {alloc}` and may free the memory (CUDA wants
 * importers closed first).  A holder that disconnects lets go of its holds.
 *
 * A producer that registered with `linger` as well says when it is about to
 * free: `unmap {alloc}`.  Until then (or until it disconnects) holders keep
 * the allocation mapped after its last registration, so that a block its
 * caching allocator hands back and registers again is a warm lookup.  Such
 * lingering allocations are listed on the producer's connection, at most
 * max-leases of them; past that, holders are told at once, as without it.
 * Holds are not kept over a daemon restart; libgpuipc closes such cached
 * mappings when it reconnects. */
#ifndef GPUIPCD_HOLDS_H
#define GPUIPCD_HOLDS_H

#include "conn.h"
#include "cuda_reg.h"
#include "ops.h"

/* Whether lookups of r may hold its allocation: cuda-vmm, and cacheable
 * cuda-ipc and cuda-pool. */
bool holds_apply(const struct reg *r);
/* The same for a buffer of kind with CUDA data rc (a batch's part). */
bool holds_apply_part(unsigned kind, const struct reg_cuda *rc);
/* A lookup by c with `cache: true` answered with r: hold r's allocation
 * when it is cacheable.  1 when c holds it now (taken here or before), 0
 * when holds do not apply to r, -ENOBUFS past max-leases holds per
 * connection, -ENOMEM. */
int holds_take(struct conn *c, struct reg *r);
/* The same for a part of a batch. */
int holds_take_part(struct conn *c, unsigned kind, struct reg_cuda *rc);
/* r is about to be freed, or to leave its allocations for others (adopt):
 * for each allocation of r (of each of a batch's parts) whose last
 * registration r is, when it is cacheable, tell its holders to let go, or
 * its owner that nobody maps it. */
void holds_reg_freeing(struct daemon *d, struct reg *r);
/* c is closing: tells the holders of the allocations that linger for it to
 * let go, and drops its holds. */
void holds_conn_closed(struct conn *c);
/* unhold {allocs: [id...]}: c lets go of those allocations. */
int op_unhold(struct req *q);
/* unmap {alloc: id}: c, the producer, is about to free a lingering
 * allocation: its holders are told to let go (`unmapped` follows). */
int op_unmap(struct req *q);

#endif
