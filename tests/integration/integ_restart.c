/* integ_restart.c: gpuipcd restarts without loss.
 *
 * The test process plays systemd (sdhost): it owns the listening socket and
 * the file descriptor store, and restarts the daemon with SIGTERM or
 * SIGKILL.  Registrations, their bytes, leases and sessions must come back;
 * clients reconnect by themselves.  One test runs without the store and
 * checks that clients re-register instead.
 *
 * Suite restart_cuda does the same for the CUDA kinds through the driver
 * double ($GPUIPC_BUILDDIR/tests/cuda-double/libcuda.so.1, whose device pointers
 * are host addresses): cuda-vmm allocations in the store, cuda-ipc records,
 * adopted buffers.  Suite restart_inflight checks calls that were waiting
 * for their reply when the daemon died (helper-cuda-resume interposes the
 * library's sendmsg/recvmsg to pin down the moment).
 *
 * Suites restart_events, restart_journal and restart_nostore: a shutdown
 * must not tell a producer of releases the next daemon undoes, and releases
 * while it is detached must reach it; a compaction must not miss the change
 * that triggered it nor drop ownerless ephemeral buffers; a failed start
 * keeps the store; without a store, stale lease ids and reused ids must not
 * hit new leases and registrations. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"
#include "sdhost.h"

/* Helpers may take GPUIPC_RECONNECT_MS (10 s by default) to reconnect. */
#define REPLY_MS 15000

static struct h_sd sd;
static bool finished;
static char nostore_dir[256];

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
        (void)sb;
        (void)flag;
        (void)ftw;
        return remove(path);
}

static void print_file(const char *path)
{
        char buf[4096];
        size_t n;
        FILE *f = fopen(path, "r");

        if (!f)
                return;
        fprintf(stderr, "---- %s ----\n", path);
        while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
                fwrite(buf, 1, n, stderr);
        fprintf(stderr, "---- end of log ----\n");
        fclose(f);
}

static void init(void)
{
        signal(SIGPIPE, SIG_IGN);
}

static void fini(void)
{
        /* a test that did not reach its end failed: show what the daemon said */
        if (!finished && sd.st)
                h_sd_dump_log(&sd);
        if (!finished && h_d.pid > 0)
                print_file(h_d.log);
        h_sd_stop(&sd);
        if (h_d.pid > 0 || h_d.dir[0])  /* also the directory of a failed start */
                h_daemon_stop(&h_d);
        if (nostore_dir[0])
                nftw(nostore_dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
        nostore_dir[0] = '\0';
}

TestSuite(restart, .init = init, .fini = fini, .timeout = 240);

/* The end of a test under sdhost: the daemon spoke the notify protocol
 * without mistakes. */
static void finish(void)
{
        if (sd.st)
                cr_expect_eq(h_sd_errors(&sd), 0,
                             "%u notify protocol mistakes by gpuipcd (sdhost: lines on stderr)",
                             h_sd_errors(&sd));
        finished = true;
}

/* The daemon under sdhost, with its journal stored before READY=1. */
static void start_store(const char *const *args)
{
        h_sd_start(&sd, args);
        cr_assert_eq(h_sd_stored(&sd, "state"), 1,
                     "at READY=1 the fd store holds [%s]: want exactly one journal (state0 or "
                     "state1), pushed before READY=1", h_sd_store_str(&sd));
}

static void restart(int sig)
{
        h_sd_restart(&sd, sig);
        cr_assert_eq(h_sd_stored_settle(&sd, "state", 1, 2000), 1,
                     "after the restart the fd store holds [%s]: want exactly one journal",
                     h_sd_store_str(&sd));
}

static const char *host_name(uint64_t id)
{
        static char bufs[4][32];
        static unsigned next;
        char *b = bufs[next++ % 4];
        snprintf(b, sizeof(bufs[0]), "host-%" PRIu64, id);
        return b;
}

static void expect_stored(uint64_t id)
{
        cr_assert_eq(h_sd_stored_name_settle(&sd, host_name(id), 1, 2000), 1,
                     "registration %" PRIu64 " is not in the fd store as %s: store holds [%s]", id,
                     host_name(id), h_sd_store_str(&sd));
}

/* ---- registrations as a user sees them ----------------------------------- */

struct reg {
        uint64_t id;
        uint32_t leases, pid;
        bool connected, ephemeral;
        /* for the CUDA kinds */
        gpuipc_kind kind;
        uint64_t size, offset, alloc_id, alloc_size, buffer_id;
        uint32_t alloc_regs;
        bool has_event;
};

/* gpuipc_name_stat through a fresh connection: 0, or the error (-ENOENT). */
static int stat_name(const char *name, struct reg *ret)
{
        gpuipc_client *c = NULL;
        gpuipc_list *l = NULL;
        const gpuipc_info *i;
        int r;

        r = gpuipc_client_connect(h_d.sock, &c);
        cr_assert_eq(r, 0, "connect %s: %s", h_d.sock, gpuipc_strerror(r));
        r = gpuipc_name_stat(c, name, &l);
        if (r == 0) {
                cr_assert_eq(gpuipc_list_count(l), 1);
                i = gpuipc_list_get(l, 0);
                *ret = (struct reg){
                        .id = i->id,
                        .leases = i->leases,
                        .pid = i->owner_pid,
                        .connected = !(i->flags & GPUIPC_INFO_OWNER_GONE),
                        .ephemeral = !!(i->flags & GPUIPC_INFO_EPHEMERAL),
                        .kind = i->kind,
                        .size = i->size,
                        .offset = i->offset,
                        .alloc_id = i->alloc_id,
                        .alloc_size = i->alloc_size,
                        .buffer_id = i->buffer_id,
                        .alloc_regs = i->alloc_regs,
                        .has_event = i->has_event != 0,
                };
        }
        gpuipc_list_free(l);
        gpuipc_client_free(c);
        return r;
}

static struct reg must_stat(const char *name, const char *when)
{
        struct reg g = { 0 };
        int r = stat_name(name, &g);
        cr_assert_eq(r, 0, "%s: %s is not registered: %s", when, name, gpuipc_strerror(r));
        return g;
}

/* Polls until name is gone; returns how long that took, or -1. */
static int64_t wait_gone(const char *name, int timeout_ms)
{
        int64_t t0 = h_now_ms();
        struct reg g;

        do {
                if (stat_name(name, &g) == -ENOENT)
                        return h_now_ms() - t0;
                h_sleep_ms(20);
        } while (h_now_ms() - t0 < timeout_ms);
        return -1;
}

/* helper-consumer: looks up, checks every byte, releases.  Its exit code. */
static int consume(const char *name, size_t size, uint32_t seed)
{
        char size_s[32], seed_s[32];
        const char *args[] = { name, size_s, seed_s, NULL };
        struct h_child ch;

        snprintf(size_s, sizeof(size_s), "%zu", size);
        snprintf(seed_s, sizeof(seed_s), "%" PRIu32, seed);
        h_spawn(&ch, "helper-consumer", args, false);
        return h_wait(&ch, 20000);
}

static uint64_t register_host(gpuipc_client *c, const char *name, size_t size, uint32_t seed)
{
        gpuipc_hostbuf *b = NULL;
        uint64_t id = 0;
        uint8_t *p;
        int r;

        cr_assert_eq(gpuipc_hostbuf_new(size, &b), 0);
        p = gpuipc_hostbuf_data(b);
        for (size_t i = 0; i < size; i++)
                p[i] = h_pattern(i, seed);
        r = gpuipc_hostbuf_register(c, name, b, NULL, 0, &id);
        cr_assert_eq(r, 0, "register %s: %s (%s)", name, gpuipc_strerror(r), gpuipc_errmsg(c));
        gpuipc_hostbuf_free(b);
        return id;
}

static gpuipc_client *connect_client(void)
{
        gpuipc_client *c = NULL;
        int r = gpuipc_client_connect(h_d.sock, &c);
        cr_assert_eq(r, 0, "gpuipc_client_connect %s: %s", h_d.sock, gpuipc_strerror(r));
        return c;
}

/* ---- helper-resume ------------------------------------------------------- */

static void spawn_resume(struct h_child *ch)
{
        h_spawn(ch, "helper-resume", NULL, true);
}

static void send_cmd(struct h_child *ch, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static void send_cmd(struct h_child *ch, const char *fmt, ...)
{
        char line[512];
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
        va_end(ap);
        cr_assert(n > 0 && n < (int)sizeof(line) - 1);
        line[n++] = '\n';
        cr_assert_eq(write(ch->in, line, (size_t)n), n, "helper-resume (pid %d) gone: %s",
                     (int)ch->pid, strerror(errno));
}

/* The reply to a command sent before, into buf. */
static void read_reply(struct h_child *ch, const char *cmd, char *buf, size_t len)
{
        cr_assert_geq(h_read_line(ch, buf, len, REPLY_MS), 0,
                      "helper-resume (pid %d) did not answer \"%s\" within %d ms", (int)ch->pid,
                      cmd, REPLY_MS);
}

static void expect_cmd(struct h_child *ch, const char *cmd, const char *want, const char *why)
{
        char buf[512];

        send_cmd(ch, "%s", cmd);
        read_reply(ch, cmd, buf, sizeof(buf));
        cr_assert_str_eq(buf, want, "%s: \"%s\" answered \"%s\", want \"%s\"", why, cmd, buf, want);
}

static uint64_t helper_reg(struct h_child *ch, const char *name, size_t size, uint32_t seed,
                           bool ephemeral)
{
        char buf[512], cmd[300];
        unsigned long long id;

        snprintf(cmd, sizeof(cmd), "reg %s %zu %" PRIu32 "%s", name, size, seed,
                 ephemeral ? " eph" : "");
        send_cmd(ch, "%s", cmd);
        read_reply(ch, cmd, buf, sizeof(buf));
        cr_assert_eq(sscanf(buf, "id %llu", &id), 1, "\"%s\" answered \"%s\"", cmd, buf);
        return id;
}

static void helper_quit(struct h_child *ch)
{
        expect_cmd(ch, "quit", "bye", "helper-resume quitting");
        cr_assert_eq(h_wait(ch, 10000), 0);
}

/* ---- 1, 2: a durable registration of an exited producer ------------------ */

static void durable_survives(int sig)
{
        const char *args[] = { "rs/durable", "262144", "7", NULL };
        struct h_child p;
        char line[64];
        unsigned long long id = 0;
        struct reg g;
        int code;

        start_store(NULL);
        h_spawn(&p, "helper-producer", args, true);
        cr_assert_geq(h_read_line(&p, line, sizeof(line), 10000), 0, "producer did not register");
        cr_assert_eq(sscanf(line, "id %llu", &id), 1, "producer said \"%s\"", line);
        cr_assert_eq(h_wait(&p, 10000), 0, "producer failed");
        expect_stored(id);

        restart(sig);
        g = must_stat("rs/durable", "after the restart");
        cr_expect_eq(g.id, id, "rs/durable came back as id %" PRIu64 ", was %llu", g.id, id);
        cr_expect_eq(g.leases, 0);
        cr_expect(!g.ephemeral, "rs/durable came back ephemeral");
        code = consume("rs/durable", 262144, 7);
        cr_expect_eq(code, 0, "a consumer after the restart: helper-consumer exit %d "
                     "(4 not found, 7 wrong size, 8 wrong bytes)", code);
        cr_expect_eq(h_sd_stored_name(&sd, host_name(id)), 1,
                     "%s left the store after the restart: [%s]", host_name(id),
                     h_sd_store_str(&sd));
        finish();
}

Test(restart, durable_survives_sigterm)
{
        durable_survives(SIGTERM);
}

Test(restart, durable_survives_sigkill)
{
        durable_survives(SIGKILL);
}

/* ---- 3: an ephemeral registration of a live, idle producer --------------- */

Test(restart, ephemeral_of_live_producer_survives)
{
        struct h_child p;
        uint64_t id;
        struct reg g;
        int code;

        start_store(NULL);
        spawn_resume(&p);
        id = helper_reg(&p, "rs/eph", 65536, 3, true);
        expect_stored(id);

        restart(SIGTERM);
        /* restored detached, visible at once, before its producer notices */
        g = must_stat("rs/eph", "right after the restart, producer idle");
        cr_assert_eq(g.id, id, "rs/eph came back as id %" PRIu64 ", was %" PRIu64, g.id, id);
        cr_expect(g.ephemeral, "rs/eph came back durable");
        cr_expect_eq(g.pid, (uint32_t)p.pid, "rs/eph owned by pid %u, want the producer's %d",
                     g.pid, (int)p.pid);
        code = consume("rs/eph", 65536, 3);
        cr_expect_eq(code, 0, "a consumer after the restart: helper-consumer exit %d", code);

        /* the producer's next call resumes its session */
        expect_cmd(&p, "ping", "ok", "the producer's first call after the restart");
        g = must_stat("rs/eph", "after the producer's ping");
        cr_expect_eq(g.id, id);
        cr_expect(g.connected, "after the producer's next call (ping) rs/eph has no connected "
                  "owner: the session was not resumed");

        /* and ends with the producer's connection, as before the restart */
        helper_quit(&p);
        cr_expect_geq(wait_gone("rs/eph", 3000), 0,
                      "rs/eph outlived its resumed producer's disconnect");
        cr_expect_eq(h_sd_stored_name_settle(&sd, host_name(id), 0, 2000), 0,
                     "%s still stored after rs/eph ended: [%s]", host_name(id),
                     h_sd_store_str(&sd));
        finish();
}

/* ---- 4: a consumer's lease ----------------------------------------------- */

Test(restart, lease_survives)
{
        struct h_child prod, cons;
        char cmd[64], want[64], buf[512];
        uint64_t id;
        struct reg g;

        start_store(NULL);
        spawn_resume(&prod);
        spawn_resume(&cons);
        id = helper_reg(&prod, "rs/lease", 65536, 5, false);
        snprintf(want, sizeof(want), "id %" PRIu64, id);
        expect_cmd(&cons, "lookup rs/lease", want, "consumer lookup");
        expect_cmd(&cons, "check rs/lease 5", "ok", "consumer's view before the restart");
        cr_assert_eq(must_stat("rs/lease", "before the restart").leases, 1);

        restart(SIGTERM);
        g = must_stat("rs/lease", "after the restart");
        cr_assert_eq(g.id, id);
        cr_assert_eq(g.leases, 1, "the consumer's lease did not survive the restart (leases %u)",
                     g.leases);
        expect_cmd(&cons, "check rs/lease 5", "ok", "consumer's view after the restart");

        /* the producer (resumed) hears of the release of the restored lease */
        expect_cmd(&prod, "ping", "ok", "the producer's first call after the restart");
        snprintf(cmd, sizeof(cmd), "waitrel %" PRIu64 " 10000", id);
        send_cmd(&prod, "%s", cmd);
        h_sleep_ms(200);
        expect_cmd(&cons, "release rs/lease", "ok", "releasing the restored lease");
        cr_expect_eq(must_stat("rs/lease", "after the release").leases, 0,
                     "the restored lease is still counted after its release");
        read_reply(&prod, cmd, buf, sizeof(buf));
        cr_expect_str_eq(buf, "ok", "the producer's gpuipc_reg_wait_released: %s", buf);

        helper_quit(&cons);
        helper_quit(&prod);
        finish();
}

/* An unregistered buffer that a consumer still maps outlives two restarts:
 * the second replays the snapshot the first wrote, where a U record written
 * before the registration's leases freed it. */
Test(restart, unregistered_leased_survives_snapshots)
{
        struct h_child prod, cons;
        char want[64];
        uint64_t id;

        start_store(NULL);
        spawn_resume(&prod);
        spawn_resume(&cons);
        id = helper_reg(&prod, "rs/unreg", 65536, 6, false);
        snprintf(want, sizeof(want), "id %" PRIu64, id);
        expect_cmd(&cons, "lookup rs/unreg", want, "consumer lookup");
        expect_cmd(&prod, "unreg rs/unreg", "ok", "unregister while leased");
        expect_stored(id);

        restart(SIGTERM);
        restart(SIGKILL);
        cr_assert_eq(h_sd_stored_name_settle(&sd, host_name(id), 1, 2000), 1,
                     "host-%" PRIu64 " left the store after two restarts although a consumer "
                     "still holds a lease: %s", id, h_sd_store_str(&sd));
        expect_cmd(&cons, "check rs/unreg 6", "ok", "consumer's view after two restarts");
        expect_cmd(&cons, "release rs/unreg", "ok", "releasing the restored lease");
        cr_expect_eq(h_sd_stored_name_settle(&sd, host_name(id), 0, 2000), 0,
                     "host-%" PRIu64 " is still stored after the last release", id);
        helper_quit(&cons);
        helper_quit(&prod);
        finish();
}

/* ---- 5: a producer that dies while the daemon is down -------------------- */

Test(restart, producer_dead_while_down)
{
        struct h_child p;
        int64_t took;
        uint64_t id;

        start_store(NULL);
        spawn_resume(&p);
        id = helper_reg(&p, "rs/dead", 65536, 9, true);
        expect_stored(id);

        h_sd_kill(&sd, SIGTERM);
        cr_assert_eq(kill(p.pid, SIGKILL), 0);
        cr_assert_eq(h_wait(&p, 5000), 128 + SIGKILL);
        h_sd_start_again(&sd);

        took = wait_gone("rs/dead", 5000);
        cr_assert_geq(took, 0, "ephemeral rs/dead of a producer that died while the daemon was "
                      "down is still registered 5 s after the restart");
        cr_expect_leq(took, 2500, "rs/dead went only %" PRId64 " ms after the restart", took);
        cr_expect_eq(h_sd_stored_name_settle(&sd, host_name(id), 0, 2000), 0,
                     "%s still stored after rs/dead ended: [%s]", host_name(id),
                     h_sd_store_str(&sd));
        finish();
}

/* ---- 6: resume over the raw protocol ------------------------------------- */

#define MAX_REGS 16

struct hello_out {
        char error[64];         /* the error code, "" on success */
        bool has_session, has_resumed, resumed, has_regs, has_leases;
        bool regs_not_maps;     /* an entry of regs is not a map {id, name} */
        uint8_t session[16];
        unsigned n_regs, n_leases;
        uint64_t reg_ids[MAX_REGS];
        char reg_names[MAX_REGS][64];
};

static void pack_resume(msgpack_packer *pk, const uint8_t *token)
{
        proto_pack_str(pk, "resume");
        msgpack_pack_bin(pk, 16);
        msgpack_pack_bin_body(pk, token, 16);
}

/* hello, with resume when token is not NULL.  Plain returns, no
 * assertions: a forked child uses it too.  0, or a negative errno. */
static int send_hello(int fd, uint64_t seq, const uint8_t *token)
{
        struct proto_out o;
        uint8_t *b;
        size_t n;
        int r;

        proto_out_init(&o);
        msgpack_pack_map(&o.pk, token ? 4 : 3);
        proto_pack_kstr(&o.pk, "op", "hello");
        proto_pack_ku64(&o.pk, "seq", seq);
        proto_pack_ku64(&o.pk, "version", 1);
        if (token)
                pack_resume(&o.pk, token);
        r = proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT);
        if (r == 0) {
                b = proto_out_release(&o, &n);
                r = h_raw_send(fd, b, n, NULL, 0);
                free(b);
        }
        proto_out_free(&o);
        return r;
}

static int read_full(int fd, uint8_t *buf, size_t n, int64_t deadline)
{
        size_t done = 0;

        while (done < n) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int left = (int)(deadline - h_now_ms());
                ssize_t k;

                if (left <= 0)
                        return -ETIMEDOUT;
                if (poll(&p, 1, left) <= 0)
                        continue;
                k = read(fd, buf + done, n - done);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        return -ECONNRESET;
                done += (size_t)k;
        }
        return 0;
}

