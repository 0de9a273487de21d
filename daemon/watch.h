/* watch.h: registry observers: watch subscriptions, owner executables and
 * per-device byte counts.
 *
 * The registry reports registrations entering and leaving the namespace and
 * leases coming and going through its optional callbacks; this module turns
 * them into `watch` events for subscribed connections.  It also remembers
 * each connection's executable (read at accept) and copies it to the
 * registrations that connection makes, for records' owner.exe.  The daemon
 * is a single instance, so the tables are the module's own. */
#ifndef GPUIPCD_WATCH_H
#define GPUIPCD_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "registry.h"

struct conn;
struct daemon;

#define WATCH_MAX   64u         /* subscribed connections, daemon-wide */
#define WATCH_EXE_MAX 255u      /* bytes of an executable path kept */
#define WATCH_DEVICES_MAX 64u   /* (kind, device) byte counters */

/* Subscribes c to events of registrations in namespace prefix (plen 0:
 * all), replacing an earlier subscription.  -ENOBUFS past WATCH_MAX,
 * -EDQUOT when c's uid has max-watches-per-uid subscriptions, -ENOMEM. */
int watch_add(struct conn *c, const char *prefix, size_t plen);
/* Ends c's subscription; false when it had none. */
bool watch_remove(struct conn *c);
uint32_t watch_count(void);

/* The party whose request is being handled (NULL between requests): the
 * actor of the events that request causes. */
void watch_set_actor(struct reg_party *p);

/* Sends a `revoked` watch event for r, caused by actor. */
void watch_emit_revoked(struct reg *r, const struct reg_party *actor);

/* Reads /proc/PID/exe of c's peer, best effort, and keeps it (at accept,
 * so that a process that execs another program after connecting is
 * recorded as the one that connected). */
void watch_conn_accepted(struct conn *c);
/* c is closing: drops its subscription and executable. */
void watch_conn_closed(struct conn *c);
/* Restore: the owner executable the next added registration records. */
void watch_set_restored_exe(const char *exe);
/* The executable of the connection behind party p, or "" (a detached
 * session, or one that could not be read). */
const char *watch_party_exe(const struct reg_party *p);
/* The owner executable recorded for registration id, or "". */
const char *watch_reg_exe(uint64_t id);

/* Registrations not yet freed and their bytes per (kind, device UUID or ""
 * for host), for metrics: calls fn for each pair that has registrations.
 * A registration counts under the kind it was registered as (adopt moves
 * cuda-ipc bytes to cuda-vmm only in the registry's own counters). */
void watch_bytes_each(void (*fn)(unsigned kind, const char *device, uint64_t count,
                                 uint64_t bytes, void *data),
                      void *data);

/* Registry callbacks (daemon.c wires them; userdata is the daemon). */
void watch_on_added(struct reg *r, void *userdata);
void watch_on_removed(struct reg *r, void *userdata);
void watch_on_leased(struct reg *r, struct lease *l, void *userdata);
void watch_on_unleased(struct reg *r, struct lease *l, void *userdata);
/* From the freed callback: forgets r's executable and bytes. */
void watch_reg_freed(struct reg *r);
/* Frees the tables at shutdown. */
void watch_done(void);

#endif
