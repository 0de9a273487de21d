/* restart_decode.h: what journal replay (restart_replay.c) rebuilds from
 * an A or C record beside the registry's fields: the allocation entries of
 * a CUDA registration, under their old ids and with their stored fds, and
 * the parts of a batch (restart_decode.c).  Internal to the replay. */
#ifndef GPUIPCD_RESTART_DECODE_H
#define GPUIPCD_RESTART_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "cuda_reg.h"
#include "daemon.h"
#include "restart_replay.h"

struct restore_ctx {
        struct daemon *d;
        struct sd_fd *fds;
        bool *claimed;                  /* stays in the store */
        bool *owned;                    /* the fd is a registration's now */
        size_t n;
        struct restore_result *res;
        struct hmap alloc_ids;          /* ids of the allocations created, never twice */
        uint64_t records;               /* applied so far */
        uint64_t walked;                /* records restore_replay_one() saw */
};

/* The index of the unowned stored fd of that name, or -1. */
int restore_stored_fd(struct restore_ctx *x, const char *name);
void restore_ids_free(struct hmap *h);
/* The allocation of a CUDA record's cuda map m (its device into device),
 * of kind want_kind; -EINVAL, -ENOENT (its fd is not stored), -ENOMEM. */
int restore_decode_alloc(struct restore_ctx *x, const msgpack_object *m, uint64_t want_kind,
                         uint8_t device[], struct alloc **ret);
/* A registration's (or batch part's) CUDA data from cuda map m. */
int restore_decode_cuda(struct restore_ctx *x, const msgpack_object *m, uint64_t kind,
                        struct reg_cuda **ret);
/* The batch of A record m, whose scalars are p (its id, its lifetime),
 * with its memfds (copies of the stored batch-ID-N fds, which stay the
 * store's) checked as restore checks a host registration's; -EINVAL,
 * -ENOENT, -ENOMEM. */
int restore_decode_batch(struct restore_ctx *x, const msgpack_object *m,
                         const struct reg_params *p, struct reg_batch **ret);

#endif
