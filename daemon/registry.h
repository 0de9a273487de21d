/* registry.h: registrations, names and leases; the daemon's core state.
 *
 * A pure data structure: no sockets, no event loop, no logging, so the unit
 * tests drive it directly.  A client connection appears here as a struct
 * reg_party that the caller embeds in its own state; the registry links the
 * party's leases and registrations so that a disconnect costs time in
 * proportion to what that party held, not to the size of the registry.
 *
 * A registration is live from registry_add() until registry_unregister() (or
 * its ephemeral owner's end).  It then leaves the name table but stays in the
 * id table while leases or pins remain; when the last one goes it is freed
 * and the freed callback runs (the daemon closes the fd there). */
#ifndef GPUIPCD_REGISTRY_H
#define GPUIPCD_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hmap.h"
#include "wire.h"

struct registry;
struct lease;
struct reg_cuda;
struct reg_batch;
struct proto_access;

struct reg_party {
        struct reg *owned;              /* registrations it registered */
        struct lease *leases;           /* leases it holds */
        uint32_t n_live;                /* its live registrations */
        uint32_t n_leases;
        uint32_t pid, uid, gid;
        bool detached;                  /* a session kept over a restart, no connection */
        uint64_t start_time;            /* of the peer's process, when known */
        uint64_t pidns, ipcns;          /* its PID and IPC namespaces (inodes), 0: unknown */
        uint8_t session[PROTO_SESSION_LEN];       /* its resume token (session.c) */
};

struct reg {
        struct hmap_node by_name;       /* while live */
        struct hmap_node by_id;         /* until freed */
        struct reg *prev, *next;        /* all registrations, by increasing id */
        struct reg *own_prev, *own_next;/* the owner's list */
        struct reg_party *owner;        /* NULL once the owner's connection ended */
        uint64_t id;
        uint64_t size, offset;
        uint64_t created_ms;
        uint64_t expires_ms;            /* Unix ms its TTL ends (ttl.c); 0: none */
        const uint8_t *meta;            /* one packed msgpack map, or NULL */
        struct reg_cuda *cuda;          /* CUDA kinds: the daemon's, freed in freed */
        struct reg_batch *batch;        /* batch: its parts, likewise (cuda is NULL) */
        struct proto_access *access;      /* extra readers; NULL: owner only; freed with r */
        uint64_t charged;               /* bytes counted against the owner's uid */
        struct lease *held;             /* its leases, newest first */
        uint64_t lease_mark;            /* leases with a smaller id are marked */
        uint32_t marked;                /* marked leases still held */
        uint32_t meta_len;
        uint32_t leases;
        uint32_t pins;                  /* queued sends that still need fd */
        uint32_t ttl_slot;              /* 1 + its index in the TTL heap; 0: none */
        uint32_t pid, uid, gid;         /* the owner's credentials */
        int fd;
        int ro_fd;                      /* host: a read-only open of fd, or -1 */
        uint16_t name_len;
        uint8_t kind;
        uint8_t fds_charged;            /* fds counted against the owner's uid (quota.c) */
        uint8_t store_charged;          /* fd store entries counted likewise */
        bool ephemeral : 1;
        bool revocable : 1;             /* its leases are revoked with its owner */
        bool live : 1;
        char name[];                    /* NUL-terminated; meta follows it */
};

struct lease {
        struct hmap_node by_id;
        struct lease *prev, *next;      /* the holder's list */
        struct lease *rprev, *rnext;    /* the registration's list */
        struct reg *reg;
        struct reg_party *holder;
        uint64_t id;
        uint64_t since_ms;              /* Unix ms it was taken (or restored) */
};

struct reg_params {
        const char *name;
        size_t name_len;
        unsigned kind;
        uint64_t size, offset;
        uint64_t created_ms;
        uint64_t expires_ms;            /* 0: no TTL */
        const uint8_t *meta;            /* copied */
        size_t meta_len;
        bool ephemeral;
        bool revocable;
        struct reg_cuda *cuda;          /* owned by the registration on success */
        struct reg_batch *batch;        /* kind batch: likewise */
        struct proto_access *access;      /* one malloc block, owned likewise */
        int fd;                         /* owned by the registration on success */
        uint64_t id;                    /* restore: this id; 0 for the next one */
        uint32_t pid, uid, gid;         /* restore: the credentials of an ownerless one */
};