/* Reads the reply to hello seq (skipping events).  0 or a negative errno. */
static int read_hello(int fd, uint64_t seq, struct hello_out *h)
{
        int64_t deadline = h_now_ms() + 5000;

        memset(h, 0, sizeof(*h));
        for (;;) {
                const msgpack_object *err = NULL, *arr = NULL;
                struct proto_msg m;
                uint8_t hdr[4], *body;
                const uint8_t *bin;
                uint64_t got = 0;
                uint32_t len;
                size_t n;
                int r;

                r = read_full(fd, hdr, 4, deadline);
                if (r < 0)
                        return r;
                len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 |
                      hdr[3];
                if (len == 0 || len > PROTO_MAX_FRAME_LIMIT)
                        return -EBADMSG;
                body = malloc(len);
                if (!body)
                        return -ENOMEM;
                r = read_full(fd, body, len, deadline);
                if (r == 0)
                        r = proto_decode(body, len, &m, NULL);
                if (r < 0) {
                        free(body);
                        return r;
                }
                if (proto_get_u64(m.root, "seq", &got) < 0 || got != seq) {
                        proto_msg_free(&m);     /* an event */
                        free(body);
                        continue;
                }
                if (proto_get_map(m.root, "error", &err) == 0) {
                        const char *code = "?";
                        size_t code_len = 1;
                        proto_get_str(err, "code", &code, &code_len);
                        snprintf(h->error, sizeof(h->error), "%.*s", (int)code_len, code);
                }
                if (proto_get_bin(m.root, "session", &bin, &n) == 0 && n == 16) {
                        h->has_session = true;
                        memcpy(h->session, bin, 16);
                }
                h->has_resumed = proto_get_bool(m.root, "resumed", &h->resumed) == 0;
                if (proto_get_array(m.root, "regs", &arr) == 0) {
                        h->has_regs = true;
                        for (uint32_t i = 0; i < arr->via.array.size && h->n_regs < MAX_REGS; i++) {
                                const msgpack_object *e = &arr->via.array.ptr[i];
                                const char *s = "";
                                size_t sl = 0;
                                if (e->type != MSGPACK_OBJECT_MAP) {
                                        h->regs_not_maps = true;
                                        proto_obj_u64(e, &h->reg_ids[h->n_regs++]);
                                        continue;
                                }
                                proto_get_u64(e, "id", &h->reg_ids[h->n_regs]);
                                proto_get_str(e, "name", &s, &sl);
                                snprintf(h->reg_names[h->n_regs], sizeof(h->reg_names[0]), "%.*s",
                                         (int)sl, s);
                                h->n_regs++;
                        }
                }
                if (proto_get_array(m.root, "leases", &arr) == 0) {
                        h->has_leases = true;
                        h->n_leases = arr->via.array.size;
                }
                proto_msg_free(&m);
                free(body);
                return 0;
        }
}

