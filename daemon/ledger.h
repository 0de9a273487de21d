/* ledger.h: owner executables and the bytes per (kind, device) of the
 * registrations not yet freed (ledger.c). */
#ifndef GPUIPCD_LEDGER_H
#define GPUIPCD_LEDGER_H

#include <stdint.h>

#include "registry.h"

struct conn;

#define LEDGER_EXE_MAX 255u     /* bytes of an executable path kept */
#define LEDGER_DEVICES_MAX 64u  /* (kind, device) byte counters */

/* Reads /proc/PID/exe of c's peer, best effort, and keeps it (at accept,
 * so that a process that execs another program after connecting is
 * recorded as the one that connected). */
void ledger_conn_accepted(struct conn *c);
/* c is closing: drops its executable. */
void ledger_conn_closed(struct conn *c);
/* Restore: the owner executable the next added registration records. */
void ledger_set_restored_exe(const char *exe);
/* The executable of the connection behind party p, or "" (a detached
 * session, or one that could not be read). */
const char *ledger_party_exe(const struct reg_party *p);
/* The owner executable recorded for registration id, or "". */
const char *ledger_reg_exe(uint64_t id);

/* From the added callback: records r's executable (its owner's, or the
 * restored one) and counts its bytes. */
void ledger_reg_added(struct reg *r);
/* From the freed callback: forgets r's executable and bytes. */
void ledger_reg_freed(struct reg *r);

/* Registrations not yet freed and their bytes per (kind, device UUID or ""
 * for host), for metrics: calls fn for each pair that has registrations.
 * A registration counts under the kind it was registered as (adopt moves
 * cuda-ipc bytes to cuda-vmm only in the registry's own counters). */
void ledger_bytes_each(void (*fn)(unsigned kind, const char *device, uint64_t count,
                                  uint64_t bytes, void *data),
                       void *data);
/* Frees the tables at shutdown. */
void ledger_done(void);

#endif
