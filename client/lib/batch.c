/* batch.c: building a batch from Arrow C Data Interface structs.
 *
 * The builder reads the caller's ArrowSchema and ArrowArray trees into a
 * flat pre-order list of nodes (format, name, lengths, children count,
 * buffer references) and a list of distinct buffers, each with the size
 * its format, offset and length give it.  Buffers that start at the same
 * address on the same device are one buffer (the largest extent), as
 * Arrow producers often share them between arrays.  Nothing is copied or
 * exported here: gpuipc_batch_register() does that.  Each add either
 * succeeds whole or leaves the batch as it was.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchint.h"

int gpuipc_batch_new(gpuipc_batch **ret_batch)
{
        gpuipc_batch *b;

        if (!ret_batch)
                return -EINVAL;
        b = calloc(1, sizeof(*b));
        if (!b)
                return -ENOMEM;
        b->rows = -1;
        b->event_device = -1;
        *ret_batch = b;
        return 0;
}

static void node_clear(struct gpuipc__bnode *n)
{
        free(n->name);
        free(n->format);
        gpuipc__meta_free(&n->meta);
}

void gpuipc_batch_free(gpuipc_batch *b)
{
        if (!b)
                return;
        for (uint32_t i = 0; i < b->n_nodes; i++)
                node_clear(&b->nodes[i]);
        free(b->nodes);
        free(b->bufs);
        gpuipc__meta_free(&b->meta);
        free(b);
}

const char *gpuipc_batch_errmsg(const gpuipc_batch *b)
{
        return b ? b->errmsg : "";
}

static int bfail(gpuipc_batch *b, int err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int bfail(gpuipc_batch *b, int err, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(b->errmsg, sizeof(b->errmsg), fmt, ap);
        va_end(ap);
        return err;
}

/* One add: what it started from (to roll back to), and where it is. */
struct walk {
        gpuipc_batch *b;
        uint32_t node0, buf0, columns0;
        int device;                     /* -1: host */
        char where[96];                 /* "column 2 (\"price\")", for messages */
};

static void walk_begin(struct walk *w, gpuipc_batch *b, int device)
{
        memset(w, 0, sizeof(*w));
        w->b = b;
        w->node0 = b->n_nodes;
        w->buf0 = b->n_bufs;
        w->columns0 = b->n_columns;
        w->device = device;
        b->errmsg[0] = '\0';
}

static void walk_rollback(struct walk *w)
{
        gpuipc_batch *b = w->b;

        while (b->n_nodes > w->node0)
                node_clear(&b->nodes[--b->n_nodes]);
        b->n_bufs = w->buf0;
        b->n_columns = w->columns0;
}

int gpuipc__grow(void **p, unsigned *cap, unsigned need, size_t size)
{
        uint32_t n = *cap ? *cap * 2 : 16;
        void *q;

        if (need <= *cap)
                return 0;
        while (n < need)
                n *= 2;
        q = realloc(*p, (size_t)n * size);
        if (!q)
                return -ENOMEM;
        *p = q;
        *cap = n;
        return 0;
}

/* The last offset of a utf8, binary or list array: offsets[index]. */
static int last_offset(struct walk *w, const void *offsets, bool large, int64_t index,
                       int64_t *ret)
{
        uint64_t at = (uint64_t)(uintptr_t)offsets + (uint64_t)index * (large ? 8 : 4);
        char why[128];
        int32_t v32;
        int64_t v64;
        int r;

        if (w->device < 0) {
                if (large)
                        memcpy(&v64, (const void *)(uintptr_t)at, 8);
                else
                        memcpy(&v32, (const void *)(uintptr_t)at, 4);
        } else {
                r = gpuipc__cuda_read(at, w->device, large ? (void *)&v64 : (void *)&v32,
                                      large ? 8 : 4, why, sizeof(why));
                if (r < 0)
                        return bfail(w->b, r, "%s: cannot read its last offset from device %d: "
                                     "%s", w->where, w->device, why);
        }
        *ret = large ? v64 : v32;
        if (*ret < 0)
                return bfail(w->b, -EINVAL, "%s: its last offset is negative (%lld)", w->where,
                             (long long)*ret);
        return 0;
}

