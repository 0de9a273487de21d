/* cuda_alloc.h: the table of distinct CUDA allocations behind registrations.
 *
 * Many registrations may be carved from one allocation (an RMM pool, a
 * producer's slab); consumers must open each allocation once per process,
 * so the daemon names every distinct allocation with one entry and tells
 * consumers its id.  An entry is keyed by
 *   cuda-ipc: (device, the 64 handle bytes of the allocation's base,
 *             buffer_id), since a freed and recycled address yields new
 *             memory behind an old-looking handle;
 *   cuda-vmm: (device, the 16-byte alloc_key the producer drew for the
 *             allocation).  Not the exported fd's file: on the real driver
 *             every export, of any allocation, is an open of /dev/nvidiactl
 *             with one st_dev/st_ino.  A registration over several VMM
 *             chunks (PyTorch's expandable segments) holds one entry each.
 *   cuda-pool: (device, the 64-byte CUmemPoolPtrExportData, buffer_id) for
 *             the pointer, which references the entry of its pool
 *             (ALLOC_KIND_POOL, keyed by the pool_key the producer drew),
 *             the one that keeps the pool's exported fd.
 * The device is part of every key, so the one hash table is in effect one
 * table per device.  Entries count the registrations that use them and are
 * freed with the last; a cuda-vmm entry keeps the first registration's fd
 * (the one lookups send) and closes the duplicates of later ones.
 *
 * Pure data, no CUDA and no logging, so the unit tests drive it directly. */
#ifndef GPUIPCD_CUDA_ALLOC_H
#define GPUIPCD_CUDA_ALLOC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "hmap.h"
#include "wire.h"

#define ALLOC_UID_NOBODY UINT32_MAX     /* a creator no peer matches */
/* The kind of a pool's own entry: it holds the pool's exported fd and is
 * shared by the entries of the pool's pointers (PROTO_KIND_CUDA_POOL). */
#define ALLOC_KIND_POOL  0x10u

struct alloc {
        struct hmap_node node;
        uint64_t id;                    /* unique for the daemon's lifetime */
        uint64_t size;                  /* alloc_size */
        uint64_t buffer_id;             /* cuda-ipc */
        uint32_t regs;                  /* registrations using it */
        uint32_t uid;                   /* cuda-vmm, pool: the creator's; only it may join */
        int fd;                         /* cuda-vmm, pool: kept; else -1 */
        uint8_t kind;                   /* PROTO_KIND_CUDA_*, or ALLOC_KIND_POOL */
        uint8_t device[PROTO_UUID_LEN];
        uint8_t handle[PROTO_IPC_HANDLE_LEN];       /* cuda-ipc; cuda-pool: export data */
        uint8_t key[PROTO_ALLOC_KEY_LEN];             /* cuda-vmm, pool */
        struct alloc *pool;             /* cuda-pool: its pool's entry */
        /* Register's `cacheable`.  cuda-ipc, cuda-pool: the producer
         * promised not to free the allocation before the daemon says
         * `unmapped`, so consumers may keep it mapped after their leases
         * (cuda-vmm ones may always; for them it comes with linger).  Each
         * connection that does is a holder (holds.c); the entry stays,
         * ended, while holders remain after its last registration. */
        bool cacheable;
        /* With cacheable, register's `linger`: the producer sends `unmap`
         * before it frees, so holders need not let go when the last
         * registration goes (holds.h).  While they keep it so, the entry
         * is in that producer's connection's list (linger_owner). */
        bool linger;
        uint32_t n_holders, cap_holders;
        void **holders;                 /* struct conn *, in no order */
        void *linger_owner;             /* struct conn * */
        uint64_t owner_conn;            /* ended: the connection to tell `unmapped` */
};

struct alloc_table {
        struct hmap map;
        uint64_t next_id;
        uint64_t n;                     /* entries */
};

void alloc_table_init(struct alloc_table *T);
/* Frees every entry (closing their fds). */
void alloc_table_done(struct alloc_table *T);

