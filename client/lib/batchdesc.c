/* batchdesc.c: a batch as its record describes it (lookup, stat, list),
 * laid out inside the record's gpuipc_info block (info.c), and the
 * gpuipc_info_batch_*() accessors.
 *
 * The daemon checked the description when it was registered, but a
 * consumer hands its pointers to Arrow code that trusts them, so the
 * record is checked again here with the same proto_arrow_check(): part
 * indexes in range, children counts that fit, strings of sane lengths.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "batchint.h"

#define DEVICE_MAX 64u          /* a device UUID string is 40 bytes */

static size_t str_len(const msgpack_object *o)
{
        return o && o->type == MSGPACK_OBJECT_STR ? o->via.str.size : 0;
}

/* The pairs of a metadata map (checked by proto_arrow_check), and the
 * bytes of their strings. */
static uint32_t meta_map(const msgpack_object *m, size_t *bytes)
{
        if (!m || m->type != MSGPACK_OBJECT_MAP)
                return 0;
        for (uint32_t i = 0; i < m->via.map.size; i++)
                *bytes += str_len(&m->via.map.ptr[i].key) + str_len(&m->via.map.ptr[i].val) + 2;
        return m->via.map.size;
}

/* The tree the children counts describe (nodes as checked by
 * proto_arrow_check): each node's parent (UINT32_MAX for a column) and the
 * columns, when the arrays are given.  Returns the number of columns, or
 * -EBADMSG when the counts run past the end. */
static int tree(const struct proto_arrow_node *nodek, uint32_t n, uint32_t *parent,
                uint32_t *columns)
{
        uint32_t stack[GPUIPC_BATCH_NODES_MAX], left[GPUIPC_BATCH_NODES_MAX];
        uint32_t depth = 0, ncols = 0;

        for (uint32_t i = 0; i < n; i++) {
                uint64_t kids = 0;
                while (depth > 0 && left[depth - 1] == 0)
                        depth--;
                if (depth == 0) {
                        if (columns)
                                columns[ncols] = i;
                        ncols++;
                } else {
                        left[depth - 1]--;
                }
                if (parent)
                        parent[i] = depth ? stack[depth - 1] : UINT32_MAX;
                (void)proto_obj_u64(nodek[i].k[PROTO_NODE_CHILDREN], &kids);
                if (kids > 0) {
                        if (kids >= n)
                                return -EBADMSG;
                        stack[depth] = i;
                        left[depth] = (uint32_t)kids;
                        depth++;
                }
        }
        while (depth > 0 && left[depth - 1] == 0)
                depth--;
        return depth > 0 ? -EBADMSG : (int)ncols;
}

static const struct proto_key part_keys[GPUIPC__PART_KEYS] = {
        [GPUIPC__PART_KIND] = PROTO_KEY("kind"),
        [GPUIPC__PART_SIZE] = PROTO_KEY("size"),
        [GPUIPC__PART_DEVICE] = PROTO_KEY("device"),
        [GPUIPC__PART_COPIED] = PROTO_KEY("copied"),
};

/* A str of at most max bytes, or absent: its bytes with a NUL into *bytes. */
static int opt_str_obj(const msgpack_object *o, size_t max, size_t *bytes)
{
        if (o && o->type == MSGPACK_OBJECT_NIL)
                o = NULL;
        if (o && (o->type != MSGPACK_OBJECT_STR || o->via.str.size > max))
                return -EBADMSG;
        *bytes += str_len(o) + 1;
        return 0;
}

/* Part p's fields into k. */
static int parse_part(const msgpack_object *p, const msgpack_object **k,
                      struct gpuipc__batchrec *br)
{
        const msgpack_object *kind_s;
        uint64_t size;
        int kind;

        if (p->type != MSGPACK_OBJECT_MAP)
                return -EBADMSG;
        proto_get_n(p, part_keys, GPUIPC__PART_KEYS, k);
        kind_s = k[GPUIPC__PART_KIND];
        kind = kind_s && kind_s->type == MSGPACK_OBJECT_STR
               ? proto_kind_from_name(kind_s->via.str.ptr, kind_s->via.str.size) : -1;
        if (kind < 0 || kind >= GPUIPC_KIND_BATCH ||
            proto_obj_u64(k[GPUIPC__PART_SIZE], &size) < 0 ||
            opt_str_obj(k[GPUIPC__PART_DEVICE], DEVICE_MAX, &br->string_bytes) < 0 ||
            opt_str_obj(k[GPUIPC__PART_COPIED], PROTO_USER_VALUE_MAX, &br->string_bytes) < 0)
                return -EBADMSG;
        if (!br->copied && str_len(k[GPUIPC__PART_COPIED]) > 0)
                br->copied = k[GPUIPC__PART_COPIED];
        return 0;
}

/* A node's fields (checked by proto_arrow_check): the bytes of its
 * strings. */
static void count_node(const struct proto_arrow_node *n, struct gpuipc__batchrec *br)
{
        br->string_bytes += str_len(n->k[PROTO_NODE_NAME]) + str_len(n->k[PROTO_NODE_FORMAT]) + 2;
        br->n_meta_ptrs += meta_map(n->k[PROTO_NODE_METADATA], &br->string_bytes);
}

