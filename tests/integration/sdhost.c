/* sdhost.c: see sdhost.h. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/kcmp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "harness.h"
#include "sdhost.h"

#define SD_FDNAME_MAX 255
#define SD_ARGS_MAX 24
#define SD_MSG_MAX 4096
#define SD_MSG_FDS 64

extern char **environ;

struct stored {
        int fd;
        char name[SD_FDNAME_MAX + 1];
};

struct h_sd_state {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        pthread_t thread;
        bool thread_on;
        int listen_fd, notify_fd, wake_fd;
        char notify_path[300];
        char *args[SD_ARGS_MAX + 1];
        /* under lock, from here on */
        struct stored *store;   /* in the order stored */
        size_t n_store, cap_store;
        bool ready, stopping;
        unsigned dups, errors;
};

/* ---- the notify socket --------------------------------------------------- */

/* systemd's fdname_is_valid(): printable ASCII but ':', at most 255 bytes. */
static bool fdname_ok(const char *s)
{
        size_t n = 0;

        for (; s[n]; n++)
                if (s[n] < ' ' || s[n] > '~' || s[n] == ':')
                        return false;
        return n <= SD_FDNAME_MAX;
}

/* systemd's same_fd(): one open file description (kcmp), else the same
 * inode with the same flags. */
static bool same_fd(int a, int b)
{
        pid_t pid = getpid();
        struct stat sa, sb;
        long r;

        r = syscall(SYS_kcmp, pid, pid, KCMP_FILE, a, b);
        if (r >= 0)
                return r == 0;
        if (fstat(a, &sa) < 0 || fstat(b, &sb) < 0)
                return false;
        if (sa.st_dev != sb.st_dev || sa.st_ino != sb.st_ino ||
            (sa.st_mode & S_IFMT) != (sb.st_mode & S_IFMT))
                return false;
        if (S_ISCHR(sa.st_mode) || S_ISBLK(sa.st_mode))
                return false;
        return fcntl(a, F_GETFL) == fcntl(b, F_GETFL);
}

static void complain(struct h_sd_state *st, const char *what, const char *msg)
{
        st->errors++;
        fprintf(stderr, "sdhost: %s in notification \"%s\"\n", what, msg);
}

/* Takes fd into the store under name; consumes fd. */
static void store_add(struct h_sd_state *st, const char *name, int fd)
{
        for (size_t i = 0; i < st->n_store; i++) {
                if (!same_fd(st->store[i].fd, fd))
                        continue;
                st->dups++;
                fprintf(stderr, "sdhost: FDSTORE of \"%s\" dropped: the same open file is "
                        "stored as \"%s\" (systemd drops it too)\n", name, st->store[i].name);
                close(fd);
                return;
        }
        if (st->n_store == st->cap_store) {
                size_t cap = st->cap_store ? st->cap_store * 2 : 16;
                struct stored *p = realloc(st->store, cap * sizeof(*p));
                if (!p) {
                        fprintf(stderr, "sdhost: out of memory, \"%s\" not stored\n", name);
                        st->errors++;
                        close(fd);
                        return;
                }
                st->store = p;
                st->cap_store = cap;
        }
        st->store[st->n_store].fd = fd;
        snprintf(st->store[st->n_store].name, sizeof(st->store[0].name), "%s", name);
        st->n_store++;
}

static void store_remove(struct h_sd_state *st, const char *name)
{
        size_t j = 0;

        for (size_t i = 0; i < st->n_store; i++) {
                if (strcmp(st->store[i].name, name) == 0) {
                        close(st->store[i].fd);
                        continue;
                }
                st->store[j++] = st->store[i];
        }
        st->n_store = j;
}

