/* integ_isolation.c: what one uid can do to another's buffers, and whom
 * the daemon and the library trust (issue 15): the seals a producer's memfd
 * must carry and a reader cannot add, bytes charged for the whole memfd and
 * counters that saturate, the fd kinds a cuda-vmm registration takes,
 * another uid's registration not found by adopt, what error messages and
 * --json reveal (UTF-8), a safe socket directory, a client that refuses a
 * listener of an untrusted uid, fds tied to their frame, released events
 * that fit max-frame, and a squatter after a restart without an fd store.
 *
 * Attacks by another uid run in children that drop to that uid (setgroups,
 * setgid, setuid) as in integ_access.c; CI runs as root. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"

#define OWNER 65530u
#define OTHER 65533u

static void setup(void)
{
        signal(SIGPIPE, SIG_IGN);
}

TestSuite(isolation, .init = setup, .timeout = 60);

static void need_root(void)
{
        if (geteuid() != 0)
                cr_skip_test("needs root to act as other uids");
}

/* A daemon whose socket any uid can reach. */
static void start(const char *const *more)
{
        const char *args[16] = { "--socket-mode", "0666" };
        unsigned n = 2;

        for (; more && *more && n < 15; more++)
                args[n++] = *more;
        args[n] = NULL;
        h_daemon_start(&h_d, args);
        cr_assert_eq(chmod(h_d.dir, 0755), 0);
}

/* Forks, becomes uid (and gid uid, no groups) and returns fn(arg) as the
 * child's exit code. */
static pid_t as_user_start(uid_t uid, int (*fn)(void *), void *arg)
{
        pid_t pid = fork();

        cr_assert_geq(pid, 0);
        if (pid == 0) {
                alarm(20);
                if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
                        _exit(100);
                _exit(fn(arg));
        }
        return pid;
}

static int as_user_wait(pid_t pid)
{
        int st;

        cr_assert_eq(waitpid(pid, &st, 0), pid);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int as_user(uid_t uid, int (*fn)(void *), void *arg)
{
        return as_user_wait(as_user_start(uid, fn, arg));
}

/* ---- raw requests ------------------------------------------------------- */

/* Packs a request: fmt letters s (str), u (uint64), b (bool), k (bin of 16
 * bytes), H (bin of 64 bytes), each after its key. */
static void vreq(int fd, uint64_t seq, const char *op, const int *fds, unsigned nfds,
                 const char *fmt, va_list ap)
{
        struct proto_out o;
        uint8_t *b;
        size_t n;

        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 2 + (uint32_t)strlen(fmt));
        proto_pack_kstr(&o.pk, "op", op);
        proto_pack_ku64(&o.pk, "seq", seq);
        for (const char *f = fmt; *f; f++) {
                const char *key = va_arg(ap, const char *);
                switch (*f) {
                case 's':
                        proto_pack_kstr(&o.pk, key, va_arg(ap, const char *));
                        break;
                case 'u':
                        proto_pack_ku64(&o.pk, key, va_arg(ap, uint64_t));
                        break;
                case 'b':
                        proto_pack_kbool(&o.pk, key, va_arg(ap, int) != 0);
                        break;
                case 'k':
                        proto_pack_str(&o.pk, key);
                        msgpack_pack_bin(&o.pk, 16);
                        msgpack_pack_bin_body(&o.pk, va_arg(ap, const uint8_t *), 16);
                        break;
                case 'H':
                        proto_pack_str(&o.pk, key);
                        msgpack_pack_bin(&o.pk, 64);
                        msgpack_pack_bin_body(&o.pk, va_arg(ap, const uint8_t *), 64);
                        break;
                default:
                        abort();
                }
        }
        if (proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT) < 0)
                abort();
        b = proto_out_release(&o, &n);
        if (h_raw_send(fd, b, n, fds, nfds) < 0)
                abort();
        free(b);
}

static void req(int fd, uint64_t seq, const char *op, const int *fds, unsigned nfds,
                const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vreq(fd, seq, op, fds, nfds, fmt, ap);
        va_end(ap);
}

/* Receives the reply with seq: "" when it succeeded, else its error code
 * (static storage); message (may be NULL) gets the error's message. */
static const char *reply_code(int fd, uint64_t seq, char *message, size_t mlen)
{
        static char code[64];
        const msgpack_object *err;
        struct h_frame f;
        const char *s;
        uint64_t got;
        size_t n;

        for (;;) {
                if (h_raw_recv(fd, 5000, &f) != 1)
                        return "(no reply)";
                if (f.m.root && proto_get_u64(f.m.root, "seq", &got) == 0 && got == seq)
                        break;
                h_frame_free(&f);       /* an event */
        }
        code[0] = '\0';
        if (message && mlen)
                message[0] = '\0';
        if (proto_get_map(f.m.root, "error", &err) == 0) {
                if (proto_get_str(err, "code", &s, &n) == 0)
                        snprintf(code, sizeof(code), "%.*s", (int)n, s);
                if (message && proto_get_str(err, "message", &s, &n) == 0)
                        snprintf(message, mlen, "%.*s", (int)n, s);
        }
        h_frame_free(&f);
        return code;
}