static void hello_ok(int fd, uint64_t seq, const uint8_t *token, struct hello_out *h)
{
        int r = send_hello(fd, seq, token);
        cr_assert_eq(r, 0, "send hello: %s", strerror(-r));
        r = read_hello(fd, seq, h);
        cr_assert_eq(r, 0, "no hello reply: %s", strerror(-r));
        cr_assert_str_eq(h->error, "", "hello%s answered with error %s",
                         token ? " with resume" : "", h->error);
}

struct raw_reg {
        const char *name;
        uint64_t size;
};

static void pack_raw_reg(msgpack_packer *pk, void *data)
{
        const struct raw_reg *a = data;
        proto_pack_kstr(pk, "name", a->name);
        proto_pack_kstr(pk, "kind", "host");
        proto_pack_ku64(pk, "size", a->size);
        proto_pack_kbool(pk, "ephemeral", true);
        /* the memfd has no write seal: restore must not ask for one */
        proto_pack_kbool(pk, "shared_write", true);
        proto_pack_ku64(pk, "fds", 1);
}

/* In a child of another pid: 0 when refused (resumed false), 1 when resumed,
 * 2 when the reply lacked resumed, 3 on other failures. */
static int child_try_resume(const char *sock, const uint8_t *token)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct hello_out h;
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0 || strlen(sock) >= sizeof(sa.sun_path))
                return 3;
        strcpy(sa.sun_path, sock);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return 3;
        if (send_hello(fd, 1, token) < 0 || read_hello(fd, 1, &h) < 0 || h.error[0])
                return 3;
        close(fd);
        if (!h.has_resumed)
                return 2;
        return h.resumed ? 1 : 0;
}

Test(restart, resume_refused_to_other_pid)
{
        const uint8_t zero[16] = { 0 };
        struct raw_reg a = { "rs/raw", 8192 };
        struct hello_out h, h2;
        struct h_frame f;
        uint64_t id = 0;
        int fd, fd2, mfd, status;
        bool listed = false;
        uint8_t *p;
        pid_t pid;
        struct reg g;

        start_store(NULL);
        fd = h_raw_connect(sd.sock);
        hello_ok(fd, 1, NULL, &h);
        cr_assert(h.has_session, "the hello reply has no 16-byte session");
        cr_assert(memcmp(h.session, zero, 16) != 0, "the session token is all zero");

        mfd = memfd_create("rs-raw", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        cr_assert_geq(mfd, 0);
        cr_assert_eq(ftruncate(mfd, (off_t)a.size), 0);
        p = mmap(NULL, a.size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        cr_assert_neq(p, MAP_FAILED);
        for (size_t i = 0; i < a.size; i++)
                p[i] = h_pattern(i, 21);
        munmap(p, a.size);
        cr_assert_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
        cr_assert_eq(h_raw_request(fd, "register", 2, 6, pack_raw_reg, &a, &mfd, 1), 0);
        close(mfd);
        cr_assert_eq(h_raw_recv(fd, 5000, &f), 1, "no register reply");
        h_expect_reply(&f, 2, "");
        cr_assert_eq(proto_get_u64(f.m.root, "id", &id), 0);
        h_frame_free(&f);
        expect_stored(id);

        /* no restart yet: a live session is not resumable, even by its process */
        fd2 = h_raw_connect(sd.sock);
        hello_ok(fd2, 1, h.session, &h2);
        cr_expect(h2.has_resumed && !h2.resumed,
                  "a session whose connection is still open was resumed (or no resumed field)");
        close(fd2);

        restart(SIGTERM);
        h_raw_expect_eof(fd, 5000);     /* after the shutting_down event */
        close(fd);
        g = must_stat("rs/raw", "after the restart, session detached");
        cr_assert_eq(g.id, id);

        /* another pid, same uid: refused, and the session stays resumable */
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0)
                _exit(child_try_resume(sd.sock, h.session));
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status));
        cr_assert_neq(WEXITSTATUS(status), 1, "a process with another pid resumed the session");
        cr_assert_neq(WEXITSTATUS(status), 2, "a hello with resume was answered without resumed");
        cr_assert_eq(WEXITSTATUS(status), 0, "the other pid's hello with resume failed");
        must_stat("rs/raw", "after another pid's refused resume");

        /* the original process: resumed, with its registration */
        fd2 = h_raw_connect(sd.sock);
        hello_ok(fd2, 1, h.session, &h2);
        cr_assert(h2.has_resumed && h2.resumed, "the session's own process was not resumed");
        cr_assert(h2.has_regs, "a resumed hello reply without regs");
        cr_expect(h2.regs_not_maps, "regs entries must be registration ids (uint)");
        cr_expect(h2.has_leases, "a resumed hello reply without leases");
        cr_expect_eq(h2.n_leases, 0, "the session held no lease, the reply lists %u", h2.n_leases);
        for (unsigned i = 0; i < h2.n_regs; i++)
                listed |= h2.reg_ids[i] == id &&
                          (h2.regs_not_maps || strcmp(h2.reg_names[i], "rs/raw") == 0);
        cr_expect(listed, "regs (%u entries) does not list id %" PRIu64,
                  h2.n_regs, id);
        cr_expect(must_stat("rs/raw", "after the resume").connected,
                  "rs/raw has no connected owner after its session was resumed");

        /* a plain disconnect now ends the session: the ephemeral registration goes */
        close(fd2);
        cr_expect_geq(wait_gone("rs/raw", 3000), 0, "rs/raw outlived its resumed session's close");
        cr_expect_eq(h_sd_stored_name_settle(&sd, host_name(id), 0, 2000), 0,
                     "%s still stored after rs/raw ended: [%s]", host_name(id),
                     h_sd_store_str(&sd));
        finish();
}

/* ---- 7: without the store, clients register again ------------------------ */

Test(restart, no_store_reregisters)
{
        char sock[300], cmd[64];
        const char *args[] = { "--fdstore", "no", "--socket", sock, NULL };
        uint64_t id_d, id_e;
        struct h_child p;
        struct reg g;
        int code;

        snprintf(nostore_dir, sizeof(nostore_dir), "/tmp/gpuipc-rs-XXXXXX");
        cr_assert_not_null(mkdtemp(nostore_dir));
        snprintf(sock, sizeof(sock), "%s/gpuipcd.sock", nostore_dir);
        h_daemon_start(&h_d, args);
        spawn_resume(&p);
        id_d = helper_reg(&p, "rs/again-d", 131072, 11, false);
        id_e = helper_reg(&p, "rs/again-e", 65536, 12, true);

        h_daemon_stop(&h_d);
        h_daemon_start(&h_d, args);
        /* the daemon kept nothing; the producer's next call brings both back */
        expect_cmd(&p, "ping", "ok", "the producer's first call after the restart");
        g = must_stat("rs/again-d", "after the producer's ping");
        cr_expect_eq(g.pid, (uint32_t)p.pid, "rs/again-d owned by pid %u, want %d", g.pid,
                     (int)p.pid);
        cr_expect(g.connected);
        cr_expect(!g.ephemeral, "rs/again-d came back ephemeral");
        g = must_stat("rs/again-e", "after the producer's ping");
        cr_expect_eq(g.pid, (uint32_t)p.pid);
        cr_expect(g.ephemeral, "rs/again-e came back durable");
        code = consume("rs/again-d", 131072, 11);
        cr_expect_eq(code, 0, "rs/again-d after re-registering: helper-consumer exit %d", code);
        code = consume("rs/again-e", 65536, 12);
        cr_expect_eq(code, 0, "rs/again-e after re-registering: helper-consumer exit %d", code);

        /* the consumer looked up and released: the old id still works */
        snprintf(cmd, sizeof(cmd), "waitrel %" PRIu64 " 5000", id_d);
        expect_cmd(&p, cmd, "ok", "gpuipc_reg_wait_released with the id from before the restart");
        snprintf(cmd, sizeof(cmd), "waitrel %" PRIu64 " 5000", id_e);
        expect_cmd(&p, cmd, "ok", "gpuipc_reg_wait_released with the id from before the restart");
        helper_quit(&p);
        h_daemon_stop(&h_d);
        finish();
}

/* ---- 8: the store returns to its baseline -------------------------------- */

Test(restart, store_returns_to_baseline)
{
        gpuipc_client *c, *r;
        gpuipc_view *v = NULL;
        int n;

        start_store(NULL);
        c = connect_client();
        r = connect_client();
        for (int i = 0; i < 50; i++) {
                uint64_t id = register_host(c, "rs/cycle", 4096, (uint32_t)i);
                bool leased = i % 10 == 9;

                if (i == 0)
                        expect_stored(id);
                if (leased)
                        cr_assert_eq(gpuipc_view_lookup(r, "rs/cycle", 0, 0, &v), 0);
                cr_assert_eq(gpuipc_name_unregister(c, "rs/cycle"), 0, "%s", gpuipc_errmsg(c));
                if (leased) {
                        /* unregistered but leased: the memory, and its fd, stay */
                        cr_expect_eq(h_sd_stored_name(&sd, host_name(id)), 1,
                                     "%s left the store while a lease still holds it: [%s]",
                                     host_name(id), h_sd_store_str(&sd));
                        cr_assert_eq(gpuipc_view_release(v), 0);
                }
        }
        n = h_sd_stored_settle(&sd, "host-", 0, 3000);
        cr_expect_eq(n, 0, "after 50 register+unregister cycles the store holds %d host- fds: [%s]",
                     n, h_sd_store_str(&sd));
        cr_expect_eq(h_sd_stored_settle(&sd, "state", 1, 2000), 1, "journals stored: [%s]",
                     h_sd_store_str(&sd));
        cr_expect_eq(h_sd_stored(&sd, ""), 1,
                     "want only the journal left in the store, it holds [%s]", h_sd_store_str(&sd));
        gpuipc_client_free(r);
        gpuipc_client_free(c);
        finish();
}

/* ---- 9: registration ids continue after a restart ------------------------ */

