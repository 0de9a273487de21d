/* waits.h: lookups that wait for a name to be registered.
 *
 * Waiters queue per name in the daemon's waits table, in arrival order, and
 * each has its own timer.  A waiter ends exactly once: with a lease when the
 * name appears, with `timeout`, with `shutting_down` when the daemon stops,
 * or silently when its connection closes. */
#ifndef GPUIPCD_WAITS_H
#define GPUIPCD_WAITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "registry.h"

struct conn;

/* Answers a waiting lookup of r (ops_lookup.c): 0 when its reply is
 * queued, else a negative errno with the reason in msg (msg_len bytes),
 * which waits.c sends as the error reply. */
typedef int waits_answer_fn(struct conn *c, uint64_t seq, struct reg *r, bool writable,
                            bool cache, char *msg, size_t msg_len);

/* Parks a lookup of name by c for up to ms milliseconds (writable: it asked
 * for the read-write fd; cache: to hold the allocation, holds.h; owner_uid
 * >= 0: only a registration of that uid answers it), to be answered with
 * answer.  -ENOBUFS over the per-connection limit, -ENOMEM. */
int waits_add(struct conn *c, uint64_t seq, const char *name, size_t len, uint64_t ms,
              bool writable, bool cache, int64_t owner_uid, waits_answer_fn *answer);
/* r was just registered: answers every lookup waiting for its name. */
void waits_wake(struct daemon *d, struct reg *r);
/* Drops c's waiters without answering them. */
void waits_cancel_conn(struct conn *c);
/* Daemon shutdown: answers c's waiters with shutting_down. */
void waits_shutdown_conn(struct conn *c);

#endif
