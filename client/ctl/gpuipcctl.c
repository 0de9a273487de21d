/* gpuipcctl.c: the operator's command line for gpuipcd. */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"
#include "proto.h"

#define OPT_SOCKET 0x100

const char *ctl_socket;

static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
        const char *description;
} subcommands[] = {
        { "ping",  ping_main,  "check that the daemon answers, and how fast" },
        { "list",  list_main,  "list registrations, optionally under a namespace prefix" },
        { "show",  show_main,  "show every field of one registration" },
        { "stats", stats_main, "show the daemon's counters" },
        { "put",   put_main,   "register the contents of a file (or stdin) under a name" },
        { "get",   get_main,   "write a registered buffer to stdout (or a file)" },
        { "rm",    rm_main,    "unregister a name" },
        { "watch", watch_main, "print registry events as they happen" },
        { "revoke", revoke_main, "take a name and all its leases away (admin)" },
        { "metrics", metrics_main, "print the daemon's metrics (Prometheus text format)" },
        { "doctor", doctor_main, "explain why buffer handoff may not work from here" },
        { "completion", completion_main, "print a bash, zsh or fish completion script" },
};

static void usage(FILE *f)
{
        fprintf(f, "Usage: gpuipcctl [--socket PATH] <subcommand> [<args>]\n"
                   "       gpuipcctl --help | --version\n\n"
                   "Subcommands:\n");
        for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
                fprintf(f, "  %-10s  %s\n", subcommands[i].name, subcommands[i].description);
        fprintf(f, "\n'gpuipcctl <subcommand> --help' describes each one.\n\n"
                   "Options:\n"
                   "  --socket PATH  the daemon's socket (default: $GPUIPC_SOCKET, else %s)\n"
                   "  -h, --help     show this help\n"
                   "  --version      show the version\n\n"
                   "Exit status:\n"
                   "  0  success\n"
                   "  1  error (the daemon refused the request, or I/O failed)\n"
                   "  2  usage error\n"
                   "  3  the daemon is unreachable (connecting failed)\n",
                GPUIPC_DEFAULT_SOCKET);
}

int main(int argc, char **argv)
{
        static const struct option opts[] = {
                { "socket",  required_argument, NULL, OPT_SOCKET },
                { "help",    no_argument,       NULL, 'h' },
                { "version", no_argument,       NULL, 'V' },
                {},
        };
        int c;

        /* '+' stops at the subcommand: its options are its own. */
        while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
                switch (c) {
                case OPT_SOCKET:
                        ctl_socket = optarg;
                        break;
                case 'h':
                        usage(stdout);
                        return EXIT_OK;
                case 'V':
                        printf("gpuipcctl %s\n", gpuipc_version_string());
                        return EXIT_OK;
                default:
                        fprintf(stderr, "Try 'gpuipcctl --help'.\n");
                        return EXIT_USAGE;
                }
        }
        if (optind >= argc) {
                usage(stderr);
                return EXIT_USAGE;
        }
        for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
                if (strcmp(argv[optind], subcommands[i].name) == 0)
                        return subcommands[i].fn(argc - optind, argv + optind);
        fprintf(stderr, "gpuipcctl: unknown subcommand '%s'\nTry 'gpuipcctl --help'.\n",
                argv[optind]);
        return EXIT_USAGE;
}

/* ---- helpers shared by the subcommands ---------------------------------- */

int ctl_connect(const char *cmd, gpuipc_client **ret_client)
{
        const char *path = ctl_socket ? ctl_socket : gpuipc_client_default_socket();
        int r = gpuipc_client_connect(path, ret_client);

        if (r == 0)
                return EXIT_OK;
        if (r == -EPERM)
                fprintf(stderr, "gpuipcctl: %s: refusing %s: the process listening there runs "
                        "as neither root, your uid, the owner of its directory nor "
                        "$GPUIPC_DAEMON_UID\n", cmd, path);
        else    /* the library's message names the path and the likely cause */
                fprintf(stderr, "gpuipcctl: %s: %s\n", cmd, gpuipc_errmsg(NULL));
        return EXIT_UNREACHABLE;
}

int ctl_fail(const char *cmd, const gpuipc_client *c, int err)
{
        fprintf(stderr, "gpuipcctl: %s: %s\n", cmd, c ? gpuipc_errmsg(c) : gpuipc_strerror(err));
        return EXIT_ERROR;
}

int ctl_fail_free(const char *cmd, gpuipc_client *c, int err)
{
        int r = ctl_fail(cmd, c, err);

        gpuipc_client_free(c);
        return r;
}

int ctl_error(const char *cmd, const char *fmt, ...)
{
        va_list ap;

        fprintf(stderr, "gpuipcctl: %s: ", cmd);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return EXIT_ERROR;
}

int ctl_flush(const char *cmd)
{
        if (fflush(stdout) != 0 || ferror(stdout))
                return ctl_error(cmd, "writing stdout: %s", strerror(errno));
        return EXIT_OK;
}

int ctl_usage(const char *cmd, const char *fmt, ...)
{
        va_list ap;

        fprintf(stderr, "gpuipcctl: %s: ", cmd);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\nTry 'gpuipcctl %s --help'.\n", cmd);
        return EXIT_USAGE;
}

