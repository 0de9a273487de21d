/* client.c: the connection to gpuipcd: connect, hello, errors, lifetime.
 * Requests and calls are in call.c, frames in io.c, events in events.c. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "batchint.h"

/* ---- errors ------------------------------------------------------------ */

int gpuipc__begin(gpuipc_client *c)
{
        if (!c)
                return -EINVAL;
        c->errmsg[0] = '\0';
        c->last_err = 0;
        if (c->dead && gpuipc__may_reconnect(c, c->dead) && gpuipc__reconnect(c) == 0)
                return 0;
        if (c->dead)
                return gpuipc__fail(c, -ENOTCONN, "the connection to gpuipcd is closed (%s)",
                                    gpuipc_strerror(c->dead));
        if (c->n_unholds)
                gpuipc__send_unholds(c);
        /* Their errors are not this call's. */
        if (__atomic_load_n(&c->n_deferred, __ATOMIC_ACQUIRE)) {
                gpuipc__deferred_send(c);
                c->errmsg[0] = '\0';
                c->last_err = 0;
        }
        return 0;
}

int gpuipc__begin_named(gpuipc_client *c, const char *name)
{
        const char *why;
        int r;

        r = gpuipc__begin(c);
        if (r < 0)
                return r;
        if (!name || proto_name_check(name, strlen(name), &why) < 0)
                return gpuipc__fail(c, -EINVAL, "invalid name: %s", name ? why : "NULL");
        return 0;
}

int gpuipc__end(gpuipc_client *c, int err)
{
        if (err < 0 && c->last_err == 0)
                c->last_err = err;
        return err;
}

int gpuipc__fail(gpuipc_client *c, int err, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
        va_end(ap);
        c->last_err = err;
        return err;
}

/* Why this thread's last gpuipc_client_connect() failed (gpuipc_errmsg(NULL)), in
 * a buffer per thread.  A pthread key rather than __thread: the library is
 * a shared object even when built without -fPIC on a PIE toolchain, whose
 * TLS model cannot link into one. */
#define CONNECT_MSG_MAX 1024

static pthread_key_t connect_key;
static pthread_once_t connect_once = PTHREAD_ONCE_INIT;
static bool connect_key_ok;

static void connect_key_init(void)
{
        connect_key_ok = pthread_key_create(&connect_key, free) == 0;
}

/* This thread's buffer, or NULL when out of memory. */
static char *connect_buf(bool create)
{
        char *b;

        (void)pthread_once(&connect_once, connect_key_init);
        if (!connect_key_ok)
                return NULL;
        b = pthread_getspecific(connect_key);
        if (!b && create) {
                b = calloc(1, CONNECT_MSG_MAX);
                if (b && pthread_setspecific(connect_key, b) != 0) {
                        free(b);
                        b = NULL;
                }
        }
        return b;
}

static int connect_fail(const char *path, int err, const gpuipc_client *c)
{
        char *connect_msg = connect_buf(true);

        if (!connect_msg)
                return err;
        if (err == -ENOENT || err == -ECONNREFUSED)
                snprintf(connect_msg, CONNECT_MSG_MAX, "cannot connect to %s: %s; is "
                         "gpuipcd running?", path, err == -ENOENT ? "no such socket"
                                                                  : "nothing listens there");
        else if (err == -EINVAL && !path[0])
                snprintf(connect_msg, CONNECT_MSG_MAX, "the socket path is empty");
        else if (err == -ENAMETOOLONG)
                snprintf(connect_msg, CONNECT_MSG_MAX, "socket path longer than %zu bytes: "
                         "%.64s...", sizeof(((struct sockaddr_un *)0)->sun_path) - 1, path);
        else if (err == -EACCES || err == -EPERM)
                snprintf(connect_msg, CONNECT_MSG_MAX, "cannot connect to %s: permission "
                         "denied (is this user in the socket's group?)", path);
        else
                snprintf(connect_msg, CONNECT_MSG_MAX, "cannot connect to %s: %s", path,
                         c && c->errmsg[0] ? c->errmsg : gpuipc_strerror(err));
        return err;
}