/* The key tables for n_nodes nodes and n_parts parts, in one block. */
static int alloc_keys(struct gpuipc__batchrec *br, uint32_t n_nodes, uint32_t n_parts)
{
        char *block = malloc((size_t)n_nodes * sizeof(*br->nodek) +
                             (size_t)n_parts * sizeof(*br->partk) + 1);

        if (!block)
                return -ENOMEM;
        br->nodek = n_nodes ? (struct proto_arrow_node *)(void *)block : NULL;
        br->partk = n_parts ? (struct gpuipc__partkeys *)(void *)
                              (block + (size_t)n_nodes * sizeof(*br->nodek)) : NULL;
        br->keys_block = block;
        return 0;
}

void gpuipc__batchrec_free(struct gpuipc__batchrec *br)
{
        if (!br)
                return;
        free(br->keys_block);
        br->keys_block = NULL;
        br->nodek = NULL;
        br->partk = NULL;
}

int gpuipc__batchrec_parse(const msgpack_object *reg, struct gpuipc__batchrec *br)
{
        const msgpack_object *parts = proto_get(reg, "parts"), *arrow, *cols = NULL;
        uint32_t nnodes = 0;
        char why[128];
        uint64_t count;
        int ncols = 0;

        memset(br, 0, sizeof(*br));
        if (proto_get_u64(reg, "n_parts", &count) < 0 || count > GPUIPC_BATCH_PARTS_MAX)
                return -EBADMSG;
        br->n_parts = (uint32_t)count;
        /* list records stop at the count */
        if (parts && parts->type != MSGPACK_OBJECT_NIL) {
                if (parts->type != MSGPACK_OBJECT_ARRAY || parts->via.array.size != count)
                        return -EBADMSG;
                br->parts = parts;
        }
        if (proto_get_map(reg, "arrow", &arrow) == 0) {
                if (proto_get_array(arrow, "columns", &cols) < 0 ||
                    cols->via.array.size > GPUIPC_BATCH_NODES_MAX)
                        return -EBADMSG;
                nnodes = cols->via.array.size;
        } else if (proto_get(reg, "arrow")) {
                return -EBADMSG;
        }
        if (alloc_keys(br, nnodes, br->parts ? br->n_parts : 0) < 0)
                return -ENOMEM;
        for (uint32_t i = 0; br->parts && i < br->n_parts; i++)
                if (parse_part(&parts->via.array.ptr[i], br->partk[i].k, br) < 0)
                        return -EBADMSG;
        if (cols) {
                /* The daemon's own checks, again: a record that passes them
                 * can be walked without running off its end. */
                if (proto_arrow_check(arrow, br->n_parts, br->nodek, why, sizeof(why)) < 0 ||
                    proto_get_u64(arrow, "rows", &br->rows) < 0)
                        return -EBADMSG;
                br->nodes = cols;
                br->metadata = proto_get(arrow, "metadata");
                if (br->metadata && br->metadata->type != MSGPACK_OBJECT_MAP)
                        br->metadata = NULL;
                /* libgpuipc's own key: host memory it copied at register. */
                if (opt_str_obj(proto_get(arrow, "copied"), PROTO_USER_VALUE_MAX,
                                &br->string_bytes) < 0)
                        return -EBADMSG;
                if (str_len(proto_get(arrow, "copied")) > 0)
                        br->copied = proto_get(arrow, "copied");
                for (uint32_t i = 0; i < nnodes; i++)
                        count_node(&br->nodek[i], br);
                ncols = tree(br->nodek, nnodes, NULL, NULL);
                if (ncols < 0)
                        return -EBADMSG;
        }
        br->struct_bytes = sizeof(gpuipc_batch_desc) +
                           (br->parts ? br->n_parts : 0) * sizeof(gpuipc_batch_part) +
                           nnodes * sizeof(gpuipc_batch_node) +
                           ((size_t)ncols + 1) / 2 * 2 * sizeof(uint32_t) +
                           2 * (size_t)br->n_meta_ptrs * sizeof(char *);
        return 0;
}

/* A node's fields into n, its strings at *pos and its metadata's pointers
 * at *ptrs. */