/* Takes a reference on the cuda-ipc allocation of that key, creating its
 * entry on first use.  -EINVAL when it exists with another size, -ENOMEM. */
int alloc_get_ipc(struct alloc_table *T, const uint8_t device[PROTO_UUID_LEN],
                  const uint8_t handle[PROTO_IPC_HANDLE_LEN], uint64_t buffer_id,
                  uint64_t size, struct alloc **ret);
/* Takes a reference on the cuda-vmm allocation of that key, whose exported
 * fd is *fd.  *fd is always consumed on success: kept by a new entry, or
 * closed as a duplicate of an existing one (then *fd is set to -1 either
 * way).  On failure *fd is left alone.  -EINVAL when the key exists with
 * another size, -ENOMEM. */
int alloc_get_vmm(struct alloc_table *T, const uint8_t device[PROTO_UUID_LEN],
                  const uint8_t key[PROTO_ALLOC_KEY_LEN], int *fd, uint64_t size,
                  struct alloc **ret);
/* alloc_get_vmm() for a peer of uid: a key already in the table is joined
 * only by the uid that created its entry (-EPERM otherwise), since alloc.key
 * is shown to every consumer and a squatter could otherwise claim a key
 * first with another fd.  alloc_get_vmm() creates entries no peer may join
 * (adopt's, under fresh random keys). */
int alloc_get_vmm_as(struct alloc_table *T, const uint8_t device[PROTO_UUID_LEN],
                     const uint8_t key[PROTO_ALLOC_KEY_LEN], int *fd, uint64_t size, uint32_t uid,
                     struct alloc **ret);
/* Takes a reference on the cuda-pool pointer of (device, handle,
 * buffer_id), creating its entry on first use, and through it one on the
 * entry of its pool (device, pool_key), which keeps *fd, the pool's
 * exported fd: *fd is consumed on success as for alloc_get_vmm(); on
 * failure it is set to -1 where it was consumed, else left alone.  A pool
 * key already known is joined only by the uid that created it (-EPERM);
 * -EINVAL when the pointer is known with another size or another pool. */
int alloc_get_pool(struct alloc_table *T, const uint8_t device[PROTO_UUID_LEN],
                   const uint8_t pool_key[PROTO_ALLOC_KEY_LEN], int *fd,
                   const uint8_t handle[PROTO_IPC_HANDLE_LEN], uint64_t buffer_id, uint64_t size,
                   uint32_t uid, struct alloc **ret);
/* The two steps of alloc_get_pool(), for restore: the pool's entry (as
 * alloc_get_vmm_as(), size 0), then a pointer entry of that pool, which
 * takes a reference of its own on pool when it is new. */
int alloc_get_pool_entry(struct alloc_table *T, const uint8_t device[PROTO_UUID_LEN],
                         const uint8_t pool_key[PROTO_ALLOC_KEY_LEN], int *fd, uint32_t uid,
                         struct alloc **ret);
int alloc_get_pool_ptr(struct alloc_table *T, struct alloc *pool,
                       const uint8_t handle[PROTO_IPC_HANDLE_LEN], uint64_t buffer_id,
                       uint64_t size, struct alloc **ret);
/* Adds holder h to a: 1 when added, 0 when h holds a already; -ENOMEM. */
int alloc_hold_add(struct alloc *a, void *h);
/* Removes holder h from a; true when a has now ended: no registration and
 * no holder left, so the caller says `unmapped` and calls alloc_put_ended. */
bool alloc_hold_drop(struct alloc *a, void *h);
/* Frees an ended entry (no registration, no holder). */
void alloc_put_ended(struct alloc_table *T, struct alloc *a);
/* Drops a reference; frees the entry (closing its fd) with the last,
 * unless holders keep it (alloc_hold_drop then ends it).  NULL-safe. */
void alloc_put(struct alloc_table *T, struct alloc *a);

#endif
