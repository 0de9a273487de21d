/* revoke.c: gpuipcctl revoke: take a registration and its leases away. */
#include <inttypes.h>

#include "ctl.h"

static const char usage[] =
        "Usage: gpuipcctl revoke [--socket PATH] NAME\n\n"
        "Removes NAME from the namespace and revokes every lease on it: the\n"
        "holders are told (a 'revoked' event) and their leases are dropped, so\n"
        "the daemon frees the buffer.  Memory a holder already mapped stays\n"
        "mapped in that process until it lets go.  Needs root or membership in\n"
        "the daemon's admin-group.\n";

int revoke_main(int argc, char **argv)
{
        gpuipc_client *c;
        uint32_t n = 0;
        int idx, r;

        r = ctl_start(argc, argv, usage, NULL, 1, &idx, &c);
        if (r >= 0)
                return r;
        r = gpuipc_name_revoke(c, argv[idx], &n);
        if (r < 0)
                return ctl_fail_free(argv[0], c, r);
        printf("revoked %s (%" PRIu32 " lease%s)\n", argv[idx], n, n == 1 ? "" : "s");
        gpuipc_client_free(c);
        return ctl_flush(argv[0]);
}
