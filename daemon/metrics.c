/* metrics.c: counters kept on the request path, rendered on demand.
 *
 * The request path costs a uv_hrtime() pair, a lookup in a table of at most
 * METRICS_OPS_MAX pointers (op names are the op table's static strings, so
 * pointers compare) and a bucket search over a dozen bounds. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "metrics.h"
#include "proto.h"
#include "watch.h"

/* Upper bounds in seconds: a request takes 10 us to 100 ms. */
static const double bounds[] = {
        10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
        1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
};
#define NBOUNDS (sizeof(bounds) / sizeof(bounds[0]))

struct op_stats {
        const char *op;
        uint64_t requests;
        uint64_t buckets[NBOUNDS];      /* not cumulative; +Inf is requests */
        double sum;                     /* seconds */
        unsigned ncodes;
        struct {
                const char *code;
                uint64_t n;
        } errors[METRICS_CODES_MAX];
};

static struct op_stats ops[METRICS_OPS_MAX];
static unsigned nops;

static struct op_stats *op_slot(const char *op)
{
        if (!op)
                op = "unknown";
        for (unsigned i = 0; i < nops; i++)
                if (ops[i].op == op || strcmp(ops[i].op, op) == 0)
                        return &ops[i];
        if (nops == METRICS_OPS_MAX - 1 && strcmp(op, "other") != 0)
                return op_slot("other");
        ops[nops].op = op;
        return &ops[nops++];
}

void metrics_request(const char *op, int err, uint64_t ns)
{
        struct op_stats *s = op_slot(op);
        double secs = (double)ns / 1e9;
        unsigned i;

        s->requests++;
        s->sum += secs;
        for (i = 0; i < NBOUNDS && secs > bounds[i]; i++)
                ;
        if (i < NBOUNDS)
                s->buckets[i]++;
        if (err >= 0)
                return;
        {
                const char *code = proto_code_from_errno(err);
                for (i = 0; i < s->ncodes; i++)
                        if (strcmp(s->errors[i].code, code) == 0)
                                break;
                if (i == s->ncodes) {
                        if (s->ncodes == METRICS_CODES_MAX)
                                return;
                        s->errors[s->ncodes].code = code;
                        s->errors[s->ncodes++].n = 0;
                }
                s->errors[i].n++;
        }
}

