/* conn.c: client connections: accept, the hello deadline, reading and
 * cutting frames, flushing, closing and shutdown. */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "busypoll.h"
#include "closer.h"
#include "conn.h"
#include "holds.h"
#include "ledger.h"
#include "list.h"
#include "restart_persist.h"
#include "session.h"
#include "log.h"
#include "outq.h"
#include "quota.h"
#include "trace.h"
#include "waits.h"
#include "watch.h"

#define READS_PER_WAKEUP 16     /* fairness: then let other connections run */
#define SHUTDOWN_GRACE_MS 1000  /* for peers to take their last frames */

static void on_poll(uv_poll_t *h, int status, int events);
static void on_closed(uv_handle_t *h);

/* Backpressure: a peer that does not read its replies is not read either,
 * once more than two of the largest replies wait.  max_output stays the
 * hard cap, for replies that others' actions queue (events, wakeups). */
static bool backlogged(const struct conn *c)
{
        return c->out_bytes > 2 * (uint64_t)c->d->cfg.max_frame + PROTO_HDR_LEN;
}

/* What to poll for now: reads unless doomed or backlogged; writes while
 * bytes wait, while doomed (closing happens in the writable wakeup), or to
 * come back for frames left buffered by backpressure. */
static int wanted_events(const struct conn *c)
{
        int ev = 0;

        if (!c->doomed && !backlogged(c))
                ev |= UV_READABLE;
        if (c->out_head || c->doomed || c->paused)
                ev |= UV_WRITABLE;
        return ev;
}

