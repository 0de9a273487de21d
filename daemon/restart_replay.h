/* restart_replay.h: replaying the journal of a previous gpuipcd at start.
 *
 * systemd passes back what restart_persist.c stored: the journal (state0 and/or
 * state1) and the fds of host registrations and cuda-vmm allocations.  The
 * journal with the highest snapshot serial is replayed into the empty
 * registry: registrations keep their ids, names, owners and contents,
 * leases their ids, and every session that was connected becomes a detached
 * session (session.h) for its client to resume.  A record that cannot be
 * applied (its fd is missing, say) is skipped with a warning; stored fds
 * that nothing claims are closed and removed from the store. */
#ifndef GPUIPCD_RESTART_REPLAY_H
#define GPUIPCD_RESTART_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "sd.h"

struct daemon;

struct restore_result {
        int gen;                        /* state0 or state1 replayed, or -1 */
        uint64_t serial;                /* its snapshot serial */
        uint64_t regs, leases, sessions, skipped;
        uint64_t missing;               /* records of freed registrations, mostly */
        uint64_t kept;                  /* stored fds left in the store */
};

/* Consumes fds[0..n) and frees the array. */
void restore_run(struct daemon *d, struct sd_fd *fds, size_t n, struct restore_result *ret);

/* Applies one journal record (a msgpack map) to d; for the fuzzer and
 * restore_run.  -EINVAL for a record that does not decode. */
struct restore_ctx;
int restore_apply(struct restore_ctx *x, const uint8_t *body, size_t len);
/* restore_apply() as restore_run() walks the journal with it (a
 * journal_record_fn; data the context): counts and logs a skipped record,
 * naming it; stops the walk (-EPROTONOSUPPORT) at another version's. */
int restore_replay_one(const uint8_t *body, size_t len, void *data);
/* A context for restore_apply() outside restore_run() (the fuzzer): takes
 * fds[0..n) and the array as restore_run() does; NULL without memory (fds
 * are then left alone).  restore_ctx_free() closes the stored fds that no
 * registration took and frees the array; NULL-safe. */
struct restore_ctx *restore_ctx_new(struct daemon *d, struct sd_fd *fds, size_t n);
void restore_ctx_free(struct restore_ctx *x);

#endif