static int hello(void)
{
        int fd = h_raw_connect(h_d.sock);

        req(fd, 1, "hello", NULL, 0, "u", "version", (uint64_t)1);
        if (strcmp(reply_code(fd, 1, NULL, 0), "") != 0)
                abort();
        return fd;
}

/* A size-byte memfd with seals. */
static int memfd_sealed(off_t size, int seals)
{
        int fd = memfd_create("harden", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        cr_assert_geq(fd, 0);
        cr_assert_eq(ftruncate(fd, size), 0);
        if (seals)
                cr_assert_eq(fcntl(fd, F_ADD_SEALS, seals), 0, "F_ADD_SEALS: %s",
                             strerror(errno));
        return fd;
}

#define ALL_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)

/* ---- 6. seals against growing and further seals -------------------------- */

Test(isolation, register_wants_grow_and_seal_seals)
{
        static const struct { int seals; const char *code; } cases[] = {
                { F_SEAL_SHRINK | F_SEAL_WRITE, "bad_fd" },
                { F_SEAL_SHRINK | F_SEAL_WRITE | F_SEAL_SEAL, "bad_fd" },
                { F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE, "bad_fd" },
                { ALL_SEALS, "" },
        };
        char name[32], msg[512];
        int fd;

        start(NULL);
        fd = hello();
        for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                int mfd = memfd_sealed(4096, cases[i].seals);
                snprintf(name, sizeof(name), "seal/%u", i);
                req(fd, 10 + i, "register", &mfd, 1, "ssuu", "name", name, "kind", "host",
                    "size", (uint64_t)4096, "fds", (uint64_t)1);
                cr_expect_str_eq(reply_code(fd, 10 + i, msg, sizeof(msg)), cases[i].code,
                                 "seals %#x: %s", cases[i].seals, msg);
                close(mfd);
        }
        /* shared_write still needs them */
        {
                int mfd = memfd_sealed(4096, F_SEAL_SHRINK);
                req(fd, 20, "register", &mfd, 1, "ssuub", "name", "seal/sw", "kind", "host",
                    "size", (uint64_t)4096, "fds", (uint64_t)1, "shared_write", 1);
                cr_expect_str_eq(reply_code(fd, 20, msg, sizeof(msg)), "bad_fd", "%s", msg);
                cr_expect(strstr(msg, "F_SEAL_GROW"), "message: %s", msg);
                close(mfd);
        }
        close(fd);
        h_daemon_stop(&h_d);
}

struct attack_args {
        const char *name;
};

/* As a reader of another uid: reopen the lookup fd read-write, try to grow
 * the memfd and to seal it against writes.  0 when everything failed. */
static int do_attack(void *p)
{
        struct attack_args *a = p;
        gpuipc_client *c = NULL;
        gpuipc_view *v = NULL;
        char path[64];
        int fd, rw, bad = 0;

        if (gpuipc_client_connect(h_d.sock, &c) < 0)
                return 10;
        if (gpuipc_view_lookup(c, a->name, 0, 0, &v) < 0)
                return 11;
        /* the library keeps the fd of a host view: find it again by
         * looking up raw */
        fd = h_raw_connect(h_d.sock);
        req(fd, 1, "hello", NULL, 0, "u", "version", (uint64_t)1);
        if (strcmp(reply_code(fd, 1, NULL, 0), "") != 0)
                return 12;
        req(fd, 2, "lookup", NULL, 0, "s", "name", a->name);
        {
                struct h_frame f;
                if (h_raw_recv(fd, 5000, &f) != 1 || f.nfds != 1)
                        return 13;
                snprintf(path, sizeof(path), "/proc/self/fd/%d", f.fds[0]);
                rw = open(path, O_RDWR | O_CLOEXEC);
                h_frame_free(&f);
        }
        if (rw < 0)
                return 14;
        if (fallocate(rw, 0, 0, 1 << 30) == 0)
                bad |= 1;
        if (ftruncate(rw, (off_t)1 << 40) == 0)
                bad |= 2;
        if (fcntl(rw, F_ADD_SEALS, F_SEAL_WRITE) == 0)
                bad |= 4;
        close(rw);
        close(fd);
        gpuipc_view_release(v);
        gpuipc_client_free(c);
        return bad ? 20 + bad : 0;
}