const char *gpuipc_errmsg(const gpuipc_client *c)
{
        if (!c) {
                const char *m = connect_buf(false);
                return m && m[0] ? m : gpuipc_strerror(-EINVAL);
        }
        if (c->errmsg[0])
                return c->errmsg;
        if (c->last_err)
                return gpuipc_strerror(c->last_err);
        return "success";
}

int gpuipc__client_kill(gpuipc_client *c, int err)
{
        if (!c->dead)
                c->dead = err;
        if (c->fd >= 0) {
                close(c->fd);
                c->fd = -1;
                /* The daemon drops this connection's holds: what the cache
                 * kept of producer-bound memory must go now. */
                gpuipc__cucache_conn_lost(c);
        }
        proto_fdq_clear(&c->fdq);
        return err;
}

bool gpuipc__client_usable(const gpuipc_client *c)
{
        return c->fd >= 0 && !c->dead;
}

/* ---- lifetime ---------------------------------------------------------- */

gpuipc_client *gpuipc__client_ref(gpuipc_client *c)
{
        __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
        return c;
}

void gpuipc__client_unref(gpuipc_client *c)
{
        if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0)
                return;
        if (c->fd >= 0)
                close(c->fd);
        proto_fdq_clear(&c->fdq);
        proto_reader_free(&c->rd);
        gpuipc__relev_clear(c);
        gpuipc__watch_clear(c);
        gpuipc__resume_clear(c);
        gpuipc__lost_clear(c);
        free(c->unholds);
        free(c->deferred);
        pthread_mutex_destroy(&c->deferred_lock);
        free(c);
}

void gpuipc_client_free(gpuipc_client *c)
{
        if (!c)
                return;
        /* Batch views let go of by release callbacks: their releases
         * first, so that their producers hear of them now. */
        if (gpuipc__client_usable(c))
                gpuipc__deferred_send(c);
        pthread_mutex_lock(&c->deferred_lock);
        c->freed = true;        /* later callbacks queue nothing */
        pthread_mutex_unlock(&c->deferred_lock);
        /* Closing now makes the daemon drop this connection's leases and
         * ephemeral registrations, as documented; views that remain only
         * hold their mapping and a reference to this struct. */
        gpuipc__client_kill(c, -ENOTCONN);
        gpuipc__client_unref(c);
}

/* ---- connect ----------------------------------------------------------- */

/* The uid $GPUIPC_DAEMON_UID names: 1 and *ret_uid, 0 when unset or empty,
 * -EINVAL when it is not a uid. */
static int daemon_uid_env(uid_t *ret_uid)
{
        const char *s = getenv("GPUIPC_DAEMON_UID");
        unsigned long v;
        char *end;

        if (!s || !*s)
                return 0;
        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno || *end || *s == '-' || v >= (unsigned long)(uid_t)-1)
                return -EINVAL;
        *ret_uid = (uid_t)v;
        return 1;
}

int gpuipc__check_server(gpuipc_client *c, int fd, const char *path)
{
        struct ucred cred;
        socklen_t len = sizeof(cred);
        char dir[sizeof(c->path)];
        struct stat st;
        uid_t want;
        int r;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return gpuipc__fail(c, -errno, "cannot read the credentials of the process "
                                    "listening on %s (SO_PEERCRED): %s", path, strerror(errno));
        if (cred.uid == 0)
                return 0;
        r = daemon_uid_env(&want);
        if (r < 0)
                return gpuipc__fail(c, -EINVAL, "GPUIPC_DAEMON_UID is not a uid");
        if (r > 0) {
                if (cred.uid == want)
                        return 0;
                return gpuipc__fail(c, -EPERM, "the process listening on %s (pid %d) runs as "
                                    "uid %u, not root or GPUIPC_DAEMON_UID=%u: refusing to "
                                    "talk to it", path, (int)cred.pid, (unsigned)cred.uid,
                                    (unsigned)want);
        }
        /* Without the variable: this process's own uid (a daemon it
         * started), or the owner of the socket's directory, who could
         * replace the socket anyway (/run/gpuipcd is gpuipcd's). */
        if (cred.uid == geteuid())
                return 0;
        if (stat(proto_sock_dir(path, dir, sizeof(dir)), &st) == 0 && st.st_uid == cred.uid)
                return 0;
        return gpuipc__fail(c, -EPERM, "the process listening on %s (pid %d) runs as uid %u, "
                            "which is not root, this process's uid, nor the owner of %s: "
                            "refusing to talk to it (set GPUIPC_DAEMON_UID=%u if that is "
                            "gpuipcd's user)", path, (int)cred.pid, (unsigned)cred.uid, dir,
                            (unsigned)cred.uid);
}