/* One notification: newline-separated assignments, fds attached. */
static void handle(struct h_sd_state *st, char *msg, const int *fds, unsigned nfds)
{
        bool fdstore = false, remove = false, ready = false, stopping = false, bad_name = false;
        const char *name = NULL;
        char shown[256], *save = NULL;

        /* for messages: one line */
        snprintf(shown, sizeof(shown), "%.*s", (int)sizeof(shown) - 1, msg);
        for (char *p = shown; *p; p++)
                if (*p == '\n')
                        *p = '|';

        for (char *line = strtok_r(msg, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (strcmp(line, "READY=1") == 0)
                        ready = true;
                else if (strcmp(line, "STOPPING=1") == 0)
                        stopping = true;
                else if (strcmp(line, "FDSTORE=1") == 0)
                        fdstore = true;
                else if (strcmp(line, "FDSTOREREMOVE=1") == 0)
                        remove = true;
                else if (strncmp(line, "FDNAME=", 7) == 0) {
                        name = line + 7;
                        if (!fdname_ok(name)) {
                                bad_name = true;
                                name = NULL;
                        }
                }
                /* WATCHDOG=1, STATUS=, FDPOLL=, ...: nothing to do */
        }
        if (bad_name)
                complain(st, "invalid FDNAME (systemd ignores it)", shown);
        if (remove) {
                if (name)
                        store_remove(st, name);
                else
                        complain(st, "FDSTOREREMOVE=1 without a valid FDNAME", shown);
        }
        if (nfds && !fdstore) {
                complain(st, "fds without FDSTORE=1 (closed)", shown);
                for (unsigned i = 0; i < nfds; i++)
                        close(fds[i]);
        } else if (fdstore) {
                if (!nfds)
                        complain(st, "FDSTORE=1 without an fd", shown);
                else if (nfds > 1)
                        complain(st, "FDSTORE=1 with more than one fd (all stored)", shown);
                for (unsigned i = 0; i < nfds; i++)
                        store_add(st, name ? name : "stored", fds[i]);
        }
        if (stopping)
                st->stopping = true;
        if (ready) {
                st->ready = true;
                pthread_cond_broadcast(&st->cond);
        }
}

/* Takes one queued notification: 1, 0 when none is queued.  Locked. */
static int take_one(struct h_sd_state *st)
{
        union {
                char buf[CMSG_SPACE(sizeof(int) * SD_MSG_FDS)];
                struct cmsghdr align;
        } ctl;
        char buf[SD_MSG_MAX + 1];
        struct iovec iov = { .iov_base = buf, .iov_len = SD_MSG_MAX };
        struct msghdr msg = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = ctl.buf,
                .msg_controllen = sizeof(ctl.buf),
        };
        int fds[SD_MSG_FDS];
        unsigned nfds = 0;
        ssize_t n;

        n = recvmsg(st->notify_fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0)
                return errno == EINTR;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
                size_t k;
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        if (nfds < SD_MSG_FDS)
                                fds[nfds++] = fd;
                        else
                                close(fd);
                }
        }
        buf[n] = '\0';
        if (msg.msg_flags & MSG_CTRUNC)
                complain(st, "fds cut off (too many in one message)", buf);
        if (msg.msg_flags & MSG_TRUNC)
                complain(st, "message longer than 4096 bytes, cut off", buf);
        handle(st, buf, fds, nfds);
        return 1;
}

static void drain_locked(struct h_sd_state *st)
{
        while (take_one(st) > 0)
                ;
}

static void drain(struct h_sd_state *st)
{
        pthread_mutex_lock(&st->lock);
        drain_locked(st);
        pthread_mutex_unlock(&st->lock);
}

static void *notify_thread(void *arg)
{
        struct h_sd_state *st = arg;

        for (;;) {
                struct pollfd p[2] = {
                        { .fd = st->notify_fd, .events = POLLIN },
                        { .fd = st->wake_fd, .events = POLLIN },
                };
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (p[1].revents)
                        break;
                drain(st);
        }
        return NULL;
}

/* ---- the daemon ---------------------------------------------------------- */

void h_sd_dump_log(const struct h_sd *s)
{
        static char buf[16384];
        FILE *f = fopen(s->log, "r");
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
        fprintf(stderr, "---- %s (tail) ----\n%s---- end of log ----\n", s->log, buf);
}

static void describe_status(int status, char *buf, size_t len)
{
        if (WIFEXITED(status))
                snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
        else if (WIFSIGNALED(status))
                snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
        else
                snprintf(buf, len, "wait status 0x%x", status);
}