static int do_register_shared(void *p)
{
        static const uint32_t other[] = { OTHER };
        const char *name = p;
        gpuipc_client *c = NULL;
        gpuipc_access acc = { .size = sizeof(gpuipc_access), .uids = other, .n_uids = 1 };
        int mfd, r;

        /* a memfd of the producer's own, with no seals yet */
        mfd = memfd_create("prod", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (mfd < 0 || ftruncate(mfd, 65536) < 0)
                return 10;
        if (gpuipc_client_connect(h_d.sock, &c) < 0 || gpuipc_client_set_access(c, &acc) < 0)
                return 11;
        r = gpuipc_fd_register(c, name, mfd, 0, 65536, NULL,
                               strstr(name, "shared") ? GPUIPC_REGISTER_SHARED_WRITE : 0, NULL);
        gpuipc_client_free(c);
        /* the producer can still write its shared buffer */
        if (r == 0 && strstr(name, "shared") && pwrite(mfd, "x", 1, 0) != 1)
                r = -EPERM;
        close(mfd);
        return r == 0 ? 0 : 12;
}

Test(isolation, reader_cannot_grow_or_seal_the_memfd)
{
        struct attack_args ro = { "att/ro" }, sw = { "att/shared" };

        need_root();
        start(NULL);
        cr_assert_eq(as_user(OWNER, do_register_shared, (void *)ro.name), 0);
        cr_assert_eq(as_user(OWNER, do_register_shared, (void *)sw.name), 0);
        cr_expect_eq(as_user(OTHER, do_attack, &ro), 0,
                     "a reader grew or sealed a read-only buffer (20 + grow 1, truncate 2, "
                     "seal 4)");
        cr_expect_eq(as_user(OTHER, do_attack, &sw), 0,
                     "a reader grew or sealed a shared_write buffer (20 + grow 1, truncate 2, "
                     "seal 4)");
        h_daemon_stop(&h_d);
}

/* ---- 7. bytes per uid charge the memfd's size ---------------------------- */

Test(isolation, bytes_quota_charges_the_memfd)
{
        const char *args[] = { "--max-bytes-per-uid", "1048576", NULL };
        gpuipc_client *c;
        int big, half[3], r;

        start(args);
        cr_assert_eq(gpuipc_client_connect(h_d.sock, &c), 0);
        big = memfd_sealed((off_t)1 << 30, 0);                  /* sparse: 1 GiB */
        r = gpuipc_fd_register(c, "q/big", big, 0, 1, NULL, 0, NULL);
        cr_expect_eq(r, -ENOBUFS, "size=1 of a 1 GiB memfd under a 1 MiB quota: %d (%s)", r,
                     gpuipc_errmsg(c));
        close(big);
        for (int i = 0; i < 3; i++) {
                char name[16];
                half[i] = memfd_sealed(512 << 10, 0);
                snprintf(name, sizeof(name), "q/half%d", i);
                r = gpuipc_fd_register(c, name, half[i], 0, 1, NULL, 0, NULL);
                cr_expect_eq(r, i < 2 ? 0 : -ENOBUFS, "512 KiB memfd %d: %d (%s)", i, r,
                             gpuipc_errmsg(c));
                close(half[i]);
        }
        /* unregistering gives back what was charged */
        cr_expect_eq(gpuipc_name_unregister(c, "q/half0"), 0);
        half[0] = memfd_sealed(512 << 10, 0);
        cr_expect_eq(gpuipc_fd_register(c, "q/again", half[0], 0, 1, NULL, 0, NULL), 0, "%s",
                     gpuipc_errmsg(c));
        close(half[0]);
        gpuipc_client_free(c);
        h_daemon_stop(&h_d);
}

/* ---- 8. cuda-vmm fds, and byte counters that do not wrap ----------------- */

#define UUID "GPU-2f1c7a9e-0b3d-4e5f-8a6b-1c2d3e4f5a6b"

static const char *vmm_register(int fd, uint64_t seq, const char *name, int efd,
                                uint64_t size, uint8_t keyb, char *msg, size_t mlen)
{
        uint8_t key[16];

        memset(key, keyb, sizeof(key));
        req(fd, seq, "register", &efd, 1, "ssuusuk", "name", name, "kind", "cuda-vmm", "size",
            size, "fds", (uint64_t)1, "device", UUID, "alloc_size", size, "alloc_key", key);
        return reply_code(fd, seq, msg, mlen);
}

Test(isolation, vmm_fd_kinds)
{
        char msg[512];
        int fd, p[2], sv[2], mfd, dfd;

        start(NULL);
        fd = hello();
        cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
        cr_expect_str_eq(vmm_register(fd, 2, "vmm/pipe", p[0], 1 << 21, 1, msg, sizeof(msg)),
                         "bad_fd", "a pipe: %s", msg);
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        cr_expect_str_eq(vmm_register(fd, 3, "vmm/sock", sv[0], 1 << 21, 2, msg, sizeof(msg)),
                         "bad_fd", "a socket: %s", msg);
        dfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        cr_expect_str_eq(vmm_register(fd, 4, "vmm/dir", dfd, 1 << 21, 3, msg, sizeof(msg)),
                         "bad_fd", "a directory: %s", msg);
        /* what the driver double exports: a memfd; and a character device */
        mfd = memfd_sealed(1 << 21, 0);
        cr_expect_str_eq(vmm_register(fd, 5, "vmm/memfd", mfd, 1 << 21, 4, msg, sizeof(msg)),
                         "", "a memfd: %s", msg);
        close(mfd);
        mfd = open("/dev/null", O_RDWR | O_CLOEXEC);
        cr_expect_str_eq(vmm_register(fd, 6, "vmm/chr", mfd, 1 << 21, 5, msg, sizeof(msg)),
                         "", "a character device: %s", msg);
        close(mfd);
        close(p[0]);
        close(p[1]);
        close(sv[0]);
        close(sv[1]);
        close(dfd);
        close(fd);
        h_daemon_stop(&h_d);
}

Test(isolation, byte_counters_saturate)
{
        const msgpack_object *bytes;
        struct h_frame f;
        uint64_t v = 0, seq;
        char msg[256];
        int fd, mfd;

        start(NULL);
        fd = hello();
        mfd = memfd_sealed(4096, 0);
        for (int i = 0; i < 2; i++) {
                char name[16];
                snprintf(name, sizeof(name), "huge/%d", i);
                cr_assert_str_eq(vmm_register(fd, 2 + (uint64_t)i, name, mfd, UINT64_C(1) << 63,
                                              (uint8_t)(10 + i), msg, sizeof(msg)), "", "%s", msg);
        }
        close(mfd);
        seq = 9;
        req(fd, seq, "stats", NULL, 0, "");
        cr_assert_eq(h_raw_recv(fd, 5000, &f), 1);
        h_expect_reply(&f, seq, "");
        cr_assert_eq(proto_get_map(f.m.root, "bytes", &bytes), 0);
        cr_expect_eq(proto_get_u64(bytes, "cuda-vmm", &v), 0, "no cuda-vmm bytes: wrapped to 0");
        cr_expect_eq(v, UINT64_MAX, "cuda-vmm bytes %llu", (unsigned long long)v);
        h_frame_free(&f);
        /* and back down, exactly */
        req(fd, 10, "unregister", NULL, 0, "s", "name", "huge/0");
        cr_expect_str_eq(reply_code(fd, 10, NULL, 0), "");
        req(fd, 11, "stats", NULL, 0, "");
        cr_assert_eq(h_raw_recv(fd, 5000, &f), 1);
        cr_assert_eq(proto_get_map(f.m.root, "bytes", &bytes), 0);
        cr_expect_eq(proto_get_u64(bytes, "cuda-vmm", &v), 0);
        cr_expect_eq(v, UINT64_C(1) << 63);
        h_frame_free(&f);
        close(fd);
        h_daemon_stop(&h_d);
}

/* ---- 9. adopt reveals nothing to other uids ------------------------------ */

static int do_adopt_probe(void *p)
{
        const char *name = p;
        char msg[512];
        const char *code;
        int fd = hello();

        req(fd, 2, "adopt", NULL, 0, "s", "name", name);
        code = reply_code(fd, 2, msg, sizeof(msg));
        if (strcmp(code, "not_found") != 0)
                return 20;
        req(fd, 3, "adopt", NULL, 0, "u", "id", (uint64_t)1);
        code = reply_code(fd, 3, msg, sizeof(msg));
        if (strcmp(code, "not_found") != 0)
                return 21;
        if (strstr(msg, name))
                return 22;
        close(fd);
        return 0;
}

static int do_register_plain(void *p)
{
        gpuipc_client *c = NULL;
        gpuipc_hostbuf *b = NULL;
        int r;

        if (gpuipc_client_connect(h_d.sock, &c) < 0 || gpuipc_hostbuf_new(4096, &b) < 0)
                return 10;
        r = gpuipc_hostbuf_register(c, p, b, NULL, 0, NULL);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
        return r == 0 ? 0 : 11;
}

Test(isolation, adopt_of_another_uids_registration_is_not_found)
{
        need_root();
        start(NULL);
        cr_assert_eq(as_user(OWNER, do_register_plain, "secret/name-1"), 0);
        cr_expect_eq(as_user(OTHER, do_adopt_probe, "secret/name-1"), 0,
                     "adopt told another uid about the registration (20/21: not not_found, "
                     "22: the name in the message)");
        h_daemon_stop(&h_d);
}

/* ---- 16. UTF-8 --------------------------------------------------------- */

static void pack_meta_register(int fd, uint64_t seq, const char *name, const char *dtype,
                               const char *key, const char *val)
{
        int mfd = memfd_sealed(4096, ALL_SEALS);
        struct proto_out o;
        uint8_t *b;
        size_t n;

        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 7);
        proto_pack_kstr(&o.pk, "op", "register");
        proto_pack_ku64(&o.pk, "seq", seq);
        proto_pack_kstr(&o.pk, "name", name);
        proto_pack_kstr(&o.pk, "kind", "host");
        proto_pack_ku64(&o.pk, "size", 4096);
        proto_pack_ku64(&o.pk, "fds", 1);
        proto_pack_str(&o.pk, "meta");
        msgpack_pack_map(&o.pk, 2);
        proto_pack_kstr(&o.pk, "dtype", dtype);
        proto_pack_str(&o.pk, "user");
        msgpack_pack_map(&o.pk, 1);
        proto_pack_kstr(&o.pk, key, val);
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT), 0);
        b = proto_out_release(&o, &n);
        cr_assert_eq(h_raw_send(fd, b, n, &mfd, 1), 0);
        free(b);
        close(mfd);
}