Test(restart, ids_continue)
{
        uint64_t a, b, gone, fresh, top;
        gpuipc_client *c;

        start_store(NULL);
        c = connect_client();
        a = register_host(c, "rs/id-a", 4096, 1);
        b = register_host(c, "rs/id-b", 4096, 2);
        gone = register_host(c, "rs/id-c", 4096, 3);
        cr_assert_eq(gpuipc_name_unregister(c, "rs/id-c"), 0);
        gpuipc_client_free(c);
        cr_assert_eq(h_sd_stored_settle(&sd, "host-", 2, 2000), 2,
                     "want %s and %s stored (%s unregistered), the store holds [%s]", host_name(a),
                     host_name(b), host_name(gone), h_sd_store_str(&sd));

        restart(SIGTERM);
        cr_assert_eq(must_stat("rs/id-a", "after the restart").id, a);
        cr_assert_eq(must_stat("rs/id-b", "after the restart").id, b);
        c = connect_client();
        fresh = register_host(c, "rs/id-new", 4096, 4);
        top = a > b ? a : b;
        cr_expect_gt(fresh, top, "a registration after the restart got id %" PRIu64
                     ", not above the restored ids (%" PRIu64 ", %" PRIu64 ")", fresh, a, b);
        cr_expect_gt(fresh, gone, "a registration after the restart got id %" PRIu64
                     ": id %" PRIu64 " (unregistered before the restart) may be reused", fresh,
                     gone);
        gpuipc_client_free(c);
        finish();
}

/* ==== CUDA kinds, through the driver double ============================== */

#define IPC_SIZE 32768u
#define IPC_OFF  12345u

static void cuda_init_suite(void)
{
        init();
        setenv("GPUIPC_LIBCUDA", h_path("tests/cuda-double/libcuda.so.1"), 1);
        unsetenv("CUDA_VISIBLE_DEVICES");
}

TestSuite(restart_cuda, .init = cuda_init_suite, .fini = fini, .timeout = 240);

static const char *vmm_name(uint64_t alloc_id)
{
        static char bufs[4][32];
        static unsigned next;
        char *b = bufs[next++ % 4];
        snprintf(b, sizeof(bufs[0]), "vmm-%" PRIu64, alloc_id);
        return b;
}

static void spawn_cuda(struct h_child *ch)
{
        h_spawn(ch, "helper-cuda-resume", NULL, true);
        expect_cmd(ch, "ping", "ok", "helper-cuda-resume starting (the driver double loaded?)");
}

/* The answer "id N" to cmd, sent before. */
static uint64_t read_id(struct h_child *ch, const char *cmd)
{
        char buf[512];
        unsigned long long id;

        read_reply(ch, cmd, buf, sizeof(buf));
        cr_assert_eq(sscanf(buf, "id %llu", &id), 1, "\"%s\" answered \"%s\"", cmd, buf);
        return id;
}

static uint64_t helper_reg_cmd(struct h_child *ch, const char *cmd)
{
        send_cmd(ch, "%s", cmd);
        return read_id(ch, cmd);
}

/* helper-cuda-producer with args, to its "ready" and exit. */
static void produce_and_exit(const char *const *args)
{
        struct h_child prod;
        char line[64];
        int n, rc;

        h_spawn(&prod, "helper-cuda-producer", args, true);
        n = h_read_line(&prod, line, sizeof(line), 15000);
        rc = h_wait(&prod, 15000);
        cr_assert(n >= 0 && rc == 0, "helper-cuda-producer %s: exit %d, see its stderr", args[0],
                  rc);
        cr_assert_str_eq(line, "ready");
}

static void check_pattern(const void *data, size_t size, uint32_t seed, const char *what)
{
        const uint8_t *p = data;

        for (size_t i = 0; i < size; i++)
                if (p[i] != h_pattern(i, seed))
                        cr_assert_fail("%s: byte %zu is 0x%02x, want 0x%02x", what, i, p[i],
                                       h_pattern(i, seed));
}

/* A lookup by c, its kind and size checked and every byte read. */
static gpuipc_view *lookup_check(gpuipc_client *c, const char *name, gpuipc_kind kind,
                                 uint64_t size, uint32_t seed, const char *when)
{
        gpuipc_view *v = NULL;
        const gpuipc_info *info;
        char what[300];
        int r = gpuipc_view_lookup(c, name, 0, 0, &v);

        cr_assert_eq(r, 0, "%s: lookup %s: %s (%s)", when, name, gpuipc_strerror(r),
                     gpuipc_errmsg(c));
        info = gpuipc_view_info(v);
        cr_assert_eq(info->kind, kind, "%s: %s has kind %d, want %d", when, name, info->kind,
                     kind);
        cr_assert_eq(gpuipc_view_size(v), size, "%s: %s is %zu bytes, want %" PRIu64, when, name,
                     gpuipc_view_size(v), size);
        snprintf(what, sizeof(what), "%s: %s", when, name);
        check_pattern(gpuipc_view_data(v), size, seed, what);
        return v;
}

/* What a raw lookup shows of a CUDA registration: handles the library
 * does not expose. */
struct raw_view {
        uint64_t lease, id, offset, alloc_id, buffer_id;
        char kind[16];
        bool has_handle, has_event, has_key;
        uint8_t handle[64], event[64], key[16];
};

static void pack_name(msgpack_packer *pk, void *data)
{
        proto_pack_kstr(pk, "name", data);
}

static void pack_lease_id(msgpack_packer *pk, void *data)
{
        proto_pack_ku64(pk, "lease", *(const uint64_t *)data);
}

static void copy_bin(const msgpack_object *m, const char *key, uint8_t *out, size_t n, bool *has)
{
        const uint8_t *b;
        size_t len;

        *has = proto_get_bin(m, key, &b, &len) == 0 && len == n;
        if (*has)
                memcpy(out, b, n);
}

/* Looks name up on a raw connection and releases the lease at once. */
static struct raw_view raw_lookup(const char *name)
{
        const msgpack_object *reg, *alloc;
        struct raw_view rv = { 0 };
        struct h_frame f;
        const char *s;
        size_t sl;
        int fd = h_raw_connect(sd.sock);

        h_raw_hello(fd, 1);
        cr_assert_eq(h_raw_request(fd, "lookup", 2, 1, pack_name, (void *)name, NULL, 0), 0);
        cr_assert_eq(h_raw_recv(fd, 5000, &f), 1, "no reply to a raw lookup of %s", name);
        h_expect_reply(&f, 2, "");
        cr_assert_eq(proto_get_u64(f.m.root, "lease", &rv.lease), 0);
        cr_assert_eq(proto_get_map(f.m.root, "reg", &reg), 0);
        (void)proto_get_u64(reg, "id", &rv.id);
        (void)proto_get_u64(reg, "offset", &rv.offset);
        if (proto_get_str(reg, "kind", &s, &sl) == 0)
                snprintf(rv.kind, sizeof(rv.kind), "%.*s", (int)sl, s);
        if (proto_get_map(reg, "alloc", &alloc) == 0) {
                (void)proto_get_u64(alloc, "id", &rv.alloc_id);
                copy_bin(alloc, "key", rv.key, sizeof(rv.key), &rv.has_key);
        }
        (void)proto_get_u64(reg, "buffer_id", &rv.buffer_id);
        copy_bin(reg, "handle", rv.handle, sizeof(rv.handle), &rv.has_handle);
        copy_bin(reg, "event", rv.event, sizeof(rv.event), &rv.has_event);
        h_frame_free(&f);
        cr_assert_eq(h_raw_request(fd, "release", 3, 1, pack_lease_id, &rv.lease, NULL, 0), 0);
        h_raw_expect_reply(fd, 3, "");
        close(fd);
        return rv;
}

static void expect_same_reg(const struct reg *now, const struct reg *was, const char *name)
{
        cr_expect_eq(now->id, was->id, "%s came back as id %" PRIu64 ", was %" PRIu64, name,
                     now->id, was->id);
        cr_expect_eq(now->kind, was->kind, "%s came back as kind %d, was %d", name, now->kind,
                     was->kind);
        cr_expect_eq(now->size, was->size, "%s: size %" PRIu64 ", was %" PRIu64, name, now->size,
                     was->size);
        cr_expect_eq(now->offset, was->offset, "%s: offset %" PRIu64 ", was %" PRIu64, name,
                     now->offset, was->offset);
        cr_expect_eq(now->alloc_id, was->alloc_id, "%s: alloc id %" PRIu64 ", was %" PRIu64,
                     name, now->alloc_id, was->alloc_id);
        cr_expect_eq(now->alloc_size, was->alloc_size, "%s: alloc size %" PRIu64 ", was %" PRIu64,
                     name, now->alloc_size, was->alloc_size);
        cr_expect_eq(now->ephemeral, was->ephemeral, "%s: ephemeral %d, was %d", name,
                     now->ephemeral, was->ephemeral);
}

/* Exactly one registration named name in the list of its namespace. */
static void expect_listed_once(const char *prefix, const char *name, uint64_t id)
{
        gpuipc_client *c = connect_client();
        gpuipc_list *l = NULL;
        unsigned n = 0;
        int r = gpuipc_list_fetch(c, prefix, 0, &l);

        cr_assert_eq(r, 0, "list %s: %s", prefix, gpuipc_strerror(r));
        for (size_t i = 0; i < gpuipc_list_count(l); i++) {
                const gpuipc_info *info = gpuipc_list_get(l, i);
                if (strcmp(info->name, name) != 0)
                        continue;
                n++;
                cr_expect_eq(info->id, id, "list shows %s as id %" PRIu64 ", want %" PRIu64, name,
                             info->id, id);
        }
        cr_expect_eq(n, 1, "list %s shows %s %u times", prefix, name, n);
        gpuipc_list_free(l);
        gpuipc_client_free(c);
}

/* ---- c1: a durable cuda-vmm registration of an exited producer ----------- */

static void vmm_durable_survives(int sig)
{
        const char *args[] = { "vmm", "rs/vmm", "0", "3145733", "9", NULL };
        struct raw_view before, after;
        struct reg was, now;
        gpuipc_client *c;
        gpuipc_view *v;

        start_store(NULL);
        produce_and_exit(args);
        was = must_stat("rs/vmm", "before the restart");
        cr_assert_eq(was.kind, GPUIPC_KIND_CUDA_VMM, "rs/vmm is kind %d", was.kind);
        cr_assert_neq(was.alloc_id, 0);
        cr_assert(!was.ephemeral);
        cr_assert_eq(h_sd_stored_name_settle(&sd, vmm_name(was.alloc_id), 1, 2000), 1,
                     "the allocation of rs/vmm is not in the fd store as %s: [%s]",
                     vmm_name(was.alloc_id), h_sd_store_str(&sd));
        before = raw_lookup("rs/vmm");
        cr_assert(before.has_key, "a raw lookup of cuda-vmm rs/vmm has no alloc key");

        restart(sig);
        now = must_stat("rs/vmm", "after the restart");
        expect_same_reg(&now, &was, "rs/vmm");
        cr_expect_eq(now.leases, 0, "rs/vmm has %u leases after the restart", now.leases);
        cr_expect(!now.connected, "the exited producer's rs/vmm has a connected owner");
        expect_listed_once("rs", "rs/vmm", was.id);
        after = raw_lookup("rs/vmm");
        cr_expect_eq(after.alloc_id, before.alloc_id);
        cr_expect(after.has_key && memcmp(after.key, before.key, sizeof(after.key)) == 0,
                  "the allocation key of rs/vmm changed across the restart: consumers key their "
                  "imports by it");
        c = connect_client();
        v = lookup_check(c, "rs/vmm", GPUIPC_KIND_CUDA_VMM, 3145733, 9, "after the restart");
        cr_expect_eq(gpuipc_view_info(v)->alloc_id, was.alloc_id);
        cr_expect_eq(must_stat("rs/vmm", "with the consumer's view").leases, 1);
        cr_assert_eq(gpuipc_view_release(v), 0, "%s", gpuipc_errmsg(c));
        gpuipc_client_free(c);
        cr_expect_eq(h_sd_stored_name(&sd, vmm_name(was.alloc_id)), 1,
                     "%s left the store, rs/vmm still registered: [%s]", vmm_name(was.alloc_id),
                     h_sd_store_str(&sd));
        cr_expect_eq(h_sd_stored(&sd, "vmm-"), 1, "want one vmm- fd stored: [%s]",
                     h_sd_store_str(&sd));
        finish();
}

