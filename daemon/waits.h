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

/* Parks a lookup of name by c for up to ms milliseconds (writable: it asked
 * for the read-write fd; cache: to hold the allocation, holds.h).  -ENOBUFS over the per-connection limit, -ENOMEM. */
int waits_add(struct conn *c, uint64_t seq, const char *name, size_t len, uint64_t ms,
              bool writable, bool cache);
/* r was just registered: answers every lookup waiting for its name. */
void waits_wake(struct daemon *d, struct reg *r);
/* Drops c's waiters without answering them. */
void waits_cancel_conn(struct conn *c);
/* Daemon shutdown: answers c's waiters with shutting_down. */
void waits_shutdown_conn(struct conn *c);

#endif
