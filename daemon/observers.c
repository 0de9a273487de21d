/* observers.c: what the daemon does when the registry changes: the
 * registry's callbacks, which tell owners and holders (released, revoked
 * events), count quotas, feed watch and the journal, and free a
 * registration's fds and allocation references.  They run inside registry
 * calls, so they only queue. */
#include <inttypes.h>
#include <unistd.h>

#include "batch.h"
#include "closer.h"
#include "conn.h"
#include "cuda_reg.h"
#include "holds.h"
#include "ledger.h"
#include "log.h"
#include "observers.h"
#include "restart_persist.h"
#include "quota.h"
#include "session.h"
#include "watch.h"

static void send_released(struct conn *c, struct reg *r);

/* The last lease went: tell the owner it may reuse the memory.  Runs inside
 * registry calls, so it only queues. */
static void on_released(struct reg *r, void *userdata)
{
        struct daemon *d = userdata;

        if (d->restoring)
                return;         /* the event went out before the restart */
        if (r->owner->detached) {
                /* A session waiting to be resumed gets it then; a
                 * connection closing for a restart never lost the lease. */
                if (!d->stopping)
                        if (session_note_released(d, r->owner, r->id, r->name, r->name_len))
                                persist_missed(d, r->owner, r->id, r->name, r->name_len);
                return;
        }
        send_released(conn_from_party(r->owner), r);
}

/* Bytes of one packed release event: a bin8 of PROTO_IPC_HANDLE_LEN bytes. */
#define RELEASE_EVENT_PACKED (2u + PROTO_IPC_HANDLE_LEN)

/* Forgets the oldest release events of e that would not fit one frame of
 * max_frame after base bytes, so the released event always goes out (with
 * the newest events, as past REG_CUDA_EVENTS_MAX). */
static void trim_events(struct rel_events *e, size_t base, uint32_t max_frame)
{
        size_t fit = base < max_frame ? (max_frame - base) / RELEASE_EVENT_PACKED : 0;

        rel_events_trim(e, fit > UINT32_MAX ? UINT32_MAX : (uint32_t)fit);
}

static void send_released(struct conn *c, struct reg *r)
{
        struct rel_events *e = reg_events(r);
        bool events = e && e->n > 0;
        struct proto_out o;
        struct proto_map m;
        uint32_t dropped;

        if (c->closed)
                return;
        conn_pack_reg_event(&o, &m, "released", r->id, r->name, r->name_len);
        if (events) {
                /* The body so far (its map header will be a fixmap, 2 bytes
                 * less than the builder's for now), the "events" key and an
                 * array32 header. */
                trim_events(e, o.sb.size - PROTO_HDR_LEN - 2 + 7 + 5, c->d->cfg.max_frame);
                proto_map_key(&m, "events");
                dropped = rel_events_pack(&o.pk, e);
                if (dropped > 0)
                        log_info("registration %" PRIu64 " (%s): %u release events over the "
                                 "cap of %u or max_frame dropped; the owner gets the newest",
                                 r->id, r->name, dropped, REG_CUDA_EVENTS_MAX);
        }
        proto_map_end(&m);
        (void)conn_send(c, &o, NULL);
        proto_out_free(&o);
}

/* The owner of a cuda-ipc registration is gone, and with it perhaps the
 * memory: tell the holder of lease l to stop using its view. */
static void on_revoked(struct reg *r, struct lease *l, void *userdata)
{
        conn_send_revoked(r, l, "the owner's connection ended; the memory may be gone", false);
}

static void on_freed(struct reg *r, void *userdata)
{
        struct daemon *d = userdata;

        log_debug("freeing registration %" PRIu64 " (%s)", r->id, r->name);
        persist_freed(d, r);
        quota_uncharge(d, r);
        quota_fds_uncharge(d, r);
        ledger_reg_freed(r);
        if (r->batch) {
                holds_reg_freeing(d, r);
                /* Its memfds and its parts' allocation references. */
                batch_free(&d->allocs, r->batch);
                r->batch = NULL;
        } else if (r->cuda) {
                holds_reg_freeing(d, r);
                /* A cuda-vmm fd is the allocation entry's, shared. */
                reg_cuda_free(&d->allocs, r->cuda);
                r->cuda = NULL;
        } else {
                closer_close(r->fd);
        }
        closer_close(r->ro_fd);
        r->fd = r->ro_fd = -1;
}

/* The per-uid counts, then the watchers. */
static void on_added(struct reg *r, void *userdata)
{
        quota_reg(userdata, r->uid, 1);
        quota_charge(userdata, r);
        quota_fds_charge(userdata, r, persist_enabled());
        ledger_reg_added(r);
        watch_on_added(r, userdata);
        persist_added(userdata, r);
        ttl_add(userdata, r);
}

static void on_removed(struct reg *r, void *userdata)
{
        quota_reg(userdata, r->uid, -1);
        ttl_remove(userdata, r);
        watch_on_removed(r, userdata);
        persist_removed(userdata, r);
}

static void on_leased(struct reg *r, struct lease *l, void *userdata)
{
        quota_lease(userdata, l->holder->uid, 1);
        watch_on_leased(r, l, userdata);
        persist_leased(userdata, l);
}

static void on_unleased(struct reg *r, struct lease *l, void *userdata)
{
        quota_lease(userdata, l->holder->uid, -1);
        watch_on_unleased(r, l, userdata);
        persist_unleased(userdata, l);
}

const struct registry_callbacks daemon_observers = {
        .released = on_released,
        .freed = on_freed,
        .revoked = on_revoked,
        .added = on_added,
        .removed = on_removed,
        .leased = on_leased,
        .unleased = on_unleased,
};