Test(restart_cuda, vmm_durable_survives_sigkill)
{
        vmm_durable_survives(SIGKILL);
}

Test(restart_cuda, vmm_durable_survives_sigterm)
{
        vmm_durable_survives(SIGTERM);
}

/* ---- c2: two registrations of one cuda-vmm allocation -------------------- */

#define V2_SIZE 524295u
#define V2_OFF  1060921u

Test(restart_cuda, vmm_shared_allocation)
{
        struct h_child p;
        struct reg was0, was1, now0, now1;
        gpuipc_view *v0, *v1, *v1b;
        gpuipc_client *c;
        const char *an;
        char buf[128];
        unsigned long long id0, id1;

        start_store(NULL);
        spawn_cuda(&p);
        snprintf(buf, sizeof(buf), "vmm2 rs/v2 %u %u 21", V2_SIZE, V2_OFF);
        send_cmd(&p, "%s", buf);
        read_reply(&p, buf, buf, sizeof(buf));
        cr_assert_eq(sscanf(buf, "id %llu %llu", &id0, &id1), 2, "vmm2 answered \"%s\"", buf);
        was0 = must_stat("rs/v2/0", "before the restart");
        was1 = must_stat("rs/v2/1", "before the restart");
        cr_assert_eq(was0.kind, GPUIPC_KIND_CUDA_VMM);
        cr_assert_eq(was1.kind, GPUIPC_KIND_CUDA_VMM);
        cr_assert_eq(was0.alloc_id, was1.alloc_id, "two regions of one cudabuf got allocations "
                     "%" PRIu64 " and %" PRIu64, was0.alloc_id, was1.alloc_id);
        cr_assert_eq(was1.alloc_regs, 2);
        cr_assert_eq(was1.offset, V2_OFF);
        an = vmm_name(was0.alloc_id);
        cr_assert_eq(h_sd_stored_settle(&sd, "vmm-", 1, 2000), 1,
                     "one allocation, two registrations: want one vmm- fd stored, [%s]",
                     h_sd_store_str(&sd));
        cr_assert_eq(h_sd_stored_name(&sd, an), 1, "%s not stored: [%s]", an,
                     h_sd_store_str(&sd));
        c = connect_client();
        v1 = lookup_check(c, "rs/v2/1", GPUIPC_KIND_CUDA_VMM, V2_SIZE, 22, "before the restart");

        restart(SIGKILL);
        cr_expect_eq(h_sd_stored(&sd, "vmm-"), 1, "after the restart want one vmm- fd stored, "
                     "[%s]", h_sd_store_str(&sd));
        cr_expect_eq(h_sd_stored_name(&sd, an), 1, "%s not stored after the restart: [%s]", an,
                     h_sd_store_str(&sd));
        now0 = must_stat("rs/v2/0", "after the restart");
        now1 = must_stat("rs/v2/1", "after the restart");
        expect_same_reg(&now0, &was0, "rs/v2/0");
        expect_same_reg(&now1, &was1, "rs/v2/1");
        cr_expect_eq(now1.alloc_regs, 2, "the allocation has %u registrations after the restart",
                     now1.alloc_regs);
        cr_expect_eq(now1.leases, 1, "the consumer's lease on rs/v2/1 did not survive (leases %u)",
                     now1.leases);
        v0 = lookup_check(c, "rs/v2/0", GPUIPC_KIND_CUDA_VMM, V2_SIZE, 21, "after the restart");
        v1b = lookup_check(c, "rs/v2/1", GPUIPC_KIND_CUDA_VMM, V2_SIZE, 22, "after the restart");
        check_pattern(gpuipc_view_data(v1), V2_SIZE, 22, "the view from before the restart");

        /* the producer (resumed) unregisters both; the leases keep the memory */
        expect_cmd(&p, "unreg rs/v2/0", "ok", "the producer unregisters after the restart");
        expect_cmd(&p, "unreg rs/v2/1", "ok", "the producer unregisters after the restart");
        cr_expect_eq(h_sd_stored_name(&sd, an), 1, "%s left the store while leases still map "
                     "it: [%s]", an, h_sd_store_str(&sd));
        cr_assert_eq(gpuipc_view_release(v0), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_view_release(v1b), 0, "%s", gpuipc_errmsg(c));
        cr_expect_eq(h_sd_stored_name(&sd, an), 1, "%s left the store while the lease from "
                     "before the restart still maps it: [%s]", an, h_sd_store_str(&sd));
        cr_assert_eq(gpuipc_view_release(v1), 0, "releasing the lease from before the restart: "
                     "%s", gpuipc_errmsg(c));
        cr_expect_eq(h_sd_stored_settle(&sd, "vmm-", 0, 3000), 0,
                     "both registrations unregistered and released, the store still holds "
                     "[%s]", h_sd_store_str(&sd));
        gpuipc_client_free(c);
        expect_cmd(&p, "free rs/v2", "ok", "the producer frees its cudabuf");
        helper_quit(&p);
        finish();
}

/* ---- c3: a cuda-ipc registration of a live producer ---------------------- */

static void ipc_survives(bool resume_first)
{
        struct raw_view before, after;
        struct h_child p;
        struct reg was, now;
        gpuipc_client *c;
        gpuipc_view *v, *v2;
        char cmd[128];
        uint64_t id;
        int r = 0;

        start_store(NULL);
        spawn_cuda(&p);
        snprintf(cmd, sizeof(cmd), "ipc rs/ipc %u %u 31", IPC_SIZE, IPC_OFF);
        id = helper_reg_cmd(&p, cmd);
        was = must_stat("rs/ipc", "before the restart");
        cr_assert_eq(was.kind, GPUIPC_KIND_CUDA_IPC, "rs/ipc is kind %d", was.kind);
        cr_assert(was.ephemeral && was.has_event);
        cr_assert_eq(was.offset, IPC_OFF);
        before = raw_lookup("rs/ipc");
        cr_assert(before.has_handle && before.has_event, "a raw lookup of rs/ipc lacks a handle");
        cr_expect_eq(h_sd_stored(&sd, "vmm-"), 0, "a cuda-ipc registration stored an fd: [%s]",
                     h_sd_store_str(&sd));
        c = connect_client();
        v = lookup_check(c, "rs/ipc", GPUIPC_KIND_CUDA_IPC, IPC_SIZE, 31, "before the restart");

        restart(SIGKILL);
        now = must_stat("rs/ipc", "after the restart, producer idle");
        expect_same_reg(&now, &was, "rs/ipc");
        cr_expect_eq(now.id, id);
        cr_expect_eq(now.buffer_id, was.buffer_id, "rs/ipc: buffer id %" PRIu64 ", was %" PRIu64,
                     now.buffer_id, was.buffer_id);
        cr_expect(now.has_event, "rs/ipc lost its event across the restart");
        cr_expect_eq(now.pid, (uint32_t)p.pid, "rs/ipc owned by pid %u, want the producer's %d",
                     now.pid, (int)p.pid);
        cr_expect_eq(now.leases, 1, "the consumer's lease on rs/ipc did not survive (leases %u)",
                     now.leases);
        after = raw_lookup("rs/ipc");
        cr_expect_eq(after.id, id);
        cr_expect_eq(after.alloc_id, before.alloc_id, "alloc id %" PRIu64 " after, %" PRIu64
                     " before the restart", after.alloc_id, before.alloc_id);
        cr_expect_eq(after.buffer_id, before.buffer_id);
        cr_expect(after.has_handle &&
                  memcmp(after.handle, before.handle, sizeof(after.handle)) == 0,
                  "the IPC handle of rs/ipc changed across the restart");
        cr_expect(after.has_event && memcmp(after.event, before.event, sizeof(after.event)) == 0,
                  "the IPC event handle of rs/ipc changed across the restart");
        v2 = lookup_check(c, "rs/ipc", GPUIPC_KIND_CUDA_IPC, IPC_SIZE, 31, "after the restart");
        cr_expect_eq(gpuipc_view_wait_stream(v, NULL), 0, "the view from before the restart: %s",
                     gpuipc_errmsg(c));

        if (resume_first) {
                expect_cmd(&p, "ping", "ok", "the producer's first call after the restart");
                cr_expect(must_stat("rs/ipc", "after the producer's ping").connected,
                          "rs/ipc has no connected owner after its producer's call");
        }
        /* the producer exits: its cuda-ipc registration goes, as ever */
        helper_quit(&p);
        cr_expect_geq(wait_gone("rs/ipc", 3000), 0, "cuda-ipc rs/ipc outlived its producer "
                      "(%s) after the restart", resume_first ? "resumed" : "never resumed");
        for (int i = 0; i < 100; i++) {
                r = gpuipc_view_wait_stream(v2, NULL);
                if (r != 0)
                        break;
                h_sleep_ms(20);
        }
        cr_expect_eq(r, -ESTALE, "a consumer's view after the producer's exit: wait_stream %d "
                     "(%s), want -ESTALE (revoked)", r, gpuipc_errmsg(c));
        gpuipc_view_release(v2);
        gpuipc_view_release(v);
        gpuipc_client_free(c);
        finish();
}

Test(restart_cuda, ipc_of_idle_producer_survives)
{
        ipc_survives(false);
}

Test(restart_cuda, ipc_of_resumed_producer_survives)
{
        ipc_survives(true);
}

/* ---- c4: adopted buffers -------------------------------------------------- */

/* Adopted by a producer that stays (idle) across the restart, and frees its
 * own memory (and event) after the adopt. */
