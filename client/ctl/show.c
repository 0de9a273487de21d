/* show.c: gpuipcctl show: every field of one registration. */
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "ctl.h"

static const char usage[] =
        "Usage: gpuipcctl show [--socket PATH] NAME [--json]\n\n"
        "Prints every field of registration NAME as 'key: value' lines, then who\n"
        "holds its leases (lease id, pid, uid, how long, executable; at most 32),\n"
        "or all of it as a JSON object with --json (\"holders\": [{\"pid\", \"uid\",\n"
        "\"exe\", \"lease\", \"age_ms\"}]).  A batch lists its rows, parts and\n"
        "columns, each with its Arrow type, row and null counts, and the part each\n"
        "of its buffers lies in (kind, size, device).\n";

static void print_dims(const char *key, const int64_t *v, uint32_t n)
{
        printf("%-10s ", key);
        if (!v) {
                printf("-\n");
                return;
        }
        for (uint32_t i = 0; i < n; i++)
                printf("%s%" PRId64, i ? "," : "", v[i]);
        printf("\n");
}

static void print_ids(const char *key, const uint32_t *v, uint32_t n)
{
        printf("%-10s ", key);
        for (uint32_t i = 0; i < n; i++)
                printf("%s%" PRIu32, i ? "," : "", v[i]);
        printf("%s\n", n ? "" : "-");
}

/* Who besides the owner's uid and root may read it. */
static void print_access(const gpuipc_info *in)
{
        bool owner_only = !in->access_public && !in->n_access_uids && !in->n_access_gids &&
                          !(in->access_group && in->access_group[0]);
        char t[CTL_TEXT_MAX];

        printf("access:    %s\n", in->access_public ? "public" : owner_only ? "owner" : "listed");
        if (owner_only || in->access_public)
                return;
        print_ids("  uids:", in->access_uids, in->n_access_uids);
        print_ids("  gids:", in->access_gids, in->n_access_gids);
        printf("%-10s %s\n", "  group:", in->access_group && in->access_group[0]
               ? ctl_text(in->access_group, t, sizeof(t)) : "-");
}

static void print_time(const char *key, uint64_t ms)
{
        char when[64], age[32];
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        uint64_t now = ctl_now_ms();

        if (gmtime_r(&t, &tm))
                strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        else
                when[0] = '\0';
        if (ms >= now)
                /* ctl_age() counts from a time in the past: mirror it. */
                printf("%-10s %s.%03" PRIu64 "Z (in %s)\n", key, when, ms % 1000,
                       ctl_age(now - (ms - now), age, sizeof(age)));
        else
                printf("%-10s %s.%03" PRIu64 "Z (%s ago)\n", key, when, ms % 1000,
                       ctl_age(ms, age, sizeof(age)));
}

static void print_holders(const gpuipc_info *in)
{
        char age[32], t[CTL_TEXT_MAX];

        printf("holders:   %" PRIu32 "%s\n", in->leases,
               in->n_holders < in->leases ? " (the newest listed)" : "");
        if (in->n_holders == 0)
                return;
        printf("  %-8s %-8s %-6s %5s  %s\n", "LEASE", "PID", "UID", "AGE", "EXE");
        for (uint32_t i = 0; i < in->n_holders; i++) {
                const gpuipc_holder *h = gpuipc_info_holder(in, i);
                printf("  %-8" PRIu64 " %-8" PRIu32 " %-6" PRIu32 " %5s  %s\n", h->lease, h->pid,
                       h->uid, ctl_age(h->since_ms, age, sizeof(age)),
                       h->exe[0] ? ctl_text(h->exe, t, sizeof(t)) : "-");
        }
}

