/* main.c: gpuipcd's command line, startup and ordered shutdown. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <uv.h>

#include "gpuipc.h"
#include "daemon.h"
#include "listen.h"
#include "log.h"
#include "proto.h"
#include "sd.h"

#define MIN_FRAME 1024u

static struct daemon daemon_state;
static struct listener listener;
static uv_signal_t sig_term, sig_int;

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: gpuipcd [OPTION]...\n"
                "Broker zero-copy buffer handoff between processes over an AF_UNIX socket.\n"
                "\n"
                "  --socket PATH            socket to listen on (default: $GPUIPC_SOCKET,\n"
                "                           else " GPUIPC_DEFAULT_SOCKET ")\n"
                "  --socket-mode OCTAL      permissions of the socket (default 0660)\n"
                "  --max-frame N            largest frame body, %u to %u (default %u)\n"
                "  --max-connections N      open connections (default 1024)\n"
                "  --max-registrations N    live registrations per connection (default 16384)\n"
                "  --max-leases N           leases per connection (default 16384)\n"
                "  --max-waits N            waiting lookups per connection (default 256)\n"
                "  --max-output N           unsent reply bytes per connection before it is\n"
                "                           closed (default 16777216)\n"
                "  --log-level 0-7          most verbose syslog level logged (default 6)\n"
                "  -h, --help               show this help\n"
                "  -V, --version            show the version\n"
                "\n"
                "Under systemd, a passed listening socket (LISTEN_FDS) is used instead of\n"
                "--socket, and readiness is reported through NOTIFY_SOCKET.\n",
                MIN_FRAME, PROTO_MAX_FRAME_LIMIT, PROTO_MAX_FRAME);
}

/* Parses an unsigned number in [min, max]; base 0 accepts 0x and 0 prefixes. */
static int parse_num(const char *opt, const char *s, int base, uint64_t min, uint64_t max,
                     uint64_t *ret)
{
        unsigned long long v;
        char *end;

        errno = 0;
        if (!*s || *s == '-')
                goto bad;
        v = strtoull(s, &end, base);
        if (errno || *end || v < min || v > max)
                goto bad;
        *ret = v;
        return 0;
bad:
        fprintf(stderr, "gpuipcd: --%s: '%s' is not a number from %" PRIu64 " to %" PRIu64 "\n",
                opt, s, min, max);
        return -EINVAL;
}