/* Buffer i of the array a, at offset and length, into node n. */
static int walk_buffer(struct walk *w, const struct gpuipc__arrow_layout *l,
                       const struct ArrowArray *a, int64_t offset, int64_t length,
                       unsigned i, struct gpuipc__bnode *n)
{
        gpuipc_batch *b = w->b;
        const void *p = a->buffers[i];
        int64_t last = 0;
        uint64_t size;
        int r;

        n->buf[i] = -1;
        if (l->buf[i] == GPUIPC__AB_DATA32 || l->buf[i] == GPUIPC__AB_DATA64) {
                const void *off = a->buffers[i - 1];
                if (off) {
                        r = last_offset(w, off, l->buf[i] == GPUIPC__AB_DATA64,
                                        offset + length, &last);
                        if (r < 0)
                                return r;
                } else if (length > 0) {
                        return bfail(b, -EINVAL, "%s: its offsets buffer is NULL", w->where);
                }
        }
        r = gpuipc__arrow_buf_size(l, i, offset, length, last, &size);
        if (r < 0)
                return bfail(b, -EINVAL, "%s: buffer %u would exceed 2^63 bytes", w->where, i);
        if (!p) {
                /* Only the validity bitmap of an array without nulls, and
                 * buffers of no bytes (an empty array's), may be absent. */
                if (l->buf[i] == GPUIPC__AB_VALIDITY && a->null_count > 0)
                        return bfail(b, -EINVAL, "%s: it has %lld nulls but no validity bitmap",
                                     w->where, (long long)a->null_count);
                if (l->buf[i] != GPUIPC__AB_VALIDITY && size > 0 &&
                    !(l->buf[i] == GPUIPC__AB_OFFSETS32 && length == 0) &&
                    !(l->buf[i] == GPUIPC__AB_OFFSETS64 && length == 0))
                        return bfail(b, -EINVAL, "%s: buffer %u is NULL", w->where, i);
                return 0;
        }
        if (size == 0)
                return 0;
        if ((uint64_t)(uintptr_t)p > UINT64_MAX - size)
                return bfail(b, -EINVAL, "%s: buffer %u wraps around the address space",
                             w->where, i);
        if (gpuipc__grow((void **)&b->bufs, &b->cap_bufs, b->n_bufs + 1, sizeof(*b->bufs)) < 0)
                return bfail(b, -ENOMEM, "out of memory");
        b->bufs[b->n_bufs] = (struct gpuipc__bbuf){ .ptr = (uint64_t)(uintptr_t)p,
                                                    .size = size, .device = w->device };
        n->buf[i] = (int32_t)b->n_bufs++;
        return 0;
}