Test(isolation, meta_must_be_utf8)
{
        static const struct { const char *dtype, *key, *val, *code; } cases[] = {
                { "float32", "k", "caf\xc3\xa9 \xe6\x97\xa5\xf0\x9f\x98\x80", "" },
                { "f\xff", "k", "v", "bad_request" },
                { "float32", "k\xc3", "v", "bad_request" },             /* truncated */
                { "float32", "k", "\xc0\xaf", "bad_request" },          /* overlong */
                { "float32", "k", "\xed\xa0\x80", "bad_request" },      /* surrogate */
                { "float32", "k", "\xf4\x90\x80\x80", "bad_request" },  /* > U+10FFFF */
                { "float32", "k", "\x80", "bad_request" },
        };
        char name[32], msg[256];
        int fd;

        start(NULL);
        fd = hello();
        for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                snprintf(name, sizeof(name), "utf8/%u", i);
                pack_meta_register(fd, 10 + i, name, cases[i].dtype, cases[i].key,
                                   cases[i].val);
                cr_expect_str_eq(reply_code(fd, 10 + i, msg, sizeof(msg)), cases[i].code,
                                 "case %u: %s", i, msg);
        }
        close(fd);
        h_daemon_stop(&h_d);
}

/* Runs path with argv, GPUIPC_SOCKET set; returns its stdout (malloc'd,
 * NUL-terminated) and its exit status in *ret_status. */