static int parse_args(int argc, char **argv, struct config *cfg, int *ret_level)
{
        enum {
                OPT_SOCKET = 0x100, OPT_MODE, OPT_FRAME, OPT_CONNS, OPT_REGS, OPT_LEASES,
                OPT_WAITS, OPT_OUTPUT, OPT_LEVEL,
        };
        static const struct option opts[] = {
                { "socket",            required_argument, NULL, OPT_SOCKET },
                { "socket-mode",       required_argument, NULL, OPT_MODE },
                { "max-frame",         required_argument, NULL, OPT_FRAME },
                { "max-connections",   required_argument, NULL, OPT_CONNS },
                { "max-registrations", required_argument, NULL, OPT_REGS },
                { "max-leases",        required_argument, NULL, OPT_LEASES },
                { "max-waits",         required_argument, NULL, OPT_WAITS },
                { "max-output",        required_argument, NULL, OPT_OUTPUT },
                { "log-level",         required_argument, NULL, OPT_LEVEL },
                { "help",              no_argument,       NULL, 'h' },
                { "version",           no_argument,       NULL, 'V' },
                {}
        };
        const char *env = getenv("GPUIPC_SOCKET");
        uint64_t v;
        int c, idx = -1, r = 0;

        *cfg = (struct config) {
                .socket_path = env && *env ? env : GPUIPC_DEFAULT_SOCKET,
                .socket_mode = 0660,
                .max_frame = PROTO_MAX_FRAME,
                .max_connections = 1024,
                .max_registrations = 16384,
                .max_leases = 16384,
                .max_waits = 256,
                .max_output = 16u << 20,
        };
        *ret_level = LOG_LVL_INFO;
        while (r == 0 && (c = getopt_long(argc, argv, "hV", opts, &idx)) >= 0) {
                const char *o = idx >= 0 ? opts[idx].name : "option";
                switch (c) {
                case OPT_SOCKET:
                        cfg->socket_path = optarg;
                        break;
                case OPT_MODE:
                        if ((r = parse_num(o, optarg, 8, 0, 07777, &v)) == 0)
                                cfg->socket_mode = (mode_t)v;
                        break;
                case OPT_FRAME:
                        if ((r = parse_num(o, optarg, 0, MIN_FRAME, PROTO_MAX_FRAME_LIMIT, &v)) == 0)
                                cfg->max_frame = (uint32_t)v;
                        break;
                case OPT_CONNS:
                        if ((r = parse_num(o, optarg, 0, 1, 1u << 20, &v)) == 0)
                                cfg->max_connections = (uint32_t)v;
                        break;
                case OPT_REGS:
                        if ((r = parse_num(o, optarg, 0, 1, UINT32_MAX, &v)) == 0)
                                cfg->max_registrations = (uint32_t)v;
                        break;
                case OPT_LEASES:
                        if ((r = parse_num(o, optarg, 0, 1, UINT32_MAX, &v)) == 0)
                                cfg->max_leases = (uint32_t)v;
                        break;
                case OPT_WAITS:
                        if ((r = parse_num(o, optarg, 0, 0, UINT32_MAX, &v)) == 0)
                                cfg->max_waits = (uint32_t)v;
                        break;
                case OPT_OUTPUT:
                        if ((r = parse_num(o, optarg, 0, 1, UINT64_MAX >> 1, &v)) == 0)
                                cfg->max_output = v;
                        break;
                case OPT_LEVEL:
                        if ((r = parse_num(o, optarg, 10, 0, 7, &v)) == 0)
                                *ret_level = (int)v;
                        break;
                case 'h':
                        usage(stdout);
                        exit(EXIT_SUCCESS);
                case 'V':
                        printf("gpuipcd %s (protocol %u)\n", GPUIPC_VERSION, PROTO_VERSION);
                        exit(EXIT_SUCCESS);
                default:
                        r = -EINVAL;
                        break;
                }
        }
        if (r == 0 && optind < argc) {
                fprintf(stderr, "gpuipcd: unexpected argument '%s'\n", argv[optind]);
                r = -EINVAL;
        }
        /* A connection must be able to queue at least one largest reply. */
        if (r == 0 && cfg->max_output < (uint64_t)cfg->max_frame + PROTO_HDR_LEN) {
                fprintf(stderr, "gpuipcd: --max-output must be at least --max-frame + %u\n",
                        PROTO_HDR_LEN);
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
        listener_close(&listener);
        (void)sd_notify_send("STOPPING=1");
        daemon_close_connections(d);
        uv_close((uv_handle_t *)&sig_term, NULL);
        uv_close((uv_handle_t *)&sig_int, NULL);
}

static int start(struct daemon *d)
{
        char status[256];
        int r, fd;

        r = sd_listen_fd(&fd);
        if (r < 0) {
                log_error("the socket passed by systemd is unusable: %s", strerror(-r));
                return r;
        }
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
        snprintf(status, sizeof(status), "READY=1\nSTATUS=listening on %s", listener.path);
        r = sd_notify_send(status);
        if (r < 0)
                log_warn("cannot notify systemd: %s", strerror(-r));
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
        int level, r;

        if (parse_args(argc, argv, &d->cfg, &level) < 0) {
                usage(stderr);
                return 2;
        }
        log_set_level(level);
        signal(SIGPIPE, SIG_IGN);
        raise_fd_limit();

        r = uv_loop_init(&loop);
        if (r < 0) {
                log_error("cannot create the event loop: %s", uv_strerror(r));
                return 1;
        }
        d->loop = &loop;
        r = daemon_init(d);
        if (r < 0) {
                log_error("cannot set up: %s", strerror(-r));
                uv_loop_close(&loop);
                return 1;
        }
        r = start(d);
        if (r < 0) {
                /* Let the handles that did open finish closing. */
                uv_run(&loop, UV_RUN_DEFAULT);
                daemon_done(d);
                uv_loop_close(&loop);
                return 1;
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        daemon_done(d);
        r = uv_loop_close(&loop);
        if (r < 0)
                log_warn("event loop still had handles at exit: %s", uv_strerror(r));
        log_info("gpuipcd stopped");
        return 0;
}
