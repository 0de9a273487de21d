/* integ_restart.c: gpuipcd restarts without loss.
 *
 * The test process plays systemd (sdhost): it owns the listening socket and
 * the file descriptor store, and restarts the daemon with SIGTERM or
 * SIGKILL.  Registrations, their bytes, leases and sessions must come back;
 * clients reconnect by themselves.  One test runs without the store and
 * checks that clients re-register instead. */
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
#include <sys/mman.h>
#include <sys/socket.h>
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

TestSuite(restart, .init = init, .fini = fini, .timeout = 60);

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
};

/* gpuipc_stat through a fresh connection: 0, or the error (-ENOENT). */
static int stat_name(const char *name, struct reg *ret)
{
        gpuipc_client *c = NULL;
        gpuipc_list *l = NULL;
        const gpuipc_info *i;
        int r;

        r = gpuipc_connect(h_d.sock, &c);
        cr_assert_eq(r, 0, "connect %s: %s", h_d.sock, gpuipc_strerror(r));
        r = gpuipc_stat(c, name, &l);
        if (r == 0) {
                cr_assert_eq(gpuipc_list_count(l), 1);
                i = gpuipc_list_get(l, 0);
                *ret = (struct reg){
                        .id = i->id,
                        .leases = i->leases,
                        .pid = i->owner_pid,
                        .connected = !(i->flags & GPUIPC_INFO_OWNER_GONE),
                        .ephemeral = !!(i->flags & GPUIPC_INFO_EPHEMERAL),
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
        r = gpuipc_register_host(c, name, b, NULL, 0, &id);
        cr_assert_eq(r, 0, "register %s: %s (%s)", name, gpuipc_strerror(r), gpuipc_errmsg(c));
        gpuipc_hostbuf_free(b);
        return id;
}

static gpuipc_client *connect_client(void)
{
        gpuipc_client *c = NULL;
        int r = gpuipc_connect(h_d.sock, &c);
        cr_assert_eq(r, 0, "gpuipc_connect %s: %s", h_d.sock, gpuipc_strerror(r));
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
        cr_expect_str_eq(buf, "ok", "the producer's gpuipc_wait_released: %s", buf);

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
        cr_assert_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
        cr_assert_eq(h_raw_request(fd, "register", 2, 5, pack_raw_reg, &a, &mfd, 1), 0);
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
        expect_cmd(&p, cmd, "ok", "gpuipc_wait_released with the id from before the restart");
        snprintf(cmd, sizeof(cmd), "waitrel %" PRIu64 " 5000", id_e);
        expect_cmd(&p, cmd, "ok", "gpuipc_wait_released with the id from before the restart");
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
                        cr_assert_eq(gpuipc_lookup(r, "rs/cycle", 0, 0, &v), 0);
                cr_assert_eq(gpuipc_unregister(c, "rs/cycle"), 0, "%s", gpuipc_errmsg(c));
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
        cr_assert_eq(gpuipc_unregister(c, "rs/id-c"), 0);
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
