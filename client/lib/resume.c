/* resume.c: reconnecting after the daemon restarted.
 *
 * A client keeps the register frames (and a dup of their fds) of the
 * registrations it made and has not unregistered, its watch request, and
 * the ids of the leases it holds.  When the connection drops because the
 * daemon went away, the next call (or the call in flight) reconnects to
 * the same path and sends hello with the session token of the old
 * connection.  A daemon that kept its state (the fd store) hands the
 * session back: registrations, leases and ids are as they were.  One that
 * did not gets the registrations again from the kept frames; they get new
 * ids there, which the client maps back to the ids its caller knows. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

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

static void rec_free(struct gpuipc__rec *r)
{
        for (unsigned i = 0; i < r->nfds; i++)
                close(r->fds[i]);
        free(r->frame);
        free(r);
}

/* Remembers that r could not be registered again (err). */
static void note_lost(gpuipc_client *c, const struct gpuipc__rec *r, int err)
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
                rec_free(r);
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

static bool lease_drop(gpuipc_client *c, uint64_t id)
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
                        rec_free(r);
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
                        rec_free(r);
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
                        rec_free(r);
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
                        rec_free(r);
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
                lease_drop(c, rq->lease);
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

/* ---- reconnecting ------------------------------------------------------ */

bool gpuipc__may_reconnect(const gpuipc_client *c, int err)
{
        if (c->reconnect_ms <= 0 || c->freed || c->recovering || !c->path[0])
                return false;
        return err == -ECONNRESET || err == -EPIPE || err == -ESHUTDOWN;
}

static int64_t mono_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* A new socket connected to c->path, retrying until the deadline. */
static int connect_again(gpuipc_client *c, int64_t deadline)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int delay = 5;

        memcpy(sa.sun_path, c->path, sizeof(c->path));
        for (;;) {
                int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), r;
                if (fd < 0)
                        return -errno;
                do
                        r = connect(fd, (const struct sockaddr *)&sa, sizeof(sa));
                while (r < 0 && errno == EINTR);
                if (r == 0) {
                        /* Who took the path over while the daemon was away? */
                        r = gpuipc__check_server(c, fd, c->path);
                        if (r == 0)
                                return fd;
                        close(fd);
                        return r;
                }
                r = -errno;
                close(fd);
                if (r != -ENOENT && r != -ECONNREFUSED && r != -EAGAIN)
                        return r;
                if (mono_ms() + delay > deadline)
                        return r;
                sleep_ms(delay);
                if (delay < 200)
                        delay *= 2;
        }
}

static bool in_array(const msgpack_object *a, uint64_t v)
{
        if (!a || a->type != MSGPACK_OBJECT_ARRAY)
                return false;
        for (uint32_t i = 0; i < a->via.array.size; i++) {
                uint64_t x;
                if (proto_obj_u64(&a->via.array.ptr[i], &x) == 0 && x == v)
                        return true;
        }
        return false;
}

/* The reconnect's own requests: neither redone nor kept. */
static const struct gpuipc__op op_release = { .name = "release" };
static const struct gpuipc__op op_stat = { .name = "stat" };

/* A request of the reconnect's own, through gpuipc__call() but neither
 * reconnecting nor tracked (c->recovering). */
static int call_quiet(gpuipc_client *c, struct gpuipc__req *rq, struct gpuipc__reply *ret_reply)
{
        bool was = c->recovering;
        int k;

        c->recovering = true;
        k = gpuipc__call(c, rq, NULL, 0, ret_reply);
        c->recovering = was;
        return k;
}

static void send_release(gpuipc_client *c, uint64_t lease)
{
        struct gpuipc__reply rp;
        struct gpuipc__req rq;

        gpuipc__request(c, &rq, &op_release, 1);
        proto_pack_ku64(&rq.o.pk, "lease", lease);
        if (call_quiet(c, &rq, &rp) == 0)
                gpuipc__reply_free(&rp);
}

/* Sends a kept frame again; a registration learns its new id.  A record
 * the daemon refuses (the name was taken meanwhile, say) is dropped. */
