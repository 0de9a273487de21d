/* list.c: gpuipcctl list: registrations as a table or as JSON. */
#include <getopt.h>
#include <inttypes.h>
#include <string.h>

#include "ctl.h"

static const char usage[] =
        "Usage: gpuipcctl list [--socket PATH] [PREFIX] [--all] [--json]\n\n"
        "Lists the live registrations, all of them or those in namespace PREFIX,\n"
        "ordered by id.  OWNER is pid/uid, marked '-' when the registering\n"
        "connection has ended; EXE is its executable ('-' when the daemon could\n"
        "not read it); ACCESS who else may read it ('owner': only its uid and\n"
        "root; 'public'; or '+N uids', '+N gids', '+group').  CUDA records get a\n"
        "second line with their device UUID and allocation.  A summary of bytes\n"
        "per device ('host' for host memory) follows.\n\n"
        "  --all   also the buffers that were unregistered while readers still\n"
        "          hold them (STATE 'unregistered', gone from the namespace but\n"
        "          still holding memory), each with a line per holder\n"
        "  --json  an array of objects instead (with --all, each has \"holders\")\n";

struct list_opts {
        bool json, all;
};

static int opt(int ch, const char *arg, void *data)
{
        struct list_opts *o = data;

        if (ch == 'a')
                o->all = true;
        else
                o->json = true;
        return 0;
}

#define SUMMARY_MAX 64

/* Bytes per device, "host" for host buffers, in order of first appearance. */
static void print_summary(const gpuipc_list *l)
{
        struct { const char *dev; uint64_t bytes, n; } sum[SUMMARY_MAX];
        size_t ns = 0;
        char size[32];

        for (size_t i = 0; i < gpuipc_list_count(l); i++) {
                const gpuipc_info *in = gpuipc_list_get(l, i);
                const char *dev = in->kind == GPUIPC_KIND_HOST || !in->device[0] ? "host"
                                                                              : in->device;
                size_t k;
                for (k = 0; k < ns && strcmp(sum[k].dev, dev) != 0; k++)
                        ;
                if (k == ns) {
                        if (ns == SUMMARY_MAX)
                                continue;
                        sum[ns].dev = dev;
                        sum[ns].bytes = sum[ns].n = 0;
                        ns++;
                }
                sum[k].bytes += in->size;
                sum[k].n++;
        }
        for (size_t k = 0; k < ns; k++)
                printf("%s: %s in %" PRIu64 " registration%s\n", sum[k].dev,
                       proto_size_text(sum[k].bytes, size, sizeof(size)), sum[k].n,
                       sum[k].n == 1 ? "" : "s");
}

/* The access rule in a few characters: "owner", "public", or what the rule
 * lists ("+2 uids", "+1 uid +group"). */
static const char *access_brief(const gpuipc_info *in, char *buf, size_t n)
{
        size_t k = 0;

        if (in->access_public)
                return "public";
        buf[0] = '\0';
        if (in->n_access_uids)
                k += (size_t)snprintf(buf + k, n - k, "+%" PRIu32 " uid%s", in->n_access_uids,
                                      in->n_access_uids == 1 ? "" : "s");
        if (in->n_access_gids && k < n)
                k += (size_t)snprintf(buf + k, n - k, "%s+%" PRIu32 " gid%s", k ? " " : "",
                                      in->n_access_gids, in->n_access_gids == 1 ? "" : "s");
        if (in->access_group && in->access_group[0] && k < n)
                snprintf(buf + k, n - k, "%s+group", k ? " " : "");
        return buf[0] ? buf : "owner";
}

/* Who keeps an unregistered buffer alive. */
static void print_holders(const gpuipc_info *in)
{
        char age[32], t[CTL_TEXT_MAX];

        for (uint32_t i = 0; i < in->n_holders; i++) {
                const gpuipc_holder *h = gpuipc_info_holder(in, i);
                printf("       held by pid %" PRIu32 " (uid %" PRIu32 ", lease %" PRIu64
                       ", for %s) %s\n", h->pid, h->uid, h->lease,
                       ctl_age(h->since_ms, age, sizeof(age)),
                       h->exe[0] ? ctl_text(h->exe, t, sizeof(t)) : "-");
        }
        if (in->n_holders < in->leases)
                printf("       and %" PRIu32 " more leases\n", in->leases - in->n_holders);
}

