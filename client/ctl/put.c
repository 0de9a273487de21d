/* put.c: gpuipcctl put: register a file's contents (or stdin's). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "dtype.h"

#define CHUNK (1u << 20)

static const char usage[] =
        "Usage: gpuipcctl put [--socket PATH] NAME [FILE] [--dtype T] [--shape 2,3]\n"
        "                     [--meta KEY=VALUE]... [--ephemeral | --hold] [--ttl D]\n"
        "                     [--allow-uid UID]... [--allow-gid GID]... [--allow-group G]\n"
        "                     [--public] [--shared-write] [--max-size N] [--json]\n\n"
        "Copies FILE (default: stdin) into a new shared-memory buffer and registers\n"
        "it as NAME, then prints the registration id.  The daemon keeps the buffer\n"
        "after gpuipcctl exits, until 'gpuipcctl rm' (or the TTL) removes it.\n"
        "By default only its uid (and root) may look it up.  The buffer is sealed\n"
        "read-only for everyone unless --shared-write.\n\n"
        "  --dtype T          element type: float16/32/64, bfloat16, int8/16/32/64,\n"
        "                     uint8/16/32/64, bool, complex64/128, or a typestr (<f4)\n"
        "  --shape 2,3        dimensions; with --dtype, shape x itemsize must fit\n"
        "  --meta KEY=VALUE   free-form metadata (at most 32)\n"
        "  --ephemeral        end the registration with this connection (that is,\n"
        "                     at once: useful only with --hold)\n"
        "  --hold             keep the (ephemeral) registration until interrupted\n"
        "                     (Ctrl-C, SIGTERM); implies --ephemeral\n"
        "  --ttl D            the daemon unregisters it after D (500ms, 30s, 5m, 2h)\n"
        "  --allow-uid UID    also readable by UID (repeatable, at most 32)\n"
        "  --allow-gid GID    also readable by group GID (repeatable, at most 32)\n"
        "  --allow-group G    also readable by the members of group G\n"
        "  --public           readable by everyone who can reach the socket\n"
        "  --shared-write     let writable lookups (its uid or root) write it\n"
        "  --max-size N       refuse input larger than N bytes (64K, 512M, 1G; default\n"
        "                     1G for pipes and devices, none for regular files)\n"
        "  --json             print {\"id\": ..., \"name\": ...} instead of the id\n";

#define MAX_SIZE_DEFAULT (1ull << 30)
/* Input larger than this gets a progress line when stderr is a terminal. */
#define PROGRESS_MIN (64ull << 20)

struct put_opts {
        gpuipc_meta meta;
        int64_t shape[32];
        const char *keys[32], *values[32];
        unsigned flags;
        gpuipc_access access;
        uint32_t uids[GPUIPC_ACCESS_IDS_MAX], gids[GPUIPC_ACCESS_IDS_MAX];
        bool has_access, hold, json, has_max;
        uint64_t ttl_ms, max_size;
};

/* A dtype's item size in bytes, or 0 when it names none (the names the
 * bindings use and NumPy typestrs of them, proto/dtype.h).  Any byte
 * order: the buffer holds the producer's bytes as they are. */
static unsigned dtype_itemsize(const char *t)
{
        struct proto_dtype d;

        return proto_dtype_parse(t, &d) < 0 ? 0 : d.size;
}

/* shape x itemsize (or the product of shape alone) must fit size. */
static int check_meta(const struct put_opts *o, uint64_t size)
{
        uint64_t bytes = o->meta.dtype ? dtype_itemsize(o->meta.dtype) : 1;

        if (o->meta.ndim == 0)
                return 0;
        for (uint32_t i = 0; i < o->meta.ndim; i++) {
                uint64_t d = (uint64_t)o->shape[i];
                if (d && bytes > UINT64_MAX / d)
                        return ctl_usage("put", "--shape is too large");
                bytes *= d;
        }
        if (bytes > size) {
                char a[32], b[32];
                return ctl_error("put", "--shape with --dtype %s needs %" PRIu64 " bytes (%s); "
                                 "the input has %" PRIu64 " (%s)",
                                 o->meta.dtype ? o->meta.dtype : "(none: 1 byte)", bytes,
                                 proto_size_text(bytes, a, sizeof(a)), size,
                                 proto_size_text(size, b, sizeof(b)));
        }
        return 0;
}

static int parse_id(const char *arg, const char *what, uint32_t *ids, uint32_t *n)
{
        char *end;
        unsigned long v;

        errno = 0;
        v = strtoul(arg, &end, 10);
        if (errno || !*arg || *end || *arg == '-' || v >= UINT32_MAX)
                return ctl_usage("put", "bad --allow-%s '%s'", what, arg);
        if (*n == GPUIPC_ACCESS_IDS_MAX)
                return ctl_usage("put", "more than %d --allow-%s", GPUIPC_ACCESS_IDS_MAX, what);
        ids[(*n)++] = (uint32_t)v;
        return 0;
}

