/* ping.c: gpuipcctl ping: is the daemon there, and how fast does it answer. */
#include <time.h>

#include "ctl.h"

static const char usage[] =
        "Usage: gpuipcctl ping [--socket PATH] [--json]\n\n"
        "Connects, then times one request round trip.  Prints e.g.\n"
        "  gpuipcd 0.1.0 (pid 123, protocol 1): 85 us\n"
        "or with --json\n"
        "  {\"server\": \"gpuipcd 0.1.0\", \"pid\": 123, \"protocol\": 1, \"latency_us\": 85}\n";

int ping_main(int argc, char **argv)
{
        struct timespec t0, t1;
        gpuipc_client *c = NULL;
        gpuipc_stats *s = NULL;
        bool json = false;
        long long us;
        int r;

        /* The daemon's name and pid come with its counters. */
        r = ctl_start_stats(argc, argv, usage, &json, &c, &s);
        if (r >= 0)
                return r;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        r = gpuipc_client_ping(c);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (r < 0)
                goto fail;
        us = (long long)(t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000;
        if (json) {
                printf("{\"server\": ");
                json_str(stdout, s->server[0] ? s->server : "gpuipcd");
                printf(", \"pid\": %u, \"protocol\": %u, \"latency_us\": %lld}\n", s->pid,
                       s->protocol, us);
        } else {
                printf("%s (pid %u, protocol %u): %lld us\n", s->server[0] ? s->server : "gpuipcd",
                       s->pid, s->protocol, us);
        }
        gpuipc_stats_free(s);
        gpuipc_client_free(c);
        return ctl_flush(argv[0]);
fail:
        r = ctl_fail(argv[0], c, r);
        gpuipc_stats_free(s);
        gpuipc_client_free(c);
        return r;
}
