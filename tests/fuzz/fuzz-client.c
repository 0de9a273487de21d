/* fuzz-client.c: libFuzzer entry point for libgpuipc, the daemon's bytes
 * being the input.
 *
 * The harness plays gpuipcd: it listens on a socket of its own (one per
 * process, in a temporary directory), a thread accepts the library's
 * connections and writes the input to them, and the main thread drives the
 * library through its public API as a program would: connect (hello), one
 * call picked by the input, a ping, the lost registrations, free.  Every
 * call must return 0 or a negative errno, and on failure gpuipc_errmsg()
 * must have something to say; ASan, UBSan and LSan (libFuzzer's leak check
 * after each input) watch the rest.
 *
 * Input layout: byte 0 picks the call (see scenario()), byte 1 its flags
 * (FL_*), the rest is what the daemon sends: connection i gets segment i
 * of the rest split at SEP (a connection after the last gets none).  Each
 * segment is written a frame at a time; a frame whose body has the key
 * "fds" with a small uint n carries n memfds (SCM_RIGHTS, FL_FD_SIZE picks
 * their size), so that a lookup reply maps.  After its segment the fake
 * daemon shuts its side down: the library reads EOF rather than waiting
 * for ever, and with FL_RECONNECT reconnects to the next segment (the
 * resume paths: hello with a session, replays).  What the library sends
 * is read and dropped; it is not checked.
 *
 * No GPU: $GPUIPC_LIBCUDA is the driver double when $GPUIPC_BUILDDIR has
 * one (make check sets it), else a path that does not exist, so that a
 * real driver is never loaded; either way device records are refused or
 * fail cleanly.  The mapping cache is off unless FL_CACHE (then trimmed
 * after each input), so that inputs do not depend on one another.
 *
 * Build and run with `make fuzz-client` (FUZZ_SECONDS=N); replay without
 * libFuzzer: see replay.c.  Seeds in corpus-client/ were recorded from
 * gpuipcd with record-client.py, which proxies $GPUIPC_FUZZ_CLIENT_SOCKET
 * (the harness then connects there) to a daemon; reply streams
 * longer than a socket buffer could block the fake daemon, which is why
 * the Makefile keeps -max_len small. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gpuipc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Between the segments of two connections.  libFuzzer's memmem hook
 * lets it find the separator. */
#define SEP "\n--gpuipc-fuzz-reconnect--\n"
#define SEP_LEN (sizeof(SEP) - 1)
#define HDR_LEN 4u
#define MAX_FDS 64u

enum {
        FL_RECONNECT = 1 << 0,  /* reconnect (to the next segment) when the stream ends */
        FL_FD_EXTRA = 1 << 1,   /* one fd more than a frame declares */
        FL_FD_FEWER = 1 << 2,   /* one fd fewer */
        FL_CACHE = 1 << 3,      /* the mapping cache on */
        FL_WRITABLE = 1 << 4,   /* lookups: GPUIPC_LOOKUP_WRITABLE */
        FL_NO_SYNC = 1 << 5,    /* lookups: GPUIPC_LOOKUP_NO_SYNC */
        FL_FD_SIZE = 3 << 6,    /* memfd sizes: 1 MiB (sparse), 4 KiB, 64 KiB, 0 */
};

static const uint64_t fd_sizes[] = { 1u << 20, 4096, 65536, 0 };

/* ---- checks ------------------------------------------------------------- */

static void fail(const char *what, int r)
{
        fprintf(stderr, "fuzz-client: %s: %d\n", what, r);
        abort();
}

/* r from a call on c: 0 or more, or a negative errno that gpuipc_errmsg()
 * explains. */
