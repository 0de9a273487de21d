/* watch.c: gpuipcctl watch: registry events as they happen. */
#include <errno.h>
#include <inttypes.h>
#include <time.h>

#include "ctl.h"

static const char usage[] =
        "Usage: gpuipcctl watch [--socket PATH] [PREFIX] [--json]\n\n"
        "Prints registry events (registered, unregistered, leased, released,\n"
        "revoked) of names in namespace PREFIX, or all, as they happen, until\n"
        "interrupted.  PID/UID are those of the process that caused the event.\n"
        "--json prints one JSON object per line.\n";

static void print_event(const gpuipc_event *e, bool json)
{
        char when[32], size[32];
        time_t t = (time_t)(e->time_ms / 1000);
        struct tm tm;

        if (json) {
                printf("{\"type\": ");
                json_str(stdout, e->type);
                printf(", \"id\": %" PRIu64 ", \"name\": ", e->id);
                json_str(stdout, e->name);
                printf(", \"kind\": \"%s\", \"size\": %" PRIu64 ", \"leases\": %" PRIu32
                       ", \"lease\": %" PRIu64 ", \"pid\": %" PRIu32 ", \"uid\": %" PRIu32
                       ", \"time_ms\": %" PRIu64 ", \"dropped\": %" PRIu64 "}\n",
                       ctl_kind(e->kind), e->size, e->leases, e->lease, e->pid, e->uid,
                       e->time_ms, e->dropped);
                return;
        }
        if (e->dropped)
                printf("(%" PRIu64 " events dropped: not read in time)\n", e->dropped);
        if (localtime_r(&t, &tm))
                strftime(when, sizeof(when), "%H:%M:%S", &tm);
        else
                when[0] = '\0';
        printf("%s.%03" PRIu64 " %-12s %-6" PRIu64 " %-32s %-8s %10s pid %" PRIu32 " uid %"
               PRIu32, when, e->time_ms % 1000, e->type, e->id, e->name, ctl_kind(e->kind),
               proto_size_text(e->size, size, sizeof(size)), e->pid, e->uid);
        if (e->lease)
                printf(" lease %" PRIu64, e->lease);
        printf(" (%" PRIu32 " leases)\n", e->leases);
}

int watch_main(int argc, char **argv)
{
        gpuipc_client *c;
        gpuipc_event *e;
        bool json = false;
        int idx, r;

        r = ctl_start(argc, argv, usage, &json, -1, &idx, NULL);
        if (r >= 0)
                return r;
        if (argc - idx > 1)
                return ctl_usage(argv[0], "expected at most one PREFIX");
        r = ctl_connect(argv[0], &c);
        if (r != EXIT_OK)
                return r;
        r = gpuipc_event_watch(c, idx < argc ? argv[idx] : NULL);
        if (r < 0)
                return ctl_fail_free(argv[0], c, r);
        /* Line by line, so that a pipe into grep or jq sees each event. */
        for (;;) {
                r = gpuipc_event_next(c, -1, &e);
                if (r < 0)
                        break;
                print_event(e, json);
                gpuipc_event_free(e);
                if (ctl_flush(argv[0]) != EXIT_OK) {
                        gpuipc_client_free(c);
                        return EXIT_ERROR;
                }
        }
        r = ctl_fail(argv[0], c, r);
        gpuipc_client_free(c);
        return r;
}
