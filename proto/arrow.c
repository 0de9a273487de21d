/* arrow.c: the structure checks of a batch's arrow description
 * (docs/protocol.md, "Batches").  The daemon keeps the description as it
 * came; these checks are what it promises every reader of it: a tree that
 * can be walked without running off the end, part indexes that exist, and
 * sizes within the wire limits. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"

#define INT63_LIMIT (UINT64_C(1) << 63)       /* lengths and offsets are int64 in Arrow */

/* How deep o nests: 1 for a map or an array with nothing nested in it, 0 for
 * any other value.  Bounded by the frame check's PROTO_MAX_DEPTH.  Sets
 * *bad_str when a str in o, a key or a value, is not well-formed UTF-8:
 * the daemon returns keys it does not know as they came. */
static unsigned depth_of(const msgpack_object *o, bool *bad_str)
{
        unsigned d = 0, k;

        if (o->type == MSGPACK_OBJECT_STR) {
                if (proto_utf8_valid(o->via.str.ptr, o->via.str.size) != o->via.str.size)
                        *bad_str = true;
                return 0;
        }
        if (o->type == MSGPACK_OBJECT_ARRAY) {
                for (uint32_t i = 0; i < o->via.array.size; i++) {
                        k = depth_of(&o->via.array.ptr[i], bad_str);
                        d = k > d ? k : d;
                }
                return d + 1;
        }
        if (o->type == MSGPACK_OBJECT_MAP) {
                for (uint32_t i = 0; i < o->via.map.size; i++) {
                        k = depth_of(&o->via.map.ptr[i].key, bad_str);
                        d = k > d ? k : d;
                        k = depth_of(&o->via.map.ptr[i].val, bad_str);
                        d = k > d ? k : d;
                }
                return d + 1;
        }
        return 0;
}

/* A uint below 2^63 (o from proto_get_n(): NULL when absent); 0 when
 * absent and not required. */
static int get_u63(const msgpack_object *o, bool required, uint64_t *ret)
{
        if (!o && !required) {
                *ret = 0;
                return 0;
        }
        if (proto_obj_u64(o, ret) < 0 || *ret >= INT63_LIMIT)
                return -EINVAL;
        return 0;
}

static bool printable_ascii(const char *s, size_t len)
{
        for (size_t i = 0; i < len; i++)
                if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
                        return false;
        return true;
}

static const struct proto_key node_keys[PROTO_NODE_KEYS] = {
        [PROTO_NODE_NAME] = PROTO_KEY("name"),
        [PROTO_NODE_FORMAT] = PROTO_KEY("format"),
        [PROTO_NODE_FLAGS] = PROTO_KEY("flags"),
        [PROTO_NODE_LENGTH] = PROTO_KEY("length"),
        [PROTO_NODE_NULLS] = PROTO_KEY("null_count"),
        [PROTO_NODE_OFFSET] = PROTO_KEY("offset"),
        [PROTO_NODE_CHILDREN] = PROTO_KEY("children"),
        [PROTO_NODE_BUFFERS] = PROTO_KEY("buffers"),
        [PROTO_NODE_METADATA] = PROTO_KEY("metadata"),
};

static bool is_type(const msgpack_object *o, msgpack_object_type t)
{
        return o && o->type == t;
}

/* The fields of column node i, read in one pass into k (every reader of a
 * batch checks every node); its children count into *ret_children and the
 * parts it names into used (n_parts bits). */