static int check(gpuipc_client *c, const char *what, int r)
{
        static int verbose = -1;
        const char *m;

        /* $GPUIPC_FUZZ_CLIENT_VERBOSE: each call's outcome, for making seeds. */
        if (verbose < 0)
                verbose = getenv("GPUIPC_FUZZ_CLIENT_VERBOSE") != NULL;
        if (verbose)
                fprintf(stderr, "fuzz-client: %s: %d %s\n", what, r,
                        r < 0 ? gpuipc_errmsg(c) : "");
        if (r >= 0)
                return r;
        if (r < -4095)
                fail(what, r);
        m = gpuipc_errmsg(c);
        if (!m || !m[0] || strlen(m) >= 1024 || !gpuipc_strerror(r))
                fail(what, r);
        return r;
}

/* Reads n bytes at p, so that ASan sees a bad pointer or length. */
static void touch(const void *p, size_t n)
{
        volatile uint8_t sink = 0;

        for (size_t i = 0; i < n; i++)
                sink ^= ((const uint8_t *)p)[i];
        (void)sink;
}

static void touch_str(const char *s)
{
        if (s)
                touch(s, strlen(s) + 1);
}

/* ---- the fake daemon ---------------------------------------------------- */

struct fake {
        const uint8_t *data;
        size_t size;
        size_t pos;             /* where the next connection's segment starts; > size: none */
        uint8_t flags;
        int stop;               /* eventfd: the input is done */
        pthread_t thread;
};

static int listen_fd = -1;
static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];

/* How many fds the frame body declares: the value of the first key "fds"
 * that is a positive fixint (what gpuipcd packs; a batch part's "fds" is
 * an array), found by looking for its bytes rather than by decoding, so
 * that broken frames may carry fds too. */
static unsigned frame_fds(const uint8_t *body, size_t len)
{
        static const uint8_t key[] = { 0xa3, 'f', 'd', 's' };
        const uint8_t *p = body, *end = body + len;

        while ((p = memmem(p, (size_t)(end - p), key, sizeof(key)))) {
                p += sizeof(key);
                if (p < end && *p <= 0x7f)
                        return *p < MAX_FDS ? *p : MAX_FDS;
        }
        return 0;
}

/* Sends len bytes at p with n fresh memfds on the first byte; false when
 * the library has closed its end. */
static bool send_frame(int fd, const uint8_t *p, size_t len, unsigned n, uint64_t fd_size)
{
        int fds[MAX_FDS + 1];
        char cbuf[CMSG_SPACE(sizeof(fds))] = {};
        unsigned made = 0;
        bool ok = true;

        for (; made < n; made++) {
                fds[made] = memfd_create("fuzz-client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
                if (fds[made] < 0 || ftruncate(fds[made], (off_t)fd_size) < 0)
                        fail("memfd", -errno);
        }
        while (len > 0) {
                struct iovec iov = { .iov_base = (void *)p, .iov_len = len };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
                ssize_t k;

                if (made > 0) {
                        struct cmsghdr *cm;
                        mh.msg_control = cbuf;
                        mh.msg_controllen = CMSG_SPACE(made * sizeof(int));
                        cm = CMSG_FIRSTHDR(&mh);
                        cm->cmsg_level = SOL_SOCKET;
                        cm->cmsg_type = SCM_RIGHTS;
                        cm->cmsg_len = CMSG_LEN(made * sizeof(int));
                        memcpy(CMSG_DATA(cm), fds, made * sizeof(int));
                }
                k = sendmsg(fd, &mh, MSG_NOSIGNAL);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        ok = false;
                        break;
                }
                /* Ours are copies now (or never went): close them. */
                for (unsigned i = 0; i < made; i++)
                        close(fds[i]);
                made = 0;
                p += k;
                len -= (size_t)k;
        }
        for (unsigned i = 0; i < made; i++)
                close(fds[i]);
        return ok;
}

/* One connection: its segment, frame by frame, then EOF; then whatever
 * the library sends is read until it closes its end. */
