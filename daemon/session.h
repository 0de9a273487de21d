/* session.h: sessions, which let a client pick up where it was after the
 * daemon restarted.
 *
 * Every connection gets a random 16-byte session token in its hello reply.
 * With the fd store in use (restart_persist.c), a restarted daemon replays
 * its journal and keeps each session that was connected as a detached party
 * owning the same registrations and leases.  A client that presents the
 * token in hello (`resume`), from the same pid and uid, takes them over.
 * A detached session ends like a closed connection when its process exits
 * (watched with a pidfd), or, when the pid cannot be watched, after
 * resume-grace-ms. */
#ifndef GPUIPCD_SESSION_H
#define GPUIPCD_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "hmap.h"
#include "registry.h"

struct daemon;
struct conn;
struct session_missed;

/* A detached session (session.c keeps them, restart_sessions.c ends them). */
struct dsession {
        struct hmap_node node;
        struct reg_party party;
        struct daemon *d;
        uint64_t start_time;
        int pidfd;                      /* watched, or -1 */
        struct session_missed *missed, *missed_tail;
        uint32_t n_missed;
        uv_poll_t poll;                 /* with pidfd */
        bool timed : 1;                 /* ends when the grace timer fires */
};

/* Unlinks s; frees it now or once its poll handle is closed. */
void session_free_detached(struct daemon *d, struct dsession *s);

/* Draws a fresh token into p->session and reads the start time of p's
 * process; -EIO when no random bytes are to be had. */
int session_new_token(struct reg_party *p);
/* The start time of pid (clock ticks after boot, /proc/PID/stat), 0 when
 * unknown. */
uint64_t session_start_time(uint32_t pid);

/* Restore: a detached session for this token and peer.  Returns its party
 * (the registry may link registrations and leases to it), or NULL with
 * -ENOMEM / -EEXIST in *ret_err. */
struct reg_party *session_detached_add(struct daemon *d, const uint8_t token[PROTO_SESSION_LEN],
                                       uint32_t pid, uint32_t uid, uint32_t gid,
                                       uint64_t start_time, int *ret_err);
struct reg_party *session_detached_find(struct daemon *d, const uint8_t token[PROTO_SESSION_LEN]);
/* Ends a detached session now, as if its connection closed; unresumed
 * logs it (a replayed end of a connection that closed is not news). */
void session_detached_end(struct daemon *d, struct reg_party *p, bool unresumed);
/* After restore: ends the sessions whose process is gone, watches the
 * others' pids, and starts the grace timer for those that cannot be
 * watched. */
void session_watch_all(struct daemon *d);
/* hello with `resume`: when a detached session of that token belongs to
 * c's peer (pid and uid), c takes over what it owns and holds and its
 * token, and *ret_missed the released events it missed (for
 * session_send_missed()).  Returns true when resumed. */
bool session_resume(struct daemon *d, struct conn *c, const uint8_t token[PROTO_SESSION_LEN],
                    struct session_missed **ret_missed);
/* A released event for a detached session, kept for its resume. */
struct session_missed {
        struct session_missed *next;
        uint64_t id;
        uint16_t name_len;
        char name[];
};

#define SESSION_MISSED_MAX 4096u        /* kept per session; older ones go */

/* The last lease of registration id went while its owner p, a detached
 * session, waits to be resumed: keeps the event; false when out of memory
 * (the caller journals a kept one, persist_missed). */
bool session_note_released(struct daemon *d, struct reg_party *p, uint64_t id,
                           const char *name, size_t len);
/* The events kept for p, oldest first (snapshots). */
const struct session_missed *session_missed_of(const struct reg_party *p);
/* After a resumed hello's reply: sends c the kept events and frees them. */
void session_send_missed(struct conn *c, struct session_missed *m);

/* Calls fn for each detached session (snapshots). */
void session_detached_each(struct daemon *d, void (*fn)(const struct reg_party *p, void *data),
                           void *data);
uint32_t session_detached_count(const struct daemon *d);
/* Shutdown: stops watching, keeps the sessions (the next daemon restores
 * them again from the journal). */
void session_stop(struct daemon *d);
/* Frees the detached parties; the registry must be gone already. */
void session_done(struct daemon *d);

#endif
