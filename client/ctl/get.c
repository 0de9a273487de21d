/* get.c: gpuipcctl get: write a registered buffer out. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

static const char usage[] =
        "Usage: gpuipcctl get [--socket PATH] NAME [--column C] [--wait MS] [-o FILE]\n\n"
        "Looks NAME up and writes its bytes to stdout (or FILE; '-' is stdout).\n"
        "For a batch, --column C writes the data buffer of its column C (the\n"
        "values, as registered: no validity bitmap, no offsets).\n"
        "--wait waits up to MS milliseconds for NAME to be registered (negative:\n"
        "up to an hour).  A reader that stops early (get NAME | head -c 10) ends\n"
        "it quietly, with status 0.\n";

struct get_opts {
        int wait_ms;
        const char *out, *column;
};

static int opt(int ch, const char *arg, void *data)
{
        struct get_opts *o = data;
        char *end;
        long v;

        switch (ch) {
        case 'w':
                errno = 0;
                v = strtol(arg, &end, 10);
                if (errno || end == arg || *end || v > 3600000)
                        return ctl_usage("get", "bad --wait '%s': expected milliseconds", arg);
                o->wait_ms = v < 0 ? -1 : (int)v;
                return 0;
        case 'o':
                o->out = strcmp(arg, "-") == 0 ? NULL : arg;
                return 0;
        case 'c':
                o->column = arg;
                return 0;
        }
        return EXIT_USAGE;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return -errno;
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

/* A single registration's bytes; EXIT_OK or the exit status of a failure. */
static int buffer_of(const char *cmd, gpuipc_client *c, const char *name, int wait_ms,
                     gpuipc_view **ret_view, const uint8_t **ret_data, uint64_t *ret_len)
{
        int r = gpuipc_view_lookup(c, name, wait_ms, 0, ret_view);

        if (r == -EMEDIUMTYPE)
                return ctl_error(cmd, "%s is a batch: name a column with --column C "
                                 "('gpuipcctl show %s' lists them)", name, name);
        if (r < 0)
                return ctl_fail(cmd, c, r);
        if (gpuipc_view_device(*ret_view) >= 0)
                /* The view is a device pointer; writing it would fault. */
                return ctl_error(cmd, "%s is a %s buffer in GPU memory; get copies host "
                                 "buffers only", name, ctl_kind(gpuipc_view_info(*ret_view)->kind));
        *ret_data = gpuipc_view_data(*ret_view);
        *ret_len = gpuipc_view_size(*ret_view);
        return EXIT_OK;
}

/* The data buffer (Arrow's last) of a batch's column. */
static int column_of(const char *cmd, gpuipc_client *c, const char *name, const char *column,
                     int wait_ms, gpuipc_batch_view **ret_view, const uint8_t **ret_data,
                     uint64_t *ret_len)
{
        const gpuipc_batch_node *nd;
        void *data = NULL;
        int i, dev = -1, r;

        r = gpuipc_batch_view_lookup(c, name, wait_ms, 0, ret_view);
        if (r == -EMEDIUMTYPE)
                return ctl_error(cmd, "%s is not a batch: --column applies to batches only", name);
        if (r < 0)
                return ctl_fail(cmd, c, r);
        i = gpuipc_batch_view_column_index(*ret_view, column);
        if (i < 0)
                return ctl_error(cmd, "%s has no column '%s' ('gpuipcctl show %s' lists them)",
                                 name, column, name);
        nd = gpuipc_info_batch_column(gpuipc_batch_view_info(*ret_view), (size_t)i);
        if (!nd || nd->n_buffers == 0 || nd->format[0] == '+')
                return ctl_error(cmd, "column '%s' of %s (%s) has no data buffer of its own",
                                 column, name, nd ? nd->format : "?");
        r = gpuipc_batch_view_buffer(*ret_view, (size_t)i, nd->n_buffers - 1, &data, ret_len,
                                     &dev);
        if (r < 0)
                return ctl_fail(cmd, c, r);
        if (dev >= 0)
                return ctl_error(cmd, "column '%s' of %s is in GPU memory; get copies host "
                                 "buffers only", column, name);
        *ret_data = data;
        return EXIT_OK;
}

int get_main(int argc, char **argv)
{
        static const struct option opts[] = {
                { "wait",   required_argument, NULL, 'w' },
                { "output", required_argument, NULL, 'o' },
                { "column", required_argument, NULL, 'c' },
                {},
        };
        struct get_opts o = {};
        gpuipc_client *c = NULL;
        gpuipc_view *v = NULL;
        gpuipc_batch_view *bv = NULL;
        const uint8_t *data = NULL;
        uint64_t len = 0;
        int idx, out = STDOUT_FILENO, r;

        r = ctl_parse(argc, argv, usage, "o:", opts, opt, &o, &idx);
        if (r >= 0)
                return r;
        if (argc - idx != 1)
                return ctl_usage(argv[0], "expected exactly one NAME");
        /* A reader that goes away must not kill us before we release. */
        signal(SIGPIPE, SIG_IGN);

        r = ctl_connect(argv[0], &c);
        if (r != EXIT_OK)
                return r;
        r = o.column ? column_of(argv[0], c, argv[idx], o.column, o.wait_ms, &bv, &data, &len)
                     : buffer_of(argv[0], c, argv[idx], o.wait_ms, &v, &data, &len);
        if (r != EXIT_OK)
                goto out;
        if (o.out) {
                out = open(o.out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
                if (out < 0) {
                        r = ctl_error(argv[0], "%s: %s", o.out, strerror(errno));
                        goto out;
                }
        }
        r = write_all(out, data, len);
        if (r == -EPIPE && !o.out) {
                /* The reader has what it wanted: like cat, no complaint. */
                r = EXIT_OK;
                goto out;
        }
        if (r < 0) {
                r = ctl_error(argv[0], "writing %s: %s", o.out ? o.out : "stdout", strerror(-r));
                goto out;
        }
        if (o.out && close(out) < 0) {
                out = STDOUT_FILENO;
                r = ctl_error(argv[0], "%s: %s", o.out, strerror(errno));
                goto out;
        }
        out = STDOUT_FILENO;
        r = bv ? gpuipc_batch_view_release(bv) : gpuipc_view_release(v);
        v = NULL;
        bv = NULL;
        r = r < 0 ? ctl_fail(argv[0], c, r) : EXIT_OK;
out:
        if (out != STDOUT_FILENO)
                close(out);
        gpuipc_view_release(v);
        gpuipc_batch_view_release(bv);
        gpuipc_client_free(c);
        return r;
}
