/* resume.h: what the two halves of resuming share (resume_track.c keeps
 * the records, resume_reconnect.c replays them). */
#ifndef GPUIPC_RESUME_H
#define GPUIPC_RESUME_H

#include "internal.h"

/* A request a reconnect sends again: a registration this connection made
 * and has not unregistered, or its watch.  c->recs lists them, newest
 * first. */
struct gpuipc__rec {
        struct gpuipc__rec *next;
        bool watch;                     /* a watch request, not a registration */
        uint64_t user_id, cur_id;       /* the id the caller knows; the daemon's now */
        uint64_t seq;                   /* in the frame */
        uint8_t *frame;
        size_t len;
        int fds[PROTO_MAX_FDS];
        unsigned nfds;
        bool needs_fds;                 /* its frame declares fds we may not hold */
        char name[PROTO_NAME_MAX + 1];  /* a registration's name */
};

void gpuipc__rec_free(struct gpuipc__rec *r);
/* Remembers that r could not be registered again (err), for
 * gpuipc_client_next_lost(). */
void gpuipc__lost_note(gpuipc_client *c, const struct gpuipc__rec *r, int err);

#endif
