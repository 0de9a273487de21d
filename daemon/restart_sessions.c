/* restart_sessions.c: the end of detached sessions: when their process exits
 * (a pidfd), after resume-grace-ms when it cannot be watched, or at once
 * when it is gone already. */
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "restart_persist.h"
#include "session.h"

static uv_timer_t grace_timer;
static bool grace_on;

/* Shutdown: the session itself stays, for session_done(). */
static void on_poll_closed_keep(uv_handle_t *h)
{
        struct dsession *s = container_of((uv_poll_t *)h, struct dsession, poll);

        close(s->pidfd);
        s->pidfd = -1;
}

void session_detached_end(struct daemon *d, struct reg_party *p, bool unresumed)
{
        struct dsession *s = container_of(p, struct dsession, party);

        if (unresumed)
                log_info("session of pid %u (uid %u) ended without resuming: %u registrations, "
                 "%u leases", p->pid, p->uid, p->n_live, p->n_leases);
        registry_party_gone(d->reg, p);
        persist_session_end(d, p);
        session_free_detached(d, s);
}

static void on_pid_exit(uv_poll_t *h, int status, int events)
{
        struct dsession *s = h->data;

        (void)status;
        (void)events;
        session_detached_end(s->d, &s->party, true);
}

static void on_grace(uv_timer_t *t)
{
        struct daemon *d = t->data;
        struct hmap_node *n, *next;

        /* Ending a session unlinks only that one. */
        hmap_for_each_safe(n, next, &d->detached) {
                struct dsession *s = container_of(n, struct dsession, node);
                if (s->timed)
                        session_detached_end(d, &s->party, true);
        }
        uv_close((uv_handle_t *)t, NULL);
        grace_on = false;
}

/* Watches s's pid: 1 when watched, 0 when its process is gone, -errno when
 * it cannot be watched. */
static int watch_pid(struct daemon *d, struct dsession *s)
{
        int fd, r;

        if (s->party.pid == 0)
                return -ESRCH;  /* another PID namespace: no pid to watch */
        fd = (int)syscall(SYS_pidfd_open, (pid_t)s->party.pid, 0);
        if (fd < 0)
                return errno == ESRCH ? 0 : -errno;
        /* The pid may have been reused since the session was recorded. */
        if (s->start_time && session_start_time(s->party.pid) != s->start_time) {
                close(fd);
                return 0;
        }
        r = uv_poll_init(d->loop, &s->poll, fd);
        if (r < 0) {
                close(fd);
                return r;
        }
        /* From here the handle owns fd: it is closed with it. */
        s->pidfd = fd;
        s->poll.data = s;
        r = uv_poll_start(&s->poll, UV_READABLE, on_pid_exit);
        return r < 0 ? r : 1;
}

void session_watch_all(struct daemon *d)
{
        struct hmap_node *n, *next;
        size_t timed = 0;

        if (d->n_detached == 0)
                return;
        hmap_for_each_safe(n, next, &d->detached) {
                struct dsession *s = container_of(n, struct dsession, node);
                int r = watch_pid(d, s);
                if (r == 0) {
                        session_detached_end(d, &s->party, true);
                } else if (r < 0) {
                        s->timed = true;
                        timed++;
                }
        }
        if (timed > 0 && !grace_on) {
                uv_timer_init(d->loop, &grace_timer);
                grace_timer.data = d;
                uv_timer_start(&grace_timer, on_grace, d->cfg.resume_grace_ms, 0);
                grace_on = true;
        }
        log_info("%u sessions wait to be resumed (%zu of them end after %u ms)",
                 d->n_detached, timed, d->cfg.resume_grace_ms);
}

void session_stop(struct daemon *d)
{
        struct hmap_node *n, *next;

        hmap_for_each_safe(n, next, &d->detached) {
                struct dsession *s = container_of(n, struct dsession, node);
                if (s->pidfd >= 0 && !uv_is_closing((uv_handle_t *)&s->poll))
                        uv_close((uv_handle_t *)&s->poll, on_poll_closed_keep);
        }
        if (grace_on)
                uv_close((uv_handle_t *)&grace_timer, NULL);
        grace_on = false;
}
