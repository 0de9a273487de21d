/* register_part.h: what register of one buffer and register of a batch
 * share (register_part.c): the buffer's fields and fds, checked once for
 * a single registration and once per part of a batch; the name, lifetime
 * and limit checks every registration passes; and whether its lookup
 * reply fits a frame. */
#ifndef GPUIPCD_REGISTER_PART_H
#define GPUIPCD_REGISTER_PART_H

#include <stdbool.h>
#include <stdint.h>

#include "ops.h"
#include "registry.h"

/* name into p: -EINVAL with req_fail(). */
int register_name(struct req *q, struct reg_params *p);
/* ephemeral into p (*ret_given: whether the request said): -EINVAL. */
int register_ephemeral(struct req *q, struct reg_params *p, bool *ret_given);
/* ttl_ms into p->expires_ms, still a duration (0: none): -EINVAL. */
int register_ttl(struct req *q, struct reg_params *p);

/* The buffer fields of m (the request, or a batch's part), whose kind is
 * p->kind already: size, offset into p and shared_write.  -EINVAL with
 * req_fail(). */
int register_buffer_fields(struct req *q, const msgpack_object *m, struct reg_params *p,
                           bool *ret_shared_write);
/* Checks the buffer's nfds fds for its kind and, for the CUDA kinds, takes
 * the allocation references (register_cuda_params; fds[i] becomes -1 where
 * the allocation table took or closed it).  A host buffer's fds[0] is only
 * checked (the caller keeps it and opens its read-only fd); its count is
 * the caller's to check.  Returns 0 or a negative errno with req_fail(). */
int register_buffer_attach(struct req *q, const msgpack_object *m, int *fds, unsigned nfds,
                           struct reg_params *p, bool shared_write, bool ephemeral_given);

/* What a registration would cost its owner's uid: bytes (0: none counted),
 * fds held and fd store entries. */
struct reg_cost {
        uint64_t bytes, fds, store;
};
/* The per-uid limits for a registration of that cost: -ENOBUFS with
 * req_fail(). */
int register_check_limits(struct req *q, const struct reg_cost *cost);
/* The connection's registration limit and the name's being free:
 * -ENOBUFS or -EEXIST with req_fail(). */
int register_admit(struct req *q, const char *name, size_t len);
/* Whether a lookup reply for r fits max_frame (1, 0), or -ENOMEM; a
 * registration whose reply does not could never be looked up. */
int register_reply_fits(const struct reg *r, uint32_t max_frame);

#endif