/* Nothing to redo: a reconnect during hello fails (it is one itself). */
static const struct gpuipc__op op_hello = { .name = "hello" };

int gpuipc__hello(gpuipc_client *c, struct gpuipc__reply *ret_reply)
{
        struct gpuipc__reply rp;
        struct gpuipc__req rq;
        uint64_t version, max_frame;
        const uint8_t *session;
        size_t slen;
        int r;

        gpuipc__request(c, &rq, &op_hello, 2 + c->has_session);
        proto_pack_ku64(&rq.o.pk, "version", PROTO_VERSION);
        proto_pack_kstr(&rq.o.pk, "client", "libgpuipc " GPUIPC_VERSION);
        if (c->has_session) {
                proto_pack_str(&rq.o.pk, "resume");
                msgpack_pack_bin(&rq.o.pk, PROTO_SESSION_LEN);
                msgpack_pack_bin_body(&rq.o.pk, c->session, PROTO_SESSION_LEN);
        }
        r = gpuipc__call(c, &rq, NULL, 0, &rp);
        if (r < 0)
                return r;
        if (proto_get_u64(rp.msg.root, "version", &version) < 0 || version != PROTO_VERSION) {
                r = gpuipc__fail(c, -EPROTONOSUPPORT, "gpuipcd answered hello with an unsupported protocol version");
                goto out;
        }
        if (proto_get_u64(rp.msg.root, "max_frame", &max_frame) < 0 || max_frame < 64) {
                r = gpuipc__fail(c, -EBADMSG, "gpuipcd's hello reply has no usable max_frame");
                goto out;
        }
        if (max_frame > PROTO_MAX_FRAME_LIMIT)
                max_frame = PROTO_MAX_FRAME_LIMIT;
        c->max_frame = (uint32_t)max_frame;
        c->rd.max_frame = (uint32_t)max_frame;
        /* A daemon without sessions (older) gives none: then nothing resumes. */
        c->state_kept = false;
        (void)proto_get_bool(rp.msg.root, "fdstore", &c->state_kept);
        if (proto_get_bin(rp.msg.root, "session", &session, &slen) == 0 &&
            slen == PROTO_SESSION_LEN) {
                memcpy(c->session, session, PROTO_SESSION_LEN);
                c->has_session = true;
        }
        if (ret_reply) {
                *ret_reply = rp;
                ret_reply->msg.root = &ret_reply->msg.up.data;
                return 0;
        }
out:
        gpuipc__reply_free(&rp);
        return r;
}

/* $GPUIPC_RECONNECT_MS, or the default. */
static int reconnect_default(void)
{
        const char *s = getenv("GPUIPC_RECONNECT_MS");
        char *end;
        long v;

        if (!s || !*s)
                return GPUIPC__RECONNECT_MS;
        errno = 0;
        v = strtol(s, &end, 10);
        if (errno || *end || v < 0 || v > 3600000)
                return GPUIPC__RECONNECT_MS;
        return (int)v;
}

/* $GPUIPC_BUSY_POLL_US (0 to 1000000), or 0: off. */
static uint32_t busy_poll_default(void)
{
        const char *s = getenv("GPUIPC_BUSY_POLL_US");
        char *end;
        long v;

        if (!s || !*s)
                return 0;
        errno = 0;
        v = strtol(s, &end, 10);
        if (errno || *end || v < 0 || v > 1000000)
                return 0;
        return (uint32_t)v;
}

