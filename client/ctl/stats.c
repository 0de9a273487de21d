/* stats.c: gpuipcctl stats: the daemon's counters. */
#include <inttypes.h>

#include "ctl.h"

static const char usage[] =
        "Usage: gpuipcctl stats [--socket PATH] [--json]\n\n"
        "Prints the daemon's counters, one per line, or as a JSON object.\n";

static void print_json(const gpuipc_stats *s)
{
        printf("{\n  \"server\": ");
        json_str(stdout, s->server);
        printf(",\n  \"pid\": %" PRIu32 ",\n  \"protocol\": %" PRIu32 ",\n"
               "  \"uptime_ms\": %" PRIu64 ",\n  \"connections\": %" PRIu64 ",\n"
               "  \"registrations\": %" PRIu64 ",\n  \"leases\": %" PRIu64 ",\n"
               "  \"bytes_host\": %" PRIu64 ",\n  \"requests\": %" PRIu64 ",\n"
               "  \"errors\": %" PRIu64 ",\n",
               s->pid, s->protocol, s->uptime_ms, s->connections, s->registrations, s->leases,
               s->bytes_host, s->requests, s->errors);
        printf("  \"bytes_cuda_ipc\": %" PRIu64 ",\n  \"bytes_cuda_vmm\": %" PRIu64 ",\n",
               s->bytes_cuda_ipc, s->bytes_cuda_vmm);
        printf("  \"bytes_cuda_pool\": %" PRIu64 ",\n  \"copies\": %" PRIu64 ",\n"
               "  \"copied_bytes\": %" PRIu64 ",\n", s->bytes_cuda_pool, s->copies,
               s->copied_bytes);
        printf("  \"cuda\": {\"available\": %s, \"driver_version\": %" PRIu32 ", \"reason\": ",
               s->cuda_available ? "true" : "false", s->cuda_driver_version);
        json_str(stdout, s->cuda_reason ? s->cuda_reason : "");
        printf("}\n}\n");
}

static void print_text(const gpuipc_stats *s)
{
        uint64_t up = s->uptime_ms / 1000;
        char size[32];

        printf("server:         %s\n", s->server);
        printf("pid:            %" PRIu32 "\n", s->pid);
        printf("protocol:       %" PRIu32 "\n", s->protocol);
        printf("uptime:         %" PRIu64 "d %02" PRIu64 ":%02" PRIu64 ":%02" PRIu64 "\n",
               up / 86400, up / 3600 % 24, up / 60 % 60, up % 60);
        printf("connections:    %" PRIu64 "\n", s->connections);
        printf("registrations:  %" PRIu64 "\n", s->registrations);
        printf("leases:         %" PRIu64 "\n", s->leases);
        printf("host bytes:     %" PRIu64 " (%s)\n", s->bytes_host,
               proto_size_text(s->bytes_host, size, sizeof(size)));
        printf("cuda-ipc bytes: %" PRIu64 " (%s)\n", s->bytes_cuda_ipc,
               proto_size_text(s->bytes_cuda_ipc, size, sizeof(size)));
        printf("cuda-vmm bytes: %" PRIu64 " (%s)\n", s->bytes_cuda_vmm,
               proto_size_text(s->bytes_cuda_vmm, size, sizeof(size)));
        printf("cuda-pool bytes: %" PRIu64 " (%s)\n", s->bytes_cuda_pool,
               proto_size_text(s->bytes_cuda_pool, size, sizeof(size)));
        printf("copies:        %" PRIu64 " (%s copied at register time)\n", s->copies,
               proto_size_text(s->copied_bytes, size, sizeof(size)));
        if (s->cuda_available)
                printf("cuda:           driver %" PRIu32 "\n", s->cuda_driver_version);
        else
                printf("cuda:           unavailable (%s)\n",
                       s->cuda_reason && s->cuda_reason[0] ? s->cuda_reason : "not reported");
        printf("requests:       %" PRIu64 "\n", s->requests);
        printf("errors:         %" PRIu64 "\n", s->errors);
}

int stats_main(int argc, char **argv)
{
        gpuipc_client *c;
        gpuipc_stats *s;
        bool json = false;
        int r;

        r = ctl_start_stats(argc, argv, usage, &json, &c, &s);
        if (r >= 0)
                return r;
        if (json)
                print_json(s);
        else
                print_text(s);
        gpuipc_stats_free(s);
        gpuipc_client_free(c);
        return ctl_flush(argv[0]);
}
