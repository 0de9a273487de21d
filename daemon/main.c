/* main.c: gpuipcd's command line, startup and ordered shutdown. */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <uv.h>

#include "access.h"
#include "busypoll.h"
#include "closer.h"
#include "config.h"
#include "daemon.h"
#include "ledger.h"
#include "listen.h"
#include "log.h"
#include "metrics_http.h"
#include "conn.h"
#include "ops.h"
#include "restart_persist.h"
#include "restart_replay.h"
#include "session.h"
#include "watch.h"
#include "proto.h"
#include "sd.h"

static struct daemon daemon_state;
static struct listener listener;
static uv_signal_t sig_term, sig_int;
static uv_timer_t watchdog;
static bool watchdog_on;

/* Help text column, and the width lines are wrapped to. */
#define HELP_COL   32
#define HELP_WIDTH 79

/* "  LHS   help..." with help wrapped at word boundaries into its column;
 * an LHS too wide for it puts the help on the next line. */
static void print_wrapped(FILE *f, const char *lhs, const char *help)
{
        size_t col;

        col = (size_t)fprintf(f, "  %s", lhs);
        if (col + 1 > HELP_COL) {
                fputc('\n', f);
                col = 0;
        }
        while (*help) {
                size_t n = strcspn(help, " ");
                if (col > HELP_COL && col + 1 + n > HELP_WIDTH) {
                        fputc('\n', f);
                        col = 0;
                }
                if (col < HELP_COL) {
                        fprintf(f, "%*s", (int)(HELP_COL - col), "");
                        col = HELP_COL;
                } else {
                        fputc(' ', f);
                        col++;
                }
                fwrite(help, 1, n, f);
                col += n;
                help += n;
                while (*help == ' ')
                        help++;
        }
        fputc('\n', f);
}

static void usage(FILE *f)
{
        const struct config_key_info *k;
        size_t n;

        fprintf(f,
                "Usage: gpuipcd [OPTION]...\n"
                "Broker zero-copy buffer handoff between processes over an AF_UNIX socket.\n"
                "\n"
                "Every setting below is also a key of the configuration file\n"
                "(" CONFIG_DEFAULT_PATH " and " CONFIG_DEFAULT_PATH ".d/*.conf,\n"
                "'key=value' lines; see gpuipcd.conf(5)); flags win over files.\n"
                "\n");
        k = config_keys(&n);
        for (size_t i = 0; i < n; i++) {
                char lhs[64];
                snprintf(lhs, sizeof(lhs), "--%s %s", k[i].name, k[i].arg);
                print_wrapped(f, lhs, k[i].help);
        }
        fprintf(f,
                "  --config PATH                 read PATH and PATH.d/*.conf instead of\n"
                "                                " CONFIG_DEFAULT_PATH "\n"
                "  --no-config                   read no configuration file\n"
                "  -h, --help                    show this help\n"
                "  -V, --version                 show the version\n"
                "\n"
                "SIZE takes a byte count with an optional IEC suffix: 4096, 64K, 16M, 1G.\n"
                "\n"
                "Under systemd, a passed listening socket (LISTEN_FDS) is used instead of\n"
                "--socket, readiness is reported through NOTIFY_SOCKET, and WATCHDOG_USEC\n"
                "is honoured.\n");
}

#define OPT_CONFIG    0x100
#define OPT_NO_CONFIG 0x101
#define OPT_KEY       0x200     /* + index into config_keys() */

/* Defaults, then the configuration files, then the flags: the flags are
 * collected first so that --config can name the file they override. */
