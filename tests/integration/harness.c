/* harness.c: see harness.h. */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "harness.h"

extern char **environ;

struct h_daemon h_d = { .pid = -1, .notify_fd = -1 };

void h_setup(void)
{
        signal(SIGPIPE, SIG_IGN);
        h_daemon_start(&h_d, NULL);
}

void h_teardown(void)
{
        h_daemon_stop(&h_d);
}

const char *h_builddir(void)
{
        const char *b = getenv("GPUIPC_BUILDDIR");
        return b && *b ? b : "build";
}

const char *h_path(const char *rel)
{
        static char bufs[4][512];
        static unsigned next;
        char *b = bufs[next++ % 4];
        snprintf(b, sizeof(bufs[0]), "%s/%s", h_builddir(), rel);
        return b;
}

int64_t h_now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void h_sleep_ms(int ms)
{
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static int count_dir(const char *path)
{
        DIR *d = opendir(path);
        struct dirent *e;
        int n = 0;

        if (!d)
                return -1;
        while ((e = readdir(d)))
                if (e->d_name[0] != '.')
                        n++;
        closedir(d);
        return n;
}

int h_self_fd_count(void)
{
        return count_dir("/proc/self/fd") - 1;
}

/* ---- the daemon ---------------------------------------------------------- */

static void dump_log(const struct h_daemon *d)
{
        static char buf[8192];
        FILE *f = fopen(d->log, "r");
        long size;
        size_t n;

        if (!f)
                return;
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fseek(f, size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0, SEEK_SET);
        n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        fclose(f);
        fprintf(stderr, "---- %s (tail) ----\n%s---- end of log ----\n", d->log, buf);
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        return remove(path);
}

static void check_exit(const struct h_daemon *d, int status, const char *when)
{
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                return;
        dump_log(d);
        if (WIFSIGNALED(status))
                cr_assert_fail("gpuipcd %s: killed by signal %d", when, WTERMSIG(status));
        cr_assert_fail("gpuipcd %s: exit status %d (sanitizer report or error; log above)", when,
                       WEXITSTATUS(status));
}

void h_daemon_start(struct h_daemon *d, const char *const *extra_args)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char notify_path[300], notify_env[320], *argv[32];
        const char *daemon_path = h_path("gpuipcd");
        int64_t deadline;
        int argc = 0, logfd;
        pid_t pid;

        memset(d, 0, sizeof(*d));
        d->pid = -1;
        d->notify_fd = -1;
        snprintf(d->dir, sizeof(d->dir), "/tmp/gpuipc-test-XXXXXX");
        cr_assert_not_null(mkdtemp(d->dir), "mkdtemp: %s", strerror(errno));
        snprintf(d->sock, sizeof(d->sock), "%s/gpuipcd.sock", d->dir);
        snprintf(d->log, sizeof(d->log), "%s/daemon.log", d->dir);
        snprintf(notify_path, sizeof(notify_path), "%s/notify.sock", d->dir);
        cr_assert_eq(access(daemon_path, X_OK), 0, "no daemon at %s (set GPUIPC_BUILDDIR)",
                     daemon_path);

        d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        cr_assert_geq(d->notify_fd, 0);
        strcpy(sa.sun_path, notify_path);
        cr_assert_eq(bind(d->notify_fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind %s: %s",
                     notify_path, strerror(errno));
        snprintf(notify_env, sizeof(notify_env), "NOTIFY_SOCKET=%s", notify_path);

        argv[argc++] = (char *)daemon_path;
        /* A real /etc/gpuipcd on the test machine must not change results,
         * unless the test names a configuration file itself. */
        bool own_config = false;
        for (int i = 0; extra_args && extra_args[i]; i++)
                own_config |= strcmp(extra_args[i], "--config") == 0;
        if (!own_config)
                argv[argc++] = "--no-config";
        /* The harness reads READY=1 only: a daemon pushing to the fd store
         * would fill the notify queue.  sdhost.c plays the store. */
        bool own_fdstore = false;
        for (int i = 0; extra_args && extra_args[i]; i++)
                own_fdstore |= strcmp(extra_args[i], "--fdstore") == 0;
        if (!own_fdstore) {
                argv[argc++] = "--fdstore";
                argv[argc++] = "no";
        }
        for (int i = 0; extra_args && extra_args[i] && argc < 28; i++) {
                /* a --socket of the caller's replaces the default */
                if (strcmp(extra_args[i], "--socket") == 0 && extra_args[i + 1])
                        snprintf(d->sock, sizeof(d->sock), "%s", extra_args[i + 1]);
                argv[argc++] = (char *)extra_args[i];
        }
        argv[argc++] = "--socket";
        argv[argc++] = d->sock;
        argv[argc] = NULL;

        logfd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        cr_assert_geq(logfd, 0);
        pid = fork();
        cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
        if (pid == 0) {
                int devnull = open("/dev/null", O_RDONLY);
                /* never outlive a test that crashed or timed out */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                dup2(devnull, 0);
                dup2(logfd, 1);
                dup2(logfd, 2);
                putenv(notify_env);
                unsetenv("GPUIPC_SOCKET");
                unsetenv("LISTEN_FDS");
                unsetenv("LISTEN_PID");
                execv(daemon_path, argv);
                _exit(127);
        }
        close(logfd);
        d->pid = pid;

        deadline = h_now_ms() + 10000;
        for (;;) {
                struct pollfd p = { .fd = d->notify_fd, .events = POLLIN };
                int status, left = (int)(deadline - h_now_ms());
                char buf[512];

                if (waitpid(pid, &status, WNOHANG) == pid) {
                        d->pid = -1;
                        dump_log(d);
                        cr_assert_fail("gpuipcd died before READY=1 (status 0x%x)", status);
                }
                if (left <= 0) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &status, 0);
                        d->pid = -1;
                        dump_log(d);
                        cr_assert_fail("gpuipcd sent no READY=1 within 10 s");
                }
                if (poll(&p, 1, left < 100 ? left : 100) <= 0)
                        continue;
                ssize_t n = recv(d->notify_fd, buf, sizeof(buf) - 1, 0);
                if (n <= 0)
                        continue;
                buf[n] = '\0';
                /* READY=1 on a line of its own */
                for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
                        if (strcmp(line, "READY=1") == 0)
                                goto ready;
        }
