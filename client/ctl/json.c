/* json.c: JSON output for --json. */
#include <inttypes.h>
#include <string.h>

#include "ctl.h"
#include "proto.h"

/* s as a JSON string.  Names and meta are UTF-8 (the daemon refuses
 * anything else), but other strings, such as an owner's executable path,
 * may not be: each byte that does not start a well-formed UTF-8 sequence
 * is written as \ufffd, so the output is always valid JSON. */
void json_str(FILE *f, const char *s)
{
        size_t len = strlen(s), i = 0;

        fputc('"', f);
        while (i < len) {
                size_t ok = i + proto_utf8_valid(s + i, len - i);

                for (; i < ok; i++) {
                        unsigned char c = (unsigned char)s[i];
                        switch (c) {
                        case '"':  fputs("\\\"", f); break;
                        case '\\': fputs("\\\\", f); break;
                        case '\b': fputs("\\b", f); break;
                        case '\f': fputs("\\f", f); break;
                        case '\n': fputs("\\n", f); break;
                        case '\r': fputs("\\r", f); break;
                        case '\t': fputs("\\t", f); break;
                        default:
                                if (c < 0x20 || c == 0x7f)
                                        fprintf(f, "\\u%04x", c);
                                else
                                        fputc(c, f);
                        }
                }
                if (i < len) {
                        fputs("\\ufffd", f);
                        i++;
                }
        }
        fputc('"', f);
}

static void json_i64_array(FILE *f, const int64_t *v, uint32_t n)
{
        if (!v) {
                fputs("null", f);
                return;
        }
        fputc('[', f);
        for (uint32_t i = 0; i < n; i++)
                fprintf(f, "%s%" PRId64, i ? ", " : "", v[i]);
        fputc(']', f);
}

static void json_u32_array(FILE *f, const uint32_t *v, uint32_t n)
{
        fputc('[', f);
        for (uint32_t i = 0; i < n; i++)
                fprintf(f, "%s%" PRIu32, i ? ", " : "", v[i]);
        fputc(']', f);
}

const char *ctl_kind(gpuipc_kind k)
{
        switch (k) {
        case GPUIPC_KIND_HOST:     return "host";
        case GPUIPC_KIND_CUDA_IPC: return "cuda-ipc";
        case GPUIPC_KIND_CUDA_VMM: return "cuda-vmm";
        case GPUIPC_KIND_CUDA_POOL: return "cuda-pool";
        case GPUIPC_KIND_BATCH:    return "batch";
        }
        return "unknown";
}

void json_info(FILE *f, const gpuipc_info *in, const char *ind)
{
        json_info_ex(f, in, ind, false);
}