static void serve(struct fake *f, int fd)
{
        const uint8_t *seg = NULL, *end;
        uint8_t drop[4096];
        size_t len = 0;

        if (f->pos <= f->size) {
                const uint8_t *p = f->data + f->pos;
                const uint8_t *sep = memmem(p, f->size - f->pos, SEP, SEP_LEN);
                seg = p;
                len = sep ? (size_t)(sep - p) : f->size - f->pos;
                f->pos = sep ? f->pos + len + SEP_LEN : f->size + 1;
        }
        end = seg ? seg + len : NULL;
        while (seg && seg < end) {
                size_t left = (size_t)(end - seg), flen = left, body;
                unsigned n;
                if (left >= HDR_LEN) {
                        body = (size_t)seg[0] << 24 | (size_t)seg[1] << 16 |
                               (size_t)seg[2] << 8 | seg[3];
                        if (body <= left - HDR_LEN)
                                flen = HDR_LEN + body;
                }
                n = flen > HDR_LEN ? frame_fds(seg + HDR_LEN, flen - HDR_LEN) : 0;
                if (n > 0 && (f->flags & FL_FD_FEWER))
                        n--;
                else if (n > 0 && (f->flags & FL_FD_EXTRA))
                        n++;
                if (!send_frame(fd, seg, flen, n, fd_sizes[(f->flags & FL_FD_SIZE) >> 6]))
                        break;
                seg += flen;
        }
        (void)shutdown(fd, SHUT_WR);
        while (read(fd, drop, sizeof(drop)) > 0)
                ;
        close(fd);
}

static void *fake_run(void *arg)
{
        struct fake *f = arg;

        for (;;) {
                struct pollfd p[2] = { { .fd = f->stop, .events = POLLIN },
                                       { .fd = listen_fd, .events = POLLIN } };
                int fd;

                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        fail("poll", -errno);
                }
                if (p[1].revents) {
                        fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
                        if (fd >= 0)
                                serve(f, fd);
                        continue;
                }
                if (p[0].revents)
                        break;
        }
        /* Connections the library made and gave up on are still queued:
         * they must not meet the next input. */
        for (int fd; (fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0;)
                close(fd);
        return NULL;
}

static void cleanup(void)
{
        char dir[sizeof(sock_path)];
        char *slash;

        if (!sock_path[0])
                return;
        memcpy(dir, sock_path, sizeof(dir));
        slash = strrchr(dir, '/');
        unlink(sock_path);
        if (slash) {
                *slash = '\0';
                rmdir(dir);
        }
}

/* Once per process: the socket, and the environment the library reads. */
static void setup(void)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char dir[] = "/tmp/gpuipc-fuzz-client-XXXXXX";
        const char *b = getenv("GPUIPC_BUILDDIR");
        char lib[4096];

        if (!mkdtemp(dir))
                fail("mkdtemp", -errno);
        snprintf(sock_path, sizeof(sock_path), "%s/s", dir);
        memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
        listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            listen(listen_fd, 64) < 0)
                fail("listen", -errno);
        atexit(cleanup);
        /* Reconnecting is the input's choice (FL_RECONNECT), per client. */
        setenv("GPUIPC_RECONNECT_MS", "0", 1);
        unsetenv("GPUIPC_BUSY_POLL_US");
        unsetenv("GPUIPC_DAEMON_UID");
        snprintf(lib, sizeof(lib), "%s/tests/cuda-double/libcuda.so.1", b ? b : "");
        if (!getenv("GPUIPC_LIBCUDA"))
                setenv("GPUIPC_LIBCUDA", b && access(lib, R_OK) == 0 ? lib
                                                  : "/nonexistent/libcuda.so.1", 1);
}

/* ---- the library's side ------------------------------------------------- */