static int check_node(const msgpack_object *node, uint32_t i, uint32_t n_parts, uint8_t *used,
                      const msgpack_object **k, uint64_t *ret_children, char *why,
                      size_t why_len)
{
        const msgpack_object *name, *format, *buffers, *meta;
        uint64_t length, v;
        int64_t nulls;
        const char *s;
        size_t len;
        char what[48];

        if (node->type != MSGPACK_OBJECT_MAP)
                return proto_invalid(why, why_len, "arrow.columns[%u] must be a map", i);
        proto_get_n(node, node_keys, PROTO_NODE_KEYS, k);
        name = k[PROTO_NODE_NAME];
        s = is_type(name, MSGPACK_OBJECT_STR) ? name->via.str.ptr : NULL;
        len = s ? name->via.str.size : 0;
        if (!is_type(name, MSGPACK_OBJECT_STR) || len > PROTO_BATCH_COLNAME_MAX ||
            (len && memchr(s, '\0', len)) || proto_utf8_valid(s, len) != len)
                return proto_invalid(why, why_len, "arrow.columns[%u].name must be a str of at "
                                     "most %u bytes of UTF-8 without NUL (it may be empty)", i,
                                     PROTO_BATCH_COLNAME_MAX);
        format = k[PROTO_NODE_FORMAT];
        s = is_type(format, MSGPACK_OBJECT_STR) ? format->via.str.ptr : NULL;
        len = s ? format->via.str.size : 0;
        if (!s || len == 0 || len > PROTO_BATCH_FORMAT_MAX || !printable_ascii(s, len))
                return proto_invalid(why, why_len, "arrow.columns[%u].format must be an Arrow "
                                     "format string of 1 to %u bytes of printable ASCII", i,
                                     PROTO_BATCH_FORMAT_MAX);
        if (get_u63(k[PROTO_NODE_FLAGS], false, &v) < 0)
                return proto_invalid(why, why_len, "arrow.columns[%u].flags must be a uint "
                                     "below 2^63", i);
        if (get_u63(k[PROTO_NODE_LENGTH], true, &length) < 0)
                return proto_invalid(why, why_len, "arrow.columns[%u].length must be a uint "
                                     "below 2^63 (it is required)", i);
        if (proto_obj_i64(k[PROTO_NODE_NULLS], &nulls) < 0 || nulls < -1 ||
            (nulls > 0 && (uint64_t)nulls > length))
                return proto_invalid(why, why_len, "arrow.columns[%u].null_count must be an "
                                     "int from -1 (unknown) to length (%llu)", i,
                                     (unsigned long long)length);
        if (get_u63(k[PROTO_NODE_OFFSET], false, &v) < 0)
                return proto_invalid(why, why_len, "arrow.columns[%u].offset must be a uint "
                                     "below 2^63", i);
        *ret_children = 0;
        if (k[PROTO_NODE_CHILDREN] && proto_obj_u64(k[PROTO_NODE_CHILDREN], ret_children) < 0)
                return proto_invalid(why, why_len, "arrow.columns[%u].children must be a uint",
                                     i);
        buffers = k[PROTO_NODE_BUFFERS];
        if (!is_type(buffers, MSGPACK_OBJECT_ARRAY) ||
            buffers->via.array.size > PROTO_BATCH_BUFFERS_MAX)
                return proto_invalid(why, why_len, "arrow.columns[%u].buffers must be an array "
                                     "of at most %u part indexes or -1 (it is required)", i,
                                     PROTO_BATCH_BUFFERS_MAX);
        for (uint32_t b = 0; b < buffers->via.array.size; b++) {
                int64_t p;
                if (proto_obj_i64(&buffers->via.array.ptr[b], &p) < 0 || p < -1 ||
                    p >= (int64_t)n_parts)
                        return proto_invalid(why, why_len, "arrow.columns[%u].buffers[%u] must "
                                             "be the index of a part (0 to %u) or -1", i, b,
                                             n_parts - 1);
                if (p >= 0)
                        used[p / 8] |= (uint8_t)(1u << (p % 8));
        }
        meta = k[PROTO_NODE_METADATA];
        if (!meta)
                return 0;
        if (meta->type != MSGPACK_OBJECT_MAP)
                return proto_invalid(why, why_len, "arrow.columns[%u].metadata must be a map of "
                                     "str to str", i);
        /* Formatted only when there is metadata. */
        snprintf(what, sizeof(what), "arrow.columns[%u].metadata", i);
        if (proto_strmap_check(meta, what, why, why_len) < 0)
                return -EINVAL;
        return 0;
}

