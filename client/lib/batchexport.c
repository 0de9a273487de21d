/* batchexport.c: a batch view's columns as Arrow C Data Interface structs.
 *
 * Every exported tree is one heap block: the child structs, their
 * children and buffers arrays, and, for a schema, its strings.  The
 * caller's own struct is the root.  Each struct of the tree has the
 * block as private_data and its own release callback, which releases
 * the children still alive and counts the struct off the block; the
 * block goes with the last struct, so children moved out of their
 * parent (as the specification allows) outlive it, and the callbacks
 * may run in any order and on any thread.  An array tree holds a
 * reference on the view (its buffers are the view's mappings); a schema
 * tree holds none.
 *
 * Before anything is exported, the description is checked against what
 * the formats say the buffers need, so that no exported pointer lets an
 * Arrow reader past the end of a mapped part.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "batchint.h"

/* The buffer of an absent non-validity buffer of no bytes (an empty
 * array's offsets or data): readable zeros rather than NULL. */
static const int64_t zeros[8];

struct tree {
        unsigned live;                  /* structs not yet released (atomic) */
        gpuipc_batch_view *v;           /* arrays: the reference */
        /* then the structs, pointer arrays and strings */
};

/* ---- checks ------------------------------------------------------------ */

struct span {
        uint32_t first, end;            /* nodes [first, end) */
        uint32_t nodes;                 /* structs in the tree (a batch: +1 root) */
        int device;                     /* of every part used: -1 host, -2 mixed,
                                         * -3 none */
        size_t strings;                 /* schema: bytes of its strings */
};

static int bad(gpuipc_batch_view *v, uint32_t i, const char *what)
{
        return gpuipc__fail(v->c, -EBADMSG, "the batch's array %u (\"%s\") %s", i,
                            v->desc->nodes[i].name, what);
}

/* The bytes the format says buffer b of node n needs, when it can tell. */
static int need_of(gpuipc_batch_view *v, const gpuipc_batch_node *n,
                   const struct gpuipc__arrow_layout *l, unsigned b, uint64_t *ret)
{
        int64_t last = 0;

        if (l->buf[b] == GPUIPC__AB_DATA32 || l->buf[b] == GPUIPC__AB_DATA64) {
                int32_t k = n->buffers[b - 1];
                size_t w = l->buf[b] == GPUIPC__AB_DATA64 ? 8 : 4;
                const struct gpuipc__bpart *p = k >= 0 ? &v->parts[k] : NULL;
                uint64_t at = ((uint64_t)n->offset + (uint64_t)n->length) * w;
                int32_t v32;
                if (!p || p->device >= 0 || p->size < at + w) {
                        *ret = 0;       /* a device's data: not read from here */
                        return 0;
                }
                if (w == 8) {
                        memcpy(&last, p->data + at, 8);
                } else {
                        memcpy(&v32, p->data + at, 4);
                        last = v32;
                }
        }
        return gpuipc__arrow_buf_size(l, b, n->offset, n->length, last, ret);
}

static int check_node(gpuipc_batch_view *v, uint32_t i, struct span *s)
{
        const gpuipc_batch_node *n = &v->desc->nodes[i];
        struct gpuipc__arrow_layout l;
        const char *why;
        uint64_t need;

        if (gpuipc__arrow_layout(n->format, &l, &why) < 0)
                return gpuipc__fail(v->c, -ENOTSUP, "the batch's array %u has format \"%s\", "
                                    "%s, which this library cannot export", i, n->format, why);
        if (n->n_buffers != l.n_buffers ||
            (l.children >= 0 && n->n_children != (uint32_t)l.children))
                return bad(v, i, "has buffers or children its format does not have");
        if (n->length < 0 || n->offset < 0 || n->offset > INT64_MAX - n->length)
                return bad(v, i, "has a negative length or offset");
        for (unsigned b = 0; b < n->n_buffers; b++) {
                int32_t k = n->buffers[b];
                if (need_of(v, n, &l, b, &need) < 0)
                        return bad(v, i, "needs a buffer larger than 2^63 bytes");
                if (k < 0) {
                        if (l.buf[b] == GPUIPC__AB_VALIDITY ? n->null_count > 0
                                                            : need > sizeof(zeros))
                                return bad(v, i, "lacks a buffer it needs");
                        continue;
                }
                if (v->parts[k].size < need)
                        return bad(v, i, "has a buffer smaller than its length needs");
                if (s->device == -3)
                        s->device = v->parts[k].device;
                else if (s->device != v->parts[k].device)
                        s->device = -2;
        }
        s->strings += strlen(n->name) + strlen(n->format) + 2;
        if (n->n_meta)
                s->strings += gpuipc__meta_encoded_len(n->n_meta, n->meta_keys,
                                                       n->meta_values);
        return 0;
}