/* A label value as the exposition format quotes it. */
static void label(FILE *f, const char *s)
{
        for (; *s; s++) {
                if (*s == '\\')
                        fputs("\\\\", f);
                else if (*s == '"')
                        fputs("\\\"", f);
                else if (*s == '\n')
                        fputs("\\n", f);
                else
                        fputc(*s, f);
        }
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

struct kinds {
        uint64_t count[_PROTO_KIND_MAX];
        FILE *f;
};

static void count_kind(unsigned kind, const char *device, uint64_t count, uint64_t bytes,
                       void *data)
{
        struct kinds *k = data;

        if (kind < _PROTO_KIND_MAX)
                k->count[kind] += count;
}

static void bytes_line(unsigned kind, const char *device, uint64_t count, uint64_t bytes,
                       void *data)
{
        struct kinds *k = data;

        fprintf(k->f, "gpuipcd_bytes{kind=\"%s\",device=\"", proto_kind_name(kind));
        label(k->f, device[0] ? device : "host");
        fprintf(k->f, "\"} %" PRIu64 "\n", bytes);
}

int metrics_render(struct daemon *d, char **ret_text, size_t *ret_len)
{
        const struct registry_counters *k = registry_counters(d->reg);
        struct kinds kinds = { 0 };
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);

        if (!f)
                return -ENOMEM;
        kinds.f = f;
        head(f, "gpuipcd_build_info", "gauge", "The daemon's version; always 1.");
        fprintf(f, "gpuipcd_build_info{version=\"");
        label(f, GPUIPC_VERSION);
        fprintf(f, "\",protocol=\"%u\"} 1\n", PROTO_VERSION);
        head(f, "gpuipcd_uptime_seconds", "gauge", "Seconds since the daemon started.");
        fprintf(f, "gpuipcd_uptime_seconds %.3f\n",
                (double)(uv_now(d->loop) - d->start_ms) / 1000.0);
        head(f, "gpuipcd_connections", "gauge", "Open client connections.");
        fprintf(f, "gpuipcd_connections %" PRIu32 "\n", d->n_conns);
        head(f, "gpuipcd_watchers", "gauge", "Connections subscribed to registry events.");
        fprintf(f, "gpuipcd_watchers %" PRIu32 "\n", watch_count());

        watch_bytes_each(count_kind, &kinds);
        head(f, "gpuipcd_registrations", "gauge",
             "Registrations held, live or unregistered but still leased, by kind.");
        for (unsigned i = 0; i < _PROTO_KIND_MAX; i++)
                fprintf(f, "gpuipcd_registrations{kind=\"%s\"} %" PRIu64 "\n",
                        proto_kind_name(i), kinds.count[i]);
        head(f, "gpuipcd_copies_total", "counter",
             "Registrations that the producer's library copied into cuda-vmm memory because "
             "zero-copy sharing was impossible (GPUIPC_REGISTER_COPY).");
        fprintf(f, "gpuipcd_copies_total %" PRIu64 "\n", d->copies);
        head(f, "gpuipcd_copied_bytes_total", "counter", "Bytes of those copies.");
        fprintf(f, "gpuipcd_copied_bytes_total %" PRIu64 "\n", d->copied_bytes);
        head(f, "gpuipcd_leases", "gauge", "Leases held by all clients.");
        fprintf(f, "gpuipcd_leases %" PRIu64 "\n", k->leases);
        head(f, "gpuipcd_bytes", "gauge", "Bytes of registered buffers, by kind and device.");
        watch_bytes_each(bytes_line, &kinds);

        head(f, "gpuipcd_requests_total", "counter", "Requests dispatched, by op.");
        for (unsigned i = 0; i < nops; i++)
                fprintf(f, "gpuipcd_requests_total{op=\"%s\"} %" PRIu64 "\n", ops[i].op,
                        ops[i].requests);
        head(f, "gpuipcd_errors_total", "counter",
             "Requests answered with an error, by op and error code.");
        for (unsigned i = 0; i < nops; i++)
                for (unsigned j = 0; j < ops[i].ncodes; j++)
                        fprintf(f, "gpuipcd_errors_total{op=\"%s\",code=\"%s\"} %" PRIu64 "\n",
                                ops[i].op, ops[i].errors[j].code, ops[i].errors[j].n);
        head(f, "gpuipcd_request_duration_seconds", "histogram",
             "Time from a request's dispatch to its handler's return, by op.");
        for (unsigned i = 0; i < nops; i++) {
                uint64_t cum = 0;
                for (unsigned b = 0; b < NBOUNDS; b++) {
                        cum += ops[i].buckets[b];
                        fprintf(f, "gpuipcd_request_duration_seconds_bucket{op=\"%s\",le=\"%g\"} "
                                "%" PRIu64 "\n", ops[i].op, bounds[b], cum);
                }
                fprintf(f, "gpuipcd_request_duration_seconds_bucket{op=\"%s\",le=\"+Inf\"} %"
                        PRIu64 "\n", ops[i].op, ops[i].requests);
                fprintf(f, "gpuipcd_request_duration_seconds_sum{op=\"%s\"} %.9f\n", ops[i].op,
                        ops[i].sum);
                fprintf(f, "gpuipcd_request_duration_seconds_count{op=\"%s\"} %" PRIu64 "\n",
                        ops[i].op, ops[i].requests);
        }
        if (fclose(f) != 0 || !text) {
                free(text);
                return -ENOMEM;
        }
        *ret_text = text;
        *ret_len = len;
        return 0;
}