/* Checks what the structs say about themselves before anything is read. */
static int walk_check(struct walk *w, const struct ArrowSchema *s, const struct ArrowArray *a,
                      unsigned depth, struct gpuipc__arrow_layout *l)
{
        gpuipc_batch *b = w->b;
        const char *why;
        int r;

        if (!s || !a)
                return bfail(b, -EINVAL, "%s: a NULL schema or array", w->where);
        if (!s->release || !a->release)
                return bfail(b, -EINVAL, "%s: its %s was released (release is NULL)", w->where,
                             !s->release ? "schema" : "array");
        if (depth > GPUIPC__BATCH_DEPTH_MAX)
                return bfail(b, -E2BIG, "%s: nested more than %u deep", w->where,
                             GPUIPC__BATCH_DEPTH_MAX);
        if (s->dictionary || a->dictionary)
                return bfail(b, -ENOTSUP, "%s: dictionary-encoded arrays are not supported in "
                             "batches (decode the dictionary first)", w->where);
        r = gpuipc__arrow_layout(s->format, l, &why);
        if (r < 0)
                return bfail(b, r, "%s: format \"%s\" is %s%s", w->where,
                             s->format ? s->format : "(null)", why,
                             r == -ENOTSUP ? ", which batches do not support" : "");
        if (strlen(s->format) > PROTO_BATCH_FORMAT_MAX)
                return bfail(b, -E2BIG, "%s: its format is longer than %u bytes", w->where,
                             PROTO_BATCH_FORMAT_MAX);
        if (s->name && (strlen(s->name) > PROTO_BATCH_COLNAME_MAX ||
                        proto_utf8_valid(s->name, strlen(s->name)) != strlen(s->name)))
                return bfail(b, -E2BIG, "%s: its name is longer than %u bytes, or not UTF-8",
                             w->where, PROTO_BATCH_COLNAME_MAX);
        if (a->length < 0 || a->offset < 0 || a->null_count < -1 ||
            a->offset > INT64_MAX - a->length)
                return bfail(b, -EINVAL, "%s: negative length, offset or null_count", w->where);
        if (s->n_children != a->n_children || a->n_children < 0 ||
            (l->children >= 0 && a->n_children != l->children) ||
            (a->n_children > 0 && (!s->children || !a->children)))
                return bfail(b, -EINVAL, "%s: the schema has %lld children, the array %lld; "
                             "format \"%s\" takes %s", w->where, (long long)s->n_children,
                             (long long)a->n_children, s->format,
                             l->children < 0 ? "any number" : l->children ? "one" : "none");
        if (a->n_buffers != (int64_t)l->n_buffers || (l->n_buffers > 0 && !a->buffers))
                return bfail(b, -EINVAL, "%s: it has %lld buffers; format \"%s\" has %u",
                             w->where, (long long)a->n_buffers, s->format, l->n_buffers);
        if (b->n_nodes >= GPUIPC_BATCH_NODES_MAX)
                return bfail(b, -E2BIG, "more than %u arrays in one batch",
                             GPUIPC_BATCH_NODES_MAX);
        return 0;
}

/* Appends the array (s, a), seen at offset and length with null_count
 * (a column of a record batch: the struct's offset applied), and its
 * descendants. */
