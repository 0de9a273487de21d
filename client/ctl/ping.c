/* ping.c: gpuipcctl ping: is the daemon there, and how fast does it answer. */
#include <time.h>

#include "ctl.h"

static const char usage[] =
        "Usage: gpuipcctl ping [--socket PATH]\n\n"
        "Connects, then times one request round trip.  Prints e.g.\n"
        "  gpuipcd 0.1.0 (pid 123, protocol 1): 85 us\n";

int ping_main(int argc, char **argv)
{
        struct timespec t0, t1;
        gpuipc_client *c = NULL;
        gpuipc_stats *s = NULL;
        long long us;
        int idx, r;

        r = ctl_parse(argc, argv, usage, NULL, NULL, NULL, NULL, &idx);
        if (r >= 0)
                return r;
        if (idx < argc)
                return ctl_usage(argv[0], "unexpected argument '%s'", argv[idx]);
        r = ctl_connect(argv[0], &c);
        if (r != EXIT_OK)
                return r;
        /* The daemon's name and pid come with its counters. */
        r = gpuipc_stats_get(c, &s);
        if (r < 0)
                goto fail;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        r = gpuipc_ping(c);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (r < 0)
                goto fail;
        us = (long long)(t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000;
        printf("%s (pid %u, protocol %u): %lld us\n", s->server[0] ? s->server : "gpuipcd",
               s->pid, s->protocol, us);
        gpuipc_stats_free(s);
        gpuipc_client_free(c);
        return ctl_flush(argv[0]);
fail:
        r = ctl_fail(argv[0], c, r);
        gpuipc_stats_free(s);
        gpuipc_client_free(c);
        return r;
}
