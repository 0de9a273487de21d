/* metrics.c: gpuipcctl metrics: the Prometheus text, as a scrape gets it. */
#include <stdlib.h>

#include "ctl.h"

static const char usage[] =
        "Usage: gpuipcctl metrics [--socket PATH]\n\n"
        "Prints the daemon's metrics in the Prometheus text exposition format\n"
        "(the same text that metrics-listen serves at GET /metrics).\n";

int metrics_main(int argc, char **argv)
{
        gpuipc_client *c;
        char *text;
        int idx, r;

        r = ctl_start(argc, argv, usage, NULL, 0, &idx, &c);
        if (r >= 0)
                return r;
        r = gpuipc_metrics_fetch(c, &text);
        if (r < 0)
                return ctl_fail_free(argv[0], c, r);
        fputs(text, stdout);
        gpuipc_free(text);
        gpuipc_client_free(c);
        return ctl_flush(argv[0]);
}