static void touch_info(const gpuipc_info *in)
{
        if (!in)
                return;
        touch_str(in->name);
        touch_str(in->device);
        touch_str(in->dtype);
        touch_str(in->owner_exe);
        touch_str(in->access_group);
        touch_str(in->copied);
        if (in->shape)
                touch(in->shape, in->ndim * sizeof(int64_t));
        if (in->strides)
                touch(in->strides, in->ndim * sizeof(int64_t));
        for (uint32_t i = 0; i < in->n_user; i++) {
                touch_str(in->user_keys[i]);
                touch_str(in->user_values[i]);
        }
        if (in->n_access_uids)
                touch(in->access_uids, in->n_access_uids * sizeof(uint32_t));
        if (in->n_access_gids)
                touch(in->access_gids, in->n_access_gids * sizeof(uint32_t));
        for (size_t i = 0; i < in->n_holders + 1u; i++) {
                const gpuipc_holder *h = gpuipc_info_holder(in, i);
                if (!h != (i == in->n_holders))
                        fail("gpuipc_info_holder", (int)i);
                if (h)
                        touch_str(h->exe);
        }
        for (size_t i = 0; i < gpuipc_info_batch_parts(in); i++) {
                const gpuipc_batch_part *p = gpuipc_info_batch_part(in, i);
                if (p)
                        touch_str(p->device);
        }
        (void)gpuipc_info_batch_rows(in);
        for (size_t i = 0; i < gpuipc_info_batch_nodes(in); i++) {
                const gpuipc_batch_node *n = gpuipc_info_batch_node(in, i);
                if (!n)
                        fail("gpuipc_info_batch_node", (int)i);
                touch_str(n->name);
                touch_str(n->format);
                for (uint32_t k = 0; k < n->n_meta; k++) {
                        touch_str(n->meta_keys[k]);
                        touch_str(n->meta_values[k]);
                }
        }
        for (size_t i = 0; i < gpuipc_info_batch_columns(in); i++)
                if (!gpuipc_info_batch_column(in, i))
                        fail("gpuipc_info_batch_column", (int)i);
}

static void do_lookup(gpuipc_client *c, uint8_t fl, int device)
{
        unsigned flags = (fl & FL_WRITABLE ? GPUIPC_LOOKUP_WRITABLE : 0) |
                         (fl & FL_NO_SYNC ? GPUIPC_LOOKUP_NO_SYNC : 0) |
                         (device >= 0 ? GPUIPC_LOOKUP_COPY_TO_DEVICE : 0);
        gpuipc_view *v[2] = {};

        /* Twice: the second offers the first's lease (`have`). */
        for (int i = 0; i < 2; i++) {
                if (check(c, "lookup", gpuipc_view_lookup_device(c, "f/a", 0, flags, device,
                                                                 &v[i])) < 0)
                        continue;
                touch_info(gpuipc_view_info(v[i]));
                if (gpuipc_view_device(v[i]) < 0)
                        touch(gpuipc_view_data(v[i]), gpuipc_view_size(v[i]));
                (void)gpuipc_view_copied(v[i]);
        }
        for (int i = 0; i < 2; i++)
                check(c, "release", gpuipc_view_release(v[i]));
}

static void touch_export(gpuipc_batch_view *v, int column, bool device)
{
        struct ArrowDeviceArray da;
        struct ArrowSchema s;
        struct ArrowArray a;
        int r;

        if (device)
                r = gpuipc_batch_view_export_device(v, column, &s, &da);
        else
                r = gpuipc_batch_view_export(v, column, &s, &a);
        if (r < 0)
                return;
        touch_str(s.format);
        touch_str(s.name);
        s.release(&s);
        if (device)
                da.array.release(&da.array);
        else
                a.release(&a);
}

