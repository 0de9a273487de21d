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
        "Usage: gpuipcctl get [--socket PATH] NAME [--wait MS] [-o FILE]\n\n"
        "Looks NAME up and writes its bytes to stdout (or FILE; '-' is stdout).\n"
        "--wait waits up to MS milliseconds for NAME to be registered (negative:\n"
        "up to an hour).  A reader that stops early (get NAME | head -c 10) ends\n"
        "it quietly, with status 0.\n";

struct get_opts {
        int wait_ms;
        const char *out;
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

int get_main(int argc, char **argv)
{
        static const struct option opts[] = {
                { "wait",   required_argument, NULL, 'w' },
                { "output", required_argument, NULL, 'o' },
                {},
        };
        struct get_opts o = {};
        gpuipc_client *c = NULL;
        gpuipc_view *v = NULL;
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
        r = gpuipc_view_lookup(c, argv[idx], o.wait_ms, 0, &v);
        if (r < 0) {
                r = ctl_fail(argv[0], c, r);
                goto out;
        }
        if (gpuipc_view_device(v) >= 0) {
                /* The view is a device pointer; writing it would fault. */
                r = ctl_error(argv[0], "%s is a %s buffer in GPU memory; get copies host "
                              "buffers only", argv[idx],
                              gpuipc_view_info(v)->kind == GPUIPC_KIND_CUDA_VMM ? "cuda-vmm"
                                                                               : "cuda-ipc");
                goto out;
        }
        if (o.out) {
                out = open(o.out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
                if (out < 0) {
                        r = ctl_error(argv[0], "%s: %s", o.out, strerror(errno));
                        goto out;
                }
        }
        r = write_all(out, gpuipc_view_data(v), gpuipc_view_size(v));
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
        r = gpuipc_view_release(v);
        v = NULL;
        r = r < 0 ? ctl_fail(argv[0], c, r) : EXIT_OK;
out:
        if (out != STDOUT_FILENO)
                close(out);
        gpuipc_view_release(v);
        gpuipc_client_free(c);
        return r;
}
