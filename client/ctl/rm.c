/* rm.c: gpuipcctl rm: unregister a name. */
#include "ctl.h"

static const char usage[] =
        "Usage: gpuipcctl rm [--socket PATH] NAME\n\n"
        "Removes NAME from the namespace.  Consumers holding a lease keep the\n"
        "buffer until they release it.  Prints nothing on success.\n";

int rm_main(int argc, char **argv)
{
        gpuipc_client *c;
        int idx, r;

        r = ctl_parse(argc, argv, usage, NULL, NULL, NULL, NULL, &idx);
        if (r >= 0)
                return r;
        if (argc - idx != 1)
                return ctl_usage(argv[0], "expected exactly one NAME");
        r = ctl_connect(argv[0], &c);
        if (r != EXIT_OK)
                return r;
        r = gpuipc_unregister(c, argv[idx]);
        r = r < 0 ? ctl_fail(argv[0], c, r) : EXIT_OK;
        gpuipc_client_free(c);
        return r;
}