static int parse_shape(struct put_opts *o, const char *arg)
{
        const char *p = arg;

        o->meta.ndim = 0;
        for (;;) {
                char *end;
                long long v;

                if (o->meta.ndim == sizeof(o->shape) / sizeof(o->shape[0]))
                        return ctl_usage("put", "--shape has more than 32 dimensions");
                errno = 0;
                v = strtoll(p, &end, 10);
                if (errno || end == p || v < 0)
                        return ctl_usage("put", "bad --shape '%s': expected e.g. 2,3", arg);
                o->shape[o->meta.ndim++] = v;
                if (*end == '\0')
                        break;
                if (*end != ',')
                        return ctl_usage("put", "bad --shape '%s': expected e.g. 2,3", arg);
                p = end + 1;
        }
        o->meta.shape = o->shape;
        return 0;
}

static int opt(int ch, const char *arg, void *data)
{
        struct put_opts *o = data;
        char *eq;

        switch (ch) {
        case 'd':
                if (!dtype_itemsize(arg))
                        return ctl_usage("put", "unknown --dtype '%s': expected e.g. float32, "
                                         "int64, uint8, bfloat16 or a typestr such as <f4", arg);
                o->meta.dtype = arg;
                return 0;
        case 'H':
                o->hold = true;
                o->flags |= GPUIPC_REGISTER_EPHEMERAL;
                return 0;
        case 'j':
                o->json = true;
                return 0;
        case 't':
                if (ctl_parse_duration(arg, &o->ttl_ms) < 0 || o->ttl_ms == 0)
                        return ctl_usage("put", "bad --ttl '%s': expected e.g. 500ms, 30s, 5m, 2h",
                                         arg);
                return 0;
        case 'M':
                if (proto_size_parse(arg, 10, CTL_SIZE_UNITS, &o->max_size) < 0 ||
                    o->max_size == 0)
                        return ctl_usage("put", "bad --max-size '%s': expected e.g. 64K, 512M, 1G",
                                         arg);
                o->has_max = true;
                return 0;
        case 's':
                return parse_shape(o, arg);
        case 'm':
                eq = strchr(arg, '=');
                if (!eq || eq == arg)
                        return ctl_usage("put", "bad --meta '%s': expected KEY=VALUE", arg);
                if (o->meta.n_user == sizeof(o->keys) / sizeof(o->keys[0]))
                        return ctl_usage("put", "more than 32 --meta entries");
                *eq = '\0';     /* argv is ours to split */
                o->keys[o->meta.n_user] = arg;
                o->values[o->meta.n_user++] = eq + 1;
                return 0;
        case 'e':
                o->flags |= GPUIPC_REGISTER_EPHEMERAL;
                return 0;
        case 'w':
                o->flags |= GPUIPC_REGISTER_SHARED_WRITE;
                return 0;
        case 'U':
                o->has_access = true;
                return parse_id(arg, "uid", o->uids, &o->access.n_uids);
        case 'G':
                o->has_access = true;
                return parse_id(arg, "gid", o->gids, &o->access.n_gids);
        case 'g':
                o->has_access = true;
                o->access.group = arg;
                return 0;
        case 'p':
                o->has_access = true;
                o->access.public_ = 1;
                return 0;
        }
        return EXIT_USAGE;
}

static void progress(uint64_t total, bool done)
{
        char b[32];

        fprintf(stderr, "\rgpuipcctl: put: read %s%s", proto_size_text(total, b, sizeof(b)),
                done ? "\n" : "   ");
}

/* Copies in into a new memfd, at most max bytes (0: no limit); returns
 * it and the byte count.  -EFBIG past max. */
static int slurp(int in, uint64_t max, bool show, int *ret_fd, uint64_t *ret_size)
{
        uint64_t total = 0, shown = 0;
        char *buf;
        int fd, r = 0;

        fd = memfd_create("gpuipcctl", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return -errno;
        buf = malloc(CHUNK);
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        for (;;) {
                ssize_t n = read(in, buf, CHUNK);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = -errno;
                        break;
                }
                if (n == 0)
                        break;
                if (max && (uint64_t)n > max - total) {
                        r = -EFBIG;
                        break;
                }
                for (ssize_t done = 0; done < n;) {
                        ssize_t w = write(fd, buf + done, (size_t)(n - done));
                        if (w < 0 && errno == EINTR)
                                continue;
                        if (w < 0) {
                                r = -errno;
                                goto out;
                        }
                        done += w;
                }
                total += (uint64_t)n;
                if (show && total >= PROGRESS_MIN && total - shown >= 16 * CHUNK) {
                        progress(total, false);
                        shown = total;
                }
        }
out:
        if (shown)
                progress(total, true);
        free(buf);
        /* Its size is final: fixed before anyone else sees it (the library
         * adds the write seal and F_SEAL_SEAL when it registers it). */
        if (r == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
                r = -errno;
        if (r < 0) {
                close(fd);
                return r;
        }
        *ret_fd = fd;
        *ret_size = total;
        return 0;
}

/* --hold: waits for SIGINT, SIGTERM or SIGHUP, blocked meanwhile. */
static void hold(void)
{
        sigset_t set;
        int sig;

        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGHUP);
        (void)sigwait(&set, &sig);
}