ready:
        cr_assert_eq(access(d->sock, F_OK), 0, "READY=1 but no socket at %s", d->sock);
}

bool h_reap(pid_t pid, int timeout_ms, int *ret_status)
{
        int64_t deadline = h_now_ms() + timeout_ms;
        pid_t r;

        while ((r = waitpid(pid, ret_status, WNOHANG)) == 0 && h_now_ms() < deadline)
                h_sleep_ms(5);
        if (r == pid)
                return true;
        cr_assert_eq(r, 0, "waitpid(%d): %s", (int)pid, strerror(errno));
        kill(pid, SIGKILL);
        cr_assert_eq(waitpid(pid, ret_status, 0), pid, "waitpid(%d) after SIGKILL: %s",
                     (int)pid, strerror(errno));
        return false;
}

void h_daemon_wait(struct h_daemon *d)
{
        int status = 0;
        bool in_time;

        if (d->pid <= 0)
                return;
        in_time = h_reap(d->pid, 10000, &status);
        d->pid = -1;
        if (!in_time) {
                dump_log(d);
                cr_assert_fail("gpuipcd did not exit within 10 s of SIGTERM");
        }
        check_exit(d, status, "after SIGTERM");
        cr_assert_neq(access(d->sock, F_OK), 0, "socket %s left behind", d->sock);
}

void h_daemon_stop(struct h_daemon *d)
{
        if (d->pid > 0) {
                cr_assert_eq(kill(d->pid, SIGTERM), 0);
                h_daemon_wait(d);
        }
        if (d->notify_fd >= 0)
                close(d->notify_fd);
        d->notify_fd = -1;
        if (d->dir[0])
                nftw(d->dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
        d->dir[0] = '\0';
}

bool h_daemon_alive(const struct h_daemon *d)
{
        int status;
        if (d->pid <= 0)
                return false;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
                ((struct h_daemon *)d)->pid = -1;
                check_exit(d, status, "while the test ran");
                return false;
        }
        return true;
}

int h_daemon_fd_count(const struct h_daemon *d)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
        return count_dir(path);
}

int h_daemon_fd_settle(const struct h_daemon *d, int want, int timeout_ms)
{
        int64_t deadline = h_now_ms() + timeout_ms;
        int n;
        while ((n = h_daemon_fd_count(d)) != want && h_now_ms() < deadline)
                h_sleep_ms(10);
        return n;
}

long h_daemon_rss_kb(const struct h_daemon *d)
{
        char path[64], line[256];
        long kb = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
        f = fopen(path, "r");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
                        break;
        fclose(f);
        return kb;
}

/* ---- raw connections ----------------------------------------------------- */

