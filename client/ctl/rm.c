/* rm.c: gpuipcctl rm: unregister a name, or every name under a prefix. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>

#include "ctl.h"

static const char usage[] =
        "Usage: gpuipcctl rm [--socket PATH] NAME\n"
        "       gpuipcctl rm [--socket PATH] --prefix PREFIX\n\n"
        "Removes NAME from the namespace.  Consumers holding a lease keep the\n"
        "buffer until they release it.  Prints nothing on success.\n\n"
        "  --prefix PREFIX  remove every registration in namespace PREFIX that\n"
        "                   this user may remove (its own uid's; root: all), and\n"
        "                   print how many were removed, and how many skipped\n"
        "                   because they belong to other users\n";

static int opt(int ch, const char *arg, void *data)
{
        *(const char **)data = arg;     /* --prefix is the only option */
        return 0;
}

int rm_main(int argc, char **argv)
{
        static const struct option opts[] = {
                { "prefix", required_argument, NULL, 'p' },
                {},
        };
        const char *prefix = NULL;
        uint64_t removed = 0, skipped = 0;
        gpuipc_client *c;
        int idx, r;

        r = ctl_parse(argc, argv, usage, NULL, opts, opt, &prefix, &idx);
        if (r >= 0)
                return r;
        if (prefix && argc - idx != 0)
                return ctl_usage(argv[0], "--prefix takes no NAME");
        if (prefix && !prefix[0])
                return ctl_usage(argv[0], "--prefix needs a namespace");
        if (!prefix && argc - idx != 1)
                return ctl_usage(argv[0], "expected exactly one NAME");
        r = ctl_connect(argv[0], &c);
        if (r != EXIT_OK)
                return r;
        if (!prefix) {
                r = gpuipc_name_unregister(c, argv[idx]);
                if (r == -EPERM)
                        r = ctl_error(argv[0], "permission denied: %s", gpuipc_errmsg(c));
                else
                        r = r < 0 ? ctl_fail(argv[0], c, r) : EXIT_OK;
                gpuipc_client_free(c);
                return r;
        }
        r = gpuipc_prefix_unregister(c, prefix, &removed, &skipped);
        if (r < 0)
                return ctl_fail_free(argv[0], c, r);
        gpuipc_client_free(c);
        printf("removed %" PRIu64 " registration%s under %s", removed, removed == 1 ? "" : "s",
               prefix);
        if (skipped)
                printf("; skipped %" PRIu64 " of other users (permission)", skipped);
        printf("\n");
        return ctl_flush(argv[0]);
}
