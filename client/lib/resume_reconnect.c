/* resume_reconnect.c: reconnecting after the daemon restarted.
 *
 * When the connection drops because the daemon went away, the next call
 * (or the call in flight) reconnects to the same path and sends hello with
 * the session token of the old connection.  A daemon that kept its state
 * (the fd store) hands the session back: registrations, leases and ids are
 * as they were.  One that did not gets the registrations again from the
 * frames resume_track.c kept.  The call in flight is then completed as its
 * kind says (enum gpuipc__redo), or fails. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "resume.h"

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
                        gpuipc__lost_note(c, r, k);
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
                        gpuipc__rec_free(r);
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