static char *run_capture(const char *path, char *const *argv, int *ret_status)
{
        size_t cap = 1 << 16, len = 0;
        char *out = malloc(cap + 1);
        int p[2], st;
        ssize_t k;
        pid_t pid;

        cr_assert_not_null(out);
        cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                int dn = open("/dev/null", O_RDWR);
                dup2(dn, 0);
                dup2(p[1], 1);
                setenv("GPUIPC_SOCKET", h_d.sock, 1);
                execv(path, argv);
                _exit(127);
        }
        close(p[1]);
        while (len < cap && (k = read(p[0], out + len, cap - len)) > 0)
                len += (size_t)k;
        close(p[0]);
        out[len] = '\0';
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        *ret_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return out;
}

Test(isolation, ctl_json_escapes_invalid_utf8)
{
        char exe[400], cmd[900];
        char *out;
        int st;

        start(NULL);
        /* an executable whose path is not UTF-8: the record's owner.exe */
        snprintf(exe, sizeof(exe), "%s/ctl-\xff\xfe", h_d.dir);
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", h_path("gpuipcctl"), exe);
        cr_assert_eq(system(cmd), 0);
        snprintf(cmd, sizeof(cmd), "%s/in.bin", h_d.dir);
        out = run_capture(exe, (char *[]){ exe, "put", "utf8/exe", exe, NULL }, &st);
        cr_assert_eq(st, 0, "put: %s", out);
        free(out);
        out = run_capture(h_path("gpuipcctl"),
                          (char *[]){ (char *)h_path("gpuipcctl"), "show", "utf8/exe", "--json",
                                      NULL }, &st);
        cr_assert_eq(st, 0);
        cr_expect_eq(proto_utf8_valid(out, strlen(out)), strlen(out),
                     "show --json wrote invalid UTF-8: %s", out);
        cr_expect(strstr(out, "ctl-\\ufffd\\ufffd"), "exe not escaped: %s", out);
        free(out);
        unlink(exe);
        h_daemon_stop(&h_d);
}

/* ---- 11. the socket's directory ------------------------------------------ */

/* Runs gpuipcd with args until it exits (up to 3 s); returns its exit
 * status, or -1 when it was still running (it is then stopped). */
static int daemon_exit_status(const char *const *args)
{
        const char *argv[16] = { h_path("gpuipcd"), "--no-config" };
        unsigned n = 2;
        int64_t deadline = h_now_ms() + 3000;
        int st;
        pid_t pid;

        for (; *args && n < 15; args++)
                argv[n++] = *args;
        argv[n] = NULL;
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                int dn = open("/dev/null", O_RDWR);
                dup2(dn, 0);
                dup2(dn, 1);
                dup2(dn, 2);
                unsetenv("NOTIFY_SOCKET");
                unsetenv("LISTEN_FDS");
                execv(argv[0], (char **)argv);
                _exit(127);
        }
        while (h_now_ms() < deadline) {
                if (waitpid(pid, &st, WNOHANG) == pid)
                        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                h_sleep_ms(20);
        }
        kill(pid, SIGTERM);
        waitpid(pid, &st, 0);
        return -1;
}

