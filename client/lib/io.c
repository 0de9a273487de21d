/* io.c: requests out, frames in.
 *
 * Calls are synchronous: a request is sent, then frames are read until the
 * reply with its seq arrives.  Events that arrive meanwhile are handed to
 * events.c on the way, and frames after the reply stay buffered in the
 * reader for the next call.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "trace.h"

/* ---- frames ------------------------------------------------------------ */

void gpuipc__reply_free(struct gpuipc__reply *r)
{
        if (!r)
                return;
        proto_msg_free(&r->msg);
        free(r->body);
        r->body = NULL;
        for (unsigned i = 0; i < r->nfds; i++)
                close(r->fds[i]);
        r->nfds = 0;
}

int gpuipc__reply_take_fd(struct gpuipc__reply *r, int *ret_fd)
{
        if (r->nfds == 0)
                return -EBADMSG;
        *ret_fd = r->fds[0];
        for (unsigned i = 1; i < r->nfds; i++)
                close(r->fds[i]);
        r->nfds = 0;
        return 0;
}

void gpuipc__reply_move(struct gpuipc__reply *to, struct gpuipc__reply *from)
{
        *to = *from;
        to->msg.root = &to->msg.up.data;
        memset(from, 0, sizeof(*from));
}

/* Copies a daemon message into the error text. */
static void set_errmsg(gpuipc_client *c, const msgpack_object *map)
{
        const char *s;
        size_t n;

        if (proto_get_str(map, "message", &s, &n) < 0 || n == 0)
                return;
        if (n >= sizeof(c->errmsg))
                n = sizeof(c->errmsg) - 1;
        memcpy(c->errmsg, s, n);
        c->errmsg[n] = '\0';
}

/* The errno of an error map's code (-EIO for an unusable map). */
static int error_code(const msgpack_object *err)
{
        const char *code;
        size_t n;

        if (proto_get_str(err, "code", &code, &n) < 0)
                return -EIO;
        return proto_errno_from_code(code, n);
}

/* Handles an event.  Returns a negative errno when it answers the request
 * in flight (an `error` event), else 0. */
static int handle_event(gpuipc_client *c, const msgpack_object *root, bool in_call)
{
        const msgpack_object *ev = proto_get(root, "event");
        bool fatal = false;
        int err;

        if (!proto_obj_str_eq(ev, "error")) {
                gpuipc__event_take(c, root, ev);
                return 0;
        }
        err = error_code(root);
        set_errmsg(c, root);
        (void)proto_get_bool(root, "fatal", &fatal);
        if (fatal)
                return gpuipc__client_kill(c, err);
        /* A frame the daemon could not pair with a seq can only be the one
         * request we have in flight: failing the call beats waiting forever. */
        return in_call ? err : 0;
}

/* Handles one frame.  Returns 1 when it is the reply with seq `want` (moved
 * into *reply), 0 when it was handled otherwise, or a negative errno. */