int proto_arrow_check(const msgpack_object *arrow, uint32_t n_parts,
                      struct proto_arrow_node *ret_nodes, char *why, size_t why_len)
{
        /* open[k]: children still to come of the k-th open ancestor. */
        uint64_t open[PROTO_BATCH_NODES_MAX];
        uint8_t used[(PROTO_BATCH_PARTS_MAX + 7) / 8] = { 0 };
        const msgpack_object *cols, *meta;
        uint32_t n, depth = 0, owner = 0;
        uint32_t owners[PROTO_BATCH_NODES_MAX];
        uint64_t rows;
        bool bad_str = false;
        int r;

        if (arrow->type != MSGPACK_OBJECT_MAP)
                return proto_invalid(why, why_len, "arrow must be a map");
        if (n_parts == 0 || n_parts > PROTO_BATCH_PARTS_MAX)
                return proto_invalid(why, why_len, "a batch has 1 to %u parts",
                                     PROTO_BATCH_PARTS_MAX);
        if (depth_of(arrow, &bad_str) > PROTO_BATCH_ARROW_DEPTH)
                return proto_invalid(why, why_len, "arrow nests more than %u levels deep",
                                     PROTO_BATCH_ARROW_DEPTH);
        if (get_u63(proto_get(arrow, "rows"), true, &rows) < 0)
                return proto_invalid(why, why_len, "arrow.rows must be a uint below 2^63 (it "
                                     "is required)");
        r = proto_get_map(arrow, "metadata", &meta);
        if (r == -EINVAL)
                return proto_invalid(why, why_len, "arrow.metadata must be a map of str to str");
        if (r == 0 && proto_strmap_check(meta, "arrow.metadata", why, why_len) < 0)
                return -EINVAL;
        r = proto_get_array(arrow, "columns", &cols);
        if (r < 0)
                return proto_invalid(why, why_len, "arrow.columns must be an array of column "
                                     "nodes (it is required)");
        n = cols->via.array.size;
        if (n == 0 || n > PROTO_BATCH_NODES_MAX)
                return proto_invalid(why, why_len, "arrow.columns must hold 1 to %u nodes (got "
                                     "%u)", PROTO_BATCH_NODES_MAX, n);
        for (uint32_t i = 0; i < n; i++) {
                const msgpack_object *scratch[PROTO_NODE_KEYS];
                uint64_t children;

                r = check_node(&cols->via.array.ptr[i], i, n_parts, used,
                               ret_nodes ? ret_nodes[i].k : scratch, &children, why, why_len);
                if (r < 0)
                        return r;
                /* Node i fills one slot of the innermost open node. */
                if (depth > 0)
                        open[depth - 1]--;
                if (children > n - 1 - i)
                        return proto_invalid(why, why_len, "arrow.columns[%u] has %llu "
                                             "children but only %u nodes follow it", i,
                                             (unsigned long long)children, n - 1 - i);
                if (children > 0) {
                        owners[depth] = i;
                        open[depth++] = children;
                }
                while (depth > 0 && open[depth - 1] == 0)
                        depth--;
        }
        if (depth > 0) {
                owner = owners[depth - 1];
                return proto_invalid(why, why_len, "arrow.columns[%u] has %llu children too "
                                     "many: the array ends inside its subtree", owner,
                                     (unsigned long long)open[depth - 1]);
        }
        for (uint32_t p = 0; p < n_parts; p++)
                if (!(used[p / 8] & (1u << (p % 8))))
                        return proto_invalid(why, why_len, "parts[%u] is named by no column "
                                             "node's buffers", p);
        /* After the nodes' own checks, which name the node; this is what
         * is left: keys the daemon does not know and their values. */
        if (bad_str)
                return proto_invalid(why, why_len, "every str in arrow, keys included, must be "
                                     "well-formed UTF-8");
        return 0;
}