struct registry_callbacks {
        /* The lease count of r dropped from 1 to 0 and r->owner is set. */
        void (*released)(struct reg *r, void *userdata);
        /* r is about to be freed: release r->fd. */
        void (*freed)(struct reg *r, void *userdata);
        /* The owner of revocable r is gone; l is one of its leases.  Runs
         * for each lease, before an ephemeral r leaves the namespace. */
        void (*revoked)(struct reg *r, struct lease *l, void *userdata);
        /* Optional observers (watch, metrics): r entered the namespace; r
         * is leaving it; lease l was taken; l is about to be dropped (also
         * by registry_lease_undo and when its holder goes).  They must not
         * call back into the registry. */
        void (*added)(struct reg *r, void *userdata);
        void (*removed)(struct reg *r, void *userdata);
        void (*leased)(struct reg *r, struct lease *l, void *userdata);
        void (*unleased)(struct reg *r, struct lease *l, void *userdata);
};

#define REGISTRY_KINDS 5u       /* _PROTO_KIND_MAX: the buffer kinds and batch */

struct registry_counters {
        uint64_t registrations;         /* live plus unregistered, not yet freed */
        uint64_t live;
        uint64_t leases;
        uint64_t bytes[REGISTRY_KINDS];
};

int registry_new(const struct registry_callbacks *cb, void *userdata, struct registry **ret);
/* Frees every lease and registration (running freed for each) without
 * touching the parties, which may be gone already and must not be used with
 * the registry afterwards. */
struct registry *registry_free(struct registry *R);
const struct registry_counters *registry_counters(const struct registry *R);

void reg_party_init(struct reg_party *p, uint32_t pid, uint32_t uid, uint32_t gid);

/* -EEXIST when the name is live, -EINVAL for a bad kind or an over-long
 * name (names are checked by the caller), -ENOMEM. */
int registry_add(struct registry *R, struct reg_party *owner, const struct reg_params *p,
                 struct reg **ret);
/* The live registration of that name, or NULL. */
struct reg *registry_find_name(const struct registry *R, const char *name, size_t len);
/* A registration by id: live, or unregistered while still leased. */
struct reg *registry_find_id(const struct registry *R, uint64_t id);
/* Takes r out of the namespace; may free it.  -ENOENT if it is not live. */
int registry_unregister(struct registry *R, struct reg *r);

int registry_lease(struct registry *R, struct reg *r, struct reg_party *holder,
                   struct lease **ret);
/* registry_lease() under a given id (restore); -EEXIST when it is taken. */
int registry_lease_id(struct registry *R, struct reg *r, struct reg_party *holder,
                      uint64_t lease_id, struct lease **ret);
/* Drops a lease just taken whose answer could not be sent, without a
 * released event. */
void registry_lease_undo(struct registry *R, struct lease *l);
/* -ENOENT when holder holds no lease of that id. */
int registry_release(struct registry *R, struct reg_party *holder, uint64_t lease_id);
struct lease *registry_find_lease(const struct registry *R, uint64_t lease_id);

/* The party's connection ended: drops its leases, unregisters its ephemeral
 * registrations and orphans the durable ones. */
void registry_party_gone(struct registry *R, struct reg_party *p);

/* Hands everything party `from` owns and holds to `to` (a resumed session). */
void registry_party_move(struct registry *R, struct reg_party *from, struct reg_party *to);
/* The ids the next registration and lease would get; restore raises them
 * (never lowers) so that ids are not reused across a restart. */
void registry_next_ids(const struct registry *R, uint64_t *ret_id, uint64_t *ret_lease);
void registry_raise_ids(struct registry *R, uint64_t next_id, uint64_t next_lease);

/* Moves r to another kind (keeping the byte counters right). */
void registry_set_kind(struct registry *R, struct reg *r, unsigned kind);
/* Marks the leases r holds now and returns how many: when the last of them
 * goes while newer ones remain, the released callback runs early (adopt:
 * the producer's memory is free once the leases that map it are gone). */
uint32_t registry_mark_leases(struct registry *R, struct reg *r);

/* Pins keep a registration (and its fd) from being freed. */
void registry_pin(struct reg *r);
void registry_unpin(struct registry *R, struct reg *r);

/* Every registration not yet freed, by increasing id (follow r->next). */
const struct reg *registry_first(const struct registry *R);

/* Paging over live registrations by increasing id: the first one after id
 * `after` (prev == NULL) or the one after prev, whose name lies in prefix
 * (empty: all).  NULL at the end. */
struct reg *registry_iter(const struct registry *R, const struct reg *prev, uint64_t after,
                          const char *prefix, size_t prefix_len);
/* registry_iter(), with leased_too also the unregistered registrations
 * that leases still hold. */
struct reg *registry_iter_ex(const struct registry *R, const struct reg *prev, uint64_t after,
                             const char *prefix, size_t prefix_len, bool leased_too);

#endif