static void adopted_survives(bool event)
{
        struct h_child p;
        struct reg was, now;
        gpuipc_client *c;
        gpuipc_view *v;
        char cmd[128];
        uint64_t id;

        start_store(NULL);
        spawn_cuda(&p);
        snprintf(cmd, sizeof(cmd), "ipc rs/ad 1048579 4096 41%s", event ? "" : " noevent");
        id = helper_reg_cmd(&p, cmd);
        expect_cmd(&p, "adopt rs/ad", "leases 0", "adopting rs/ad");
        expect_cmd(&p, "free rs/ad", "ok", "the producer frees its own memory");
        was = must_stat("rs/ad", "after the adopt");
        cr_assert_eq(was.kind, GPUIPC_KIND_CUDA_VMM, "adopted rs/ad is kind %d", was.kind);
        cr_assert(!was.ephemeral, "adopted rs/ad is ephemeral");
        cr_assert_eq(was.offset, 0);
        cr_assert_eq(h_sd_stored_name_settle(&sd, vmm_name(was.alloc_id), 1, 2000), 1,
                     "the adopted allocation is not in the fd store as %s: [%s]",
                     vmm_name(was.alloc_id), h_sd_store_str(&sd));
        c = connect_client();
        v = lookup_check(c, "rs/ad", GPUIPC_KIND_CUDA_VMM, 1048579, 41,
                         event ? "after the adopt of a registration with an event, the "
                                 "producer's event destroyed" : "after the adopt");
        cr_assert_eq(gpuipc_view_release(v), 0);

        restart(SIGKILL);
        now = must_stat("rs/ad", "after the restart");
        cr_expect_eq(now.id, id);
        expect_same_reg(&now, &was, "adopted rs/ad");
        v = lookup_check(c, "rs/ad", GPUIPC_KIND_CUDA_VMM, 1048579, 41, "after the restart");
        cr_expect_eq(gpuipc_view_info(v)->offset, 0);
        cr_assert_eq(gpuipc_view_release(v), 0);
        gpuipc_client_free(c);
        /* durable now: the producer's exit leaves it */
        helper_quit(&p);
        cr_expect_lt(wait_gone("rs/ad", 1000), 0, "adopted (durable) rs/ad went with its "
                     "producer after the restart");
        finish();
}

Test(restart_cuda, adopted_survives)
{
        adopted_survives(false);
}

/* The producer's IPC event goes with the producer's memory. */
Test(restart_cuda, adopted_with_event_survives)
{
        adopted_survives(true);
}

/* Adopted by helper-cuda-producer adopt, which exits before the restart. */
Test(restart_cuda, adopted_of_exited_producer_survives)
{
        static const struct {
                const char *name;
                uint64_t size, alloc_size;
                uint32_t seed;
        } want[] = {
                { "ad/vmm", 3145733, 4u << 20, 40 },
                { "ad/a", 1048579, 2u << 20, 41 },
                { "ad/b", 3145728, 4u << 20, 42 },
        };
        const char *args[] = { "adopt", "ad", "0", "40", NULL };
        struct reg was[3], now;
        gpuipc_client *c;
        gpuipc_view *v;

        start_store(NULL);
        produce_and_exit(args);
        for (int i = 0; i < 3; i++) {
                was[i] = must_stat(want[i].name, "before the restart");
                cr_assert_eq(was[i].kind, GPUIPC_KIND_CUDA_VMM, "%s is kind %d", want[i].name,
                             was[i].kind);
                cr_assert(!was[i].ephemeral, "%s is ephemeral", want[i].name);
                cr_assert_eq(h_sd_stored_name_settle(&sd, vmm_name(was[i].alloc_id), 1, 2000), 1,
                             "%s: %s is not in the store: [%s]", want[i].name,
                             vmm_name(was[i].alloc_id), h_sd_store_str(&sd));
        }

        restart(SIGKILL);
        c = connect_client();
        for (int i = 0; i < 3; i++) {
                char when[64];
                int r = stat_name(want[i].name, &now);

                cr_expect_eq(r, 0, "%s (%s) is gone after the restart: %s", want[i].name,
                             i ? "adopted" : "registered as cuda-vmm", gpuipc_strerror(r));
                if (r < 0)
                        continue;
                expect_same_reg(&now, &was[i], want[i].name);
                snprintf(when, sizeof(when), "after the restart");
                v = lookup_check(c, want[i].name, GPUIPC_KIND_CUDA_VMM, want[i].size,
                                 want[i].seed, when);
                cr_expect_eq(gpuipc_view_info(v)->alloc_size, want[i].alloc_size);
                cr_expect_eq(gpuipc_view_info(v)->offset, 0);
                cr_assert_eq(gpuipc_view_release(v), 0);
        }
        gpuipc_client_free(c);
        cr_expect_eq(h_sd_stored(&sd, "vmm-"), 3, "want the three allocations stored: [%s]",
                     h_sd_store_str(&sd));
        finish();
}

/* ==== calls in flight during a restart ==================================== */

TestSuite(restart_inflight, .init = cuda_init_suite, .fini = fini, .timeout = 240);

/* How the call is caught in flight. */
enum inflight {
        UNREAD,         /* the daemon is stopped: the request is never read */
        REPLY_LOST,     /* the daemon does it; the reply goes with the connection */
};

/* Sends cmd, armed for its request op; returns once the request is out
 * (UNREAD: the daemon is stopped) or the daemon has answered it
 * (REPLY_LOST).  The caller restarts the daemon, then reads the answer. */
static void in_flight(struct h_child *p, enum inflight how, const char *op, const char *cmd)
{
        char arm[64], buf[128];
        const char *mark = how == UNREAD ? "sent" : "dropped";

        snprintf(arm, sizeof(arm), "arm %s %s", how == UNREAD ? "stop" : "drop", op);
        expect_cmd(p, arm, "ok", "arming helper-cuda-resume");
        if (how == UNREAD)
                cr_assert_eq(kill(sd.pid, SIGSTOP), 0);
        send_cmd(p, "%s", cmd);
        read_reply(p, cmd, buf, sizeof(buf));
        cr_assert_str_eq(buf, mark, "\"%s\" (%s) answered \"%s\" before the restart", cmd, arm,
                         buf);
}

/* ---- i1: register ---------------------------------------------------------- */

static void reg_in_flight(enum inflight how)
{
        const char *cmd = "hreg rs/if-reg 65536 51";
        struct h_child p;
        struct reg g, done = { 0 };
        uint64_t id;
        int code;

        start_store(NULL);
        spawn_cuda(&p);
        in_flight(&p, how, "register", cmd);
        if (how == REPLY_LOST)
                done = must_stat("rs/if-reg", "once the daemon answered the register");
        restart(SIGKILL);
        id = read_id(&p, cmd);
        g = must_stat("rs/if-reg", "after the register in flight");
        cr_expect_eq(g.id, id, "the register in flight answered id %" PRIu64 ", rs/if-reg is id %"
                     PRIu64, id, g.id);
        if (how == REPLY_LOST)
                cr_expect_eq(g.id, done.id, "the daemon registered rs/if-reg as id %" PRIu64
                             " before the restart, it is id %" PRIu64 " after", done.id, g.id);
        cr_expect_eq(g.pid, (uint32_t)p.pid);
        cr_expect(g.connected, "rs/if-reg has no connected owner after the register in flight");
        cr_expect(!g.ephemeral);
        expect_listed_once("rs", "rs/if-reg", g.id);
        expect_stored(g.id);
        cr_expect_eq(h_sd_stored(&sd, "host-"), 1, "want one host- fd stored: [%s]",
                     h_sd_store_str(&sd));
        code = consume("rs/if-reg", 65536, 51);
        cr_expect_eq(code, 0, "a consumer of rs/if-reg: helper-consumer exit %d", code);
        expect_cmd(&p, "unreg rs/if-reg", "ok", "the producer unregisters");
        cr_expect_geq(wait_gone("rs/if-reg", 2000), 0);
        helper_quit(&p);
        finish();
}

Test(restart_inflight, register_unread)
{
        reg_in_flight(UNREAD);
}

Test(restart_inflight, register_reply_lost)
{
        reg_in_flight(REPLY_LOST);
}

/* The library keeps a copy of every cuda-ipc register request it made (it
 * needs no fd), to register it again where a restarted daemon lost it (see
 * docs/restart.md, Limits): that of a register whose reply was lost too.
 * Here the next daemon starts without the store. */
Test(restart_inflight, register_reply_lost_kept_for_reregister)
{
        char dir[256], sock[300];
        const char *args[] = { "--fdstore", "no", "--socket", sock, NULL };
        struct h_child p;
        struct reg g;
        int r;

        start_store(NULL);
        spawn_cuda(&p);
        helper_reg_cmd(&p, "ipc rs/kept-ctl 4096 0 53");
        in_flight(&p, REPLY_LOST, "register", "ipc rs/kept 4096 0 54");
        restart(SIGKILL);
        read_id(&p, "ipc rs/kept 4096 0 54");
        cr_expect_eq(h_sd_errors(&sd), 0);

        /* the same socket path, served by a daemon that kept nothing */
        snprintf(dir, sizeof(dir), "%s", sd.dir);
        snprintf(sock, sizeof(sock), "%s", sd.sock);
        h_sd_stop(&sd);
        cr_assert_eq(mkdir(dir, 0700), 0, "mkdir %s: %s", dir, strerror(errno));
        snprintf(nostore_dir, sizeof(nostore_dir), "%s", dir);
        h_daemon_start(&h_d, args);
        expect_cmd(&p, "ping", "ok", "the producer's first call after the restart");
        g = must_stat("rs/kept-ctl", "after a restart that lost everything");
        cr_expect_eq(g.pid, (uint32_t)p.pid);
        r = stat_name("rs/kept", &g);
        cr_expect_eq(r, 0, "rs/kept, registered by a register whose reply was lost, is not "
                     "registered again after a restart that lost the registry: %s "
                     "(rs/kept-ctl, registered normally, is)", gpuipc_strerror(r));
        helper_quit(&p);
        h_daemon_stop(&h_d);
        finished = true;
}

/* ---- i2: lookup ------------------------------------------------------------ */

static void lookup_in_flight(enum inflight how)
{
        const char *args[] = { "vmm", "rs/if-look", "0", "3145733", "61", NULL };
        const char *cmd = "lookup rs/if-look";
        struct h_child p;
        struct reg g;
        uint64_t id;

        start_store(NULL);
        produce_and_exit(args);
        g = must_stat("rs/if-look", "before the restart");
        spawn_cuda(&p);
        in_flight(&p, how, "lookup", cmd);
        if (how == REPLY_LOST)
                cr_assert_eq(must_stat("rs/if-look", "once the daemon answered the lookup").leases,
                             1);
        restart(SIGKILL);
        id = read_id(&p, cmd);
        cr_expect_eq(id, g.id);
        g = must_stat("rs/if-look", "after the lookup in flight");
        cr_expect_eq(g.leases, 1, "after a lookup in flight (%s) rs/if-look has %u leases, "
                     "want exactly the consumer's one", how == UNREAD ? "never read" :
                     "reply lost", g.leases);
        expect_cmd(&p, "check rs/if-look 61", "ok", "the view of the lookup in flight");
        expect_cmd(&p, "release rs/if-look", "ok", "releasing the view of the lookup in flight");
        g = must_stat("rs/if-look", "after the release");
        cr_expect_eq(g.leases, 0, "after the consumer's only release rs/if-look has %u leases",
                     g.leases);
        helper_quit(&p);
        finish();
}