/* Async-signal-safe: writes "LISTEN_PID=<pid>" into buf. */
static void fmt_listen_pid(char *buf, pid_t pid)
{
        char digits[24];
        int n = 0;

        memcpy(buf, "LISTEN_PID=", 11);
        buf += 11;
        do {
                digits[n++] = (char)('0' + pid % 10);
                pid /= 10;
        } while (pid > 0);
        while (n > 0)
                *buf++ = digits[--n];
        *buf = '\0';
}

static bool env_skipped(const char *e)
{
        static const char *const skip[] = {
                "NOTIFY_SOCKET=", "LISTEN_PID=", "LISTEN_FDS=", "LISTEN_FDNAMES=",
                "GPUIPC_SOCKET=", "WATCHDOG_USEC=", "WATCHDOG_PID=",
        };
        for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
                if (strncmp(e, skip[i], strlen(skip[i])) == 0)
                        return true;
        return false;
}

static void wait_ready(struct h_sd *s)
{
        struct h_sd_state *st = s->st;
        int64_t deadline = h_now_ms() + 10000;
        char why[64];

        for (;;) {
                struct timespec ts;
                bool ready;
                int status;

                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_nsec += 100 * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000L;
                }
                pthread_mutex_lock(&st->lock);
                if (!st->ready)
                        pthread_cond_timedwait(&st->cond, &st->lock, &ts);
                ready = st->ready;
                pthread_mutex_unlock(&st->lock);
                if (ready)
                        return;
                if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
                        s->pid = -1;
                        if (s->may_fail) {
                                s->failed_status = status;
                                return;
                        }
                        h_sd_dump_log(s);
                        describe_status(status, why, sizeof(why));
                        cr_assert_fail("gpuipcd (start #%u) died before READY=1: %s", s->starts,
                                       why);
                }
                if (h_now_ms() > deadline) {
                        kill(s->pid, SIGKILL);
                        waitpid(s->pid, &status, 0);
                        s->pid = -1;
                        h_sd_dump_log(s);
                        cr_assert_fail("gpuipcd (start #%u) sent no READY=1 within 10 s",
                                       s->starts);
                }
        }
}

/* Forks and execs the daemon with the socket at fd 3 and the store, newest
 * first, from fd 4 on; then waits for READY=1. */