/* Checks the subtree of node i, returning the node after it. */
static int check_tree(gpuipc_batch_view *v, uint32_t i, struct span *s, uint32_t *ret_end)
{
        uint32_t j = i + 1;
        int r = check_node(v, i, s);

        s->nodes++;
        for (uint32_t k = 0; r == 0 && k < v->desc->nodes[i].n_children; k++) {
                if (j >= v->desc->n_nodes)
                        return bad(v, i, "has more children than the batch has arrays");
                r = check_tree(v, j, s, &j);
        }
        *ret_end = j;
        return r;
}

/* What column (-1: the whole batch) exports: its nodes, their device. */
static int span_of(gpuipc_batch_view *v, int column, struct span *s)
{
        const gpuipc_batch_desc *d = v->desc;
        int r = 0;

        memset(s, 0, sizeof(*s));
        s->device = -3;
        if (column < -1 || column >= (int)d->n_columns || !d->nodes)
                return gpuipc__fail(v->c, -EINVAL, "no column %d in a batch of %u", column,
                                    d->n_columns);
        if (column >= 0) {
                s->first = d->columns[column];
                return check_tree(v, s->first, s, &s->end);
        }
        s->nodes = 1;                   /* the struct of the columns */
        s->strings = 3 + 1;             /* "+s", "" */
        if (v->info->n_user)
                s->strings += gpuipc__meta_encoded_len(v->info->n_user, v->info->user_keys,
                                                       v->info->user_values);
        s->end = 0;
        for (uint32_t c = 0; r == 0 && c < d->n_columns; c++)
                r = check_tree(v, d->columns[c], s, &s->end);
        return r;
}

/* ---- arrays -------------------------------------------------------------- */

struct afill {
        gpuipc_batch_view *v;
        struct tree *t;
        struct ArrowArray *kids;        /* the structs below the root, in order */
        struct ArrowArray **ptrs;
        const void **bufs;
        unsigned nkid, nptr, nbuf;
};

static void array_release(struct ArrowArray *a)
{
        struct tree *t = a->private_data;

        for (int64_t i = 0; i < a->n_children; i++)
                if (a->children[i]->release)
                        a->children[i]->release(a->children[i]);
        a->release = NULL;
        if (__atomic_sub_fetch(&t->live, 1, __ATOMIC_ACQ_REL) == 0) {
                gpuipc_batch_view *v = t->v;
                free(t);
                gpuipc__batch_view_unref(v, false);
        }
}

static void array_init(struct afill *f, struct ArrowArray *a, int64_t n_buffers,
                       int64_t n_children)
{
        memset(a, 0, sizeof(*a));
        a->n_buffers = n_buffers;
        a->n_children = n_children;
        a->buffers = f->bufs + f->nbuf;
        f->nbuf += (unsigned)n_buffers;
        a->children = n_children ? f->ptrs + f->nptr : NULL;
        f->nptr += (unsigned)n_children;
        a->release = array_release;
        a->private_data = f->t;
}