int h_raw_connect(const char *sock)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        cr_assert_geq(fd, 0);
        cr_assert_lt(strlen(sock), sizeof(sa.sun_path));
        strcpy(sa.sun_path, sock);
        cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect %s: %s", sock,
                     strerror(errno));
        return fd;
}

int h_raw_send(int fd, const void *buf, size_t n, const int *fds, unsigned nfds)
{
        char ctl[CMSG_SPACE(sizeof(int) * 128)];
        struct iovec iov = { .iov_base = (void *)buf, .iov_len = n };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
        size_t done = 0;

        cr_assert_leq(nfds, 128);
        if (nfds) {
                struct cmsghdr *c;
                memset(ctl, 0, sizeof(ctl));
                msg.msg_control = ctl;
                msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
                c = CMSG_FIRSTHDR(&msg);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
        }
        while (done < n) {
                ssize_t k;
                iov.iov_base = (char *)buf + done;
                iov.iov_len = n - done;
                k = sendmsg(fd, &msg, MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                done += (size_t)k;
                msg.msg_control = NULL;
                msg.msg_controllen = 0;
        }
        return 0;
}

int h_raw_send_frame(int fd, const void *body, size_t n, const int *fds, unsigned nfds)
{
        uint8_t *b = malloc(n + 4);
        int r;

        cr_assert_not_null(b);
        b[0] = (uint8_t)(n >> 24);
        b[1] = (uint8_t)(n >> 16);
        b[2] = (uint8_t)(n >> 8);
        b[3] = (uint8_t)n;
        memcpy(b + 4, body, n);
        r = h_raw_send(fd, b, n + 4, fds, nfds);
        free(b);
        return r;
}

/* Reads exactly n bytes; collects fds.  Returns n, 0 at EOF before the
 * first byte, or -errno (-ETIMEDOUT). */
static ssize_t read_exact(int fd, uint8_t *buf, size_t n, int64_t deadline, struct h_frame *f)
{
        size_t done = 0;

        while (done < n) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int left = (int)(deadline - h_now_ms());
                int fds[PROTO_MAX_FDS];
                unsigned nfds = 0;
                ssize_t k;

                if (left <= 0)
                        return -ETIMEDOUT;
                if (poll(&p, 1, left) <= 0)
                        continue;
                k = proto_recv(fd, buf + done, n - done, fds, PROTO_MAX_FDS, &nfds);
                for (unsigned i = 0; i < nfds; i++) {
                        if (f && f->nfds < PROTO_MAX_FDS)
                                f->fds[f->nfds++] = fds[i];
                        else
                                close(fds[i]);
                }
                if (k == -ECONNRESET)
                        k = 0;
                if (k < 0)
                        return k;
                if (k == 0)
                        return done == 0 ? 0 : -EPIPE;
                done += (size_t)k;
        }
        return (ssize_t)n;
}

int h_raw_recv(int fd, int timeout_ms, struct h_frame *f)
{
        int64_t deadline = h_now_ms() + timeout_ms;
        uint8_t hdr[4];
        ssize_t k;

        memset(f, 0, sizeof(*f));
        msgpack_unpacked_init(&f->m.up);
        k = read_exact(fd, hdr, 4, deadline, f);
        if (k <= 0)
                return (int)k;
        f->len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
        cr_assert(f->len > 0 && f->len <= PROTO_MAX_FRAME_LIMIT, "daemon sent frame length %u",
                  f->len);
        f->body = malloc(f->len);
        cr_assert_not_null(f->body);
        k = read_exact(fd, f->body, f->len, deadline, f);
        cr_assert_eq(k, (ssize_t)f->len, "frame of %u bytes cut short (%zd)", f->len, k);
        proto_msg_free(&f->m);
        if (proto_decode(f->body, f->len, &f->m, NULL) < 0)
                f->m.root = NULL;
        return 1;
}

void h_frame_free(struct h_frame *f)
{
        proto_msg_free(&f->m);
        free(f->body);
        f->body = NULL;
        for (unsigned i = 0; i < f->nfds; i++)
                close(f->fds[i]);
        f->nfds = 0;
}

int h_raw_expect_eof(int fd, int timeout_ms)
{
        int64_t deadline = h_now_ms() + timeout_ms;
        int frames = 0;

        for (;;) {
                struct h_frame f;
                int left = (int)(deadline - h_now_ms());
                int r = h_raw_recv(fd, left > 0 ? left : 1, &f);
                h_frame_free(&f);
                if (r == 0)
                        return frames;
                cr_assert_neq(r, -ETIMEDOUT, "connection still open after %d ms", timeout_ms);
                cr_assert_eq(r, 1, "recv: %s", strerror(-r));
                frames++;
        }
}