static void put_node(const struct proto_arrow_node *o, gpuipc_batch_node *n,
                     const char ***ptrs, char **pos)
{
        const msgpack_object *const *k = o->k, *bufs, *m;
        uint64_t u;

        bufs = k[PROTO_NODE_BUFFERS];
        m = k[PROTO_NODE_METADATA];
        if (proto_obj_u64(k[PROTO_NODE_FLAGS], &u) == 0)
                n->flags = (int64_t)u;
        if (proto_obj_u64(k[PROTO_NODE_LENGTH], &u) == 0)
                n->length = (int64_t)u;
        if (proto_obj_u64(k[PROTO_NODE_OFFSET], &u) == 0)
                n->offset = (int64_t)u;
        if (proto_obj_u64(k[PROTO_NODE_CHILDREN], &u) == 0)
                n->n_children = (uint32_t)u;
        (void)proto_obj_i64(k[PROTO_NODE_NULLS], &n->null_count);
        n->name = gpuipc__put_str(pos, k[PROTO_NODE_NAME]);
        n->format = gpuipc__put_str(pos, k[PROTO_NODE_FORMAT]);
        n->n_buffers = bufs->via.array.size;
        for (uint32_t i = 0; i < 3; i++) {
                int64_t v = -1;
                if (i < n->n_buffers)
                        (void)proto_obj_i64(&bufs->via.array.ptr[i], &v);
                n->buffers[i] = (int32_t)v;
        }
        if (m && m->type == MSGPACK_OBJECT_MAP && m->via.map.size > 0) {
                n->n_meta = m->via.map.size;
                n->meta_keys = *ptrs;
                n->meta_values = *ptrs + n->n_meta;
                for (uint32_t i = 0; i < n->n_meta; i++) {
                        (*ptrs)[i] = gpuipc__put_str(pos, &m->via.map.ptr[i].key);
                        (*ptrs)[n->n_meta + i] = gpuipc__put_str(pos, &m->via.map.ptr[i].val);
                }
                *ptrs += 2 * n->n_meta;
        }
}

const gpuipc_batch_desc *gpuipc__batchdesc_put(const struct gpuipc__batchrec *br, void *mem,
                                               char **pos)
{
        uint32_t parent[GPUIPC_BATCH_NODES_MAX];
        gpuipc_batch_desc *d = mem;
        uint32_t nparts = br->parts ? br->n_parts : 0;
        uint32_t nnodes = br->nodes ? br->nodes->via.array.size : 0;
        gpuipc_batch_part *parts = (gpuipc_batch_part *)(d + 1);
        gpuipc_batch_node *nodes = (gpuipc_batch_node *)(parts + nparts);
        uint32_t *columns = (uint32_t *)(nodes + nnodes);
        int ncols = br->nodes ? tree(br->nodek, nnodes, parent, columns) : 0;
        const char **ptrs = (const char **)(columns + ((size_t)ncols + 1) / 2 * 2);

        memset(d, 0, sizeof(*d));
        d->rows = br->rows;
        d->n_parts = br->n_parts;
        d->parts = nparts ? parts : NULL;
        for (uint32_t i = 0; i < nparts; i++) {
                const msgpack_object *const *k = br->partk[i].k;
                memset(&parts[i], 0, sizeof(parts[i]));
                parts[i].kind = (gpuipc_kind)proto_kind_from_name(
                        k[GPUIPC__PART_KIND]->via.str.ptr, k[GPUIPC__PART_KIND]->via.str.size);
                (void)proto_obj_u64(k[GPUIPC__PART_SIZE], &parts[i].size);
                parts[i].device = gpuipc__put_str(pos, k[GPUIPC__PART_DEVICE]);
        }
        d->n_nodes = nnodes;
        d->nodes = nnodes ? nodes : NULL;
        for (uint32_t i = 0; i < nnodes; i++) {
                memset(&nodes[i], 0, sizeof(nodes[i]));
                nodes[i].index = i;
                nodes[i].parent = parent[i];
                put_node(&br->nodek[i], &nodes[i], &ptrs, pos);
        }
        d->n_columns = (uint32_t)(ncols > 0 ? ncols : 0);
        d->columns = ncols > 0 ? columns : NULL;
        return d;
}

/* ---- accessors ---------------------------------------------------------- */

static const gpuipc_batch_desc *desc_of(const gpuipc_info *info)
{
        return info && info->kind == GPUIPC_KIND_BATCH ? info->batch : NULL;
}

size_t gpuipc_info_batch_parts(const gpuipc_info *info)
{
        const gpuipc_batch_desc *d = desc_of(info);

        return d ? d->n_parts : 0;
}

const gpuipc_batch_part *gpuipc_info_batch_part(const gpuipc_info *info, size_t i)
{
        const gpuipc_batch_desc *d = desc_of(info);

        return d && d->parts && i < d->n_parts ? &d->parts[i] : NULL;
}

uint64_t gpuipc_info_batch_rows(const gpuipc_info *info)
{
        const gpuipc_batch_desc *d = desc_of(info);

        return d ? d->rows : 0;
}

size_t gpuipc_info_batch_nodes(const gpuipc_info *info)
{
        const gpuipc_batch_desc *d = desc_of(info);

        return d ? d->n_nodes : 0;
}

const gpuipc_batch_node *gpuipc_info_batch_node(const gpuipc_info *info, size_t i)
{
        const gpuipc_batch_desc *d = desc_of(info);

        return d && i < d->n_nodes ? &d->nodes[i] : NULL;
}

size_t gpuipc_info_batch_columns(const gpuipc_info *info)
{
        const gpuipc_batch_desc *d = desc_of(info);

        return d ? d->n_columns : 0;
}

const gpuipc_batch_node *gpuipc_info_batch_column(const gpuipc_info *info, size_t i)
{
        const gpuipc_batch_desc *d = desc_of(info);

        return d && i < d->n_columns ? &d->nodes[d->columns[i]] : NULL;
}