static void print_text(const gpuipc_info *in)
{
        char size[32], age[32], when[64], txt[CTL_TEXT_MAX], k[CTL_TEXT_MAX];
        time_t t = (time_t)(in->created_ms / 1000);
        struct tm tm;

        if (gmtime_r(&t, &tm))
                strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        else
                when[0] = '\0';
        printf("id:        %" PRIu64 "\n", in->id);
        printf("name:      %s\n", in->name);
        printf("kind:      %s\n", ctl_kind(in->kind));
        printf("size:      %" PRIu64 " (%s)\n", in->size,
               proto_size_text(in->size, size, sizeof(size)));
        if (in->kind == GPUIPC_KIND_BATCH) {
                batch_print(in);
        } else {
                printf("offset:    %" PRIu64 "\n", in->offset);
                printf("device:    %s\n", in->device[0] ? in->device : "-");
        }
        if (in->kind != GPUIPC_KIND_HOST && in->kind != GPUIPC_KIND_BATCH) {
                printf("alloc:     id %" PRIu64 ", %" PRIu64 " bytes (%s), %" PRIu32
                       " registrations\n", in->alloc_id, in->alloc_size,
                       proto_size_text(in->alloc_size, size, sizeof(size)), in->alloc_regs);
                if (in->n_chunks > 1)
                        printf("chunks:    %" PRIu32 " VMM allocations\n", in->n_chunks);
                if (in->kind == GPUIPC_KIND_CUDA_IPC || in->kind == GPUIPC_KIND_CUDA_POOL)
                        printf("buffer_id: %" PRIu64 "\n", in->buffer_id);
                printf("event:     %s\n", in->has_event ? "yes" : "no");
                if (in->copied && in->copied[0])
                        printf("copied:    %s\n", ctl_text(in->copied, txt, sizeof(txt)));
        }
        printf("state:     %s\n", in->flags & GPUIPC_INFO_UNREGISTERED ? "unregistered" : "live");
        printf("ephemeral: %s\n", in->flags & GPUIPC_INFO_EPHEMERAL ? "yes" : "no");
        printf("leases:    %" PRIu32 "\n", in->leases);
        printf("owner:     pid %" PRIu32 ", uid %" PRIu32 ", gid %" PRIu32 " (%s)\n",
               in->owner_pid, in->owner_uid, in->owner_gid,
               in->flags & GPUIPC_INFO_OWNER_GONE ? "disconnected" : "connected");
        printf("exe:       %s\n", in->owner_exe && in->owner_exe[0]
               ? ctl_text(in->owner_exe, txt, sizeof(txt)) : "-");
        print_access(in);
        printf("created:   %s.%03" PRIu64 "Z (%s ago)\n", when, in->created_ms % 1000,
               ctl_age(in->created_ms, age, sizeof(age)));
        if (in->expires_ms)
                print_time("expires:", in->expires_ms);
        else
                printf("expires:   never (no TTL)\n");
        if (in->kind != GPUIPC_KIND_BATCH) {
                printf("dtype:     %s\n", in->dtype[0] ? ctl_text(in->dtype, txt, sizeof(txt)) : "-");
                print_dims("shape:", in->ndim ? in->shape : NULL, in->ndim);
                print_dims("strides:", in->strides, in->ndim);
        }
        for (uint32_t i = 0; i < in->n_user; i++) {
                /* Keys up to 4 bytes line up with the rest; longer ones
                 * push their value right. */
                const char *key = ctl_text(in->user_keys[i], k, sizeof(k));

                printf("user.%s:%*s %s\n", key, strlen(key) < 4 ? (int)(4 - strlen(key)) : 0, "",
                       ctl_text(in->user_values[i], txt, sizeof(txt)));
        }
        print_holders(in);
}

int show_main(int argc, char **argv)
{
        gpuipc_list *l;
        gpuipc_client *c;
        bool json = false;
        int idx, r;

        r = ctl_start(argc, argv, usage, &json, 1, &idx, &c);
        if (r >= 0)
                return r;
        r = gpuipc_name_stat(c, argv[idx], &l);
        if (r < 0)
                return ctl_fail_free(argv[0], c, r);
        if (json) {
                json_info_ex(stdout, gpuipc_list_get(l, 0), "", true);
                fputc('\n', stdout);
        } else {
                print_text(gpuipc_list_get(l, 0));
        }
        gpuipc_list_free(l);
        gpuipc_client_free(c);
        return ctl_flush(argv[0]);
}