Test(isolation, socket_directory_must_be_safe)
{
        char dir[128], sock[200];
        struct stat st;

        need_root();
        snprintf(dir, sizeof(dir), "/tmp/gpuipc-harden-XXXXXX");
        cr_assert_not_null(mkdtemp(dir));
        snprintf(sock, sizeof(sock), "%s/d.sock", dir);

        /* another uid's directory */
        cr_assert_eq(chown(dir, OTHER, OTHER), 0);
        cr_assert_eq(chmod(dir, 0755), 0);
        cr_expect_gt(daemon_exit_status((const char *[]){ "--socket", sock, NULL }), 0,
                     "bound in a directory of uid %u", OTHER);
        /* the metrics socket too */
        {
                char ok_sock[200], metrics[220];
                snprintf(ok_sock, sizeof(ok_sock), "%s.main.sock", dir);
                snprintf(metrics, sizeof(metrics), "unix:%s/m.sock", dir);
                cr_expect_gt(daemon_exit_status((const char *[]){ "--socket", ok_sock,
                                                                  "--metrics-listen", metrics,
                                                                  NULL }), 0,
                             "metrics socket bound in a directory of uid %u", OTHER);
                unlink(ok_sock);
        }
        /* root's, but group-writable without the sticky bit */
        cr_assert_eq(chown(dir, 0, 0), 0);
        cr_assert_eq(chmod(dir, 0775), 0);
        cr_expect_gt(daemon_exit_status((const char *[]){ "--socket", sock, NULL }), 0,
                     "bound in a group-writable directory");
        /* world-writable and sticky, like /tmp: fine, and the mode is exact */
        cr_assert_eq(chmod(dir, 01777), 0);
        {
                const char *args[] = { "--socket", sock, "--socket-mode", "0640", NULL };
                h_daemon_start(&h_d, args);
                cr_assert_eq(lstat(sock, &st), 0);
                cr_expect_eq(st.st_mode & 07777, 0640, "mode %04o", st.st_mode & 07777);
                h_daemon_stop(&h_d);
        }
        rmdir(dir);
}

/* ---- 12. clients check who listens --------------------------------------- */

/* Starts gpuipcd as uid on sock; waits until the socket appears. */
static pid_t daemon_as(uid_t uid, const char *sock)
{
        int64_t deadline = h_now_ms() + 10000;
        struct stat st;
        pid_t pid = fork();

        cr_assert_geq(pid, 0);
        if (pid == 0) {
                int dn = open("/dev/null", O_RDWR);
                dup2(dn, 0);
                dup2(dn, 1);
                dup2(dn, 2);
                unsetenv("NOTIFY_SOCKET");
                if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
                        _exit(100);
                execl(h_path("gpuipcd"), "gpuipcd", "--no-config", "--socket", sock,
                      "--socket-mode", "0666", (char *)NULL);
                _exit(127);
        }
        while (stat(sock, &st) < 0) {
                cr_assert_lt(h_now_ms(), deadline, "the impostor daemon did not start");
                h_sleep_ms(20);
        }
        return pid;
}

static int do_connect(void *p)
{
        gpuipc_client *c = NULL;
        int r = gpuipc_client_connect(p, &c);

        gpuipc_client_free(c);
        return r == 0 ? 0 : r == -EPERM ? 1 : 2;
}

Test(isolation, client_refuses_an_untrusted_listener)
{
        char dir[128], sock[200];
        gpuipc_client *c = NULL;
        pid_t impostor;
        int st, r;

        need_root();
        snprintf(dir, sizeof(dir), "/tmp/gpuipc-harden-XXXXXX");
        cr_assert_not_null(mkdtemp(dir));
        cr_assert_eq(chmod(dir, 01777), 0);     /* root's, like /tmp */
        snprintf(sock, sizeof(sock), "%s/gpuipcd.sock", dir);
        /* a process of another uid took the path over */
        impostor = daemon_as(OTHER, sock);
        unsetenv("GPUIPC_DAEMON_UID");
        r = gpuipc_client_connect(sock, &c);
        cr_expect_eq(r, -EPERM, "root connected to uid %u's listener: %d", OTHER, r);
        gpuipc_client_free(c);
        c = NULL;
        cr_expect_eq(as_user(OWNER, do_connect, sock), 1, "uid %u connected to uid %u's listener",
                     OWNER, OTHER);
        /* its own uid's daemon is fine; so is one named by GPUIPC_DAEMON_UID */
        cr_expect_eq(as_user(OTHER, do_connect, sock), 0);
        setenv("GPUIPC_DAEMON_UID", "65533", 1);
        r = gpuipc_client_connect(sock, &c);
        cr_expect_eq(r, 0, "GPUIPC_DAEMON_UID=65533: %d", r);
        gpuipc_client_free(c);
        c = NULL;
        setenv("GPUIPC_DAEMON_UID", "1", 1);
        cr_expect_eq(as_user(OTHER, do_connect, sock), 1, "GPUIPC_DAEMON_UID pins the uid");
        unsetenv("GPUIPC_DAEMON_UID");
        kill(impostor, SIGTERM);
        cr_assert_eq(waitpid(impostor, &st, 0), impostor);
        rmdir(dir);
}

