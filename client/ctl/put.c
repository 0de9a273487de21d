/* put.c: gpuipcctl put: register a file's contents (or stdin's). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ctl.h"

#define CHUNK (1u << 20)

static const char usage[] =
        "Usage: gpuipcctl put [--socket PATH] NAME [FILE] [--dtype T] [--shape 2,3]\n"
        "                     [--meta KEY=VALUE]... [--ephemeral]\n"
        "                     [--allow-uid UID]... [--allow-gid GID]... [--allow-group G]\n"
        "                     [--public] [--shared-write]\n\n"
        "Copies FILE (default: stdin) into a new shared-memory buffer and registers\n"
        "it as NAME.  The daemon keeps the buffer after gpuipcctl exits (unless\n"
        "--ephemeral, which ends the registration with this connection).  Prints\n"
        "the registration id.  By default only its uid (and root) may look it up;\n"
        "--allow-* (at most 32 uids and 32 gids) and --public widen that.  The\n"
        "buffer is sealed read-only for everyone unless --shared-write, which lets\n"
        "writable lookups (by its uid or root) map it read-write.\n";

struct put_opts {
        gpuipc_meta meta;
        int64_t shape[32];
        const char *keys[32], *values[32];
        unsigned flags;
        gpuipc_access access;
        uint32_t uids[GPUIPC_ACCESS_IDS_MAX], gids[GPUIPC_ACCESS_IDS_MAX];
        bool has_access;
};

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
                o->meta.dtype = arg;
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

/* Copies in into a new memfd; returns it and the byte count. */
static int slurp(int in, int *ret_fd, uint64_t *ret_size)
{
        uint64_t total = 0;
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
        }
out:
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
                {},
        };
        struct put_opts o = {};
        gpuipc_client *c = NULL;
        const char *name, *file = NULL;
        uint64_t size = 0, id;
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
        /* Connect first: no point reading a large input for an absent daemon. */
        r = ctl_connect(argv[0], &c);
        if (r != EXIT_OK)
                goto out;
        r = slurp(in, &fd, &size);
        if (r < 0) {
                r = ctl_error(argv[0], "reading %s: %s", file ? file : "stdin", strerror(-r));
                goto out;
        }
        if (size == 0) {
                r = ctl_error(argv[0], "input is empty: nothing to register");
                goto out;
        }
        o.access.uids = o.uids;
        o.access.gids = o.gids;
        r = o.has_access ? gpuipc_access_set(c, &o.access) : 0;
        if (r == 0)
                r = gpuipc_register_fd(c, name, fd, 0, size, &o.meta, o.flags, &id);
        if (r < 0) {
                r = ctl_fail(argv[0], c, r);
                goto out;
        }
        printf("%" PRIu64 "\n", id);
        r = ctl_flush(argv[0]);
out:
        if (fd >= 0)
                close(fd);
        if (in != STDIN_FILENO)
                close(in);
        gpuipc_client_free(c);
        return r;
}