static int walk_node(struct walk *w, const struct ArrowSchema *s, const struct ArrowArray *a,
                     int64_t offset, int64_t length, int64_t null_count, unsigned depth)
{
        gpuipc_batch *b = w->b;
        struct gpuipc__arrow_layout l;
        struct gpuipc__bnode *n;
        uint32_t at;
        int r;

        r = walk_check(w, s, a, depth, &l);
        if (r < 0)
                return r;
        if (gpuipc__grow((void **)&b->nodes, &b->cap_nodes, b->n_nodes + 1, sizeof(*b->nodes)) < 0)
                return bfail(b, -ENOMEM, "out of memory");
        at = b->n_nodes++;
        n = &b->nodes[at];
        memset(n, 0, sizeof(*n));
        n->name = strdup(s->name ? s->name : "");
        n->format = strdup(s->format);
        if (!n->name || !n->format)
                return bfail(b, -ENOMEM, "out of memory");
        n->flags = s->flags;
        n->offset = offset;
        n->length = length;
        n->null_count = null_count;
        n->n_buffers = l.n_buffers;
        n->n_children = (uint32_t)a->n_children;
        r = gpuipc__meta_parse(s->metadata, &n->meta, b->errmsg, sizeof(b->errmsg));
        if (r < 0)
                return r;
        for (unsigned i = 0; i < l.n_buffers; i++) {
                r = walk_buffer(w, &l, a, offset, length, i, &b->nodes[at]);
                if (r < 0)
                        return r;
        }
        for (int64_t i = 0; i < a->n_children; i++) {
                const struct ArrowArray *ch = a->children[i];
                if (!ch || !s->children[i])
                        return bfail(b, -EINVAL, "%s: child %lld is NULL", w->where,
                                     (long long)i);
                /* Children keep their own offsets: a consumer applies the
                 * parent's as Arrow says. */
                r = walk_node(w, s->children[i], ch, ch->offset, ch->length, ch->null_count,
                              depth + 1);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Folds the buffers added since w began into the distinct ones: a buffer
 * at an address (and device) seen before is that one, grown to the larger
 * extent.  Fails with -E2BIG, changing nothing, past the part limit. */
static int walk_commit(struct walk *w)
{
        gpuipc_batch *b = w->b;
        uint32_t nnew = b->n_bufs - w->buf0, next = w->buf0;
        uint32_t *map = malloc((nnew ? nnew : 1) * sizeof(*map));
        uint64_t *grow_old = calloc(w->buf0 ? w->buf0 : 1, sizeof(*grow_old));

        if (!map || !grow_old) {
                free(map);
                free(grow_old);
                return bfail(b, -ENOMEM, "out of memory");
        }
        for (uint32_t j = w->buf0; j < b->n_bufs; j++) {
                const struct gpuipc__bbuf *x = &b->bufs[j];
                uint32_t k;
                for (k = 0; k < next; k++)
                        if (b->bufs[k].ptr == x->ptr && b->bufs[k].device == x->device)
                                break;
                if (k == next) {
                        b->bufs[next++] = *x;
                } else if (k >= w->buf0) {
                        if (x->size > b->bufs[k].size)
                                b->bufs[k].size = x->size;
                } else if (x->size > b->bufs[k].size && x->size > grow_old[k]) {
                        grow_old[k] = x->size;
                }
                map[j - w->buf0] = k;
        }
        if (next > GPUIPC_BATCH_PARTS_MAX) {
                free(map);
                free(grow_old);
                return bfail(b, -E2BIG, "more than %u distinct buffers in one batch",
                             GPUIPC_BATCH_PARTS_MAX);
        }
        for (uint32_t k = 0; k < w->buf0; k++)
                if (grow_old[k])
                        b->bufs[k].size = grow_old[k];
        for (uint32_t i = w->node0; i < b->n_nodes; i++)
                for (unsigned j = 0; j < b->nodes[i].n_buffers; j++)
                        if (b->nodes[i].buf[j] >= (int32_t)w->buf0)
                                b->nodes[i].buf[j] = (int32_t)map[b->nodes[i].buf[j] - w->buf0];
        b->n_bufs = next;
        free(map);
        free(grow_old);
        return 0;
}

/* One top-level column. */
static int add_one(struct walk *w, const struct ArrowSchema *s, const struct ArrowArray *a,
                   int64_t offset, int64_t length, int64_t null_count)
{
        gpuipc_batch *b = w->b;
        int64_t rows = b->rows >= 0 ? b->rows : length;

        snprintf(w->where, sizeof(w->where), "column %u (\"%.48s\")", b->n_columns,
                 s && s->name ? s->name : "");
        if (length != rows)
                return bfail(b, -EINVAL, "%s: %lld rows; the batch has %lld", w->where,
                             (long long)length, (long long)rows);
        b->n_columns++;
        return walk_node(w, s, a, offset, length, null_count, 0);
}

static int add_done(struct walk *w, int r, int64_t rows)
{
        if (r == 0)
                r = walk_commit(w);
        if (r < 0) {
                walk_rollback(w);
                return r;
        }
        w->b->rows = rows;
        return 0;
}

int gpuipc_batch_add_column(gpuipc_batch *b, const struct ArrowSchema *schema,
                            const struct ArrowArray *array, int device)
{
        struct walk w;
        int r;

        if (!b)
                return -EINVAL;
        if (device < -1)
                return bfail(b, -EINVAL, "invalid device %d", device);
        if (!schema || !array)
                return bfail(b, -EINVAL, "schema or array is NULL");
        walk_begin(&w, b, device);
        r = add_one(&w, schema, array, array->offset, array->length, array->null_count);
        return add_done(&w, r, array->length);
}

/* The structs gpuipc_batch_add_buffer() describes are its own, never released. */
static void keep_schema(struct ArrowSchema *s)
{
        s->release = NULL;
}

static void keep_array(struct ArrowArray *a)
{
        a->release = NULL;
}

int gpuipc_batch_add_buffer(gpuipc_batch *b, const char *name, const char *format,
                            int64_t length, int64_t null_count, const void *validity,
                            const void *data, int device)
{
        const void *buffers[2] = { validity, data };
        struct ArrowSchema s = {
                .format = format, .name = name, .release = keep_schema,
                .flags = validity ? ARROW_FLAG_NULLABLE : 0,
        };
        struct ArrowArray a = {
                .length = length, .null_count = null_count, .n_buffers = 2,
                .buffers = buffers, .release = keep_array,
        };

        if (!b)
                return -EINVAL;
        if (!format)
                return bfail(b, -EINVAL, "format is NULL");
        return gpuipc_batch_add_column(b, &s, &a, device);
}

int gpuipc_batch_add_buffers(gpuipc_batch *b, size_t n, const char *const *names,
                             const char *const *formats, const int64_t *lengths,
                             const void *const *data, int device)
{
        struct walk w;
        int r = 0;

        if (!b)
                return -EINVAL;
        if (device < -1)
                return bfail(b, -EINVAL, "invalid device %d", device);
        if (n == 0)
                return 0;
        if (!names || !formats || !lengths || !data)
                return bfail(b, -EINVAL, "names, formats, lengths or data is NULL");
        walk_begin(&w, b, device);
        for (size_t i = 0; i < n && r == 0; i++) {
                const void *buffers[2] = { NULL, data[i] };
                struct ArrowSchema s = { .format = formats[i], .name = names[i],
                                         .release = keep_schema };
                struct ArrowArray a = { .length = lengths[i], .n_buffers = 2,
                                        .buffers = buffers, .release = keep_array };

                /* the batch's row count is set at the end: check it here,
                 * naming the column by its place in the batch, as add_one() */
                if (!formats[i])
                        r = bfail(b, -EINVAL, "column %u: format is NULL", b->n_columns);
                else if (lengths[i] != lengths[0])
                        r = bfail(b, -EINVAL, "column %u (\"%.48s\"): %lld rows; the batch "
                                  "has %lld", b->n_columns, names[i] ? names[i] : "",
                                  (long long)lengths[i], (long long)lengths[0]);
                else
                        r = add_one(&w, &s, &a, 0, lengths[i], 0);
        }
        return add_done(&w, r, lengths[0]);
}

/* The children of struct (s, a) as columns, with its offset applied. */
static int add_struct(gpuipc_batch *b, const struct ArrowSchema *s, const struct ArrowArray *a,
                      int device)
{
        struct gpuipc__meta meta = { 0 };
        struct walk w;
        int r = 0;

        if (!s || !a)
                return bfail(b, -EINVAL, "schema or array is NULL");
        walk_begin(&w, b, device);
        snprintf(w.where, sizeof(w.where), "the record batch");
        if (!s->release || !a->release)
                return bfail(b, -EINVAL, "the record batch's %s was released (release is NULL)",
                             !s->release ? "schema" : "array");
        if (!s->format || strcmp(s->format, "+s") != 0 || s->n_children != a->n_children ||
            a->n_children < 0 || a->length < 0 || a->offset < 0 ||
            (a->n_children > 0 && (!s->children || !a->children)))
                return bfail(b, -EINVAL, "a record batch is a struct array (\"+s\") whose "
                             "schema and array have as many children");
        if (a->null_count > 0 || (a->null_count < 0 && a->n_buffers > 0 && a->buffers &&
                                  a->buffers[0]))
                return bfail(b, -EINVAL, "the record batch's struct has nulls");
        if (!b->meta_set) {
                r = gpuipc__meta_parse(s->metadata, &meta, b->errmsg, sizeof(b->errmsg));
                if (r < 0)
                        return r;
        }
        for (int64_t i = 0; i < a->n_children && r == 0; i++) {
                const struct ArrowArray *ch = a->children[i];
                if (ch && (ch->offset < 0 || ch->length < a->offset + a->length ||
                           ch->offset > INT64_MAX - a->offset)) {
                        r = bfail(b, -EINVAL, "column %lld is shorter than its record batch",
                                  (long long)i);
                        break;
                }
                /* A slice of a column has a null count of its own, which
                 * only 0 tells without counting. */
                r = add_one(&w, s->children[i], ch, ch ? ch->offset + a->offset : 0, a->length,
                            !ch || ch->null_count == 0 || (a->offset == 0 &&
                                                           ch->length == a->length)
                            ? (ch ? ch->null_count : 0) : -1);
        }
        r = add_done(&w, r, a->n_children > 0 ? a->length : b->rows);
        if (r == 0 && !b->meta_set) {
                gpuipc__meta_free(&b->meta);
                b->meta = meta;
                b->meta_set = true;
        } else {
                gpuipc__meta_free(&meta);
        }
        return r;
}

int gpuipc_batch_add_record_batch(gpuipc_batch *b, const struct ArrowSchema *schema,
                                  const struct ArrowArray *array)
{
        if (!b)
                return -EINVAL;
        return add_struct(b, schema, array, -1);
}

int gpuipc_batch_add_device_record_batch(gpuipc_batch *b, const struct ArrowSchema *schema,
                                         const struct ArrowDeviceArray *array)
{
        void *event = NULL;
        int device, r;

        if (!b)
                return -EINVAL;
        if (!array)
                return bfail(b, -EINVAL, "array is NULL");
        switch (array->device_type) {
        case ARROW_DEVICE_CPU:
                device = -1;
                break;
        case ARROW_DEVICE_CUDA_HOST:    /* pinned or managed: host code reads it */
        case ARROW_DEVICE_CUDA_MANAGED:
        case ARROW_DEVICE_CUDA:
                if (array->device_id < 0 || array->device_id > 1024)
                        return bfail(b, -EINVAL, "invalid CUDA device_id %lld",
                                     (long long)array->device_id);
                device = array->device_type == ARROW_DEVICE_CUDA ? (int)array->device_id : -1;
                if (array->sync_event)
                        event = *(void *const *)array->sync_event;
                break;
        default:
                return bfail(b, -ENOTSUP, "device_type %d: batches take CPU and CUDA memory",
                             (int)array->device_type);
        }
        if (event && b->event && event != b->event)
                return bfail(b, -EINVAL, "the batch has an event already (one per batch)");
        r = add_struct(b, schema, &array->array, device);
        if (r == 0 && event) {
                b->event = event;
                b->event_device = (int)array->device_id;
        }
        return r;
}

int gpuipc_batch_set_event(gpuipc_batch *b, void *event, int device)
{
        if (!b)
                return -EINVAL;
        if (event && device < 0)
                return bfail(b, -EINVAL, "an event needs the CUDA device it was recorded on");
        b->event = event;
        b->event_device = event ? device : -1;
        return 0;
}

int gpuipc_batch_set_metadata(gpuipc_batch *b, uint32_t n, const char *const *keys,
                              const char *const *values)
{
        int r;

        if (!b)
                return -EINVAL;
        b->errmsg[0] = '\0';
        r = gpuipc__meta_set(&b->meta, n, keys, values, NULL, NULL, b->errmsg,
                             sizeof(b->errmsg));
        if (r == 0)
                b->meta_set = true;
        return r;
}
