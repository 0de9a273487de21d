/* watch.h: watch subscriptions and their events.
 *
 * The registry reports registrations entering and leaving the namespace and
 * leases coming and going through its callbacks (observers.c); this module
 * turns them into `watch` events for subscribed connections.  The daemon is
 * a single instance, so the subscriptions are the module's own. */
#ifndef GPUIPCD_WATCH_H
#define GPUIPCD_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "registry.h"

struct conn;
struct daemon;

#define WATCH_MAX   64u         /* subscribed connections, daemon-wide */

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


/* c is closing: drops its subscription. */
void watch_conn_closed(struct conn *c);

/* Registry callbacks (observers.c calls them; userdata is the daemon). */
void watch_on_added(struct reg *r, void *userdata);
void watch_on_removed(struct reg *r, void *userdata);
void watch_on_leased(struct reg *r, struct lease *l, void *userdata);
void watch_on_unleased(struct reg *r, struct lease *l, void *userdata);
/* Ends every subscription at shutdown. */
void watch_done(void);

#endif
