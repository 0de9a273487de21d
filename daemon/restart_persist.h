/* restart_persist.h: the registry's state in systemd's file descriptor store, so
 * that registrations and leases survive a restart of gpuipcd.
 *
 * In use when the fdstore setting is on and $NOTIFY_SOCKET is set.  The
 * daemon then pushes (FDSTORE=1) every host registration's memfd as
 * "host-ID" and every cuda-vmm allocation's fd as "vmm-ALLOCID", and a
 * journal memfd (restart_journal.h) as "state0" or "state1" whose records
 * describe sessions (S, E), released events a detached session missed (M),
 * registrations (A, U, C), leases (L, R) and the id counters (H).  The
 * journal starts with a snapshot of the whole state and grows by one record
 * per change; when it has grown to twice its snapshot a new snapshot goes
 * out under the other name and the old one is removed.  restart_replay.c
 * replays it on the next start.  Every function here is a no-op while the
 * store is not in use or after persist_freeze(). */
#ifndef GPUIPCD_RESTART_PERSIST_H
#define GPUIPCD_RESTART_PERSIST_H

#include <stdbool.h>
#include <stdint.h>

#include "registry.h"

struct daemon;

#define PERSIST_STATE_NAME "state"      /* + "0" or "1" */

/* Decides whether the store is used (before restore). */
void persist_init(struct daemon *d);
bool persist_enabled(void);
/* Writes the first snapshot and pushes it; prev_gen is the generation
 * restored from (0 or 1), or -1, prev_serial its snapshot serial, and
 * stored the number of fds the store holds.  From here on changes are
 * journalled. */
int persist_start(struct daemon *d, int prev_gen, uint64_t prev_serial, uint64_t stored);
/* Shutdown: the store keeps what it has; nothing is removed from now on. */
void persist_freeze(void);
void persist_done(void);

/* Entries of the store kept free for the journal's two states and for
 * adopt, which cannot be refused for want of one. */
#define PERSIST_STORE_RESERVE 16u

/* While the store is in use and its maximum is known ($FDSTORE): true, with
 * the entries it holds and how many registrations may take (the maximum
 * less PERSIST_STORE_RESERVE, or 0). */
bool persist_store_room(uint64_t *ret_used, uint64_t *ret_pool);

/* Asks systemd to forget a stored fd name (restore: stale entries). */
void persist_store_remove(const char *name);

/* Hooks, from the registry callbacks, hello and connection close. */
void persist_session(struct daemon *d, const struct reg_party *p);
void persist_session_end(struct daemon *d, const struct reg_party *p);
void persist_added(struct daemon *d, const struct reg *r);
void persist_removed(struct daemon *d, const struct reg *r);
void persist_freed(struct daemon *d, const struct reg *r);
void persist_leased(struct daemon *d, const struct lease *l);
void persist_unleased(struct daemon *d, const struct lease *l);
/* A released event kept for detached session p (session.c). */
void persist_missed(struct daemon *d, const struct reg_party *p, uint64_t id, const char *name,
                    size_t len);
/* r's CUDA allocation changed (adopt moved it into a daemon-owned copy). */
void persist_cuda_changed(struct daemon *d, const struct reg *r);

#endif