Test(restart_inflight, lookup_unread)
{
        lookup_in_flight(UNREAD);
}

Test(restart_inflight, lookup_reply_lost)
{
        lookup_in_flight(REPLY_LOST);
}

/* ---- c4: a cuda-vmm range over three chunks (expandable segments) -------- */

/* Bytes at data are h_pattern(from + j, seed). */
static void check_from(const void *data, size_t n, uint64_t from, uint32_t seed,
                       const char *what)
{
        const uint8_t *p = data;

        for (size_t j = 0; j < n; j++)
                if (p[j] != h_pattern(from + j, seed))
                        cr_assert_fail("%s: byte %zu is 0x%02x, want 0x%02x", what, j, p[j],
                                       h_pattern(from + j, seed));
}

Test(restart_cuda, vmm_chunks_survive)
{
        const char *args[] = { "chunks", "rs/es", "5", NULL };
        const uint64_t chunk = 2ull << 20;
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v = NULL;
        char line[64];

        start_store(NULL);
        setenv("GPUIPC_LIBCUDA", h_path("tests/cuda-double/libcuda.so.1"), 1);
        h_spawn(&prod, "helper-alloc", args, true);
        cr_assert_geq(h_read_line(&prod, line, sizeof(line), 15000), 0);
        cr_assert_str_eq(line, "ready");
        close(prod.in);
        prod.in = -1;
        cr_assert_eq(h_wait(&prod, 15000), 0);
        /* Three chunks, shared by the two registrations: three entries. */
        cr_assert_eq(h_sd_stored_settle(&sd, "vmm-", 3, 2000), 3, "want 3 vmm- fds: [%s]",
                     h_sd_store_str(&sd));
        restart(SIGKILL);
        c = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c, "rs/es", 0, 0, &v), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_view_info(v)->n_chunks, 3);
        check_from(gpuipc_view_data(v), 2 * chunk, chunk / 2, 5, "rs/es after the restart");
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(gpuipc_view_lookup(c, "rs/es-b", 0, 0, &v), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_view_info(v)->n_chunks, 2);
        check_from(gpuipc_view_data(v), 3 * chunk / 2, 3 * chunk / 2, 5,
                   "rs/es-b after the restart");
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(gpuipc_name_unregister(c, "rs/es"), 0);
        /* The first chunk was rs/es's alone. */
        cr_assert_eq(h_sd_stored_settle(&sd, "vmm-", 2, 3000), 2, "[%s]", h_sd_store_str(&sd));
        cr_assert_eq(gpuipc_name_unregister(c, "rs/es-b"), 0);
        cr_assert_eq(h_sd_stored_settle(&sd, "vmm-", 0, 3000), 0, "[%s]", h_sd_store_str(&sd));
        gpuipc_client_free(c);
        finish();
}

/* ==== what the owner of a buffer is told across restarts, compaction, ids
 * without the store ======================================================== */

TestSuite(restart_events, .init = init, .fini = fini, .timeout = 240);
TestSuite(restart_journal, .init = init, .fini = fini, .timeout = 240);
TestSuite(restart_nostore, .init = init, .fini = fini, .timeout = 240);

/* A 4 KiB host buffer registered with flags; its id. */
static uint64_t register_flags(gpuipc_client *c, const char *name, unsigned flags)
{
        gpuipc_hostbuf *b = NULL;
        uint64_t id = 0;
        int r;

        cr_assert_eq(gpuipc_hostbuf_new(4096, &b), 0);
        memset(gpuipc_hostbuf_data(b), 0x5a, 4096);
        r = gpuipc_hostbuf_register(c, name, b, NULL, flags, &id);
        cr_assert_eq(r, 0, "register %s: %s (%s)", name, gpuipc_strerror(r), gpuipc_errmsg(c));
        gpuipc_hostbuf_free(b);
        return id;
}

static void counts(gpuipc_client *c, uint64_t *regs, uint64_t *leases)
{
        gpuipc_stats *s = NULL;
        int r = gpuipc_stats_fetch(c, &s);

        cr_assert_eq(r, 0, "stats: %s (%s)", gpuipc_strerror(r), gpuipc_errmsg(c));
        *regs = s->registrations;
        *leases = s->leases;
        gpuipc_stats_free(s);
}

/* SIGTERM closes the consumer's connection before the producer's; the
 * journal is frozen by then, so its lease comes back after the restart and
 * the producer must not be told "released". */
Test(restart_events, sigterm_false_release)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL;
        uint64_t id, regs, leases;
        int r;

        h_sd_start(&sd, NULL);
        p = connect_client();
        id = register_flags(p, "t/a", 0);
        c = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c, "t/a", 0, 0, &v), 0);
        h_sd_restart(&sd, SIGTERM);
        r = gpuipc_reg_wait_released(p, id, 1000);
        counts(p, &regs, &leases);
        cr_expect_neq(r, 0, "producer told 'released' while the consumer's lease "
                      "survived the restart (leases now %" PRIu64 ")", leases);
        gpuipc_view_release(v);
        gpuipc_client_free(c);
        gpuipc_client_free(p);
        finish();
}

/* A release while the owner is detached, then a second restart: the
 * released event still reaches the owner (the mark is journalled). */
Test(restart_events, release_missed_two_restarts)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL;
        uint64_t id;
        int r;

        h_sd_start(&sd, NULL);
        p = connect_client();
        id = register_flags(p, "t/b", 0);
        c = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c, "t/b", 0, 0, &v), 0);
        h_sd_restart(&sd, SIGKILL);
        r = gpuipc_view_release(v);     /* c resumes, releases; p detached */
        cr_assert_eq(r, 0, "release: %s (%s)", gpuipc_strerror(r), gpuipc_errmsg(c));
        h_sd_restart(&sd, SIGKILL);
        r = gpuipc_reg_wait_released(p, id, 1500);
        cr_expect_eq(r, 0, "released event lost over a second restart");
        gpuipc_client_free(c);
        gpuipc_client_free(p);
        finish();
}

/* The owner unregistered its buffer, still leased; after a restart the
 * consumer releases it while the owner is detached: the registration is
 * freed, and the owner still hears "released". */
Test(restart_events, release_missed_freed)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL;
        uint64_t id;
        int r;

        h_sd_start(&sd, NULL);
        p = connect_client();
        id = register_flags(p, "t/c", 0);
        c = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c, "t/c", 0, 0, &v), 0);
        cr_assert_eq(gpuipc_name_unregister(p, "t/c"), 0);
        h_sd_restart(&sd, SIGKILL);
        r = gpuipc_view_release(v);
        cr_assert_eq(r, 0, "release: %s (%s)", gpuipc_strerror(r), gpuipc_errmsg(c));
        r = gpuipc_reg_wait_released(p, id, 1500);
        cr_expect_eq(r, 0, "released event of an unregistered buffer lost");
        gpuipc_client_free(c);
        gpuipc_client_free(p);
        finish();
}

/* The journal's length: the daemon's memfd:gpuipcd-state. */
static long long journal_len(void)
{
        char dir[64], path[600], link[256];
        long long best = -1;
        struct dirent *e;
        DIR *d;

        snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)sd.pid);
        d = opendir(dir);
        cr_assert(d);
        while ((e = readdir(d))) {
                ssize_t n;
                struct stat st;
                snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
                n = readlink(path, link, sizeof(link) - 1);
                if (n <= 0)
                        continue;
                link[n] = 0;
                if (!strstr(link, "gpuipcd-state"))
                        continue;
                if (stat(path, &st) == 0)
                        best = st.st_size;
        }
        closedir(d);
        return best;
}

/* The journal is compacted when it would grow past this. */
#define COMPACT_AT (4LL << 20)

/* A compaction triggered by a release's record does not snapshot the
 * lease being released: it stays released after the restart. */
Test(restart_journal, compact_at_release_resurrects_lease)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL, *victim = NULL;
        gpuipc_view *extra[200];
        int nextra = 0;
        uint64_t regs, leases, regs2, leases2;
        long long l0, dl = 0, dr = 0;

        h_sd_start(&sd, NULL);
        p = connect_client();
        register_flags(p, "t/d", 0);
        c = connect_client();
        /* pad */
        while (COMPACT_AT - journal_len() > 4000) {
                cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &v), 0);
                gpuipc_view_release(v);
        }
        l0 = journal_len();
        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &v), 0);
        dl = journal_len() - l0;
        l0 = journal_len();
        gpuipc_view_release(v);
        dr = journal_len() - l0;
        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &victim), 0);
        for (;;) {
                long long g = COMPACT_AT - journal_len();
                cr_assert(g >= 0, "overshot");
                if (g < dr)
                        break;
                /* x lookup+release pairs and y held lookups that land the
                 * journal just below the threshold, so that the victim's
                 * release record crosses it */
                int found = 0, bx = 0;
                for (int x = 0; x < 100 && !found; x++)
                        for (int y = 0; y < 150 && !found; y++) {
                                long long s = x * (dl + dr) + y * dl;
                                if (s <= g && s > g - dr) {
                                        found = 1;
                                        bx = x;
                                }
                        }
                cr_assert(found, "no pad plan for gap %lld (dl %lld dr %lld)", g, dl, dr);
                if (bx > 0) {
                        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &v), 0);
                        gpuipc_view_release(v);
                } else {
                        cr_assert(nextra < 200);
                        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &extra[nextra++]), 0);
                }
        }
        gpuipc_view_release(victim);
        counts(p, &regs, &leases);
        h_sd_restart(&sd, SIGKILL);
        counts(p, &regs2, &leases2);
        cr_expect_eq(leases2, leases, "a released lease came back after the restart");
        gpuipc_client_free(c);
        gpuipc_client_free(p);
        finish();
}

/* A compaction triggered by a hello's session record keeps that session:
 * its ephemeral registration is there after the restart. */
Test(restart_journal, compact_at_hello_loses_session)
{
        gpuipc_client *p, *c, *n;
        gpuipc_view *v = NULL;
        gpuipc_list *l = NULL;
        long long g;
        int r;

        h_sd_start(&sd, NULL);
        p = connect_client();
        register_flags(p, "t/e", 0);
        c = connect_client();
        while (COMPACT_AT - journal_len() > 60) {
                cr_assert_eq(gpuipc_view_lookup(c, "t/e", 0, 0, &v), 0);
                gpuipc_view_release(v);
        }
        g = COMPACT_AT - journal_len();
        cr_assert_geq(g, 0, "the journal passed the threshold before the hello");
        n = connect_client();        /* S record crosses the threshold */
        register_flags(n, "t/eph", GPUIPC_REGISTER_EPHEMERAL);
        h_sd_restart(&sd, SIGKILL);
        r = gpuipc_name_stat(n, "t/eph", &l);    /* n reconnects and tries to resume */
        cr_expect_eq(r, 0, "live client's ephemeral registration lost");
        gpuipc_list_free(l);
        gpuipc_client_free(n);
        gpuipc_client_free(c);
        gpuipc_client_free(p);
        finish();
}