int h_raw_request(int fd, const char *op, uint64_t seq, unsigned extra_pairs, h_pack_fn fn,
                  void *data, const int *fds, unsigned nfds)
{
        struct proto_out o;
        uint8_t *b;
        size_t n;
        int r;

        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 2 + extra_pairs);
        proto_pack_kstr(&o.pk, "op", op);
        proto_pack_ku64(&o.pk, "seq", seq);
        if (fn)
                fn(&o.pk, data);
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT), 0);
        b = proto_out_release(&o, &n);
        r = h_raw_send(fd, b, n, fds, nfds);
        free(b);
        proto_out_free(&o);
        return r;
}

static void pack_version(msgpack_packer *pk, void *data)
{
        (void)data;
        proto_pack_ku64(pk, "version", 1);
}

uint32_t h_raw_hello(int fd, uint64_t seq)
{
        struct h_frame f;
        uint64_t max_frame = 0;

        cr_assert_eq(h_raw_request(fd, "hello", seq, 1, pack_version, NULL, NULL, 0), 0);
        cr_assert_eq(h_raw_recv(fd, 5000, &f), 1, "no hello reply");
        h_expect_reply(&f, seq, "");
        cr_assert_eq(proto_get_u64(f.m.root, "max_frame", &max_frame), 0);
        h_frame_free(&f);
        return (uint32_t)max_frame;
}

static const char *frame_str(const struct h_frame *f)
{
        static char buf[256];
        size_t n = 0;
        if (!f->body)
                return "(none)";
        for (uint32_t i = 0; i < f->len && n + 4 < sizeof(buf); i++) {
                uint8_t c = f->body[i];
                n += (size_t)snprintf(buf + n, sizeof(buf) - n, c >= 32 && c < 127 ? "%c" : "\\x%02x", c);
        }
        return buf;
}

void h_expect_reply(const struct h_frame *f, uint64_t seq, const char *code)
{
        uint64_t got_seq = 0;
        const msgpack_object *err = NULL;
        const char *s;
        size_t n;

        cr_assert_not_null(f->m.root, "reply does not decode: %s", frame_str(f));
        cr_assert_eq(proto_get_u64(f->m.root, "seq", &got_seq), 0, "not a reply: %s", frame_str(f));
        cr_assert_eq(got_seq, seq, "reply seq %llu, want %llu: %s", (unsigned long long)got_seq,
                     (unsigned long long)seq, frame_str(f));
        if (!*code) {
                cr_assert_eq(proto_get_map(f->m.root, "error", &err), -ENOENT, "error reply: %s",
                             frame_str(f));
                return;
        }
        cr_assert_eq(proto_get_map(f->m.root, "error", &err), 0, "want error %s, got %s", code,
                     frame_str(f));
        cr_assert_eq(proto_get_str(err, "code", &s, &n), 0, "error without code: %s", frame_str(f));
        cr_assert(n == strlen(code) && memcmp(s, code, n) == 0, "error code %.*s, want %s: %s",
                  (int)n, s, code, frame_str(f));
        cr_assert_eq(proto_get_str(err, "message", &s, &n), 0, "error without message: %s",
                     frame_str(f));
}

const char *h_error_message(const struct h_frame *f, size_t *ret_len)
{
        const msgpack_object *err = NULL;
        const char *s;

        cr_assert_eq(proto_get_map(f->m.root, "error", &err), 0, "not an error reply: %s",
                     frame_str(f));
        cr_assert_eq(proto_get_str(err, "message", &s, ret_len), 0, "error without message: %s",
                     frame_str(f));
        return s;
}

void h_expect_event(const struct h_frame *f, const char *code, bool fatal)
{
        const char *s;
        size_t n;
        bool got_fatal = !fatal;
        uint64_t seq;

        cr_assert_not_null(f->m.root, "event does not decode: %s", frame_str(f));
        cr_assert(proto_obj_str_eq(proto_get(f->m.root, "event"), "error"),
                  "want error event %s, got %s", code, frame_str(f));
        cr_assert_eq(proto_get_u64(f->m.root, "seq", &seq), -ENOENT, "event with seq: %s",
                     frame_str(f));
        cr_assert_eq(proto_get_str(f->m.root, "code", &s, &n), 0, "event without code: %s",
                     frame_str(f));
        cr_assert(n == strlen(code) && memcmp(s, code, n) == 0, "event code %.*s, want %s: %s",
                  (int)n, s, code, frame_str(f));
        cr_assert_eq(proto_get_str(f->m.root, "message", &s, &n), 0, "event without message: %s",
                     frame_str(f));
        cr_assert_eq(proto_get_bool(f->m.root, "fatal", &got_fatal), 0, "event without fatal: %s",
                     frame_str(f));
        cr_assert_eq(got_fatal, fatal, "event fatal=%d, want %d: %s", got_fatal, fatal, frame_str(f));
}

