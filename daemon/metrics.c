/* metrics.c: counters kept on the request path, rendered on demand.
 *
 * The request path costs a uv_hrtime() pair, a lookup in a table of at most
 * METRICS_OPS_MAX pointers (op names are the op table's static strings, so
 * pointers compare) and a bucket search over a dozen bounds. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "closer.h"
#include "daemon.h"
#include "ledger.h"
#include "metrics.h"
#include "proto.h"
#include "restart_persist.h"
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

/* ---- the process, as Prometheus' client libraries name it -------------- */

/* Open fds: the entries of /proc/self/fd less the one reading it; -1. */
static long open_fds(void)
{
        DIR *dir = opendir("/proc/self/fd");
        struct dirent *e;
        long n = 0;

        if (!dir)
                return -1;
        while ((e = readdir(dir)))
                if (e->d_name[0] != '.')
                        n++;
        closedir(dir);
        return n > 0 ? n - 1 : 0;
}

/* "btime" of /proc/stat: the boot time, in seconds since the epoch; 0. */
static unsigned long long boot_time(void)
{
        char line[256];
        unsigned long long v = 0;
        FILE *f = fopen("/proc/stat", "re");

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "btime %llu", &v) == 1)
                        break;
        fclose(f);
        return v;
}

struct proc_stat {
        unsigned long long utime, stime, starttime;    /* clock ticks */
        unsigned long long vsize;                       /* bytes */
        long long rss;                                  /* pages */
};

/* Fields 14, 15, 22, 23 and 24 of /proc/self/stat (proc(5)); -errno. */
static int proc_stat(struct proc_stat *ret)
{
        char buf[1024], *p;
        size_t n;
        FILE *f = fopen("/proc/self/stat", "re");

        if (!f)
                return -errno;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* comm may hold spaces and parentheses: fields follow the last ')'. */
        p = strrchr(buf, ')');
        if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu "
                         "%*d %*d %*d %*d %*d %*d %llu %llu %lld", &ret->utime, &ret->stime,
                         &ret->starttime, &ret->vsize, &ret->rss) != 5)
                return -EINVAL;
        return 0;
}

static void process_metrics(FILE *f)
{
        long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE), fds = open_fds();
        unsigned long long btime = boot_time();
        struct proc_stat st;
        struct rlimit rl;

        if (fds >= 0) {
                head(f, "process_open_fds", "gauge", "Open file descriptors.");
                fprintf(f, "process_open_fds %ld\n", fds);
        }
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
                head(f, "process_max_fds", "gauge",
                     "The soft limit of open file descriptors (RLIMIT_NOFILE).");
                fprintf(f, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
        }
        if (proc_stat(&st) < 0 || tck <= 0 || page <= 0)
                return;
        head(f, "process_cpu_seconds_total", "counter", "User and system CPU time, in seconds.");
        fprintf(f, "process_cpu_seconds_total %.2f\n", (double)(st.utime + st.stime) / (double)tck);
        head(f, "process_resident_memory_bytes", "gauge", "Resident memory, in bytes.");
        fprintf(f, "process_resident_memory_bytes %lld\n", st.rss * (long long)page);
        head(f, "process_virtual_memory_bytes", "gauge", "Virtual memory, in bytes.");
        fprintf(f, "process_virtual_memory_bytes %llu\n", st.vsize);
        if (btime > 0) {
                head(f, "process_start_time_seconds", "gauge",
                     "Start time of the process, in seconds since the epoch.");
                fprintf(f, "process_start_time_seconds %.2f\n",
                        (double)btime + (double)st.starttime / (double)tck);
        }
}

/* systemd's fd store: in use at all, and, where systemd says its maximum
 * ($FDSTORE: systemd 254 and later), the entries held against it. */
static void fdstore_metrics(FILE *f)
{
        const char *max = getenv("FDSTORE");   /* what persist_init() read */
        uint64_t used, pool;

        head(f, "gpuipcd_fdstore_enabled", "gauge",
             "1 while registrations are kept in systemd's fd store across restarts.");
        fprintf(f, "gpuipcd_fdstore_enabled %d\n", persist_enabled() ? 1 : 0);
        if (!persist_store_room(&used, &pool) || !max)
                return;
        head(f, "gpuipcd_fdstore_entries", "gauge",
             "Entries the daemon holds in systemd's fd store (host buffers, cuda-vmm "
             "allocations, the journal).");
        fprintf(f, "gpuipcd_fdstore_entries %" PRIu64 "\n", used);
        head(f, "gpuipcd_fdstore_max", "gauge",
             "The fd store's size, FileDescriptorStoreMax= as systemd passes it ($FDSTORE).");
        fprintf(f, "gpuipcd_fdstore_max %llu\n", strtoull(max, NULL, 10));
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

        if (kind == PROTO_KIND_BATCH)
                return;         /* its parts' bytes count under their own kinds */
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
        process_metrics(f);
        fdstore_metrics(f);
        head(f, "gpuipcd_fd_closes_pending", "gauge",
             "File descriptors let go of whose close is still running off the event loop.");
        fprintf(f, "gpuipcd_fd_closes_pending %u\n", closer_pending());
        head(f, "gpuipcd_connections", "gauge", "Open client connections.");
        fprintf(f, "gpuipcd_connections %" PRIu32 "\n", d->n_conns);
        head(f, "gpuipcd_watchers", "gauge", "Connections subscribed to registry events.");
        fprintf(f, "gpuipcd_watchers %" PRIu32 "\n", watch_count());

        ledger_bytes_each(count_kind, &kinds);
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
        ledger_bytes_each(bytes_line, &kinds);

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