static int handle_frame(gpuipc_client *c, const uint8_t *body, uint32_t len, uint64_t off,
                        bool in_call, uint64_t want, struct gpuipc__reply *reply)
{
        struct gpuipc__reply rp = {};
        uint64_t seq, nfds = 0, end = off + PROTO_HDR_LEN + len;
        int r;

        rp.body = malloc(len);
        if (!rp.body)
                return -ENOMEM;
        memcpy(rp.body, body, len);
        r = proto_decode(rp.body, len, &rp.msg, NULL);
        if (r < 0)
                goto fatal;
        r = proto_get_u64(rp.msg.root, "seq", &seq);
        if (r == -ENOENT) {
                proto_fdq_drop_stale(&c->fdq, off);
                r = handle_event(c, rp.msg.root, in_call);
                gpuipc__reply_free(&rp);
                return r;
        }
        if (r < 0)
                goto fatal;
        r = proto_get_u64(rp.msg.root, "fds", &nfds);
        if ((r < 0 && r != -ENOENT) || nfds > PROTO_MAX_FDS) {
                r = -EBADMSG;
                goto fatal;
        }
        if (!in_call || seq != want) {
                /* A reply to nothing we wait for: drop it, and its fds. */
                if (proto_fdq_take(&c->fdq, off, end, (unsigned)nfds, rp.fds) == 0)
                        rp.nfds = (unsigned)nfds;
                gpuipc__reply_free(&rp);
                return 0;
        }
        r = proto_fdq_take(&c->fdq, off, end, (unsigned)nfds, rp.fds);
        if (r < 0) {
                gpuipc__reply_free(&rp);
                return -EBADMSG;        /* declared fds did not arrive */
        }
        rp.nfds = (unsigned)nfds;
        gpuipc__reply_move(reply, &rp);
        return 1;

fatal:
        /* The daemon sent something we cannot understand; nothing later on
         * the stream can be trusted to pair with our requests. */
        gpuipc__reply_free(&rp);
        return gpuipc__client_kill(c, r == -ENOMEM ? r : -EBADMSG);
}

static int64_t mono_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* poll() for input, first spinning up to c->busy_poll_us ($GPUIPC_BUSY_POLL_US)
 * with zero timeouts so that a reply that comes soon is read without this
 * thread going to sleep and its CPU waking again. */
static int wait_readable(gpuipc_client *c, struct pollfd *p, int timeout_ms)
{
        int64_t start, spin;
        int r;

        if (c->busy_poll_us == 0 || timeout_ms == 0)
                return poll(p, 1, timeout_ms);
        spin = c->busy_poll_us;
        if (timeout_ms > 0 && (int64_t)timeout_ms * 1000 < spin)
                spin = (int64_t)timeout_ms * 1000;
        start = mono_us();
        do {
                r = poll(p, 1, 0);
                if (r != 0)
                        return r;
        } while (mono_us() - start < spin);
        if (timeout_ms > 0) {
                timeout_ms -= (int)(spin / 1000);
                if (timeout_ms <= 0)
                        return 0;
        }
        return poll(p, 1, timeout_ms);
}

/* Receives once (waiting up to timeout_ms, < 0 without limit).  Returns 1
 * when bytes arrived, 0 on timeout.  With no limit and no spinning, the
 * wait is the blocking recvmsg() itself (the socket is blocking): one
 * system call to wake in instead of poll() and then recvmsg(). */
static int client_recv(gpuipc_client *c, int timeout_ms)
{
        struct pollfd p = { .fd = c->fd, .events = POLLIN };
        bool blocking = timeout_ms < 0 && c->busy_poll_us == 0;
        int fds[PROTO_MAX_PENDING_FDS];
        unsigned nfds = 0;
        uint8_t *space;
        size_t room;
        ssize_t n;
        int r;

        if (!blocking) {
                r = wait_readable(c, &p, timeout_ms);
                TRACE("c.woke", r);
                if (r < 0)
                        return errno == EINTR ? 1 : -errno;
                if (r == 0)
                        return 0;
        }
        r = proto_reader_space(&c->rd, &space, &room);
        if (r < 0)
                return r;
        n = proto_recv(c->fd, space, room, fds, PROTO_MAX_PENDING_FDS, &nfds);
        if (blocking)
                TRACE("c.woke", n);     /* woken and read: c.recv follows at once */
        if (n == -EAGAIN)
                return 1;
        if (n == 0 || n == -ECONNRESET || n == -EPIPE)
                return gpuipc__client_kill(c, -ECONNRESET);
        if (n < 0)
                return gpuipc__client_kill(c, (int)n);
        proto_reader_commit(&c->rd, (size_t)n);
        TRACE("c.recv", n);
        for (unsigned i = 0; i < nfds; i++)
                if (proto_fdq_push(&c->fdq, fds[i], proto_reader_received(&c->rd)) < 0)
                        return gpuipc__client_kill(c, -EMFILE);
        return 1;
}

