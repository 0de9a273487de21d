/* batch.c: what gpuipcctl shows of a batch: its columns, their types and
 * buffers, as text lines (show) or a JSON object (show --json, list --json). */
#include <inttypes.h>
#include <string.h>

#include "ctl.h"
#include "size.h"

/* The Arrow format strings operators meet most, spelled out. */
static const char *type_name(const char *fmt)
{
        static const struct { const char *fmt, *name; } names[] = {
                { "n", "null" }, { "b", "bool" }, { "c", "int8" }, { "C", "uint8" },
                { "s", "int16" }, { "S", "uint16" }, { "i", "int32" }, { "I", "uint32" },
                { "l", "int64" }, { "L", "uint64" }, { "e", "float16" }, { "f", "float32" },
                { "g", "float64" }, { "u", "utf8" }, { "U", "large utf8" }, { "z", "binary" },
                { "Z", "large binary" }, { "+s", "struct" }, { "+l", "list" },
                { "+L", "large list" }, { "tdD", "date32" }, { "tdm", "date64" },
        };

        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (strcmp(fmt, names[i].fmt) == 0)
                        return names[i].name;
        return fmt;
}

static void print_node(const gpuipc_info *in, size_t n, int depth)
{
        const gpuipc_batch_node *nd = gpuipc_info_batch_node(in, n);
        char size[32], t[CTL_TEXT_MAX];

        printf("  %*s%-*s %-12s %8" PRId64 " rows, %" PRId64 " null%s\n", depth * 2, "",
               20 - depth * 2, nd->name[0] ? ctl_text(nd->name, t, sizeof(t)) : "(unnamed)",
               type_name(nd->format),
               nd->length, nd->null_count < 0 ? 0 : nd->null_count,
               nd->null_count < 0 ? " (unknown)" : "");
        for (uint32_t b = 0; b < nd->n_buffers; b++) {
                const gpuipc_batch_part *p;
                if (nd->buffers[b] < 0)
                        continue;
                p = gpuipc_info_batch_part(in, (size_t)nd->buffers[b]);
                if (!p)
                        continue;
                printf("  %*s  buffer %" PRIu32 ": part %" PRId32 ", %s, %s%s%s\n", depth * 2,
                       "", b, nd->buffers[b], ctl_kind(p->kind),
                       proto_size_text(p->size, size, sizeof(size)), p->device[0] ? " on " : "",
                       p->device);
        }
}

/* The subtree of node n, children indented under it; returns the node after it. */
static size_t print_tree(const gpuipc_info *in, size_t n, int depth)
{
        const gpuipc_batch_node *nd = gpuipc_info_batch_node(in, n);
        size_t next = n + 1;

        if (!nd)
                return n + 1;
        print_node(in, n, depth);
        for (uint32_t k = 0; k < nd->n_children; k++)
                next = print_tree(in, next, depth + 1);
        return next;
}

void batch_print(const gpuipc_info *in)
{
        size_t n = gpuipc_info_batch_nodes(in);

        printf("rows:      %" PRIu64 "\n", gpuipc_info_batch_rows(in));
        printf("parts:     %zu\n", gpuipc_info_batch_parts(in));
        printf("columns:   %zu\n", gpuipc_info_batch_columns(in));
        for (size_t i = 0; i < n;)
                i = print_tree(in, i, 0);
}

void batch_json(FILE *f, const gpuipc_info *in, const char *ind)
{
        size_t np = gpuipc_info_batch_parts(in), nn = gpuipc_info_batch_nodes(in);

        fprintf(f, ",\n%s  \"batch\": {\"rows\": %" PRIu64 ", \"parts\": [", ind,
                gpuipc_info_batch_rows(in));
        for (size_t i = 0; i < np; i++) {
                const gpuipc_batch_part *p = gpuipc_info_batch_part(in, i);
                fprintf(f, "%s{\"kind\": \"%s\", \"size\": %" PRIu64 ", \"device\": ",
                        i ? ", " : "", ctl_kind(p->kind), p->size);
                json_str(f, p->device);
                fputc('}', f);
        }
        fputs("], \"nodes\": [", f);
        for (size_t i = 0; i < nn; i++) {
                const gpuipc_batch_node *nd = gpuipc_info_batch_node(in, i);
                fprintf(f, "%s\n%s    {\"name\": ", i ? "," : "", ind);
                json_str(f, nd->name);
                fputs(", \"format\": ", f);
                json_str(f, nd->format);
                fprintf(f, ", \"parent\": %" PRId64 ", \"length\": %" PRId64
                        ", \"null_count\": %" PRId64 ", \"offset\": %" PRId64
                        ", \"flags\": %" PRId64 ", \"buffers\": [",
                        nd->parent == UINT32_MAX ? -1 : (int64_t)nd->parent, nd->length,
                        nd->null_count, nd->offset, nd->flags);
                for (uint32_t b = 0; b < nd->n_buffers; b++)
                        fprintf(f, "%s%" PRId32, b ? ", " : "", nd->buffers[b]);
                fputs("]}", f);
        }
        fprintf(f, "%s%s  ]}", nn ? "\n" : "", nn ? ind : "");
}