/* An ephemeral registration whose owner closed while a consumer holds it:
 * a snapshot writes it without a session, and replay keeps it and the lease. */
Test(restart_journal, snapshot_drops_leased_ephemeral)
{
        gpuipc_client *p, *c, *q;
        gpuipc_view *v = NULL, *w = NULL;
        uint64_t regs, leases, regs2, leases2;
        long long start;

        h_sd_start(&sd, NULL);
        q = connect_client();
        register_flags(q, "t/pad", 0);
        p = connect_client();
        register_flags(p, "t/f", GPUIPC_REGISTER_EPHEMERAL);
        c = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c, "t/f", 0, 0, &v), 0);
        gpuipc_client_free(p);
        h_sleep_ms(200);
        counts(c, &regs, &leases);
        /* force a compaction */
        start = journal_len();
        while (journal_len() >= start) {
                cr_assert_eq(gpuipc_view_lookup(c, "t/pad", 0, 0, &w), 0);
                gpuipc_view_release(w);
        }
        h_sd_restart(&sd, SIGKILL);
        counts(c, &regs2, &leases2);
        cr_expect_eq(leases2, leases, "consumer's lease on an orphaned ephemeral buffer "
                     "lost across a compaction + restart");
        gpuipc_view_release(v);
        gpuipc_client_free(c);
        gpuipc_client_free(q);
        finish();
}

/* The same without a compaction in between. */
Test(restart_journal, leased_ephemeral_of_a_gone_owner)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL;
        uint64_t regs, leases, regs2, leases2;

        h_sd_start(&sd, NULL);
        p = connect_client();
        register_flags(p, "t/f", GPUIPC_REGISTER_EPHEMERAL);
        c = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c, "t/f", 0, 0, &v), 0);
        gpuipc_client_free(p);
        h_sleep_ms(200);
        counts(c, &regs, &leases);
        h_sd_restart(&sd, SIGKILL);
        counts(c, &regs2, &leases2);
        cr_expect_eq(leases2, leases);
        gpuipc_view_release(v);
        gpuipc_client_free(c);
        finish();
}

/* A release while the owner is detached reaches it when it resumes. */
Test(restart_events, release_missed_one_restart)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL;
        uint64_t id;
        int r;

        h_sd_start(&sd, NULL);
        p = connect_client();
        id = register_flags(p, "t/b", 0);
        c = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c, "t/b", 0, 0, &v), 0);
        h_sd_restart(&sd, SIGKILL);
        r = gpuipc_view_release(v);
        cr_assert_eq(r, 0);
        r = gpuipc_reg_wait_released(p, id, 1500);
        cr_expect_eq(r, 0);
        gpuipc_client_free(c);
        gpuipc_client_free(p);
        finish();
}

static const char *const no_fdstore[] = { "--fdstore", "no", NULL };

/* No store: a view from before the restart must not release a new lease
 * that got its lease id. */
Test(restart_nostore, nostore_stale_release_hits_new_lease)
{
        gpuipc_client *p, *c;
        gpuipc_view *va = NULL, *vb = NULL;
        uint64_t ida, idb, regs, leases;
        int r;

        h_sd_start(&sd, no_fdstore);
        p = connect_client();
        ida = register_flags(p, "t/a", 0);
        idb = register_flags(p, "t/b", 0);
        c = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c, "t/a", 0, 0, &va), 0);
        h_sd_restart(&sd, SIGKILL);
        cr_assert_eq(gpuipc_client_ping(p), 0);          /* p re-registers a and b */
        cr_assert_eq(gpuipc_view_lookup(c, "t/b", 0, 0, &vb), 0);  /* new lease id 1 */
        r = gpuipc_view_release(va);              /* stale lease id 1 */
        counts(p, &regs, &leases);
        r = gpuipc_reg_wait_released(p, idb, 500);
        cr_expect_eq(leases, 1, "the stale view's release dropped the live view's lease");
        cr_expect_neq(r, 0, "the producer heard t/b released while its view is live");
        (void)ida;
        gpuipc_view_release(vb);
        gpuipc_client_free(c);
        gpuipc_client_free(p);
        finish();
}

/* No store: ids of registrations given back under new ids must not be
 * handed out again for new registrations. */
Test(restart_nostore, nostore_remap_collision)
{
        gpuipc_client *q, *p, *c;
        gpuipc_view *va = NULL;
        uint64_t ida, idd[8];
        char name[32];
        int r;

        h_sd_start(&sd, no_fdstore);
        q = connect_client();
        for (int i = 0; i < 5; i++) {
                snprintf(name, sizeof(name), "t/q%d", i);
                register_flags(q, name, GPUIPC_REGISTER_EPHEMERAL);
        }
        p = connect_client();
        ida = register_flags(p, "t/a", 0);
        c = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c, "t/a", 0, 0, &va), 0);
        h_sd_restart(&sd, SIGKILL);
        gpuipc_client_set_reconnect(q, 0);
        cr_assert_eq(gpuipc_client_ping(p), 0);
        /* The fresh daemon hands out ids that p's caller already holds for
         * t/a (given back under a new id): p must not pass them on. */
        for (int i = 0; i < 8; i++) {
                snprintf(name, sizeof(name), "t/d%d", i);
                idd[i] = register_flags(p, name, 0);
                cr_expect_neq(idd[i], ida, "t/d%d got id %" PRIu64 ", the id of t/a", i, ida);
                for (int j = 0; j < i; j++)
                        cr_expect_neq(idd[i], idd[j], "t/d%d and t/d%d share an id", i, j);
        }
        /* c's lease on a was forgotten; take a new one and release it */
        gpuipc_view *v2 = NULL;
        cr_assert_eq(gpuipc_view_lookup(c, "t/a", 0, 0, &v2), 0);
        gpuipc_view_release(v2);
        for (int i = 0; i < 8; i++) {
                r = gpuipc_reg_wait_released(p, idd[i], 50);
                cr_expect_neq(r, 0, "the release of t/a satisfied wait_released of t/d%d", i);
        }
        r = gpuipc_reg_wait_released(p, ida, 2000);
        cr_expect_eq(r, 0, "wait_released of t/a under its first id: %s", gpuipc_strerror(r));
        gpuipc_client_free(c);
        gpuipc_client_free(p);
        gpuipc_client_free(q);
        finish();
}

static int grab_port(int port)
{
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
                                 .sin_addr.s_addr = htonl(0x7f000001) };
        int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (void *)&a, sizeof(a)) < 0 || listen(fd, 1) < 0) {
                close(fd);
                return -errno;
        }
        return fd;
}

static const char *const mx[] = { "--metrics-listen", "127.0.0.1:38471", NULL };

/* A start that fails after the restore (the metrics port is taken) keeps
 * the store as it was, and does not hang on the restored sessions' pids;
 * the next start has everything back. */
Test(restart_journal, failed_start_keeps_the_store)
{
        gpuipc_client *p, *q;
        gpuipc_list *l = NULL;
        int64_t t0;
        int port;

        h_sd_start(&sd, mx);
        p = connect_client();
        register_flags(p, "t/durable", 0);
        q = connect_client();
        register_flags(q, "t/eph", GPUIPC_REGISTER_EPHEMERAL);   /* q stays: a session */
        gpuipc_client_free(p);
        h_sleep_ms(100);
        h_sd_kill(&sd, SIGKILL);
        port = grab_port(38471);
        cr_assert_geq(port, 0, "cannot take the metrics port: %s", strerror(-port));
        t0 = h_now_ms();
        cr_assert_eq(h_sd_try_start_again(&sd), -1, "gpuipcd started with its metrics port taken");
        cr_expect_lt(h_now_ms() - t0, 5000, "the failed start took %" PRId64 " ms",
                     h_now_ms() - t0);
        cr_expect_eq(h_sd_stored(&sd, "host-"), 2, "a failed start changed the store: [%s]",
                     h_sd_store_str(&sd));
        close(port);
        h_sd_start_again(&sd);
        p = connect_client();
        cr_expect_eq(gpuipc_name_stat(p, "t/durable", &l), 0, "t/durable is gone after the failed "
                     "start");
        gpuipc_list_free(l);
        cr_expect_eq(gpuipc_client_ping(q), 0);
        cr_expect_eq(gpuipc_name_stat(p, "t/eph", &l), 0, "t/eph is gone after the failed start");
        gpuipc_list_free(l);
        gpuipc_client_free(q);
        gpuipc_client_free(p);
        finish();
}

/* A compaction triggered by an unregister's record: the unregistered
 * (leased) buffer is not live again after the restart. */
Test(restart_journal, compact_at_unregister_resurrects)
{
        gpuipc_client *p, *c;
        gpuipc_view *v = NULL, *vx = NULL;
        gpuipc_view *extra[200];
        int nextra = 0;
        long long l0, dl, dr, du = 19;
        gpuipc_list *l = NULL;
        int r;

        h_sd_start(&sd, NULL);
        p = connect_client();
        register_flags(p, "t/d", 0);
        c = connect_client();
        while (COMPACT_AT - journal_len() > 4000) {
                cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &v), 0);
                gpuipc_view_release(v);
        }
        l0 = journal_len();
        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &v), 0);
        dl = journal_len() - l0;
        l0 = journal_len();
        gpuipc_view_release(v);
        dr = journal_len() - l0;
        register_flags(p, "t/x", 0);
        cr_assert_eq(gpuipc_view_lookup(c, "t/x", 0, 0, &vx), 0);
        /* measure U size with a throwaway */
        register_flags(p, "t/y", 0);
        l0 = journal_len();
        cr_assert_eq(gpuipc_name_unregister(p, "t/y"), 0);
        du = journal_len() - l0;
        for (;;) {
                long long g = COMPACT_AT - journal_len();
                cr_assert(g >= 0, "overshot");
                if (g < du)
                        break;
                int found = 0, bx = 0;
                for (int x = 0; x < 100 && !found; x++)
                        for (int y = 0; y < 150 && !found; y++) {
                                long long s = x * (dl + dr) + y * dl;
                                if (s <= g && s > g - du) { found = 1; bx = x; }
                        }
                cr_assert(found, "no pad plan for gap %lld", g);
                if (bx > 0) {
                        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &v), 0);
                        gpuipc_view_release(v);
                } else {
                        cr_assert(nextra < 200);
                        cr_assert_eq(gpuipc_view_lookup(c, "t/d", 0, 0, &extra[nextra++]), 0);
                }
        }
        l0 = journal_len();
        cr_assert_eq(gpuipc_name_unregister(p, "t/x"), 0);
        r = gpuipc_name_stat(p, "t/x", &l);
        gpuipc_list_free(l);
        l = NULL;
        h_sd_restart(&sd, SIGKILL);
        gpuipc_client *o = connect_client();
        r = gpuipc_name_stat(o, "t/x", &l);
        cr_expect_neq(r, 0, "an unregistered buffer is live again after the restart");
        gpuipc_list_free(l);
        gpuipc_client_free(o);
        gpuipc_client_free(c);
        gpuipc_client_free(p);
        finish();
}
