/* outq.c: a connection's output queue: frames queued as chunks, written
 * with sendmsg() (a frame's fds with its first byte), and the events the
 * daemon sends besides replies. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "log.h"
#include "outq.h"
#include "trace.h"

#define IOV_BATCH 64
#define CHUNK_SIZE 4096         /* the usual chunk, header included */
#define CHUNK_SPARE_MAX 64      /* usual chunks kept for reuse */
#define TRIM_MIN (UINT64_C(8) << 20) /* queued output worth giving back */

/* The poll callback is conn.c's, given at conn_new(): libuv keeps it in the
 * handle (uv_poll_t's poll_cb), so re-arming needs no call into conn.c. */
void conn_set_events(struct conn *c, int events)
{
        if (c->closed || c->events == events)
                return;
        if (uv_poll_start(&c->poll, events, c->poll.poll_cb) == 0)
                c->events = events;
}

/* Written chunks of the usual size wait here for the next replies, so that
 * a busy connection does not allocate for each.  The daemon has one loop
 * thread, and the list is bounded. */
static struct chunk *spare;
static unsigned n_spare;

static struct chunk *chunk_new(size_t len)
{
        size_t size = sizeof(struct chunk) + len;
        struct chunk *k;

        if (size <= CHUNK_SIZE && spare) {
                k = spare;
                spare = k->next;
                n_spare--;
        } else {
                if (size < CHUNK_SIZE)
                        size = CHUNK_SIZE;
                k = malloc(size);
                if (!k)
                        return NULL;
                k->cap = size - sizeof(struct chunk);
        }
        k->next = NULL;
        k->pin = NULL;
        k->nfds = 0;
        k->len = k->off = 0;
        return k;
}

static void chunk_free(struct daemon *d, struct chunk *k)
{
        if (k->pin)
                registry_unpin(d->reg, k->pin);
        if (k->cap == CHUNK_SIZE - sizeof(struct chunk) && n_spare < CHUNK_SPARE_MAX) {
                k->next = spare;
                spare = k;
                n_spare++;
                return;
        }
        free(k);
}

/* Queued output that piled up (watchers or clients that do not read) is
 * freed chunk by chunk, between the registry's allocations, so glibc keeps
 * the pages: once most of a large pile is gone, the spare chunks and the
 * free heap pages go back to the kernel. */
void outq_trim(struct daemon *d)
{
        if (d->out_peak < TRIM_MIN || d->out_total > d->out_peak / 4)
                return;
        while (spare) {
                struct chunk *k = spare;
                spare = k->next;
                free(k);
        }
        n_spare = 0;
        (void)malloc_trim(0);
        d->out_peak = d->out_total;
}

void outq_free(struct conn *c)
{
        struct daemon *d = c->d;

        while (c->out_head) {
                struct chunk *k = c->out_head;
                c->out_head = k->next;
                chunk_free(d, k);
        }
        c->out_tail = NULL;
        d->out_total -= c->out_bytes;
        c->out_bytes = 0;
        outq_trim(d);
}

void conn_doom(struct conn *c)
{
        if (c->closed || c->doomed)
                return;
        c->doomed = true;
        /* Outside its own read callback, a writable wakeup gets us back to a
         * point where closing is safe. */
        if (!c->busy)
                conn_set_events(c, c->events | UV_WRITABLE);
}

int conn_send(struct conn *c, struct proto_out *o, struct reg *pin)
{
        return conn_send_fd(c, o, pin, pin ? pin->fd : -1);
}

/* The peer would wait forever for a reply that was dropped, so a connection
 * that cannot queue one ends instead. */
static int send_failed(struct conn *c, int err)
{
        log_warn("connection %" PRIu64 " (pid %u): cannot queue a frame: %s; closing it",
                 c->id, c->party.pid, strerror(-err));
        c->discard = true;
        conn_doom(c);
        return err;
}

int conn_send_fd(struct conn *c, struct proto_out *o, struct reg *pin, int fd)
{
        return conn_send_fds(c, o, pin, &fd, pin ? 1 : 0);
}