/* ---- 15. fds belong to the frame they came with -------------------------- */

Test(isolation, fds_tied_to_their_frame)
{
        char msg[256];
        int fd, mfd, base;

        start(NULL);
        fd = hello();
        base = h_daemon_fd_count(&h_d);
        mfd = memfd_sealed(4096, ALL_SEALS);
        /* A declares an fd and sends none; B sends its own.  With the daemon
         * stopped, one recvmsg() reads A and B and brings B's fd. */
        cr_assert_eq(kill(h_d.pid, SIGSTOP), 0);
        req(fd, 2, "register", NULL, 0, "ssuu", "name", "fdq/a", "kind", "host", "size",
            (uint64_t)4096, "fds", (uint64_t)1);
        req(fd, 3, "register", &mfd, 1, "ssuu", "name", "fdq/b", "kind", "host", "size",
            (uint64_t)4096, "fds", (uint64_t)1);
        cr_assert_eq(kill(h_d.pid, SIGCONT), 0);
        cr_expect_str_eq(reply_code(fd, 2, msg, sizeof(msg)), "bad_fd",
                         "A took the fd of the frame after it: %s", msg);
        cr_expect_str_eq(reply_code(fd, 3, msg, sizeof(msg)), "", "B lost its fd: %s", msg);
        req(fd, 4, "unregister", NULL, 0, "s", "name", "fdq/b");
        cr_expect_str_eq(reply_code(fd, 4, NULL, 0), "");
        cr_expect_eq(h_daemon_fd_settle(&h_d, base, 2000), base);

        /* An fd that comes with a frame declaring none is closed with that
         * frame, not when the next one arrives. */
        req(fd, 5, "ping", &mfd, 1, "");
        cr_expect_str_eq(reply_code(fd, 5, NULL, 0), "");
        cr_expect_eq(h_daemon_fd_settle(&h_d, base, 2000), base,
                     "the undeclared fd stays open until the next frame");
        close(mfd);
        close(fd);
        h_daemon_stop(&h_d);
}

/* ---- 14. a released event always arrives --------------------------------- */

Test(isolation, released_event_fits_max_frame)
{
        const char *args[] = { "--max-frame", "4096", NULL };
        const msgpack_object *evs = NULL;
        uint8_t handle[64], ev[64];
        struct h_frame f;
        uint64_t leases[70], id = 0;
        const char *s;
        size_t n;
        int own, con, got = 0;

        start(args);
        own = hello();
        con = hello();
        memset(handle, 0x5a, sizeof(handle));
        req(own, 3, "register", NULL, 0, "ssusHuu", "name", "rel/ipc", "kind", "cuda-ipc",
            "size", (uint64_t)4096, "device", UUID, "handle", handle, "buffer_id", (uint64_t)7,
            "alloc_size", (uint64_t)4096);
        cr_assert_eq(h_raw_recv(own, 5000, &f), 1);
        h_expect_reply(&f, 3, "");
        cr_assert_eq(proto_get_u64(f.m.root, "id", &id), 0);
        h_frame_free(&f);
        for (int i = 0; i < 70; i++) {
                req(con, 100 + (uint64_t)i, "lookup", NULL, 0, "s", "name", "rel/ipc");
                cr_assert_eq(h_raw_recv(con, 5000, &f), 1);
                h_expect_reply(&f, 100 + (uint64_t)i, "");
                cr_assert_eq(proto_get_u64(f.m.root, "lease", &leases[i]), 0);
                h_frame_free(&f);
        }
        for (int i = 0; i < 70; i++) {
                memset(ev, i + 1, sizeof(ev));
                req(con, 200 + (uint64_t)i, "release", NULL, 0, "uH", "lease", leases[i],
                    "event", ev);
                cr_assert_str_eq(reply_code(con, 200 + (uint64_t)i, NULL, 0), "");
        }
        /* the owner gets its released event, with as many of the newest
         * events as fit */
        while (h_raw_recv(own, 3000, &f) == 1) {
                if (proto_get_str(f.m.root, "event", &s, &n) == 0 && n == 8 &&
                    memcmp(s, "released", 8) == 0) {
                        uint64_t rid = 0;
                        got++;
                        cr_expect_eq(proto_get_u64(f.m.root, "id", &rid), 0);
                        cr_expect_eq(rid, id);
                        cr_assert_eq(proto_get_array(f.m.root, "events", &evs), 0);
                        cr_expect_gt(evs->via.array.size, 32);
                        cr_expect_leq(evs->via.array.size, 64);
                        /* the newest is the last release's */
                        cr_expect_eq(evs->via.array.ptr[evs->via.array.size - 1].via.bin.ptr[0],
                                     70);
                }
                h_frame_free(&f);
                if (got)
                        break;
        }
        cr_expect_eq(got, 1, "no released event at --max-frame 4096");
        close(con);
        close(own);
        h_daemon_stop(&h_d);
}