int put_main(int argc, char **argv)
{
        static const struct option opts[] = {
                { "dtype",     required_argument, NULL, 'd' },
                { "shape",     required_argument, NULL, 's' },
                { "meta",      required_argument, NULL, 'm' },
                { "ephemeral", no_argument,       NULL, 'e' },
                { "allow-uid", required_argument, NULL, 'U' },
                { "allow-gid", required_argument, NULL, 'G' },
                { "allow-group", required_argument, NULL, 'g' },
                { "public",    no_argument,       NULL, 'p' },
                { "shared-write", no_argument,    NULL, 'w' },
                { "hold",      no_argument,       NULL, 'H' },
                { "ttl",       required_argument, NULL, 't' },
                { "max-size",  required_argument, NULL, 'M' },
                { "json",      no_argument,       NULL, 'j' },
                {},
        };
        struct put_opts o = { .meta = GPUIPC_META_INIT, .access = GPUIPC_ACCESS_INIT };
        gpuipc_client *c = NULL;
        const char *name, *file = NULL;
        uint64_t size = 0, id, max;
        struct stat st;
        sigset_t block;
        int idx, in = STDIN_FILENO, fd = -1, r;

        r = ctl_parse(argc, argv, usage, NULL, opts, opt, &o, &idx);
        if (r >= 0)
                return r;
        if (argc - idx < 1 || argc - idx > 2)
                return ctl_usage(argv[0], "expected NAME and at most one FILE");
        name = argv[idx];
        if (argc - idx == 2 && strcmp(argv[idx + 1], "-") != 0)
                file = argv[idx + 1];
        o.meta.user_keys = o.keys;
        o.meta.user_values = o.values;

        if (file) {
                in = open(file, O_RDONLY | O_CLOEXEC);
                if (in < 0)
                        return ctl_error(argv[0], "%s: %s", file, strerror(errno));
        }
        /* A pipe or a device may never end: cap it unless told. */
        max = o.has_max ? o.max_size
                        : fstat(in, &st) == 0 && S_ISREG(st.st_mode) ? 0 : MAX_SIZE_DEFAULT;
        if (o.hold) {
                /* Blocked before connecting, so that an early Ctrl-C still
                 * ends in order; sigwait() takes them in hold(). */
                sigemptyset(&block);
                sigaddset(&block, SIGINT);
                sigaddset(&block, SIGTERM);
                sigaddset(&block, SIGHUP);
                sigprocmask(SIG_BLOCK, &block, NULL);
        }
        /* Connect first: no point reading a large input for an absent daemon. */
        r = ctl_connect(argv[0], &c);
        if (r != EXIT_OK)
                goto out;
        r = slurp(in, max, isatty(STDERR_FILENO), &fd, &size);
        if (r == -EFBIG) {
                char b[32];
                r = ctl_error(argv[0], "%s is larger than --max-size %s; pass a larger "
                              "--max-size to register it", file ? file : "stdin",
                              proto_size_text(max, b, sizeof(b)));
                goto out;
        }
        if (r < 0) {
                r = ctl_error(argv[0], "reading %s: %s", file ? file : "stdin", strerror(-r));
                goto out;
        }
        if (size == 0) {
                r = ctl_error(argv[0], "input is empty: nothing to register");
                goto out;
        }
        r = check_meta(&o, size);
        if (r != 0)
                goto out;
        o.access.uids = o.uids;
        o.access.gids = o.gids;
        r = o.has_access ? gpuipc_client_set_access(c, &o.access) : 0;
        if (r == 0 && o.ttl_ms)
                r = gpuipc_client_set_ttl(c, o.ttl_ms);
        if (r == 0)
                r = gpuipc_fd_register(c, name, fd, 0, size, &o.meta, o.flags, &id);
        if (r < 0) {
                r = ctl_fail(argv[0], c, r);
                goto out;
        }
        if (o.json) {
                printf("{\"id\": %" PRIu64 ", \"name\": ", id);
                json_str(stdout, name);
                printf("}\n");
        } else {
                printf("%" PRIu64 "\n", id);
        }
        r = ctl_flush(argv[0]);
        if (r == EXIT_OK && !o.hold && (o.flags & GPUIPC_REGISTER_EPHEMERAL))
                fprintf(stderr, "gpuipcctl: put: --ephemeral without --hold: %s ends as "
                        "gpuipcctl exits\n", name);
        if (r == EXIT_OK && o.hold) {
                if (isatty(STDERR_FILENO))
                        fprintf(stderr, "gpuipcctl: put: holding %s; Ctrl-C removes it\n", name);
                hold();
        }
out:
        if (fd >= 0)
                close(fd);
        if (in != STDIN_FILENO)
                close(in);
        gpuipc_client_free(c);
        return r;
}