void json_info_ex(FILE *f, const gpuipc_info *in, const char *ind, bool holders)
{
        fprintf(f, "{\n%s  \"id\": %" PRIu64 ",\n%s  \"name\": ", ind, in->id, ind);
        json_str(f, in->name);
        fprintf(f, ",\n%s  \"kind\": \"%s\",\n", ind, ctl_kind(in->kind));
        fprintf(f, "%s  \"size\": %" PRIu64 ",\n%s  \"offset\": %" PRIu64 ",\n", ind, in->size,
                ind, in->offset);
        fprintf(f, "%s  \"device\": ", ind);
        json_str(f, in->device);
        if (in->kind == GPUIPC_KIND_BATCH)
                batch_json(f, in, ind);
        else if (in->kind != GPUIPC_KIND_HOST) {
                fprintf(f, ",\n%s  \"alloc\": {\"id\": %" PRIu64 ", \"size\": %" PRIu64
                           ", \"regs\": %" PRIu32 "}", ind, in->alloc_id, in->alloc_size,
                        in->alloc_regs);
                if (in->kind == GPUIPC_KIND_CUDA_IPC || in->kind == GPUIPC_KIND_CUDA_POOL)
                        fprintf(f, ",\n%s  \"buffer_id\": %" PRIu64, ind, in->buffer_id);
                if (in->kind == GPUIPC_KIND_CUDA_VMM)
                        fprintf(f, ",\n%s  \"chunks\": %" PRIu32, ind, in->n_chunks);
                fprintf(f, ",\n%s  \"event\": %s", ind, in->has_event ? "true" : "false");
                fprintf(f, ",\n%s  \"copied\": ", ind);
                if (in->copied && in->copied[0])
                        json_str(f, in->copied);
                else
                        fputs("null", f);
        }
        fprintf(f, ",\n%s  \"dtype\": ", ind);
        json_str(f, in->dtype);
        fprintf(f, ",\n%s  \"shape\": ", ind);
        if (in->ndim == 0)
                fputs("[]", f);
        else
                json_i64_array(f, in->shape, in->ndim);
        fprintf(f, ",\n%s  \"strides\": ", ind);
        json_i64_array(f, in->strides, in->ndim);
        fprintf(f, ",\n%s  \"user\": {", ind);
        for (uint32_t i = 0; i < in->n_user; i++) {
                fputs(i ? ", " : "", f);
                json_str(f, in->user_keys[i]);
                fputs(": ", f);
                json_str(f, in->user_values[i]);
        }
        fprintf(f, "},\n%s  \"owner\": {\"pid\": %" PRIu32 ", \"uid\": %" PRIu32
                   ", \"gid\": %" PRIu32 ", \"connected\": %s, \"exe\": ",
                ind, in->owner_pid, in->owner_uid, in->owner_gid,
                in->flags & GPUIPC_INFO_OWNER_GONE ? "false" : "true");
        json_str(f, in->owner_exe ? in->owner_exe : "");
        fprintf(f, "},\n%s  \"access\": {\"public\": %s, \"uids\": ", ind,
                in->access_public ? "true" : "false");
        json_u32_array(f, in->access_uids, in->n_access_uids);
        fputs(", \"gids\": ", f);
        json_u32_array(f, in->access_gids, in->n_access_gids);
        fputs(", \"group\": ", f);
        if (in->access_group && in->access_group[0])
                json_str(f, in->access_group);
        else
                fputs("null", f);
        fputs("},\n", f);
        fprintf(f, "%s  \"leases\": %" PRIu32 ",\n%s  \"ephemeral\": %s,\n", ind, in->leases, ind,
                in->flags & GPUIPC_INFO_EPHEMERAL ? "true" : "false");
        fprintf(f, "%s  \"state\": \"%s\",\n%s  \"created_ms\": %" PRIu64, ind,
                in->flags & GPUIPC_INFO_UNREGISTERED ? "unregistered" : "live", ind,
                in->created_ms);
        if (in->expires_ms)
                fprintf(f, ",\n%s  \"expires_ms\": %" PRIu64, ind, in->expires_ms);
        else
                fprintf(f, ",\n%s  \"expires_ms\": null", ind);
        if (holders)
                json_holders(f, in, ind);
        fprintf(f, "\n%s}", ind);
}

void json_holders(FILE *f, const gpuipc_info *in, const char *ind)
{
        uint64_t now = ctl_now_ms();

        fprintf(f, ",\n%s  \"holders\": [", ind);
        for (uint32_t i = 0; i < in->n_holders; i++) {
                const gpuipc_holder *h = gpuipc_info_holder(in, i);
                fprintf(f, "%s\n%s    {\"pid\": %" PRIu32 ", \"uid\": %" PRIu32 ", \"exe\": ",
                        i ? "," : "", ind, h->pid, h->uid);
                json_str(f, h->exe);
                fprintf(f, ", \"lease\": %" PRIu64 ", \"age_ms\": %" PRIu64 "}", h->lease,
                        now > h->since_ms ? now - h->since_ms : 0);
        }
        if (in->n_holders)
                fprintf(f, "\n%s  ]", ind);
        else
                fputc(']', f);
}