static void do_batch_lookup(gpuipc_client *c, uint8_t fl)
{
        gpuipc_batch_view *v;
        size_t n;
        unsigned flags = fl & FL_NO_SYNC ? GPUIPC_LOOKUP_NO_SYNC : 0;

        if (check(c, "batch lookup", gpuipc_batch_view_lookup(c, "f/a", 0, flags, &v)) < 0)
                return;
        touch_info(gpuipc_batch_view_info(v));
        (void)gpuipc_batch_view_rows(v);
        n = gpuipc_batch_view_columns(v);
        for (size_t i = 0; i <= n && i < 64; i++) {
                const char *name = gpuipc_batch_view_column_name(v, i);
                gpuipc_batch_values bv;
                void *p;
                uint64_t sz;
                int dev;

                if (!name != (i == n))
                        fail("column_name", (int)i);
                if (name)
                        (void)gpuipc_batch_view_column_index(v, name);
                if (gpuipc_batch_view_values(v, i, 1, &bv) == 0) {
                        touch_str(bv.name);
                        touch_str(bv.format);
                        if (bv.data && bv.device < 0 && bv.length > 0 && bv.length < (1 << 20))
                                touch(bv.data, (size_t)bv.length * bv.width);
                }
                for (unsigned b = 0; b < 4; b++)
                        if (gpuipc_batch_view_buffer(v, i, b, &p, &sz, &dev) == 0 && p &&
                            dev < 0)
                                touch(p, sz);
                touch_export(v, (int)i, i & 1);
        }
        for (size_t i = 0; i < gpuipc_info_batch_nodes(gpuipc_batch_view_info(v)) && i < 64; i++)
                for (unsigned b = 0; b < 4; b++) {
                        void *p;
                        uint64_t sz;
                        int dev;
                        if (gpuipc_batch_view_node_buffer(v, i, b, &p, &sz, &dev) == 0 && p &&
                            dev < 0)
                                touch(p, sz);
                }
        for (size_t i = 0; i < gpuipc_info_batch_parts(gpuipc_batch_view_info(v)) + 1; i++) {
                void *base;
                uint64_t sz;
                (void)gpuipc_batch_view_part_mapping(v, i, &base, &sz);
        }
        touch_export(v, -1, false);
        touch_export(v, -1, true);
        check(c, "batch release", gpuipc_batch_view_release(v));
}

static void do_list(gpuipc_client *c, uint8_t fl, bool stat)
{
        gpuipc_list *l;
        int r;

        if (stat)
                r = gpuipc_name_stat(c, "f/a", &l);
        else
                r = gpuipc_list_fetch(c, fl & 1 ? "f" : NULL,
                                      (fl & FL_WRITABLE ? GPUIPC_LIST_ALL : 0) |
                                      (fl & FL_NO_SYNC ? GPUIPC_LIST_HOLDERS : 0), &l);
        if (check(c, stat ? "stat" : "list", r) < 0)
                return;
        for (size_t i = 0; i < gpuipc_list_count(l); i++)
                touch_info(gpuipc_list_get(l, i));
        if (gpuipc_list_get(l, gpuipc_list_count(l)))
                fail("gpuipc_list_get", 0);
        gpuipc_list_free(l);
}

static void do_stats(gpuipc_client *c)
{
        gpuipc_stats *s;
        char *text;

        if (check(c, "stats", gpuipc_stats_fetch(c, &s)) == 0) {
                touch_str(s->server);
                touch_str(s->cuda_reason);
                gpuipc_stats_free(s);
        }
        if (check(c, "metrics", gpuipc_metrics_fetch(c, &text)) == 0) {
                touch_str(text);
                gpuipc_free(text);
        }
}

static void do_register(gpuipc_client *c, uint8_t fl)
{
        static const int64_t shape[] = { 4, 256 };
        static const char *const keys[] = { "k" }, *const values[] = { "v" };
        gpuipc_meta meta = GPUIPC_META_INIT;
        unsigned rflags = fl & FL_WRITABLE ? GPUIPC_REGISTER_SHARED_WRITE : 0;
        gpuipc_hostbuf *b;
        uint64_t id;

        meta.dtype = "float32";
        meta.ndim = 2;
        meta.shape = shape;
        meta.n_user = 1;
        meta.user_keys = keys;
        meta.user_values = values;
        if (gpuipc_hostbuf_new(4096, &b) < 0)
                fail("hostbuf_new", 0);
        if (check(c, "register", gpuipc_hostbuf_register(c, "f/a", b, fl & 1 ? &meta : NULL,
                                                         rflags, &id)) == 0)
                check(c, "wait_released", gpuipc_reg_wait_released(c, id, 1));
        gpuipc_hostbuf_free(b);
}