static int replay(gpuipc_client *c, struct gpuipc__rec *r, bool *ret_keep)
{
        struct gpuipc__reply rp = {};
        uint64_t id;
        int k;

        *ret_keep = false;
        if (r->needs_fds && r->nfds == 0)
                return 0;       /* not kept: cannot be sent again */
        k = gpuipc__send_wait(c, r->frame, r->len, r->seq, r->fds, r->nfds, &rp);
        if (k < 0)
                return k;       /* the connection: stop */
        k = gpuipc__reply_error(c, &rp);
        if (k < 0) {
                if (!r->watch)
                        note_lost(c, r, k);
                return 0;
        }
        if (!r->watch && proto_get_u64(rp.msg.root, "id", &id) == 0) {
                r->cur_id = id;
                if (id != r->user_id)
                        c->remapped = true;
        }
        gpuipc__reply_free(&rp);
        *ret_keep = true;
        return 0;
}

/* After hello: make the daemon's view of this session match ours. */
static int reconcile(gpuipc_client *c, const msgpack_object *root)
{
        const msgpack_object *regs = NULL, *leases = NULL;
        bool resumed = false;
        int k = 0;

        (void)proto_get_bool(root, "resumed", &resumed);
        (void)proto_get_array(root, "regs", &regs);
        (void)proto_get_array(root, "leases", &leases);
        if (resumed && leases) {
                /* A lease we do not know came from a lookup whose reply was
                 * lost with the connection: give it back. */
                for (uint32_t i = 0; i < leases->via.array.size; i++) {
                        uint64_t id;
                        bool known = false;
                        if (proto_obj_u64(&leases->via.array.ptr[i], &id) < 0)
                                continue;
                        for (size_t j = 0; j < c->n_leases && !known; j++)
                                known = c->leases[j].id == id;
                        if (!known)
                                send_release(c, id);
                }
        }
        /* Leases the daemon no longer has stay forgotten: the views keep
         * their mappings, their release is a no-op. */
        for (size_t j = 0; j < c->n_leases;)
                if (!resumed || (leases && !in_array(leases, c->leases[j].id)))
                        c->leases[j] = c->leases[--c->n_leases];
                else
                        j++;
        /* A daemon without the old state numbers leases afresh. */
        if (!resumed) {
                c->epoch++;
                c->leases_incomplete = false;
        }
        for (struct gpuipc__rec **pp = &c->recs; *pp && k == 0;) {
                struct gpuipc__rec *r = *pp;
                bool keep = true;
                if (r->watch || !resumed || (regs && !in_array(regs, r->cur_id)))
                        k = replay(c, r, &keep);
                if (keep) {
                        pp = &r->next;
                } else {
                        *pp = r->next;
                        rec_free(r);
                }
        }
        return k;
}

int gpuipc__reconnect(gpuipc_client *c)
{
        struct gpuipc__reply rp = {};
        int64_t deadline = mono_ms() + c->reconnect_ms;
        char msg[GPUIPC__ERRMSG_MAX];
        int fd, k;

        c->recovering = true;
        if (c->fd >= 0)
                close(c->fd);
        c->fd = -1;
        proto_fdq_clear(&c->fdq);
        proto_reader_free(&c->rd);
        k = proto_reader_init(&c->rd, c->max_frame);
        fd = k < 0 ? k : connect_again(c, deadline);
        if (fd < 0) {
                k = fd;
                goto out;
        }
        c->fd = fd;
        c->dead = 0;
        k = gpuipc__hello(c, &rp);
        if (k == 0) {
                k = reconcile(c, rp.msg.root);
                gpuipc__reply_free(&rp);
        }
        if (k == 0)
                c->reconnects++;
out:
        c->recovering = false;
        if (k < 0) {
                snprintf(msg, sizeof(msg), "the connection to gpuipcd was lost and could not be "
                         "re-established within %d ms (%s)", c->reconnect_ms,
                         gpuipc_strerror(k));
                gpuipc__client_kill(c, k == -ENOENT || k == -ECONNREFUSED ? -ECONNRESET : k);
                return gpuipc__fail(c, -ECONNRESET, "%s", msg);
        }
        return 0;
}

/* ---- the call in flight ------------------------------------------------ */

/* A reply made up for a call whose effect the reconnect already found. */
static int fake_reply(gpuipc_client *c, uint64_t seq, bool with_id, uint64_t id,
                      struct gpuipc__reply *ret)
{
        struct proto_out o;
        struct proto_map m;
        uint8_t *buf;
        size_t len;
        int k;

