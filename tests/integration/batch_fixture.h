/* batch_fixture.h: a record batch of every kind of column the batch tests
 * use, built by hand as an Arrow producer exports one, and the checks a
 * consumer makes of what it imports.  Header-only: integ_batch_client.c
 * and helper-batch.c include it.
 *
 * Columns, FX_ROWS rows, each value a function of its physical index p:
 *   0 "i32"  i      int32 3p - 7
 *   1 "f64"  g      double p / 2
 *   2 "flag" b      boolean, p % 3 == 0
 *   3 "name" u      utf8 "v<p*p>"
 *   4 "opt"  l      nullable int64 1000p, null when p % 5 == 0
 *   5 "pt"   +s     struct {x: int32 p, y: float p / 4}
 *   6 "lst"  +l     list of int16 (p % 3 items, 10p + k), child "item"
 * A slice: every column has child_off leading elements it skips with its
 * own offset, and the record batch itself skips rb_off rows.  The memory
 * comes from a gpuipc_hostbuf (shared in place) or malloc (copied).
 */
#ifndef GPUIPC_BATCH_FIXTURE_H
#define GPUIPC_BATCH_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuipc.h"

#define FX_ROWS 37
#define FX_COLS 7
#define FX_MEM  (256u << 10)

struct fx {
        gpuipc_hostbuf *hb;
        uint8_t *mem;
        size_t used;
        int64_t phys, child_off, rb_off;
        struct ArrowSchema s, cs[FX_COLS], ks[3], *csp[FX_COLS], *ptk[2], *lsk[1];
        struct ArrowArray a, ca[FX_COLS], ka[3], *cap_[FX_COLS], *pak[2], *lak[1];
        const void *bufs[FX_COLS + 3][3];
        const void *rb_bufs[1];
};

static inline void fx_release_schema(struct ArrowSchema *s)
{
        s->release = NULL;
}

static inline void fx_release_array(struct ArrowArray *a)
{
        a->release = NULL;
}

static inline void *fx_alloc(struct fx *f, size_t n)
{
        void *p = f->mem + f->used;

        f->used = (f->used + n + 63) & ~(size_t)63;
        if (f->used > FX_MEM)
                abort();
        memset(p, 0, n);
        return p;
}

static inline void fx_setbit(uint8_t *bits, int64_t i, bool v)
{
        if (v)
                bits[i / 8] |= (uint8_t)(1u << (i % 8));
}

static inline bool fx_getbit(const uint8_t *bits, int64_t i)
{
        return bits[i / 8] >> (i % 8) & 1;
}

static inline bool fx_valid(int64_t p)
{
        return p % 5 != 0;
}

static inline void fx_name(int64_t p, char *buf, size_t n)
{
        snprintf(buf, n, "v%lld", (long long)(p * p));
}

static inline void fx_node(struct fx *f, struct ArrowSchema *s, struct ArrowArray *a,
                           const char *fmt, const char *name, int nbuf, const void **bufs,
                           int64_t length)
{
        memset(s, 0, sizeof(*s));
        memset(a, 0, sizeof(*a));
        s->format = fmt;
        s->name = name;
        s->release = fx_release_schema;
        a->length = length - f->child_off;
        a->offset = f->child_off;
        a->n_buffers = nbuf;
        a->buffers = bufs;
        a->release = fx_release_array;
}