static void do_batch_register(gpuipc_client *c, uint8_t fl)
{
        static const int32_t col[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
        gpuipc_batch *b;
        uint64_t id;

        if (gpuipc_batch_new(&b) < 0 ||
            gpuipc_batch_add_buffer(b, "x", "i", 8, 0, NULL, col, -1) < 0)
                fail("batch", 0);
        if (check(c, "batch register", gpuipc_batch_register(c, "f/a", b, 0, &id)) == 0)
                check(c, "wait_released", gpuipc_reg_wait_released(c, id, 1));
        gpuipc_batch_free(b);
}

static void do_watch(gpuipc_client *c)
{
        gpuipc_event *e;

        if (check(c, "watch", gpuipc_event_watch(c, "f")) < 0)
                return;
        for (int i = 0; i < 16; i++) {
                if (check(c, "event_next", gpuipc_event_next(c, 1, &e)) < 0)
                        break;
                touch_str(e->type);
                touch_str(e->name);
                gpuipc_event_free(e);
        }
}

static void do_admin(gpuipc_client *c)
{
        uint64_t removed, skipped;
        uint32_t leases;

        check(c, "unregister", gpuipc_name_unregister(c, "f/a"));
        check(c, "prefix_unregister", gpuipc_prefix_unregister(c, "f", &removed, &skipped));
        check(c, "revoke", gpuipc_name_revoke(c, "f/a", &leases));
        check(c, "adopt", gpuipc_name_adopt(c, "f/a", &leases));
}

/* The call the input picked, after a successful connect. */
static void scenario(gpuipc_client *c, uint8_t which, uint8_t fl)
{
        switch (which % 11) {
        case 0:
                break;                          /* the ping below */
        case 1:
                do_lookup(c, fl, -1);
                break;
        case 2:
                do_lookup(c, fl, 0);            /* a consumer on device 0 */
                break;
        case 3:
                do_batch_lookup(c, fl);
                break;
        case 4:
                do_list(c, fl, false);
                break;
        case 5:
                do_list(c, fl, true);
                break;
        case 6:
                do_stats(c);
                break;
        case 7:
                do_register(c, fl);
                break;
        case 8:
                do_batch_register(c, fl);
                break;
        case 9:
                do_watch(c);
                break;
        case 10:
                do_admin(c);
                break;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static bool ready;
        struct fake f = {};
        gpuipc_client *c;
        const char *path;
        char name[256];
        uint64_t one = 1;
        int r;

        if (size < 2)
                return 0;
        if (!ready) {
                setup();
                ready = true;
        }
        f.data = data + 2;
        f.size = size - 2;
        f.flags = data[1];
        f.stop = eventfd(0, EFD_CLOEXEC);
        if (f.stop < 0 || pthread_create(&f.thread, NULL, fake_run, &f) != 0)
                fail("fake daemon", -errno);
        if (f.flags & FL_CACHE)
                (void)gpuipc_cache_set_limits(1u << 30, 4);
        else
                (void)gpuipc_cache_set_limits(0, 0);

        /* Recording seeds (record-client.py): the real daemon, through a proxy. */
        path = getenv("GPUIPC_FUZZ_CLIENT_SOCKET");
        r = gpuipc_client_connect(path ? path : sock_path, &c);
        if (r < 0) {
                check(NULL, "connect", r);
        } else {
                if (f.flags & FL_RECONNECT)
                        check(c, "set_reconnect", gpuipc_client_set_reconnect(c, 1000));
                scenario(c, data[0], f.flags);
                check(c, "ping", gpuipc_client_ping(c));
                for (int i = 0; i < 300; i++) {
                        uint64_t id;
                        int err;
                        r = gpuipc_client_next_lost(c, name, sizeof(name), &id, &err);
                        if (r <= 0)
                                break;
                }
                gpuipc_client_free(c);
        }
        (void)gpuipc_cache_trim(NULL);

        if (write(f.stop, &one, sizeof(one)) != sizeof(one))
                fail("eventfd", -errno);
        pthread_join(f.thread, NULL);
        close(f.stop);
        return 0;
}