static int parse_args(int argc, char **argv, struct config *cfg)
{
        struct option opts[64];
        const struct config_key_info *keys;
        const char *path = CONFIG_DEFAULT_PATH;
        bool explicit_path = false, no_config = false;
        struct flag {
                int key;                /* index into keys */
                const char *value;      /* optarg: "--key value" or "--key=value" */
        } *flags;
        char err[600];
        size_t nkeys, nopts = 0, nflags = 0;
        int c, r = 0;

        keys = config_keys(&nkeys);
        assert(nkeys + 5 <= sizeof(opts) / sizeof(opts[0]));
        for (size_t i = 0; i < nkeys; i++)
                opts[nopts++] = (struct option) { keys[i].name, required_argument, NULL,
                                                  OPT_KEY + (int)i };
        opts[nopts++] = (struct option) { "config", required_argument, NULL, OPT_CONFIG };
        opts[nopts++] = (struct option) { "no-config", no_argument, NULL, OPT_NO_CONFIG };
        opts[nopts++] = (struct option) { "help", no_argument, NULL, 'h' };
        opts[nopts++] = (struct option) { "version", no_argument, NULL, 'V' };
        opts[nopts] = (struct option) { 0 };

        flags = calloc((size_t)argc + 1, sizeof(*flags));
        if (!flags)
                return -ENOMEM;
        while (r == 0 && (c = getopt_long(argc, argv, "hV", opts, NULL)) >= 0) {
                switch (c) {
                case OPT_CONFIG:
                        path = optarg;
                        explicit_path = true;
                        break;
                case OPT_NO_CONFIG:
                        no_config = true;
                        break;
                case 'h':
                        usage(stdout);
                        free(flags);
                        exit(EXIT_SUCCESS);
                case 'V':
                        printf("gpuipcd %s (protocol %u)\n", GPUIPC_VERSION, PROTO_VERSION);
                        free(flags);
                        exit(EXIT_SUCCESS);
                default:
                        if (c < OPT_KEY || c >= OPT_KEY + (int)nkeys) {
                                r = -EINVAL;
                                break;
                        }
                        flags[nflags].key = c - OPT_KEY;
                        flags[nflags].value = optarg;
                        nflags++;
                        break;
                }
        }
        if (r == 0 && optind < argc) {
                fprintf(stderr, "gpuipcd: unexpected argument '%s'\n", argv[optind]);
                r = -EINVAL;
        }
        if (r == 0 && no_config && explicit_path) {
                fprintf(stderr, "gpuipcd: --config and --no-config exclude each other\n");
                r = -EINVAL;
        }
        config_defaults(cfg);
        if (r == 0 && !no_config) {
                r = config_load(cfg, path, explicit_path, err, sizeof(err));
                if (r < 0) {
                        fprintf(stderr, "gpuipcd: %s\n", err);
                        free(flags);
                        return -EBADF;  /* not a usage error: no usage text */
                }
        }
        for (size_t i = 0; r == 0 && i < nflags; i++) {
                r = config_set(cfg, keys[flags[i].key].name, flags[i].value, err, sizeof(err));
                if (r < 0)
                        fprintf(stderr, "gpuipcd: --%s\n", err);
        }
        free(flags);
        if (r == 0 && config_check(cfg, err, sizeof(err)) < 0) {
                fprintf(stderr, "gpuipcd: %s\n", err);
                r = -EINVAL;
        }
        return r;
}

static void on_signal(uv_signal_t *h, int signum)
{
        struct daemon *d = h->data;

        if (d->stopping)
                return;
        d->stopping = true;
        log_info("received %s, shutting down (%u connections, %" PRIu64 " registrations)",
                 strsignal(signum), d->n_conns, registry_counters(d->reg)->registrations);
        /* What the clients hold stays in the fd store for the next start:
         * the connections end here, but not their sessions, so closing them
         * must tell nobody of releases, revocations or unregistrations the
         * next daemon will not have made. */
        if (persist_enabled())
                for (struct conn *c = d->conns; c; c = c->next)
                        c->party.detached = true;
        persist_freeze();
        session_stop(d);
        busypoll_stop();
        listener_close(&listener);
        mhttp_stop();
        if (watchdog_on)
                uv_close((uv_handle_t *)&watchdog, NULL);
        watchdog_on = false;
        (void)sd_notify_send("STOPPING=1");
        daemon_close_connections(d);
        uv_close((uv_handle_t *)&sig_term, NULL);
        uv_close((uv_handle_t *)&sig_int, NULL);
}

/* WATCHDOG=1 with a STATUS= line, at half of systemd's interval: a loop
 * that stops turning stops the pings and gets the service restarted. */
static void on_watchdog(uv_timer_t *t)
{
        struct daemon *d = t->data;
        char msg[160];

        snprintf(msg, sizeof(msg), "WATCHDOG=1\nSTATUS=%" PRIu32 " connections, %" PRIu64
                 " registrations, %" PRIu64 " leases", d->n_conns,
                 registry_counters(d->reg)->live, registry_counters(d->reg)->leases);
        (void)sd_notify_send(msg);
}

/* $WATCHDOG_USEC, when set for this process ($WATCHDOG_PID unset or ours). */
static void start_watchdog(struct daemon *d)
{
        const char *usec_s = getenv("WATCHDOG_USEC"), *pid_s = getenv("WATCHDOG_PID");
        unsigned long long usec;
        char *end;

        if (!usec_s || !*usec_s)
                return;
        if (pid_s && *pid_s && strtoll(pid_s, &end, 10) != (long long)getpid())
                return;
        errno = 0;
        usec = strtoull(usec_s, &end, 10);
        if (errno || *end || usec < 2000) {
                log_warn("ignoring WATCHDOG_USEC='%s'", usec_s);
                return;
        }
        uv_timer_init(d->loop, &watchdog);
        watchdog.data = d;
        uv_timer_start(&watchdog, on_watchdog, 0, usec / 2000);
        watchdog_on = true;
        log_debug("watchdog: pinging every %llu ms", usec / 2000);
}

/* admin-group by name, resolved once: NSS may block, the loop must not. */
static int resolve_admin_group(const struct config *cfg)
{
        struct group *g;

        if (!cfg->admin_group[0]) {
                access_set_admin_group(false, 0);
                return 0;
        }
        errno = 0;
        g = getgrnam(cfg->admin_group);
        if (!g) {
                log_error("admin-group '%s': %s", cfg->admin_group,
                          errno ? strerror(errno) : "no such group");
                return -ENOENT;
        }
        access_set_admin_group(true, g->gr_gid);
        return 0;
}

