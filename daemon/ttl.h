/* ttl.h: registrations that end at a given time (register's ttl_ms).
 *
 * A binary min-heap of the live registrations that have an expiry, ordered
 * by reg.expires_ms, with each registration's slot kept in reg.ttl_slot so
 * that one leaving the namespace early is taken out in O(log n).  One
 * libuv timer, created with the first entry, fires at the earliest expiry
 * and unregisters what is due; leases keep their buffers as after any
 * unregister.  The heap holds only live registrations, so it is bounded by
 * the registration limits. */
#ifndef GPUIPCD_TTL_H
#define GPUIPCD_TTL_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "registry.h"

struct daemon;

/* The longest TTL a register may ask for: ten years, in ms. */
#define TTL_MAX_MS (10ull * 366 * 24 * 3600 * 1000)

struct ttl_heap {
        struct reg **v;
        uint32_t n, cap;
        uv_timer_t *timer;              /* NULL until the first entry */
        bool stopped;                   /* shutdown: no more timers */
};

/* From the registry's added callback: r has an expiry, track it.  Best
 * effort on out of memory (the registration then has no TTL; logged). */
void ttl_add(struct daemon *d, struct reg *r);
/* From the removed callback: r left the namespace before its expiry. */
void ttl_remove(struct daemon *d, struct reg *r);
/* Shutdown: closes the timer so that the loop can end. */
void ttl_stop(struct daemon *d);
/* Frees the heap (after the loop ended). */
void ttl_done(struct daemon *d);

#endif