int ctl_parse(int argc, char **argv, const char *usage_text, const char *shortopts,
              const struct option *longopts,
              int (*opt)(int ch, const char *arg, void *data), void *data, int *ret_index)
{
        struct option all[24] = {
                { "socket", required_argument, NULL, OPT_SOCKET },
                { "help",   no_argument,       NULL, 'h' },
        };
        char shorts[32];
        size_t n = 2;
        int c, r;

        for (size_t i = 0; longopts && longopts[i].name; i++) {
                if (n + 1 >= sizeof(all) / sizeof(all[0]))
                        break;
                all[n++] = longopts[i];
        }
        snprintf(shorts, sizeof(shorts), "h%s", shortopts ? shortopts : "");
        optind = 0;     /* glibc: start afresh on the subcommand's argv */
        opterr = 0;     /* we report bad options in our own format */
        while ((c = getopt_long(argc, argv, shorts, all, NULL)) != -1) {
                switch (c) {
                case OPT_SOCKET:
                        ctl_socket = optarg;
                        break;
                case 'h':
                        printf("%s", usage_text);
                        return EXIT_OK;
                case '?':
                        return ctl_usage(argv[0], "bad option or missing argument: '%s'",
                                         argv[optind - 1]);
                default:
                        r = opt ? opt(c, optarg, data) : EXIT_USAGE;
                        if (r != 0)
                                return r;
                }
        }
        *ret_index = optind;
        return -1;
}

static int opt_json(int ch, const char *arg, void *data)
{
        *(bool *)data = true;   /* --json is the only option */
        return 0;
}

int ctl_start(int argc, char **argv, const char *usage_text, bool *json, int nargs,
              int *ret_index, gpuipc_client **ret_client)
{
        static const struct option json_opts[] = {
                { "json", no_argument, NULL, 'j' },
                {},
        };
        int r;

        r = ctl_parse(argc, argv, usage_text, NULL, json ? json_opts : NULL,
                      json ? opt_json : NULL, json, ret_index);
        if (r >= 0)
                return r;
        if (nargs == 0 && *ret_index < argc)
                return ctl_usage(argv[0], "unexpected argument '%s'", argv[*ret_index]);
        if (nargs == 1 && argc - *ret_index != 1)
                return ctl_usage(argv[0], "expected exactly one NAME");
        if (ret_client) {
                r = ctl_connect(argv[0], ret_client);
                if (r != EXIT_OK)
                        return r;
        }
        return -1;
}

int ctl_start_stats(int argc, char **argv, const char *usage_text, bool *json,
                    gpuipc_client **ret_client, gpuipc_stats **ret_stats)
{
        int idx, r = ctl_start(argc, argv, usage_text, json, 0, &idx, ret_client);

        if (r >= 0)
                return r;
        r = gpuipc_stats_fetch(*ret_client, ret_stats);
        if (r < 0)
                return ctl_fail_free(argv[0], *ret_client, r);
        return -1;
}

int ctl_parse_duration(const char *arg, uint64_t *ret_ms)
{
        static const struct { const char *suffix; uint64_t ms; } units[] = {
                { "ms", 1 }, { "s", 1000 }, { "", 1000 }, { "m", 60000 },
                { "h", 3600000 }, { "d", 86400000 },
        };
        unsigned long long v;
        char *end;

        if (!arg || *arg < '0' || *arg > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(arg, &end, 10);
        if (errno)
                return -ERANGE;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
                if (strcmp(end, units[i].suffix) != 0)
                        continue;
                if (v > UINT64_MAX / units[i].ms)
                        return -ERANGE;
                *ret_ms = (uint64_t)v * units[i].ms;
                return 0;
        }
        return -EINVAL;
}

uint64_t ctl_now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

const char *ctl_text(const char *s, char *buf, size_t len)
{
        static const char hex[] = "0123456789abcdef";
        size_t o = 0, i = 0, n, slen = strlen(s);

        assert(len >= 8);
        while (i < slen) {
                unsigned char c = (unsigned char)s[i];

                /* One character: 1 byte, or a UTF-8 sequence of 2 to 4. */
                n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : 4;
                if (n > slen - i || !proto_text_valid(s + i, n))
                        n = 0;  /* shown as \xNN, one byte */
                if (o + (n ? n : 4) + 4 > len) {
                        memcpy(buf + o, "...", 4);
                        return buf;
                }
                if (n) {
                        memcpy(buf + o, s + i, n);
                        o += n;
                        i += n;
                        continue;
                }
                buf[o++] = '\\';
                buf[o++] = 'x';
                buf[o++] = hex[c >> 4];
                buf[o++] = hex[c & 15];
                i++;
        }
        buf[o] = '\0';
        return buf;
}

const char *ctl_age(uint64_t created_ms, char *buf, size_t len)
{
        uint64_t now = ctl_now_ms(), s;

        s = now > created_ms ? (now - created_ms) / 1000 : 0;
        if (s < 60)
                snprintf(buf, len, "%llus", (unsigned long long)s);
        else if (s < 3600)
                snprintf(buf, len, "%llum", (unsigned long long)(s / 60));
        else if (s < 86400)
                snprintf(buf, len, "%lluh", (unsigned long long)(s / 3600));
        else
                snprintf(buf, len, "%llud", (unsigned long long)(s / 86400));
        return buf;
}