/* Node i into a, its descendants after; returns the node after them. */
static uint32_t fill_array(struct afill *f, struct ArrowArray *a, uint32_t i)
{
        const gpuipc_batch_node *n = &f->v->desc->nodes[i];
        struct gpuipc__arrow_layout l;
        const char *why;
        uint32_t j = i + 1;

        (void)gpuipc__arrow_layout(n->format, &l, &why);        /* checked */
        array_init(f, a, n->n_buffers, n->n_children);
        a->length = n->length;
        a->null_count = n->null_count;
        a->offset = n->offset;
        for (unsigned b = 0; b < n->n_buffers; b++)
                a->buffers[b] = n->buffers[b] >= 0 ? (const void *)f->v->parts[n->buffers[b]].data
                                : l.buf[b] == GPUIPC__AB_VALIDITY ? NULL : (const void *)zeros;
        for (uint32_t k = 0; k < n->n_children; k++) {
                a->children[k] = &f->kids[f->nkid++];
                j = fill_array(f, a->children[k], j);
        }
        return j;
}

static int export_array(gpuipc_batch_view *v, int column, const struct span *s,
                        struct ArrowArray *out)
{
        unsigned nkids = s->nodes - 1, nbufs = 3 * s->nodes;
        struct afill f = { .v = v };

        f.t = calloc(1, sizeof(*f.t) + nkids * sizeof(struct ArrowArray) +
                        nkids * sizeof(struct ArrowArray *) + nbufs * sizeof(void *));
        if (!f.t)
                return gpuipc__fail(v->c, -ENOMEM, "out of memory");
        f.kids = (struct ArrowArray *)(f.t + 1);
        f.ptrs = (struct ArrowArray **)(f.kids + nkids);
        f.bufs = (const void **)(f.ptrs + nkids);
        f.t->live = s->nodes;
        f.t->v = v;
        __atomic_add_fetch(&v->refs, 1, __ATOMIC_ACQ_REL);
        if (column >= 0) {
                (void)fill_array(&f, out, s->first);
                return 0;
        }
        array_init(&f, out, 1, v->desc->n_columns);
        out->length = (int64_t)v->desc->rows;
        out->buffers[0] = NULL;
        for (uint32_t c = 0; c < v->desc->n_columns; c++) {
                out->children[c] = &f.kids[f.nkid++];
                (void)fill_array(&f, out->children[c], v->desc->columns[c]);
        }
        return 0;
}

/* ---- schemas -------------------------------------------------------------- */

struct sfill {
        gpuipc_batch_view *v;
        struct tree *t;
        struct ArrowSchema *kids;
        struct ArrowSchema **ptrs;
        char *str;
        unsigned nkid, nptr;
};

static void schema_release(struct ArrowSchema *s)
{
        struct tree *t = s->private_data;

        for (int64_t i = 0; i < s->n_children; i++)
                if (s->children[i]->release)
                        s->children[i]->release(s->children[i]);
        s->release = NULL;
        if (__atomic_sub_fetch(&t->live, 1, __ATOMIC_ACQ_REL) == 0)
                free(t);
}

static const char *put_str(struct sfill *f, const char *s)
{
        size_t n = strlen(s) + 1;
        char *p = memcpy(f->str, s, n);

        f->str += n;
        return p;
}

static void schema_init(struct sfill *f, struct ArrowSchema *s, const char *format,
                        const char *name, uint32_t n_meta, const char *const *keys,
                        const char *const *values, int64_t n_children)
{
        memset(s, 0, sizeof(*s));
        s->format = put_str(f, format);
        s->name = put_str(f, name);
        if (n_meta) {
                gpuipc__meta_encode(f->str, n_meta, keys, values);
                s->metadata = f->str;
                f->str += gpuipc__meta_encoded_len(n_meta, keys, values);
        }
        s->n_children = n_children;
        s->children = n_children ? f->ptrs + f->nptr : NULL;
        f->nptr += (unsigned)n_children;
        s->release = schema_release;
        s->private_data = f->t;
}