int conn_send_fds(struct conn *c, struct proto_out *o, struct reg *pin, const int *fds,
                  unsigned nfds)
{
        struct chunk *k;
        int r;

        if (c->closed || c->doomed)
                return 0;       /* nobody will read it */
        r = proto_out_finish(o, c->d->cfg.max_frame);
        if (r < 0)
                return r;
        if (c->out_bytes + o->sb.size > c->d->cfg.max_output) {
                log_info("connection %" PRIu64 " (pid %u): over %" PRIu64
                         " unsent reply bytes, closing it", c->id, c->party.pid,
                         c->d->cfg.max_output);
                c->discard = true;
                conn_doom(c);
                return -ENOBUFS;
        }
        /* Copied: o's buffer goes back to proto_out for the next frame. */
        k = c->out_tail;
        /* A frame with an fd gets a chunk of its own, and nothing is added
         * to it: its fd goes with its bytes alone (outq_write). */
        if (pin || !k || k->pin || k->cap - k->len < o->sb.size) {
                k = chunk_new(o->sb.size);
                if (!k)
                        return send_failed(c, -ENOMEM);
                if (pin) {
                        /* The pin keeps the registration, and so its fds, open. */
                        assert(nfds >= 1 && nfds <= PROTO_MAX_FDS);
                        registry_pin(pin);
                        k->pin = pin;
                        k->nfds = nfds;
                        for (unsigned i = 0; i < nfds; i++) {
                                assert(fds[i] >= 0);
                                k->fds[i] = fds[i];
                        }
                }
                if (c->out_tail)
                        c->out_tail->next = k;
                else
                        c->out_head = k;
                c->out_tail = k;
        }
        TRACE("d.queued", c->id);
        memcpy(k->buf + k->len, o->sb.data, o->sb.size);
        k->len += o->sb.size;
        c->out_bytes += o->sb.size;
        c->d->out_total += o->sb.size;
        if (c->d->out_total > c->d->out_peak)
                c->d->out_peak = c->d->out_total;
        /* Our own read callback flushes once its batch is done.  Another
         * connection's (a waiting consumer woken by a register) is flushed
         * at the end of the read callback that queued it, before that
         * one's own replies: a handoff waits for the consumer's answer,
         * and a writable wakeup would cost another turn of the loop.
         * Outside read callbacks (timers), it waits for the socket to be
         * writable. */
        if (c->busy)
                return 0;
        if (!c->d->in_read) {
                conn_set_events(c, c->events | UV_WRITABLE);
        } else if (!c->flush_queued) {
                c->flush_queued = true;
                c->flush_next = c->d->to_flush;
                c->d->to_flush = c;
        }
        return 0;
}

void conn_pack_error_event(struct proto_out *o, int err, const char *message, bool fatal)
{
        proto_out_init(o);
        msgpack_pack_map(&o->pk, 4);
        proto_pack_kstr(&o->pk, "event", "error");
        proto_pack_kstr(&o->pk, "code", proto_code_from_errno(err));
        proto_pack_kstr(&o->pk, "message", message);
        proto_pack_kbool(&o->pk, "fatal", fatal);
}

void conn_pack_reg_event(struct proto_out *o, struct proto_map *m, const char *event,
                         uint64_t id, const char *name, size_t name_len)
{
        proto_out_init(o);
        proto_map_begin(m, &o->pk);
        proto_map_kstr(m, "event", event);
        proto_map_ku64(m, "id", id);
        proto_map_kstrn(m, "name", name, name_len);
}

void conn_send_error_event(struct conn *c, int err, const char *message, bool fatal)
{
        struct proto_out o;

        conn_pack_error_event(&o, err, message, fatal);
        (void)conn_send(c, &o, NULL);
        proto_out_free(&o);
        if (fatal)
                conn_doom(c);
}

void conn_send_revoked(const struct reg *r, const struct lease *l, const char *reason,
                       bool with_lease)
{
        struct conn *h;
        struct proto_out o;
        struct proto_map m;

        if (l->holder->detached)
                return;
        h = conn_from_party(l->holder);
        if (h->closed)
                return;
        conn_pack_reg_event(&o, &m, "revoked", r->id, r->name, r->name_len);
        if (with_lease)
                proto_map_ku64(&m, "lease", l->id);
        proto_map_kstr(&m, "reason", reason);
        proto_map_end(&m);
        (void)conn_send(h, &o, NULL);
        proto_out_free(&o);
}

/* Writes as much of the queue as the socket takes.  Returns 0 when it is
 * empty, -EAGAIN when bytes are left, or another negative errno. */
int outq_write(struct conn *c)
{
        while (c->out_head) {
                struct iovec iov[IOV_BATCH];
                struct chunk *k = c->out_head;
                const int *fds = NULL;
                unsigned nfds = 0;
                int n = 0;
                ssize_t w;

                /* A chunk with fds is a sendmsg() of its own, so the fds go
                 * with its first byte and no other frame's bytes go with
                 * them: the reader gives the fds to the frame its recvmsg()
                 * ended in (proto.h, proto_fdq). */
                if (k->pin && k->off == 0) {
                        fds = k->fds;
                        nfds = k->nfds;
                }
                for (; k && n < IOV_BATCH; k = k->next) {
                        if (n > 0 && k->pin)
                                break;
                        iov[n].iov_base = k->buf + k->off;
                        iov[n].iov_len = k->len - k->off;
                        n++;
                        if (nfds > 0)
                                break;
                }
                TRACE("d.write", c->id);
                w = proto_send(c->fd, iov, n, fds, nfds);
                TRACE("d.written", c->id);
                if (w < 0)
                        return (int)w;
                c->out_bytes -= (uint64_t)w;
                c->d->out_total -= (uint64_t)w;
                while (w > 0) {
                        k = c->out_head;
                        size_t left = k->len - k->off;
                        if ((size_t)w < left) {
                                k->off += (size_t)w;
                                /* The fd went with the first byte. */
                                if (k->pin) {
                                        registry_unpin(c->d->reg, k->pin);
                                        k->pin = NULL;
                                }
                                break;
                        }
                        w -= (ssize_t)left;
                        c->out_head = k->next;
                        if (!c->out_head)
                                c->out_tail = NULL;
                        chunk_free(c->d, k);
                }
        }
        return 0;
}