int gpuipc_client_set_lookup_owner(gpuipc_client *c, long long uid)
{
        if (!c || uid < -1 || uid >= (long long)UINT32_MAX)
                return -EINVAL;
        c->lookup_owner = uid;
        return 0;
}

int gpuipc_client_set_reconnect(gpuipc_client *c, int timeout_ms)
{
        if (!c || timeout_ms < 0)
                return -EINVAL;
        c->reconnect_ms = timeout_ms;
        if (timeout_ms == 0)
                gpuipc__resume_clear(c);
        return 0;
}

int gpuipc_client_connect(const char *path, gpuipc_client **ret_client)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char *msg;
        gpuipc_client *c;
        size_t len;
        int r;

        if (!ret_client)
                return -EINVAL;
        if (!path)
                path = gpuipc_client_default_socket();
        msg = connect_buf(false);
        if (msg)
                msg[0] = '\0';
        len = strlen(path);
        if (len == 0)
                return connect_fail(path, -EINVAL, NULL);
        if (len >= sizeof(sa.sun_path))
                return connect_fail(path, -ENAMETOOLONG, NULL);
        memcpy(sa.sun_path, path, len + 1);

        c = calloc(1, sizeof(*c));
        if (!c)
                return connect_fail(path, -ENOMEM, NULL);
        c->refs = 1;
        c->fd = -1;
        c->lookup_owner = -1;
        pthread_mutex_init(&c->deferred_lock, NULL);
        c->max_frame = PROTO_MAX_FRAME;
        proto_fdq_init(&c->fdq);
        r = proto_reader_init(&c->rd, PROTO_MAX_FRAME);
        if (r < 0)
                goto fail;
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0) {
                r = -errno;
                goto fail;
        }
        do
                r = connect(c->fd, (const struct sockaddr *)&sa, sizeof(sa));
        while (r < 0 && errno == EINTR);
        if (r < 0) {
                r = -errno;
                goto fail;
        }
        /* Whoever took over the socket path would receive our memfds. */
        r = gpuipc__check_server(c, c->fd, path);
        if (r < 0)
                goto fail;
        memcpy(c->path, path, len + 1);
        c->reconnect_ms = reconnect_default();
        c->busy_poll_us = busy_poll_default();
        r = gpuipc__hello(c, NULL);
        if (r < 0)
                goto fail;
        *ret_client = c;
        return 0;

fail:
        connect_fail(path, r, c);
        gpuipc__client_unref(c);
        return r;
}

/* ---- simple calls ------------------------------------------------------ */

static const struct gpuipc__op op_ping = { .name = "ping", .redo = GPUIPC__REDO_SEND };

int gpuipc_client_ping(gpuipc_client *c)
{
        struct gpuipc__reply rp;
        int r;

        if (!c)
                return -EINVAL;
        r = gpuipc__call_op(c, &op_ping, &rp);
        if (r == 0)
                gpuipc__reply_free(&rp);
        return r;
}

static int64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The consumers' release events of id (CUDA kinds): wait for each. */
static int released_sync(gpuipc_client *c, uint64_t id)
{
        uint8_t *handles;
        unsigned n;
        int r = 0;

        gpuipc__released_events_take(c, id, &handles, &n);
        if (n > 0)
                r = gpuipc__cuda_wait_events(c, handles, n);
        free(handles);
        return gpuipc__end(c, r);
}

/* Tells the daemon that the producer is about to free allocation alloc,
 * so that its holders let go of it now (docs/protocol.md, `unmap`). */
static int send_unmap(gpuipc_client *c, uint64_t alloc)
{
        static const struct gpuipc__op op_unmap = { .name = "unmap" };
        struct gpuipc__reply rp;
        struct gpuipc__req rq;
        int r;

        gpuipc__request(c, &rq, &op_unmap, 1);
        proto_pack_ku64(&rq.o.pk, "alloc", alloc);
        r = gpuipc__call(c, &rq, NULL, 0, &rp);
        if (r == 0)
                gpuipc__reply_free(&rp);
        /* A daemon without `unmap` tells holders at the last unregister. */
        return r == -ENOSYS ? 0 : r;
}