static uint32_t fill_schema(struct sfill *f, struct ArrowSchema *s, uint32_t i)
{
        const gpuipc_batch_node *n = &f->v->desc->nodes[i];
        uint32_t j = i + 1;

        schema_init(f, s, n->format, n->name, n->n_meta, n->meta_keys, n->meta_values,
                    n->n_children);
        s->flags = n->flags;
        for (uint32_t k = 0; k < n->n_children; k++) {
                s->children[k] = &f->kids[f->nkid++];
                j = fill_schema(f, s->children[k], j);
        }
        return j;
}

static int export_schema(gpuipc_batch_view *v, int column, const struct span *s,
                         struct ArrowSchema *out)
{
        unsigned nkids = s->nodes - 1;
        struct sfill f = { .v = v };
        const gpuipc_info *info = v->info;

        f.t = calloc(1, sizeof(*f.t) + nkids * sizeof(struct ArrowSchema) +
                        nkids * sizeof(struct ArrowSchema *) + s->strings);
        if (!f.t)
                return gpuipc__fail(v->c, -ENOMEM, "out of memory");
        f.kids = (struct ArrowSchema *)(f.t + 1);
        f.ptrs = (struct ArrowSchema **)(f.kids + nkids);
        f.str = (char *)(f.ptrs + nkids);
        f.t->live = s->nodes;
        if (column >= 0) {
                (void)fill_schema(&f, out, s->first);
                return 0;
        }
        schema_init(&f, out, "+s", "", info->n_user, info->user_keys, info->user_values,
                    v->desc->n_columns);
        for (uint32_t c = 0; c < v->desc->n_columns; c++) {
                out->children[c] = &f.kids[f.nkid++];
                (void)fill_schema(&f, out->children[c], v->desc->columns[c]);
        }
        return 0;
}

/* ---- the calls ------------------------------------------------------------- */

/* Both structs, or neither: the schema goes again when the array fails. */
static int export_both(gpuipc_batch_view *v, int column, const struct span *s,
                       struct ArrowSchema *ret_schema, struct ArrowArray *ret_array)
{
        struct ArrowSchema schema;
        int r;

        if (ret_schema) {
                r = export_schema(v, column, s, &schema);
                if (r < 0)
                        return r;
        }
        if (ret_array) {
                r = export_array(v, column, s, ret_array);
                if (r < 0) {
                        if (ret_schema)
                                schema.release(&schema);
                        return r;
                }
        }
        if (ret_schema)
                *ret_schema = schema;
        return 0;
}

int gpuipc_batch_view_export(gpuipc_batch_view *v, int column, struct ArrowSchema *ret_schema,
                             struct ArrowArray *ret_array)
{
        struct span s;
        int r;

        if (!v || (!ret_schema && !ret_array))
                return -EINVAL;
        r = span_of(v, column, &s);
        if (r < 0)
                return r;
        if (ret_array && s.device != -1 && s.device != -3)
                return gpuipc__fail(v->c, -EINVAL, "the batch has device parts: export it "
                                    "with gpuipc_batch_view_export_device()");
        return export_both(v, column, &s, ret_schema, ret_array);
}

int gpuipc_batch_view_export_device(gpuipc_batch_view *v, int column,
                                    struct ArrowSchema *ret_schema,
                                    struct ArrowDeviceArray *ret_array)
{
        struct span s;
        int r;

        if (!v || (!ret_schema && !ret_array))
                return -EINVAL;
        r = span_of(v, column, &s);
        if (r < 0)
                return r;
        if (s.device == -2)
                return gpuipc__fail(v->c, -EINVAL, "the batch's parts are on several devices "
                                    "(or host and device): one ArrowDeviceArray cannot hold "
                                    "them");
        if (ret_array)
                memset(ret_array, 0, sizeof(*ret_array));
        r = export_both(v, column, &s, ret_schema, ret_array ? &ret_array->array : NULL);
        if (r < 0 || !ret_array)
                return r;
        if (s.device >= 0) {
                ret_array->device_type = ARROW_DEVICE_CUDA;
                ret_array->device_id = s.device;
                ret_array->sync_event = v->event ? (void *)&v->event : NULL;
        } else {
                ret_array->device_type = ARROW_DEVICE_CPU;
                ret_array->device_id = -1;
        }
        return 0;
}