/* Builds the batch; returns 0, or -errno when the hostbuf cannot be made. */
static inline int fx_build(struct fx *f, bool hostbuf, int64_t child_off, int64_t rb_off)
{
        int64_t n, nulls = 0, items = 0;
        int32_t *i32, *soff, *loff, *px;
        double *f64;
        int64_t *opt;
        float *py;
        int16_t *lv;
        uint8_t *flag, *valid, *str;
        char tmp[32];
        int r;

        memset(f, 0, sizeof(*f));
        f->child_off = child_off;
        f->rb_off = rb_off;
        n = f->phys = FX_ROWS + child_off + rb_off;
        if (hostbuf) {
                r = gpuipc_hostbuf_new(FX_MEM, &f->hb);
                if (r < 0)
                        return r;
                f->mem = gpuipc_hostbuf_data(f->hb);
        } else {
                f->mem = aligned_alloc(64, FX_MEM);
        }
        i32 = fx_alloc(f, (size_t)n * 4);
        f64 = fx_alloc(f, (size_t)n * 8);
        flag = fx_alloc(f, (size_t)(n + 7) / 8);
        soff = fx_alloc(f, (size_t)(n + 1) * 4);
        valid = fx_alloc(f, (size_t)(n + 7) / 8);
        opt = fx_alloc(f, (size_t)n * 8);
        px = fx_alloc(f, (size_t)n * 4);
        py = fx_alloc(f, (size_t)n * 4);
        loff = fx_alloc(f, (size_t)(n + 1) * 4);
        for (int64_t p = 0; p < n; p++) {
                i32[p] = (int32_t)(3 * p - 7);
                f64[p] = (double)p / 2;
                fx_setbit(flag, p, p % 3 == 0);
                fx_name(p, tmp, sizeof(tmp));
                soff[p + 1] = soff[p] + (int32_t)strlen(tmp);
                fx_setbit(valid, p, fx_valid(p));
                opt[p] = 1000 * p;
                px[p] = (int32_t)p;
                py[p] = (float)p / 4;
                loff[p + 1] = loff[p] + (int32_t)(p % 3);
        }
        for (int64_t p = child_off; p < n; p++)
                nulls += !fx_valid(p);
        str = fx_alloc(f, (size_t)soff[n]);
        for (int64_t p = 0; p < n; p++) {
                fx_name(p, tmp, sizeof(tmp));
                memcpy(str + soff[p], tmp, strlen(tmp));
        }
        items = loff[n];
        lv = fx_alloc(f, (size_t)items * 2);
        for (int64_t p = 0; p < n; p++)
                for (int32_t k = 0; k < loff[p + 1] - loff[p]; k++)
                        lv[loff[p] + k] = (int16_t)(10 * p + k);

#define B(col, ...) memcpy(f->bufs[col], (const void *[]){ __VA_ARGS__ }, \
                           sizeof((const void *[]){ __VA_ARGS__ }))
        B(0, NULL, i32);
        B(1, NULL, f64);
        B(2, NULL, flag);
        B(3, NULL, soff, str);
        B(4, valid, opt);
        B(5, NULL);
        B(6, NULL, loff);
        B(7, NULL, px);
        B(8, NULL, py);
        B(9, NULL, lv);
#undef B
        fx_node(f, &f->cs[0], &f->ca[0], "i", "i32", 2, f->bufs[0], n);
        fx_node(f, &f->cs[1], &f->ca[1], "g", "f64", 2, f->bufs[1], n);
        fx_node(f, &f->cs[2], &f->ca[2], "b", "flag", 2, f->bufs[2], n);
        fx_node(f, &f->cs[3], &f->ca[3], "u", "name", 3, f->bufs[3], n);
        fx_node(f, &f->cs[4], &f->ca[4], "l", "opt", 2, f->bufs[4], n);
        f->cs[4].flags = ARROW_FLAG_NULLABLE;
        f->ca[4].null_count = nulls;
        fx_node(f, &f->cs[5], &f->ca[5], "+s", "pt", 1, f->bufs[5], n);
        fx_node(f, &f->cs[6], &f->ca[6], "+l", "lst", 2, f->bufs[6], n);
        /* struct children: whole, offset 0; the struct's offset applies */
        fx_node(f, &f->ks[0], &f->ka[0], "i", "x", 2, f->bufs[7], n);
        fx_node(f, &f->ks[1], &f->ka[1], "f", "y", 2, f->bufs[8], n);
        f->ka[0].offset = f->ka[1].offset = 0;
        f->ka[0].length = f->ka[1].length = n;
        fx_node(f, &f->ks[2], &f->ka[2], "s", "item", 2, f->bufs[9], items);
        f->ka[2].offset = 0;
        f->ka[2].length = items;
        f->ptk[0] = &f->ks[0];
        f->ptk[1] = &f->ks[1];
        f->pak[0] = &f->ka[0];
        f->pak[1] = &f->ka[1];
        f->cs[5].n_children = f->ca[5].n_children = 2;
        f->cs[5].children = f->ptk;
        f->ca[5].children = f->pak;
        f->lsk[0] = &f->ks[2];
        f->lak[0] = &f->ka[2];
        f->cs[6].n_children = f->ca[6].n_children = 1;
        f->cs[6].children = f->lsk;
        f->ca[6].children = f->lak;
        for (int i = 0; i < FX_COLS; i++) {
                f->csp[i] = &f->cs[i];
                f->cap_[i] = &f->ca[i];
        }
        memset(&f->s, 0, sizeof(f->s));
        memset(&f->a, 0, sizeof(f->a));
        f->s.format = "+s";
        f->s.name = "";
        f->s.n_children = FX_COLS;
        f->s.children = f->csp;
        f->s.release = fx_release_schema;
        f->a.length = FX_ROWS;
        f->a.offset = rb_off;
        f->a.n_buffers = 1;
        f->a.buffers = f->rb_bufs;
        f->a.n_children = FX_COLS;
        f->a.children = f->cap_;
        f->a.release = fx_release_array;
        return 0;
}