static void print_table(const gpuipc_list *l)
{
        char size[32], age[32], owner[48], access[48], t[CTL_TEXT_MAX];

        printf("%-6s %-32s %-8s %10s %6s %-14s %5s %-13s %-16s %s\n", "ID", "NAME", "KIND",
               "SIZE", "LEASES", "OWNER", "AGE", "STATE", "ACCESS", "EXE");
        for (size_t i = 0; i < gpuipc_list_count(l); i++) {
                const gpuipc_info *in = gpuipc_list_get(l, i);

                snprintf(owner, sizeof(owner), "%" PRIu32 "/%" PRIu32 "%s", in->owner_pid,
                         in->owner_uid, in->flags & GPUIPC_INFO_OWNER_GONE ? "-" : "");
                printf("%-6" PRIu64 " %-32s %-8s %10s %6" PRIu32 " %-14s %5s %-13s %-16s %s\n",
                       in->id, in->name, ctl_kind(in->kind),
                       proto_size_text(in->size, size, sizeof(size)),
                       in->leases, owner, ctl_age(in->created_ms, age, sizeof(age)),
                       in->flags & GPUIPC_INFO_UNREGISTERED ? "unregistered" :
                       in->flags & GPUIPC_INFO_EPHEMERAL ? "live,ephem" : "live",
                       access_brief(in, access, sizeof(access)),
                       in->owner_exe && in->owner_exe[0] ? ctl_text(in->owner_exe, t, sizeof(t))
                                                         : "-");
                /* Device records: a second, indented line. */
                if (in->kind != GPUIPC_KIND_HOST)
                        printf("       device %s, alloc %" PRIu64 " (%s, %" PRIu32 " regs), offset %"
                               PRIu64 "\n", in->device, in->alloc_id,
                               proto_size_text(in->alloc_size, size, sizeof(size)),
                               in->alloc_regs, in->offset);
                if (in->flags & GPUIPC_INFO_UNREGISTERED)
                        print_holders(in);
        }
}

static void print_json(const gpuipc_list *l, bool holders)
{
        size_t n = gpuipc_list_count(l);

        fputs(n ? "[\n  " : "[", stdout);
        for (size_t i = 0; i < n; i++) {
                if (i)
                        fputs(",\n  ", stdout);
                json_info_ex(stdout, gpuipc_list_get(l, i), "  ", holders);
        }
        fputs(n ? "\n]\n" : "]\n", stdout);
}

int list_main(int argc, char **argv)
{
        static const struct option opts[] = {
                { "json", no_argument, NULL, 'j' },
                { "all",  no_argument, NULL, 'a' },
                {},
        };
        struct list_opts o = {};
        gpuipc_list *l;
        gpuipc_client *c;
        const char *prefix = NULL;
        int idx, r;

        r = ctl_parse(argc, argv, usage, NULL, opts, opt, &o, &idx);
        if (r >= 0)
                return r;
        if (argc - idx > 1)
                return ctl_usage(argv[0], "expected at most one PREFIX");
        if (idx < argc)
                prefix = argv[idx];
        r = ctl_connect(argv[0], &c);
        if (r != EXIT_OK)
                return r;
        r = gpuipc_list_fetch(c, prefix, o.all ? GPUIPC_LIST_ALL | GPUIPC_LIST_HOLDERS : 0,
                                 &l);
        if (r < 0)
                return ctl_fail_free(argv[0], c, r);
        if (o.json)
                print_json(l, o.all);
        else {
                print_table(l);
                print_summary(l);
        }
        gpuipc_list_free(l);
        gpuipc_client_free(c);
        return ctl_flush(argv[0]);
}