        proto_out_init(&o);
        proto_map_begin(&m, &o.pk);
        proto_map_ku64(&m, "seq", seq);
        proto_map_ku64(&m, "leases", 0);
        if (with_id)
                proto_map_ku64(&m, "id", id);
        proto_map_end(&m);
        k = proto_out_finish(&o, c->max_frame);
        buf = k < 0 ? NULL : proto_out_release(&o, &len);
        proto_out_free(&o);
        if (!buf)
                return -ENOMEM;
        memset(ret, 0, sizeof(*ret));
        ret->body = malloc(len - PROTO_HDR_LEN);
        if (!ret->body) {
                free(buf);
                return -ENOMEM;
        }
        memcpy(ret->body, buf + PROTO_HDR_LEN, len - PROTO_HDR_LEN);
        free(buf);
        k = proto_decode(ret->body, len - PROTO_HDR_LEN, &ret->msg, NULL);
        if (k < 0) {
                free(ret->body);
                ret->body = NULL;
        }
        return k;
}

static bool has_error(const struct gpuipc__reply *rp, const char *code)
{
        const msgpack_object *err;
        const char *s;
        size_t n;

        if (proto_get_map(rp->msg.root, "error", &err) < 0)
                return false;
        if (!code)
                return true;
        return proto_get_str(err, "code", &s, &n) == 0 && n == strlen(code) &&
               memcmp(s, code, n) == 0;
}

/* The id of name when this process's (resumed) connection owns it, or 0. */
static uint64_t owned_id(gpuipc_client *c, const char *name)
{
        const msgpack_object *reg, *owner;
        struct gpuipc__reply rp;
        struct gpuipc__req rq;
        uint64_t id = 0, pid = 0;
        bool connected = false;

        gpuipc__request(c, &rq, &op_stat, 1);
        proto_pack_kstr(&rq.o.pk, "name", name);
        if (call_quiet(c, &rq, &rp) == 0) {
                if (proto_get_map(rp.msg.root, "reg", &reg) == 0 &&
                    proto_get_map(reg, "owner", &owner) == 0 &&
                    proto_get_u64(owner, "pid", &pid) == 0 &&
                    proto_get_bool(owner, "connected", &connected) == 0 &&
                    pid == (uint64_t)getpid() && connected)
                        (void)proto_get_u64(reg, "id", &id);
                gpuipc__reply_free(&rp);
        }
        return id;
}

/* register after a reconnect: a resumed session may own the name already
 * (the first attempt took effect); then that registration is the answer. */
static int register_again(gpuipc_client *c, const struct gpuipc__req *rq, const uint8_t *buf,
                          size_t len, const int *fds, unsigned nfds, struct gpuipc__reply *ret)
{
        struct gpuipc__reply rp = {};
        uint64_t id = 0;
        int k;

        k = gpuipc__send_wait(c, buf, len, rq->seq, fds, nfds, &rp);
        if (k < 0)
                return k;
        if (has_error(&rp, "exists") && rq->name)
                id = owned_id(c, rq->name);
        if (id == 0) {
                gpuipc__reply_move(ret, &rp);
                return 0;
        }
        gpuipc__reply_free(&rp);
        return fake_reply(c, rq->seq, true, id, ret);
}

int gpuipc__recover(gpuipc_client *c, const struct gpuipc__req *rq, const uint8_t *buf,
                    size_t len, const int *fds, unsigned nfds, struct gpuipc__reply *ret_reply)
{
        struct gpuipc__reply rp = {};
        int k;

        k = gpuipc__reconnect(c);
        if (k < 0)
                return k;
        switch (rq->op->redo) {
        case GPUIPC__REDO_REGISTER:
                return register_again(c, rq, buf, len, fds, nfds, ret_reply);
        case GPUIPC__REDO_SEND:
                return gpuipc__send_wait(c, buf, len, rq->seq, fds, nfds, ret_reply);
        case GPUIPC__REDO_UNLESS_GONE:
                k = gpuipc__send_wait(c, buf, len, rq->seq, fds, nfds, &rp);
                if (k < 0)
                        return k;
                if (has_error(&rp, "not_found")) {
                        gpuipc__reply_free(&rp);
                        return fake_reply(c, rq->seq, false, 0, ret_reply);
                }
                gpuipc__reply_move(ret_reply, &rp);
                return 0;
        case GPUIPC__REDO_NEVER:
                break;
        }
        return gpuipc__fail(c, -ECONNRESET, "gpuipcd restarted during this %s; the connection "
                            "is back, but whether the request took effect is unknown",
                            rq->op->name);
}