/* The registry of the daemon before this one, from the fd store. */
static void restore(struct daemon *d)
{
        struct restore_result res;
        struct sd_fd *fds;
        size_t n;

        persist_init(d);
        sd_take_stored(&fds, &n);
        restore_run(d, fds, n, &res);
        (void)persist_start(d, res.gen, res.serial, res.kept);
        session_watch_all(d);
}

static int start(struct daemon *d)
{
        char err[300];
        char status[256];
        int r, fd;

        r = sd_listen_fd(&fd);
        if (r < 0) {
                log_error("the fds passed by systemd are unusable: %s", strerror(-r));
                return r;
        }
        restore(d);
        if (r > 0)
                r = listener_adopt(&listener, d, fd);
        else
                r = listener_bind(&listener, d, d->cfg.socket_path, d->cfg.socket_mode);
        if (r < 0)
                return r;
        r = listener_start(&listener);
        if (r < 0) {
                log_error("cannot watch the listening socket: %s", uv_strerror(r));
                listener_close(&listener);
                return r;
        }
        if (d->cfg.metrics_listen[0]) {
                r = mhttp_start(d, d->cfg.metrics_listen, err, sizeof(err));
                if (r < 0) {
                        log_error("%s", err);
                        listener_close(&listener);
                        return r;
                }
                log_info("serving metrics on %s", d->cfg.metrics_listen);
        }
        sig_term.data = sig_int.data = d;
        uv_signal_init(d->loop, &sig_term);
        uv_signal_init(d->loop, &sig_int);
        uv_signal_start(&sig_term, on_signal, SIGTERM);
        uv_signal_start(&sig_int, on_signal, SIGINT);

        log_info("gpuipcd %s (protocol %u) listening on %s, pid %d; max frame %u, "
                 "connections %u, registrations %u, leases %u, waits %u, output %" PRIu64,
                 GPUIPC_VERSION, PROTO_VERSION, listener.path, (int)getpid(), d->cfg.max_frame,
                 d->cfg.max_connections, d->cfg.max_registrations, d->cfg.max_leases,
                 d->cfg.max_waits, d->cfg.max_output);
        if (d->cfg.busy_poll_us)
                log_info("busy polling for %u us after each input (one CPU while busy)",
                         d->cfg.busy_poll_us);
        snprintf(status, sizeof(status), "READY=1\nSTATUS=listening on %s", listener.path);
        r = sd_notify_send(status);
        if (r < 0)
                log_warn("cannot notify systemd: %s", strerror(-r));
        start_watchdog(d);
        return 0;
}

/* Every host and cuda-vmm registration holds an fd, so the default soft
 * limit (1024) would be reached long before the registration limits.  Take
 * what the hard limit allows. */
static void raise_fd_limit(void)
{
        struct rlimit rl;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
                return;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
                log_warn("cannot raise the open-file limit: %s", strerror(errno));
}

int main(int argc, char **argv)
{
        struct daemon *d = &daemon_state;
        uv_loop_t loop;
        int r;

        r = parse_args(argc, argv, &d->cfg);
        if (r == -EBADF)
                return 1;
        if (r < 0) {
                fprintf(stderr, "Try 'gpuipcd --help'.\n");
                return 2;
        }
        log_set_level(d->cfg.log_level);
        signal(SIGPIPE, SIG_IGN);
        raise_fd_limit();

        r = uv_loop_init(&loop);
        if (r < 0) {
                log_error("cannot create the event loop: %s", uv_strerror(r));
                return 1;
        }
        d->loop = &loop;
        closer_start(&loop);
        r = resolve_admin_group(&d->cfg);       /* logs why itself */
        if (r >= 0) {
                r = daemon_init(d);
                if (r < 0)
                        log_error("cannot set up: %s", strerror(-r));
        }
        if (r < 0) {
                closer_stop();
                uv_loop_close(&loop);
                return 1;
        }
        r = busypoll_init(&loop, d->cfg.busy_poll_us);
        if (r < 0) {
                log_error("cannot set up busy polling: %s", uv_strerror(r));
                daemon_done(d);
                closer_stop();
                uv_loop_close(&loop);
                return 1;
        }
        r = start(d);
        if (r < 0) {
                busypoll_stop();
                /* The store keeps what was restored for the next try. */
                persist_freeze();
                session_stop(d);
                /* Let the handles that did open finish closing. */
                uv_run(&loop, UV_RUN_DEFAULT);
                closer_stop();
                daemon_done(d);
                watch_done();
                ledger_done();
                uv_loop_close(&loop);
                return 1;
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        closer_stop();          /* the loop is done: what is left closes now */
        daemon_done(d);
        persist_done();
        watch_done();
        ledger_done();
        r = uv_loop_close(&loop);
        if (r < 0)
                log_warn("event loop still had handles at exit: %s", uv_strerror(r));
        log_info("gpuipcd stopped");
        return 0;
}