static void launch(struct h_sd *s)
{
        struct h_sd_state *st = s->st;
        const char *daemon_path = h_path("gpuipcd");
        char notify_env[320], fds_env[48], sock_env[320], pid_env[48], *argv[SD_ARGS_MAX + 3];
        char **envp, *names;
        int *src, *tmp, logfd, argc = 0, n_env = 0, n;
        size_t names_len = 0;
        bool own_config = false;
        pid_t pid;

        cr_assert_eq(access(daemon_path, X_OK), 0, "no daemon at %s (set GPUIPC_BUILDDIR)",
                     daemon_path);
        argv[argc++] = (char *)daemon_path;
        for (int i = 0; st->args[i]; i++)
                own_config |= strcmp(st->args[i], "--config") == 0;
        if (!own_config)
                argv[argc++] = "--no-config";
        for (int i = 0; st->args[i]; i++)
                argv[argc++] = st->args[i];
        argv[argc] = NULL;

        while (environ[n_env])
                n_env++;
        envp = calloc((size_t)n_env + 6, sizeof(*envp));
        cr_assert_not_null(envp);
        n_env = 0;
        for (char **e = environ; *e; e++)
                if (!env_skipped(*e))
                        envp[n_env++] = *e;
        snprintf(notify_env, sizeof(notify_env), "NOTIFY_SOCKET=%s", st->notify_path);
        /* never the default /run path, should the daemon ignore LISTEN_FDS */
        snprintf(sock_env, sizeof(sock_env), "GPUIPC_SOCKET=%s", s->sock);
        envp[n_env++] = notify_env;
        envp[n_env++] = sock_env;
        envp[n_env++] = fds_env;
        envp[n_env++] = pid_env;        /* filled in by the child */

        logfd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        cr_assert_geq(logfd, 0, "open %s: %s", s->log, strerror(errno));

        /* The store must not change between the snapshot and the fork: hold
         * the lock across it (the child touches neither lock nor store). */
        pthread_mutex_lock(&st->lock);
        drain_locked(st);
        n = (int)st->n_store;
        src = calloc((size_t)n + 1, sizeof(*src));
        tmp = calloc((size_t)n + 1, sizeof(*tmp));
        for (size_t i = 0; i < st->n_store; i++)
                names_len += strlen(st->store[i].name) + 1;
        names = malloc(names_len + 64);
        if (!src || !tmp || !names) {
                pthread_mutex_unlock(&st->lock);
                cr_assert_fail("sdhost: out of memory");
        }
        strcpy(names, "LISTEN_FDNAMES=gpuipcd.socket");
        src[0] = st->listen_fd;
        /* systemd prepends to its store and passes it in list order */
        for (int i = 0; i < n; i++) {
                const struct stored *e = &st->store[st->n_store - 1 - (size_t)i];
                src[i + 1] = e->fd;
                strcat(names, ":");
                strcat(names, e->name);
        }
        envp[n_env++] = names;
        envp[n_env] = NULL;
        snprintf(fds_env, sizeof(fds_env), "LISTEN_FDS=%d", n + 1);
        st->ready = false;
        st->stopping = false;
        dprintf(logfd, "==== sdhost: start #%u, %s ====\n", s->starts + 1, names);

        pid = fork();
        if (pid == 0) {
                /* only async-signal-safe calls from here: other threads run */
                int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC), top = n + 4;
                sigset_t none;

                prctl(PR_SET_PDEATHSIG, SIGKILL);
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0)
                        _exit(126);
                /* out of the way of 3..3+n first, then into place (not
                 * close-on-exec; the copies above are) */
                for (int i = 0; i <= n; i++)
                        if ((tmp[i] = fcntl(src[i], F_DUPFD_CLOEXEC, top)) < 0)
                                _exit(126);
                for (int i = 0; i <= n; i++)
                        if (dup2(tmp[i], 3 + i) < 0)
                                _exit(126);
                /* nothing else, as under systemd (the test runner's fds are
                 * not all close-on-exec) */
                if (syscall(SYS_close_range, (unsigned)top, ~0u, 0) < 0)
                        for (int fd = top; fd < 4096; fd++)
                                close(fd);
                fmt_listen_pid(pid_env, getpid());
                execve(daemon_path, argv, envp);
                _exit(127);
        }
        pthread_mutex_unlock(&st->lock);
        close(logfd);
        free(src);
        free(tmp);
        free(names);
        free(envp);
        cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
        s->pid = pid;
        s->starts++;
        wait_ready(s);
}