static inline void fx_free(struct fx *f)
{
        if (f->hb)
                gpuipc_hostbuf_free(f->hb);
        else
                free(f->mem);
        f->hb = NULL;
        f->mem = NULL;
}

/* ---- the consumer's checks ---------------------------------------------- */

#define FX_FAIL(...) do { snprintf(why, len, __VA_ARGS__); return -1; } while (0)

static const char *const fx_names[FX_COLS] = { "i32", "f64", "flag", "name", "opt", "pt", "lst" };
static const char *const fx_formats[FX_COLS] = { "i", "g", "b", "u", "l", "+s", "+l" };

/* Checks column c of FX_ROWS rows (a: its imported array, at the offset
 * Arrow says), value by value. */
static inline int fx_check_column(int c, const struct ArrowSchema *s,
                                  const struct ArrowArray *a, char *why, size_t len)
{
        char tmp[32];

        if (strcmp(s->format, fx_formats[c]) || strcmp(s->name, fx_names[c]))
                FX_FAIL("column %d is %s \"%s\"", c, s->format, s->name);
        if (a->length != FX_ROWS)
                FX_FAIL("column %d has %lld rows", c, (long long)a->length);
        for (int64_t i = 0; i < FX_ROWS; i++) {
                int64_t p = a->offset + i;
                const void *const *b = a->buffers;
                switch (c) {
                case 0:
                        if (((const int32_t *)b[1])[p] != 3 * p - 7)
                                FX_FAIL("i32[%lld]", (long long)i);
                        break;
                case 1:
                        if (((const double *)b[1])[p] != (double)p / 2)
                                FX_FAIL("f64[%lld]", (long long)i);
                        break;
                case 2:
                        if (fx_getbit(b[1], p) != (p % 3 == 0))
                                FX_FAIL("flag[%lld]", (long long)i);
                        break;
                case 3: {
                        const int32_t *o = b[1];
                        fx_name(p, tmp, sizeof(tmp));
                        if (o[p + 1] - o[p] != (int32_t)strlen(tmp) ||
                            memcmp((const char *)b[2] + o[p], tmp, strlen(tmp)))
                                FX_FAIL("name[%lld]", (long long)i);
                        break;
                }
                case 4:
                        if (!b[0] || fx_getbit(b[0], p) != fx_valid(p) ||
                            (fx_valid(p) && ((const int64_t *)b[1])[p] != 1000 * p))
                                FX_FAIL("opt[%lld]", (long long)i);
                        break;
                case 5: {
                        const struct ArrowArray *x = a->children[0], *y = a->children[1];
                        if (((const int32_t *)x->buffers[1])[x->offset + p] != p ||
                            ((const float *)y->buffers[1])[y->offset + p] != (float)p / 4)
                                FX_FAIL("pt[%lld]", (long long)i);
                        break;
                }
                case 6: {
                        const int32_t *o = b[1];
                        const struct ArrowArray *it = a->children[0];
                        const int16_t *v = it->buffers[1];
                        if (o[p + 1] - o[p] != p % 3)
                                FX_FAIL("lst[%lld] has %d items", (long long)i, o[p + 1] - o[p]);
                        for (int32_t k = 0; k < o[p + 1] - o[p]; k++)
                                if (v[it->offset + o[p] + k] != 10 * p + k)
                                        FX_FAIL("lst[%lld][%d]", (long long)i, k);
                        break;
                }
                }
        }
        if (c == 5 && (a->n_children != 2 || strcmp(s->children[0]->name, "x") ||
                       strcmp(s->children[1]->format, "f")))
                FX_FAIL("pt's children");
        return 0;
}

/* Checks an imported whole batch: a "+s" of the FX_COLS columns. */
static inline int fx_check(const struct ArrowSchema *s, const struct ArrowArray *a,
                           char *why, size_t len)
{
        if (strcmp(s->format, "+s") || s->n_children != FX_COLS || a->n_children != FX_COLS ||
            a->length != FX_ROWS || a->offset != 0)
                FX_FAIL("the batch is %s of %lld children, %lld rows", s->format,
                        (long long)s->n_children, (long long)a->length);
        for (int c = 0; c < FX_COLS; c++)
                if (fx_check_column(c, s->children[c], a->children[c], why, len) < 0)
                        return -1;
        return 0;
}

#endif
