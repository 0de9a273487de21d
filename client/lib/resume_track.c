/* resume_track.c: what a reconnect will need, kept as calls succeed.
 *
 * A client keeps the register frames (and a dup of their fds) of the
 * registrations it made and has not unregistered, its watch request, and
 * the ids of the leases it holds; each request's kind (struct gpuipc__op)
 * says which of these its success changes.  A daemon that started afresh
 * gives registrations new ids, which the client maps back to the ids its
 * caller knows; registrations it could not make again are listed for
 * gpuipc_client_next_lost().  resume_reconnect.c uses all of it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "resume.h"

void gpuipc__rec_free(struct gpuipc__rec *r)
{
        for (unsigned i = 0; i < r->nfds; i++)
                close(r->fds[i]);
        free(r->frame);
        free(r);
}

void gpuipc__lost_note(gpuipc_client *c, const struct gpuipc__rec *r, int err)
{
        struct gpuipc__lost *l = calloc(1, sizeof(*l));

        if (!l)
                return;
        memcpy(l->name, r->name, sizeof(l->name));
        l->id = r->user_id;
        l->err = err;
        if (c->lost_n == GPUIPC__LOST_MAX) {
                struct gpuipc__lost *old = c->lost;
                c->lost = old->next;
                if (!c->lost)
                        c->lost_tail = NULL;
                free(old);
                c->lost_n--;
        }
        if (c->lost_tail)
                c->lost_tail->next = l;
        else
                c->lost = l;
        c->lost_tail = l;
        c->lost_n++;
}

void gpuipc__lost_clear(gpuipc_client *c)
{
        while (gpuipc_client_next_lost(c, NULL, 0, NULL, NULL) == 1)
                ;
}

int gpuipc_client_next_lost(gpuipc_client *c, char *buf, size_t len, uint64_t *ret_id, int *ret_err)
{
        struct gpuipc__lost *l;

        if (!c)
                return -EINVAL;
        l = c->lost;
        if (!l)
                return 0;
        c->lost = l->next;
        if (!c->lost)
                c->lost_tail = NULL;
        c->lost_n--;
        if (buf && len > 0)
                snprintf(buf, len, "%s", l->name);
        if (ret_id)
                *ret_id = l->id;
        if (ret_err)
                *ret_err = l->err;
        free(l);
        return 1;
}

void gpuipc__resume_clear(gpuipc_client *c)
{
        while (c->recs) {
                struct gpuipc__rec *r = c->recs;
                c->recs = r->next;
                gpuipc__rec_free(r);
        }
        free(c->leases);
        c->leases = NULL;
        c->n_leases = c->cap_leases = 0;
}

uint64_t gpuipc__user_id(const gpuipc_client *c, uint64_t id)
{
        if (!c->remapped)
                return id;
        for (const struct gpuipc__rec *r = c->recs; r; r = r->next)
                if (!r->watch && r->cur_id == id)
                        return r->user_id;
        return id;
}

/* ---- leases ------------------------------------------------------------ */

static void lease_add(gpuipc_client *c, uint64_t id)
{
        if (c->n_leases == c->cap_leases) {
                size_t cap = c->cap_leases ? 2 * c->cap_leases : 16;
                struct gpuipc__lease *p = realloc(c->leases, cap * sizeof(*p));
                if (!p) {
                        c->leases_incomplete = true;
                        return;
                }
                c->leases = p;
                c->cap_leases = cap;
        }
        c->leases[c->n_leases++] = (struct gpuipc__lease){ .id = id, .epoch = c->epoch };
}

bool gpuipc__lease_held(const gpuipc_client *c, uint64_t id, uint32_t epoch)
{
        if (epoch != c->epoch)
                return false;   /* taken from a daemon whose state is gone */
        if (c->leases_incomplete)
                return true;
        for (size_t i = 0; i < c->n_leases; i++)
                if (c->leases[i].id == id)
                        return true;
        return false;
}

bool gpuipc__lease_drop(gpuipc_client *c, uint64_t id)
{
        for (size_t i = 0; i < c->n_leases; i++)
                if (c->leases[i].id == id) {
                        c->leases[i] = c->leases[--c->n_leases];
                        return true;
                }
        return false;
}

/* ---- bookkeeping ------------------------------------------------------- */

/* Keeps a request that succeeded (a registration of name, or a watch):
 * its frame, its seq and a dup of its fds. */
static void rec_add(gpuipc_client *c, bool watch, uint64_t id, const char *name,
                    const uint8_t *buf, size_t len, uint64_t seq, const int *fds, unsigned nfds)
{
        struct gpuipc__rec *r = calloc(1, sizeof(*r));

        if (!r)
                return;
        r->frame = malloc(len);
        if (!r->frame) {
                free(r);
                return;
        }
        memcpy(r->frame, buf, len);
        r->len = len;
        r->seq = seq;
        r->watch = watch;
        r->user_id = r->cur_id = id;
        if (name)
                snprintf(r->name, sizeof(r->name), "%s", name);
        /* A daemon that keeps its state gives the registration back by
         * itself: no need to hold an fd per registration (the frame stays,
         * to register again should the store fail). */
        r->needs_fds = nfds > 0;
        if (c->state_kept)
                nfds = 0;
        for (unsigned i = 0; i < nfds; i++) {
                r->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
                if (r->fds[i] < 0) {
                        r->nfds = i;
                        gpuipc__rec_free(r);
                        return;
                }
        }
        r->nfds = nfds;
        r->next = c->recs;
        c->recs = r;
}