/* ---- 10. a name lost over a restart without the fd store ----------------- */

struct producer_args {
        const char *sock;
        int ready[2], go[2];
};

/* Registers svc/data, waits for the restart, makes one call and reports
 * what gpuipc_client_next_lost says: 0 when it names svc/data with -EEXIST. */
static int do_producer(void *p)
{
        struct producer_args *a = p;
        gpuipc_client *c = NULL;
        gpuipc_hostbuf *b = NULL;
        uint64_t id = 0, lost_id = 0;
        char name[64], ch;
        int err = 0, r;

        if (gpuipc_client_connect(a->sock, &c) < 0 || gpuipc_hostbuf_new(4096, &b) < 0)
                return 10;
        if (gpuipc_hostbuf_register(c, "svc/data", b, NULL, 0, &id) < 0)
                return 11;
        if (write(a->ready[1], "r", 1) != 1 || read(a->go[0], &ch, 1) != 1)
                return 12;
        r = gpuipc_client_ping(c);             /* reconnects, registers again */
        if (r < 0)
                return 13;
        r = gpuipc_client_next_lost(c, name, sizeof(name), &lost_id, &err);
        if (r != 1)
                return 14;
        if (strcmp(name, "svc/data") != 0 || lost_id != id || err != -EEXIST)
                return 15;
        if (gpuipc_client_next_lost(c, name, sizeof(name), NULL, NULL) != 0)
                return 16;
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
        return 0;
}

static int do_impostor(void *p)
{
        gpuipc_client *c = NULL;
        gpuipc_hostbuf *b = NULL;
        gpuipc_access pub = { .size = sizeof(gpuipc_access), .public_ = 1 };

        if (gpuipc_client_connect(p, &c) < 0 || gpuipc_hostbuf_new(4096, &b) < 0 ||
            gpuipc_client_set_access(c, &pub) < 0)
                return 10;
        if (gpuipc_hostbuf_register(c, "svc/data", b, NULL, 0, NULL) < 0)
                return 11;
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
        return 0;
}

Test(isolation, restart_squatter_is_visible)
{
        struct producer_args a;
        struct h_daemon d1 = { 0 }, d2 = { 0 };
        char dir[128], sock[200], ch;
        const char *args[] = { "--socket", sock, "--socket-mode", "0666", NULL };
        gpuipc_client *c;
        gpuipc_view *v = NULL;
        pid_t prod;
        int r;

        need_root();
        snprintf(dir, sizeof(dir), "/tmp/gpuipc-harden-XXXXXX");
        cr_assert_not_null(mkdtemp(dir));
        cr_assert_eq(chmod(dir, 0755), 0);
        snprintf(sock, sizeof(sock), "%s/gpuipcd.sock", dir);
        a.sock = sock;
        cr_assert_eq(pipe(a.ready), 0);
        cr_assert_eq(pipe(a.go), 0);
        h_daemon_start(&d1, args);
        prod = as_user_start(OWNER, do_producer, &a);
        cr_assert_eq(read(a.ready[0], &ch, 1), 1);
        /* a restart without the fd store, and another uid is first */
        h_daemon_stop(&d1);
        h_daemon_start(&d2, args);
        cr_assert_eq(as_user(OTHER, do_impostor, sock), 0);
        cr_assert_eq(write(a.go[1], "g", 1), 1);
        cr_expect_eq(as_user_wait(prod), 0, "the producer did not learn it lost svc/data "
                     "(14: nothing reported, 15: wrong name, id or error)");
        /* a consumer that names the owner it expects is not fooled */
        cr_assert_eq(gpuipc_client_connect(sock, &c), 0);
        cr_assert_eq(gpuipc_client_set_lookup_owner(c, OWNER), 0);
        r = gpuipc_view_lookup(c, "svc/data", 0, 0, &v);
        cr_expect_eq(r, -ENOENT, "owner_uid %u: the impostor's buffer was handed out (%d)",
                     OWNER, r);
        if (r == 0)
                gpuipc_view_release(v);
        v = NULL;
        r = gpuipc_view_lookup(c, "svc/data", 300, 0, &v);
        cr_expect_eq(r, -ETIMEDOUT, "a waiting lookup took the impostor's (%d)", r);
        if (r == 0)
                gpuipc_view_release(v);
        v = NULL;
        cr_assert_eq(gpuipc_client_set_lookup_owner(c, OTHER), 0);
        cr_expect_eq(gpuipc_view_lookup(c, "svc/data", 0, 0, &v), 0, "%s", gpuipc_errmsg(c));
        gpuipc_view_release(v);
        cr_expect_eq(gpuipc_client_set_lookup_owner(c, -2), -EINVAL);
        gpuipc_client_free(c);
        h_daemon_stop(&d2);
        rmdir(dir);
}