void h_sd_start(struct h_sd *s, const char *const *extra_args)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct h_sd_state *st;
        pthread_condattr_t ca;
        int argc = 0;

        memset(s, 0, sizeof(*s));
        s->pid = -1;
        signal(SIGPIPE, SIG_IGN);
        st = calloc(1, sizeof(*st));
        cr_assert_not_null(st);
        st->listen_fd = st->notify_fd = st->wake_fd = -1;
        s->st = st;
        pthread_mutex_init(&st->lock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&st->cond, &ca);
        pthread_condattr_destroy(&ca);

        for (int i = 0; extra_args && extra_args[i]; i++) {
                cr_assert_lt(argc, SD_ARGS_MAX, "sdhost: more than %d daemon arguments",
                             SD_ARGS_MAX);
                st->args[argc] = strdup(extra_args[i]);
                cr_assert_not_null(st->args[argc]);
                argc++;
        }

        snprintf(s->dir, sizeof(s->dir), "/tmp/gpuipc-sd-XXXXXX");
        cr_assert_not_null(mkdtemp(s->dir), "mkdtemp: %s", strerror(errno));
        snprintf(s->sock, sizeof(s->sock), "%s/gpuipcd.sock", s->dir);
        snprintf(s->log, sizeof(s->log), "%s/daemon.log", s->dir);
        snprintf(st->notify_path, sizeof(st->notify_path), "%s/notify.sock", s->dir);

        /* gpuipcd.socket: ListenStream=DIR/gpuipcd.sock */
        st->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert_geq(st->listen_fd, 0, "socket: %s", strerror(errno));
        strcpy(sa.sun_path, s->sock);
        cr_assert_eq(bind(st->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind %s: %s",
                     s->sock, strerror(errno));
        cr_assert_eq(listen(st->listen_fd, SOMAXCONN), 0, "listen: %s", strerror(errno));

        st->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        cr_assert_geq(st->notify_fd, 0, "socket: %s", strerror(errno));
        strcpy(sa.sun_path, st->notify_path);
        cr_assert_eq(bind(st->notify_fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind %s: %s",
                     st->notify_path, strerror(errno));
        st->wake_fd = eventfd(0, EFD_CLOEXEC);
        cr_assert_geq(st->wake_fd, 0, "eventfd: %s", strerror(errno));
        cr_assert_eq(pthread_create(&st->thread, NULL, notify_thread, st), 0);
        st->thread_on = true;

        snprintf(h_d.sock, sizeof(h_d.sock), "%s", s->sock);
        launch(s);
}

/* Signals and reaps the daemon; false with why filled in when it did not
 * end as sig should have ended it. */
static bool reap(struct h_sd *s, int sig, char *why, size_t len)
{
        int status = 0;
        bool in_time;
        char st_text[64];

        if (kill(s->pid, sig) < 0) {
                snprintf(why, len, "kill(%d, %d): %s", (int)s->pid, sig, strerror(errno));
                return false;
        }
        in_time = h_reap(s->pid, 10000, &status);
        s->pid = -1;
        if (!in_time) {
                snprintf(why, len, "gpuipcd did not end within 10 s of signal %d", sig);
                return false;
        }
        describe_status(status, st_text, sizeof(st_text));
        if (sig == SIGTERM && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
                snprintf(why, len, "gpuipcd after SIGTERM: %s, want exit status 0", st_text);
                return false;
        }
        if (sig != SIGTERM && !(WIFSIGNALED(status) && WTERMSIG(status) == sig)) {
                snprintf(why, len, "gpuipcd after signal %d: %s", sig, st_text);
                return false;
        }
        /* it is gone: everything it sent is queued */
        drain(s->st);
        return true;
}

void h_sd_kill(struct h_sd *s, int sig)
{
        char why[128];
        bool stopping;

        cr_assert(s->st && s->pid > 0, "h_sd_kill: no daemon running");
        if (!reap(s, sig, why, sizeof(why))) {
                h_sd_dump_log(s);
                cr_assert_fail("%s", why);
        }
        if (sig != SIGTERM)
                return;
        pthread_mutex_lock(&s->st->lock);
        stopping = s->st->stopping;
        pthread_mutex_unlock(&s->st->lock);
        cr_assert(stopping, "gpuipcd exited on SIGTERM without sending STOPPING=1");
        cr_assert_eq(access(s->sock, F_OK), 0,
                     "gpuipcd unlinked %s, the socket it was given (clients could not reconnect)",
                     s->sock);
}

void h_sd_start_again(struct h_sd *s)
{
        cr_assert(s->st && s->pid <= 0, "h_sd_start_again: no stopped daemon to start");
        launch(s);
}

int h_sd_try_start_again(struct h_sd *s)
{
        cr_assert(s->st && s->pid <= 0, "h_sd_try_start_again: no stopped daemon to start");
        s->may_fail = true;
        launch(s);
        s->may_fail = false;
        return s->pid > 0 ? 0 : -1;
}

void h_sd_restart(struct h_sd *s, int sig)
{
        h_sd_kill(s, sig);
        h_sd_start_again(s);
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
        (void)sb;
        (void)flag;
        (void)ftw;
        return remove(path);
}

void h_sd_stop(struct h_sd *s)
{
        struct h_sd_state *st = s->st;
        char why[128] = "";
        bool ok = true;
        uint64_t one = 1;

        if (!st)
                return;
        if (s->pid > 0)
                ok = reap(s, SIGTERM, why, sizeof(why));
        if (!ok)
                h_sd_dump_log(s);
        if (st->thread_on) {
                if (write(st->wake_fd, &one, sizeof(one)) != sizeof(one))
                        fprintf(stderr, "sdhost: cannot wake the notify thread: %s\n",
                                strerror(errno));
                pthread_join(st->thread, NULL);
                st->thread_on = false;
        }
        for (size_t i = 0; i < st->n_store; i++)
                close(st->store[i].fd);
        free(st->store);
        for (int i = 0; st->args[i]; i++)
                free(st->args[i]);
        if (st->listen_fd >= 0)
                close(st->listen_fd);
        if (st->notify_fd >= 0)
                close(st->notify_fd);
        if (st->wake_fd >= 0)
                close(st->wake_fd);
        pthread_cond_destroy(&st->cond);
        pthread_mutex_destroy(&st->lock);
        free(st);
        s->st = NULL;
        if (s->dir[0])
                nftw(s->dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
        if (strcmp(h_d.sock, s->sock) == 0)
                h_d.sock[0] = '\0';
        s->dir[0] = '\0';
        cr_assert(ok, "%s", why);
}

bool h_sd_alive(struct h_sd *s)
{
        int status;

        if (!s->st || s->pid <= 0)
                return false;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
                char why[64];
                s->pid = -1;
                h_sd_dump_log(s);
                describe_status(status, why, sizeof(why));
                cr_assert_fail("gpuipcd ended while the test ran: %s", why);
        }
        return true;
}

/* ---- the store ----------------------------------------------------------- */

static int count(struct h_sd *s, const char *str, bool prefix)
{
        struct h_sd_state *st = s->st;
        size_t len = strlen(str);
        int n = 0;

        cr_assert_not_null(st, "sdhost: not started");
        pthread_mutex_lock(&st->lock);
        drain_locked(st);
        for (size_t i = 0; i < st->n_store; i++)
                if (prefix ? strncmp(st->store[i].name, str, len) == 0 :
                             strcmp(st->store[i].name, str) == 0)
                        n++;
        pthread_mutex_unlock(&st->lock);
        return n;
}

int h_sd_stored(struct h_sd *s, const char *prefix)
{
        return count(s, prefix, true);
}

int h_sd_stored_name(struct h_sd *s, const char *name)
{
        return count(s, name, false);
}

static int settle(struct h_sd *s, const char *str, bool prefix, int want, int timeout_ms)
{
        int64_t deadline = h_now_ms() + timeout_ms;
        int n;

        while ((n = count(s, str, prefix)) != want && h_now_ms() < deadline)
                h_sleep_ms(10);
        return n;
}

int h_sd_stored_settle(struct h_sd *s, const char *prefix, int want, int timeout_ms)
{
        return settle(s, prefix, true, want, timeout_ms);
}

int h_sd_stored_name_settle(struct h_sd *s, const char *name, int want, int timeout_ms)
{
        return settle(s, name, false, want, timeout_ms);
}

const char *h_sd_store_str(struct h_sd *s)
{
        static char bufs[4][1024];
        static unsigned next;
        char *b = bufs[next++ % 4];
        struct h_sd_state *st = s->st;
        size_t n = 0;

        if (!st)
                return "(not started)";
        b[0] = '\0';
        pthread_mutex_lock(&st->lock);
        drain_locked(st);
        for (size_t i = 0; i < st->n_store && n < sizeof(bufs[0]); i++)
                n += (size_t)snprintf(b + n, sizeof(bufs[0]) - n, "%s%s", n ? " " : "",
                                      st->store[i].name);
        if (st->n_store == 0)
                snprintf(b, sizeof(bufs[0]), "(empty)");
        pthread_mutex_unlock(&st->lock);
        return b;
}

unsigned h_sd_dups(struct h_sd *s)
{
        unsigned n;

        pthread_mutex_lock(&s->st->lock);
        n = s->st->dups;
        pthread_mutex_unlock(&s->st->lock);
        return n;
}

unsigned h_sd_errors(struct h_sd *s)
{
        unsigned n;

        pthread_mutex_lock(&s->st->lock);
        n = s->st->errors;
        pthread_mutex_unlock(&s->st->lock);
        return n;
}