/* The allocations remembered for cacheable registration id into allocs
 * (room for GPUIPC__UNMAPPED_MAX); returns how many, or -ENOENT when id is
 * not known or newer registrations pushed some of them out. */
static int cached_allocs(const gpuipc_client *c, uint64_t id, uint64_t *allocs)
{
        unsigned n = c->cached_regs_n < GPUIPC__UNMAPPED_MAX ? c->cached_regs_n
                                                               : GPUIPC__UNMAPPED_MAX;
        unsigned want = 0, got = 0;

        /* One entry per allocation: the daemon lists each once. */
        for (unsigned i = 0; i < n; i++)
                if (c->cached_regs[i].id == id) {
                        want = c->cached_regs[i].n;
                        allocs[got++] = c->cached_regs[i].alloc;
                }
        return got > 0 && got == want ? (int)got : -ENOENT;
}

int gpuipc_reg_wait_unmapped(gpuipc_client *c, uint64_t id, int timeout_ms)
{
        uint64_t allocs[GPUIPC__UNMAPPED_MAX];
        int64_t deadline;
        unsigned left_n;
        int n, r;

        r = gpuipc__begin(c);
        if (r < 0)
                return r;
        n = cached_allocs(c, id, allocs);
        if (n < 0)
                return gpuipc__fail(c, -ENOENT, "registration %llu was not registered "
                                    "GPUIPC_REGISTER_CACHEABLE by this client (or more than "
                                    "%u cacheable allocations were registered since)",
                                    (unsigned long long)id, GPUIPC__UNMAPPED_MAX);
        if (timeout_ms < 0)
                timeout_ms = PROTO_WAIT_MAX_MS;
        deadline = now_ms() + timeout_ms;
        for (int i = 0; i < n; i++)
                if (!gpuipc__unmapped_seen(c, allocs[i])) {
                        r = send_unmap(c, allocs[i]);
                        if (r < 0)
                                return gpuipc__end(c, r);
                }
        /* Each one seen is dropped from the list, so that a later flood of
         * other events cannot make it count as not seen again. */
        left_n = (unsigned)n;
        for (;;) {
                int64_t left;

                for (unsigned i = 0; i < left_n;)
                        if (gpuipc__unmapped_seen(c, allocs[i]))
                                allocs[i] = allocs[--left_n];
                        else
                                i++;
                if (left_n == 0)
                        return 0;
                left = deadline - now_ms();
                if (left <= 0 && n == 1)
                        return gpuipc__fail(c, -ETIMEDOUT, "the allocation of registration "
                                            "%llu is still mapped by a consumer after %d ms",
                                            (unsigned long long)id, timeout_ms);
                if (left <= 0)
                        return gpuipc__fail(c, -ETIMEDOUT, "%u of the %d allocations of "
                                            "registration %llu are still mapped by consumers "
                                            "after %d ms", left_n, n, (unsigned long long)id,
                                            timeout_ms);
                r = gpuipc__pump(c, (int)left);
                if (r < 0)
                        return gpuipc__end(c, r);
        }
}

int gpuipc_reg_wait_released(gpuipc_client *c, uint64_t id, int timeout_ms)
{
        int64_t deadline;
        int r;

        r = gpuipc__begin(c);
        if (r < 0)
                return r;
        if (timeout_ms < 0)
                timeout_ms = PROTO_WAIT_MAX_MS;
        deadline = now_ms() + timeout_ms;
        for (;;) {
                int64_t left = deadline - now_ms();

                if (gpuipc__released_take(c, id))
                        return released_sync(c, id);
                if (left < 0)
                        left = 0;
                r = gpuipc__pump(c, (int)left);
                if (r < 0)
                        return gpuipc__end(c, r);
                if (gpuipc__released_take(c, id))
                        return released_sync(c, id);
                if (left == 0)
                        break;
        }
        return gpuipc__fail(c, -ETIMEDOUT, "registration %llu was not released within %d ms",
                            (unsigned long long)id, timeout_ms);
}