/* The inode of /proc/PID/ns/NAME (which namespace the peer is in), or 0. */
static uint64_t peer_ns(uint32_t pid, const char *name)
{
        char path[64];
        struct stat st;

        if (pid == 0)
                return 0;
        snprintf(path, sizeof(path), "/proc/%u/ns/%s", pid, name);
        return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void hello_timer_arm(struct daemon *d);

static void on_hello_timer_closed(uv_handle_t *h)
{
        free(h);
}

/* Closes every connection whose hello deadline has passed. */
static void on_hello_timer(uv_timer_t *t)
{
        struct daemon *d = t->data;
        uint64_t now = uv_now(d->loop);
        char msg[96];

        snprintf(msg, sizeof(msg), "no hello within %u ms of connecting (hello-timeout-ms)",
                 d->cfg.hello_timeout_ms);
        while (d->prehello && d->prehello->hello_deadline <= now) {
                struct conn *c = d->prehello;

                conn_hello_done(c);     /* unlinks c, may close the timer */
                log_info("connection %" PRIu64 " (pid %u uid %u): %s; closing it", c->id,
                         c->party.pid, c->party.uid, msg);
                conn_send_error_event(c, -ETIMEDOUT, msg, true);
                conn_flush(c);          /* may close c */
        }
        if (d->hello_timer)
                hello_timer_arm(d);
}

/* Points the timer at the oldest deadline, or closes it when no connection
 * waits for its hello (so that an idle loop has no timer to run). */
static void hello_timer_arm(struct daemon *d)
{
        uint64_t now = uv_now(d->loop);

        if (!d->prehello) {
                if (d->hello_timer) {
                        uv_close((uv_handle_t *)d->hello_timer, on_hello_timer_closed);
                        d->hello_timer = NULL;
                }
                return;
        }
        if (!d->hello_timer) {
                uv_timer_t *t = malloc(sizeof(*t));

                if (!t || uv_timer_init(d->loop, t) < 0) {
                        free(t);        /* best effort: hello comes or the peer goes */
                        return;
                }
                t->data = d;
                d->hello_timer = t;
        }
        (void)uv_timer_start(d->hello_timer, on_hello_timer,
                             d->prehello->hello_deadline > now
                                     ? d->prehello->hello_deadline - now : 0, 0);
}

/* Deadlines are accept time plus one timeout, so the list stays in
 * deadline order by appending. */
static void hello_wait_add(struct conn *c)
{
        struct daemon *d = c->d;
        bool first = !d->prehello;

        c->hello_deadline = uv_now(d->loop) + d->cfg.hello_timeout_ms;
        LIST_APPEND(d->prehello, d->prehello_tail, c, hprev, hnext);
        if (first)
                hello_timer_arm(d);
}

void conn_hello_done(struct conn *c)
{
        struct daemon *d = c->d;

        if (!c->hello_deadline)
                return;
        c->hello_deadline = 0;
        LIST_REMOVE_TAIL(d->prehello, d->prehello_tail, c, hprev, hnext);
        c->hprev = c->hnext = NULL;
        if (!d->prehello)
                hello_timer_arm(d);     /* closes it */
}

int conn_new(struct daemon *d, int fd, struct conn **ret)
{
        struct ucred cred = { .pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1 };
        socklen_t len = sizeof(cred);
        struct conn *c;
        int r;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return -errno;
        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        r = proto_reader_init(&c->rd, d->cfg.max_frame);
        if (r < 0) {
                free(c);
                return r;
        }
        proto_fdq_init(&c->fdq);
        reg_party_init(&c->party, (uint32_t)cred.pid, cred.uid, cred.gid);
        /* Read at accept, while the pid is the connecting process's: legacy
         * CUDA IPC cannot cross PID namespaces (ops_lookup.c). */
        c->party.pidns = peer_ns(c->party.pid, "pid");
        c->party.ipcns = peer_ns(c->party.pid, "ipc");
        c->d = d;
        c->fd = fd;
        c->id = ++d->next_conn_id;
        r = uv_poll_init(d->loop, &c->poll, fd);
        if (r < 0) {
                proto_reader_free(&c->rd);
                free(c);
                return r;
        }
        c->poll.data = c;
        r = uv_poll_start(&c->poll, UV_READABLE, on_poll);
        if (r < 0) {
                /* The handle exists now, so it must go through uv_close(). */
                c->closed = true;
                c->fd = -1;
                proto_reader_free(&c->rd);
                uv_close((uv_handle_t *)&c->poll, on_closed);
                return r;
        }
        c->events = UV_READABLE;
        /* Who the peer is, as of connect(2) and this accept: what a process
         * does with the socket later (fork, exec) does not change it. */
        c->n_groups = access_read_groups(fd, c->groups);
        if (persist_enabled())
                c->party.start_time = session_start_time(c->party.pid);
        LIST_PREPEND(d->conns, c, prev, next);
        d->n_conns++;
        quota_conn(d, c->party.uid, 1);
        ledger_conn_accepted(c);
        hello_wait_add(c);
        log_debug("connection %" PRIu64 " opened: pid %u uid %u gid %u", c->id,
                  c->party.pid, c->party.uid, c->party.gid);
        *ret = c;
        return 0;
}

static void grace_done(struct daemon *d);

static void on_closed(uv_handle_t *h)
{
        struct conn *c = h->data;

        if (c->fd >= 0)
                close(c->fd);
        free(c);
}

void conn_close(struct conn *c)
{
        struct daemon *d = c->d;

        if (c->closed)
                return;
        c->closed = true;
        log_debug("connection %" PRIu64 " closed: pid %u uid %u", c->id, c->party.pid,
                  c->party.uid);
        LIST_REMOVE(d->conns, c, prev, next);
        d->n_conns--;
        quota_conn(d, c->party.uid, -1);
        conn_hello_done(c);

        watch_conn_closed(c);
        ledger_conn_closed(c);
        waits_cancel_conn(c);
        holds_conn_closed(c);
        registry_party_gone(d->reg, &c->party);
        if (c->hello)
                persist_session_end(d, &c->party);
        proto_fdq_clear(&c->fdq);
        proto_reader_free(&c->rd);
        outq_free(c);
        uv_close((uv_handle_t *)&c->poll, on_closed);
        if (d->grace && !d->conns)
                grace_done(d);
}

void conn_flush(struct conn *c)
{
        int r;

        if (c->closed)
                return;
        if (c->doomed && c->discard) {
                conn_close(c);
                return;
        }
        r = outq_write(c);
        if (r < 0 && r != -EAGAIN) {
                log_debug("connection %" PRIu64 " (pid %u): write failed: %s", c->id,
                          c->party.pid, strerror(-r));
                conn_close(c);
                return;
        }
        if (c->doomed && !c->out_head) {
                conn_close(c);
                return;
        }
        if (!c->out_head)
                outq_trim(c->d);
        conn_set_events(c, wanted_events(c));
}

static void fatal(struct conn *c, int err, const char *message)
{
        log_info("connection %" PRIu64 " (pid %u): %s; disconnecting", c->id, c->party.pid,
                 message);
        conn_send_error_event(c, err, message, true);
}

/* Dispatches every complete frame.  Stops when the connection is doomed,
 * or backlogged: then the rest waits in the reader (paused) until a flush
 * has drained the output. */
static void process_frames(struct conn *c)
{
        c->paused = false;
        while (!c->doomed && !c->closed) {
                const uint8_t *body;
                uint32_t len;
                uint64_t off;
                int r;

                if (backlogged(c)) {
                        c->paused = true;
                        return;
                }
                r = proto_reader_next(&c->rd, &body, &len, &off);

                if (r == 0)
                        return;
                if (r < 0) {
                        fatal(c, -EMSGSIZE, "frame length is 0 or above max_frame");
                        return;
                }
                proto_fdq_drop_stale(&c->fdq, off);
                c->d->dispatch(c, body, len, off);
                /* fds that came with it and that it did not take */
                proto_fdq_drop_stale(&c->fdq, off + PROTO_HDR_LEN + len);
        }
}

/* Logs how close the daemon is to its fd limit: a full fd table makes the
 * kernel drop the fds of a message (MSG_CTRUNC) as too many fds would. */
static void log_fd_use(struct conn *c)
{
        struct rlimit rl = { 0 };
        struct dirent *e;
        long n = 0;
        DIR *dir;

        (void)getrlimit(RLIMIT_NOFILE, &rl);
        dir = opendir("/proc/self/fd");
        if (!dir) {
                log_warn("connection %" PRIu64 " (pid %u): fds of a message were dropped; "
                         "cannot count open fds (%m), limit %llu", c->id, c->party.pid,
                         (unsigned long long)rl.rlim_cur);
                return;
        }
        while ((e = readdir(dir)))
                n += e->d_name[0] != '.';
        closedir(dir);
        log_warn("connection %" PRIu64 " (pid %u): fds of a message were dropped: more than "
                 "%u in one message, or the daemon is out of fds (%ld open, limit %llu)",
                 c->id, c->party.pid, PROTO_MAX_PENDING_FDS, n - 1,
                 (unsigned long long)rl.rlim_cur);
}

static void read_some(struct conn *c)
{
        for (int i = 0; i < READS_PER_WAKEUP && !c->doomed && !c->closed && !c->paused &&
             !backlogged(c); i++) {
                int fds[PROTO_MAX_PENDING_FDS];
                unsigned nfds = 0;
                uint8_t *p;
                size_t room;
                ssize_t n;
                int r = proto_reader_space(&c->rd, &p, &room);

                /* The reader is never full here: complete frames are
                 * consumed after each read, and reading stops while they
                 * are paused. */
                assert(r != -ENOBUFS);
                if (r < 0) {
                        fatal(c, -ENOMEM, "out of memory buffering the frame");
                        return;
                }
                n = proto_recv(c->fd, p, room, fds, PROTO_MAX_PENDING_FDS, &nfds);
                TRACE("d.recvd", n);
                if (n == -EAGAIN)
                        return;
                if (n == -EMSGSIZE) {
                        log_fd_use(c);
                        fatal(c, -ENOBUFS, "too many fds in one message, or the daemon is "
                              "out of file descriptors");
                        return;
                }
                if (n < 0) {
                        log_debug("connection %" PRIu64 " (pid %u): read failed: %s", c->id,
                                  c->party.pid, strerror((int)-n));
                        conn_close(c);
                        return;
                }
                if (n == 0) {
                        /* A half-close: the peer may still read the replies
                         * to what it sent, so flush them before closing. */
                        for (unsigned k = 0; k < nfds; k++)
                                closer_close(fds[k]);
                        log_debug("connection %" PRIu64 " (pid %u): end of input", c->id,
                                  c->party.pid);
                        conn_doom(c);
                        return;
                }
                proto_reader_commit(&c->rd, (size_t)n);
                for (unsigned k = 0; k < nfds; k++) {
                        r = proto_fdq_push(&c->fdq, fds[k], proto_reader_received(&c->rd));
                        if (r < 0) {
                                for (k++; k < nfds; k++)
                                        closer_close(fds[k]);
                                fatal(c, -ENOBUFS, "too many unclaimed fds");
                                return;
                        }
                }
                process_frames(c);
        }
}

/* The other connections that c's frames queued output for (outq.c). */
static void flush_others(struct daemon *d)
{
        struct conn *o;

        d->in_read = false;
        while ((o = d->to_flush)) {
                d->to_flush = o->flush_next;
                o->flush_queued = false;
                conn_flush(o);
        }
}

static void on_poll(uv_poll_t *h, int status, int events)
{
        struct conn *c = h->data;

        if (c->closed)
                return;
        if (status < 0) {
                log_debug("connection %" PRIu64 " (pid %u): poll error: %s", c->id,
                          c->party.pid, uv_strerror(status));
                conn_close(c);
                return;
        }
        TRACE("d.poll", c->id);
        c->busy = true;
        c->d->in_read = true;
        busypoll_kick();
        if (c->paused)
                process_frames(c);
        if ((events & UV_READABLE) && !c->doomed)
                read_some(c);
        flush_others(c->d);
        if (c->closed)
                return;
        c->busy = false;
        conn_flush(c);
        TRACE("d.poll_done", c->id);
}

/* Shutdown: what did not flush within the grace period is dropped. */
static void on_grace_closed(uv_handle_t *h)
{
        free(h);
}

static void grace_done(struct daemon *d)
{
        uv_timer_t *t = d->grace;

        d->grace = NULL;
        uv_close((uv_handle_t *)t, on_grace_closed);
}

static void on_grace(uv_timer_t *t)
{
        struct daemon *d = t->data;

        if (d->conns)
                log_info("closing %u connections that did not take their last frames",
                         d->n_conns);
        grace_done(d);
        while (d->conns)
                conn_close(d->conns);
}

void conns_shutdown(struct daemon *d)
{
        struct conn *c, *next;
        uv_timer_t *t;

        for (c = d->conns; c; c = next) {
                next = c->next;
                waits_shutdown_conn(c);
                conn_send_error_event(c, -ESHUTDOWN, "the daemon is shutting down", true);
                conn_flush(c);          /* non-blocking; may close c */
        }
        if (!d->conns || d->grace)
                return;
        t = malloc(sizeof(*t));
        if (!t || uv_timer_init(d->loop, t) < 0) {
                free(t);
                while (d->conns)
                        conn_close(d->conns);
                return;
        }
        t->data = d;
        d->grace = t;
        (void)uv_timer_start(t, on_grace, SHUTDOWN_GRACE_MS, 0);
}