/* Handles the buffered frames; stops at the wanted reply (returning 1).
 * *ret_any (when not NULL) says whether it handled any. */
static int client_dispatch(gpuipc_client *c, bool in_call, uint64_t want,
                           struct gpuipc__reply *reply, bool *ret_any)
{
        for (;;) {
                const uint8_t *body;
                uint32_t len;
                uint64_t off;
                int r;

                r = proto_reader_next(&c->rd, &body, &len, &off);
                if (r == -EMSGSIZE)
                        return gpuipc__client_kill(c, -EMSGSIZE);
                if (r <= 0)
                        return r;
                r = handle_frame(c, body, len, off, in_call, want, reply);
                if (ret_any)
                        *ret_any = true;
                /* fds that came with it and that it did not take */
                proto_fdq_drop_stale(&c->fdq, off + PROTO_HDR_LEN + len);
                if (r != 0)
                        return r;
        }
}

int gpuipc__pump(gpuipc_client *c, int timeout_ms)
{
        bool any = false;
        int r;

        if (!gpuipc__client_usable(c)) {
                if (!gpuipc__may_reconnect(c, c->dead))
                        return -ENOTCONN;
                return gpuipc__reconnect(c);
        }
        /* Frames read along with an earlier reply (a released event that
         * came in the same recv) are "something arrived": the caller looks
         * again before anyone waits for more, which may never come. */
        r = client_dispatch(c, false, 0, NULL, &any);
        if (r >= 0 && !any)
                r = client_recv(c, timeout_ms);
        if (r >= 0 && !any)
                r = client_dispatch(c, false, 0, NULL, NULL);
        /* The daemon restarted: what we wait for may come on the new
         * connection (a released event, say). */
        if (r < 0 && gpuipc__may_reconnect(c, r))
                return gpuipc__reconnect(c);
        return r;
}

/* ---- sending ----------------------------------------------------------- */

int gpuipc__send(gpuipc_client *c, const uint8_t *buf, size_t len, const int *fds,
                 unsigned nfds)
{
        size_t done = 0;

        TRACE("c.send", len);
        /* The fds ride on the first sendmsg(), which carries the first byte. */
        while (done < len) {
                struct iovec iov = { .iov_base = (void *)(buf + done), .iov_len = len - done };
                ssize_t n = proto_send(c->fd, &iov, 1, done == 0 ? fds : NULL,
                                       done == 0 ? nfds : 0);
                if (n == -EPIPE || n == -ECONNRESET)
                        return gpuipc__client_kill(c, -ECONNRESET);
                if (n < 0)
                        return gpuipc__client_kill(c, (int)n);
                done += (size_t)n;
        }
        TRACE("c.sent", len);
        return 0;
}

/* Reads until the reply with seq arrives. */
static int wait_reply(gpuipc_client *c, uint64_t seq, struct gpuipc__reply *rp)
{
        int r;

        for (;;) {
                r = client_dispatch(c, true, seq, rp, NULL);
                if (r != 0)
                        return r < 0 ? r : 0;
                r = client_recv(c, -1);
                if (r < 0)
                        return r;
        }
}

int gpuipc__send_wait(gpuipc_client *c, const uint8_t *buf, size_t len, uint64_t seq,
                      const int *fds, unsigned nfds, struct gpuipc__reply *ret_reply)
{
        int r;

        if (!gpuipc__client_usable(c))
                return c->dead ? c->dead : -ENOTCONN;
        r = gpuipc__send(c, buf, len, fds, nfds);
        if (r < 0)
                return r;
        return wait_reply(c, seq, ret_reply);
}

int gpuipc__reply_error(gpuipc_client *c, struct gpuipc__reply *rp)
{
        const msgpack_object *err;
        int r;

        if (proto_get_map(rp->msg.root, "error", &err) < 0)
                return 0;
        r = error_code(err);
        set_errmsg(c, err);
        gpuipc__reply_free(rp);
        return r;
}