static void rec_drop_id(gpuipc_client *c, uint64_t id)
{
        for (struct gpuipc__rec **pp = &c->recs; *pp; pp = &(*pp)->next)
                if (!(*pp)->watch && (*pp)->cur_id == id) {
                        struct gpuipc__rec *r = *pp;
                        *pp = r->next;
                        gpuipc__rec_free(r);
                        return;
                }
}

/* Unregister by prefix removed every registration of this connection in
 * prefix: drop the records of those whose name lies in it. */
static void rec_drop_prefix(gpuipc_client *c, const char *prefix, size_t plen)
{
        while (plen > 0 && prefix[plen - 1] == '/')
                plen--;
        for (struct gpuipc__rec **pp = &c->recs; *pp;) {
                struct gpuipc__rec *r = *pp;

                if (!r->watch && proto_name_in(r->name, strlen(r->name), prefix, plen)) {
                        *pp = r->next;
                        gpuipc__rec_free(r);
                } else {
                        pp = &r->next;
                }
        }
}

static void rec_drop_watch(gpuipc_client *c)
{
        for (struct gpuipc__rec **pp = &c->recs; *pp; pp = &(*pp)->next)
                if ((*pp)->watch) {
                        struct gpuipc__rec *r = *pp;
                        *pp = r->next;
                        gpuipc__rec_free(r);
                        return;
                }
}

/* Sets the reply's uint `key` to v in place. */
static void reply_set_u64(struct gpuipc__reply *rp, const char *key, uint64_t v)
{
        const msgpack_object *root = rp->msg.root;

        for (uint32_t i = 0; i < root->via.map.size; i++) {
                msgpack_object_kv *kv = &root->via.map.ptr[i];
                if (proto_obj_str_eq(&kv->key, key) &&
                    kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                        kv->val.via.u64 = v;
        }
}

static bool user_id_taken(const gpuipc_client *c, uint64_t id)
{
        for (const struct gpuipc__rec *r = c->recs; r; r = r->next)
                if (!r->watch && r->user_id == id)
                        return true;
        return false;
}

/* A registration made: kept for a reconnect to make again. */
static void keep_register(gpuipc_client *c, const struct gpuipc__req *rq, const uint8_t *buf,
                          size_t len, const int *fds, unsigned nfds, struct gpuipc__reply *rp)
{
        uint64_t id;
        bool clash = false;

        if (proto_get_u64(rp->msg.root, "id", &id) < 0)
                return;
        rec_add(c, false, id, rq->name, buf, len, rq->seq, fds, nfds);
        /* A daemon that started afresh hands out ids the caller may hold
         * already (for registrations it gave back under new ones): then
         * this one gets a client-local id. */
        if (!c->remapped || !c->recs || c->recs->cur_id != id)
                return;
        for (const struct gpuipc__rec *r = c->recs->next; r && !clash; r = r->next)
                clash = !r->watch && r->user_id == id;
        if (!clash)
                return;
        do
                id = (UINT64_C(1) << 63) | ++c->local_ids;
        while (user_id_taken(c, id));
        c->recs->user_id = id;
        reply_set_u64(rp, "id", id);
}

void gpuipc__track(gpuipc_client *c, const struct gpuipc__req *rq, const uint8_t *buf,
                   size_t len, const int *fds, unsigned nfds, struct gpuipc__reply *rp)
{
        enum gpuipc__keep keep = rq->op->keep;
        uint64_t id;
        bool on = true;

        if (c->recovering)
                return;
        /* Leases are tracked always (a view's release asks); what a
         * reconnect re-establishes only when reconnecting is on. */
        if (keep == GPUIPC__KEEP_LEASE) {
                if (proto_get_u64(rp->msg.root, "lease", &id) == 0)
                        lease_add(c, id);
                return;
        }
        if (keep == GPUIPC__KEEP_RELEASE) {
                gpuipc__lease_drop(c, rq->lease);
                return;
        }
        if (c->reconnect_ms <= 0)
                return;
        switch (keep) {
        case GPUIPC__KEEP_REGISTER:
                keep_register(c, rq, buf, len, fds, nfds, rp);
                break;
        case GPUIPC__KEEP_FORGET:
                /* adopt: the daemon owns it now, there is nothing to give back */
                if (proto_get_u64(rp->msg.root, "id", &id) == 0)
                        rec_drop_id(c, id);
                else if (rq->prefix)
                        rec_drop_prefix(c, rq->prefix, strlen(rq->prefix));
                break;
        case GPUIPC__KEEP_WATCH:
                rec_drop_watch(c);
                (void)proto_get_bool(rp->msg.root, "watching", &on);
                if (on)
                        rec_add(c, true, 0, NULL, buf, len, rq->seq, NULL, 0);
                break;
        default:
                break;
        }
}