void h_raw_expect_reply(int fd, uint64_t seq, const char *code)
{
        struct h_frame f;
        int r = h_raw_recv(fd, 5000, &f);
        cr_assert_eq(r, 1, "no reply to seq %llu (want %s): %s", (unsigned long long)seq,
                     *code ? code : "success", r == 0 ? "connection closed" : strerror(-r));
        h_expect_reply(&f, seq, code);
        h_frame_free(&f);
}

void h_raw_expect_event(int fd, const char *code, bool fatal)
{
        struct h_frame f;
        int r = h_raw_recv(fd, 5000, &f);
        cr_assert_eq(r, 1, "no %s error event: %s", code,
                     r == 0 ? "connection closed" : strerror(-r));
        h_expect_event(&f, code, fatal);
        h_frame_free(&f);
}

/* ---- helper processes ---------------------------------------------------- */

void h_spawn_path(struct h_child *c, const char *path, const char *const *args, bool pipes)
{
        posix_spawn_file_actions_t fa;
        char *argv[32], sock_env[320], **envp;
        int in[2] = { -1, -1 }, out[2] = { -1, -1 }, argc = 0, n = 0, r;

        c->in = c->out = -1;
        argv[argc++] = (char *)path;
        for (int i = 0; args && args[i] && argc < 31; i++)
                argv[argc++] = (char *)args[i];
        argv[argc] = NULL;

        /* environ with GPUIPC_SOCKET replaced */
        while (environ[n])
                n++;
        envp = calloc((size_t)n + 2, sizeof(*envp));
        cr_assert_not_null(envp);
        n = 0;
        for (char **e = environ; *e; e++)
                if (strncmp(*e, "GPUIPC_SOCKET=", 14) != 0)
                        envp[n++] = *e;
        snprintf(sock_env, sizeof(sock_env), "GPUIPC_SOCKET=%s", h_d.sock);
        if (h_d.sock[0])
                envp[n++] = sock_env;
        envp[n] = NULL;

        posix_spawn_file_actions_init(&fa);
        if (pipes) {
                cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
                cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
                posix_spawn_file_actions_adddup2(&fa, in[0], 0);
                posix_spawn_file_actions_adddup2(&fa, out[1], 1);
        } else {
                posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
                posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        }
        r = posix_spawn(&c->pid, path, &fa, NULL, argv, envp);
        posix_spawn_file_actions_destroy(&fa);
        free(envp);
        cr_assert_eq(r, 0, "posix_spawn %s: %s", path, strerror(r));
        if (pipes) {
                close(in[0]);
                close(out[1]);
                c->in = in[1];
                c->out = out[0];
        }
}

void h_spawn(struct h_child *c, const char *helper, const char *const *args, bool pipes)
{
        char rel[128];
        snprintf(rel, sizeof(rel), "tests/%s", helper);
        h_spawn_path(c, h_path(rel), args, pipes);
}

int h_wait(struct h_child *c, int timeout_ms)
{
        int status = 0;
        bool in_time;

        /* EOF on its stdin tells a holding helper to finish */
        if (c->in >= 0)
                close(c->in);
        c->in = -1;
        in_time = h_reap(c->pid, timeout_ms, &status);
        if (c->out >= 0)
                close(c->out);
        c->out = -1;
        if (!in_time)
                cr_assert_fail("helper pid %d still running after %d ms", (int)c->pid, timeout_ms);
        if (WIFSIGNALED(status))
                return 128 + WTERMSIG(status);
        return WEXITSTATUS(status);
}

int h_read_line(struct h_child *c, char *buf, size_t len, int timeout_ms)
{
        int64_t deadline = h_now_ms() + timeout_ms;
        size_t n = 0;

        while (n + 1 < len) {
                struct pollfd p = { .fd = c->out, .events = POLLIN };
                int left = (int)(deadline - h_now_ms());
                ssize_t k;
                if (left <= 0 || poll(&p, 1, left) <= 0)
                        return -1;
                k = read(c->out, buf + n, 1);
                if (k <= 0)
                        return -1;
                if (buf[n] == '\n')
                        break;
                n++;
        }
        buf[n] = '\0';
        return (int)n;
}
