/* arrowfmt.c: what an Arrow format string means for its buffers, and the
 * schema metadata's binary encoding (the Arrow C Data Interface).
 *
 * A batch carries each array's buffers as parts of exact sizes, so the
 * library must know, from the format alone, how many buffers an array has
 * and how each one's size follows from the array's offset and length:
 * a validity bitmap, fixed-width values, bits, offsets, or variable-size
 * data whose size is the last offset.  Types whose buffers are not sized
 * that way (views, unions, run-end encoding) or that need a second array
 * (dictionaries) are refused.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchint.h"

static int fixed(struct gpuipc__arrow_layout *l, uint32_t width)
{
        l->n_buffers = 2;
        l->buf[0] = GPUIPC__AB_VALIDITY;
        l->buf[1] = GPUIPC__AB_FIXED;
        l->width = width;
        return 0;
}

static int varsize(struct gpuipc__arrow_layout *l, bool large)
{
        l->n_buffers = 3;
        l->buf[0] = GPUIPC__AB_VALIDITY;
        l->buf[1] = large ? GPUIPC__AB_OFFSETS64 : GPUIPC__AB_OFFSETS32;
        l->buf[2] = large ? GPUIPC__AB_DATA64 : GPUIPC__AB_DATA32;
        return 0;
}

static int nested(struct gpuipc__arrow_layout *l, enum gpuipc__arrow_buf offsets, int children)
{
        l->n_buffers = offsets == GPUIPC__AB_NONE ? 1 : 2;
        l->buf[0] = GPUIPC__AB_VALIDITY;
        l->buf[1] = offsets;
        l->children = children;
        return 0;
}

/* A decimal, "d:P,S" or "d:P,S,W" with W 32, 64, 128 (the default) or 256;
 * the scale may be negative. */
static int decimal(const char *f, struct gpuipc__arrow_layout *l)
{
        unsigned p, w = 128;
        int s, n = 0, m = 0;

        if (sscanf(f, "d:%u,%d%n", &p, &s, &n) != 2 || n == 0)
                return -EINVAL;
        if (f[n] == ',') {
                if (sscanf(f + n, ",%u%n", &w, &m) != 1 || m == 0 || f[n + m] != '\0')
                        return -EINVAL;
        } else if (f[n] != '\0') {
                return -EINVAL;
        }
        if (w != 32 && w != 64 && w != 128 && w != 256)
                return -EINVAL;
        return fixed(l, w / 8);
}

/* "w:N" and "+w:N": N > 0. */
static int size_arg(const char *s, uint32_t *ret)
{
        char *end;
        unsigned long v;

        if (*s < '1' || *s > '9')
                return -EINVAL;
        v = strtoul(s, &end, 10);
        if (*end || v == 0 || v > INT32_MAX)
                return -EINVAL;
        *ret = (uint32_t)v;
        return 0;
}

/* The temporal types: "td", "tt", "ts", "tD", "ti". */
static int temporal(const char *f, struct gpuipc__arrow_layout *l)
{
        char unit = f[1] ? f[2] : '\0';

        if (!unit)
                return -EINVAL;
        switch (f[1]) {
        case 'd':               /* date32 days, date64 milliseconds */
                if (f[3] || (unit != 'D' && unit != 'm'))
                        return -EINVAL;
                return fixed(l, unit == 'D' ? 4 : 8);
        case 't':               /* time32 s/ms, time64 us/ns */
                if (f[3] || !strchr("smun", unit))
                        return -EINVAL;
                return fixed(l, unit == 's' || unit == 'm' ? 4 : 8);
        case 's':               /* timestamps: "tsu:" then a timezone, maybe empty */
                if (!strchr("smun", unit) || f[3] != ':')
                        return -EINVAL;
                return fixed(l, 8);
        case 'D':               /* durations */
                if (f[3] || !strchr("smun", unit))
                        return -EINVAL;
                return fixed(l, 8);
        case 'i':               /* intervals: months, days+ms, months+days+ns */
                if (f[3] || !strchr("MDn", unit))
                        return -EINVAL;
                return fixed(l, unit == 'M' ? 4 : unit == 'D' ? 8 : 16);
        default:
                return -EINVAL;
        }
}

int gpuipc__arrow_layout(const char *f, struct gpuipc__arrow_layout *l, const char **ret_why)
{
        static const char *const widths = "cCsSiIlLefg";
        static const uint8_t width_of[] = { 1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8 };
        const char *p;
        uint32_t n;

        memset(l, 0, sizeof(*l));
        *ret_why = "an unknown format";
        if (!f || !f[0])
                return -EINVAL;
        if (f[1] == '\0' && (p = strchr(widths, f[0])))
                return fixed(l, width_of[p - widths]);
        switch (f[0]) {
        case 'n':
                return f[1] ? -EINVAL : 0;      /* null: no buffers */
        case 'b':
                if (f[1])
                        return -EINVAL;
                l->n_buffers = 2;
                l->buf[0] = GPUIPC__AB_VALIDITY;
                l->buf[1] = GPUIPC__AB_BITS;
                return 0;
        case 'z': case 'u': case 'Z': case 'U':
                if (f[1])
                        return -EINVAL;
                return varsize(l, f[0] == 'Z' || f[0] == 'U');
        case 'd':
                return decimal(f, l);
        case 'w':
                if (f[1] != ':' || size_arg(f + 2, &n) < 0)
                        return -EINVAL;
                return fixed(l, n);
        case 't':
                return temporal(f, l);
        case 'v':
                *ret_why = "a view type (string or binary view): its buffers are not "
                           "sized by its offsets";
                return -ENOTSUP;
        case '+':
                break;
        default:
                return -EINVAL;
        }
        switch (f[1]) {
        case 'l': case 'L': case 'm':
                if (f[2])
                        return -EINVAL;
                return nested(l, f[1] == 'L' ? GPUIPC__AB_OFFSETS64 : GPUIPC__AB_OFFSETS32, 1);
        case 's':
                return f[2] ? -EINVAL : nested(l, GPUIPC__AB_NONE, -1);
        case 'w':
                if (f[2] != ':' || size_arg(f + 3, &n) < 0)
                        return -EINVAL;
                l->list_size = n;
                return nested(l, GPUIPC__AB_NONE, 1);
        case 'u':
                *ret_why = "a union type";
                return -ENOTSUP;
        case 'r':
                *ret_why = "a run-end encoded type";
                return -ENOTSUP;
        case 'v':
                *ret_why = "a list view type";
                return -ENOTSUP;
        default:
                return -EINVAL;
        }
}

int gpuipc__arrow_buf_size(const struct gpuipc__arrow_layout *l, unsigned i, int64_t offset,
                           int64_t length, int64_t last, uint64_t *ret)
{
        uint64_t n = (uint64_t)offset + (uint64_t)length, v = 0;
        bool over = false;

        switch (l->buf[i]) {
        case GPUIPC__AB_VALIDITY:
        case GPUIPC__AB_BITS:
                v = n / 8 + (n % 8 != 0);
                break;
        case GPUIPC__AB_FIXED:
                over = __builtin_mul_overflow(n, (uint64_t)l->width, &v);
                break;
        case GPUIPC__AB_OFFSETS32:
        case GPUIPC__AB_OFFSETS64:
                over = __builtin_mul_overflow(n + 1, l->buf[i] == GPUIPC__AB_OFFSETS32 ? 4u : 8u,
                                              &v);
                break;
        case GPUIPC__AB_DATA32:
        case GPUIPC__AB_DATA64:
                if (last < 0)
                        return -EINVAL;
                v = (uint64_t)last;
                break;
        default:
                break;
        }
        if (over || v > INT64_MAX)
                return -EOVERFLOW;
        *ret = v;
        return 0;
}

/* ---- schema metadata ------------------------------------------------------
 *
 * The binary form: an int32 pair count, then per pair an int32 key length,
 * the key's bytes, an int32 value length and the value's bytes, all in
 * native byte order and unaligned. */

static int32_t get_i32(const char *p)
{
        int32_t v;

        memcpy(&v, p, sizeof(v));
        return v;
}

void gpuipc__meta_free(struct gpuipc__meta *m)
{
        for (uint32_t i = 0; i < m->n; i++) {
                free(m->keys[i]);
                free(m->values[i]);
        }
        free(m->keys);
        free(m->values);
        memset(m, 0, sizeof(*m));
}

/* Checks one string against the batch limits (max bytes, UTF-8, no NUL). */
static int meta_str_ok(const char *s, size_t n, size_t max, const char *what, char *why,
                       size_t why_len)
{
        if (n > max) {
                proto_invalid(why, why_len, "a metadata %s of %zu bytes (batches take at most "
                              "%zu)", what, n, max);
                return -E2BIG;
        }
        if (memchr(s, '\0', n) || proto_utf8_valid(s, n) != n)
                return proto_invalid(why, why_len, "a metadata %s that is not UTF-8 text", what);
        return 0;
}

int gpuipc__meta_set(struct gpuipc__meta *m, uint32_t n, const char *const *keys,
                     const char *const *values, const size_t *klen, const size_t *vlen,
                     char *why, size_t why_len)
{
        struct gpuipc__meta t = { 0 };
        int r;

        if (n > PROTO_USER_MAX_ENTRIES) {
                proto_invalid(why, why_len, "%u metadata entries (batches take at most %u)", n,
                              PROTO_USER_MAX_ENTRIES);
                return -E2BIG;
        }
        if (n > 0 && (!keys || !values))
                return proto_invalid(why, why_len, "metadata keys or values are NULL");
        t.keys = calloc(n ? n : 1, sizeof(char *));
        t.values = calloc(n ? n : 1, sizeof(char *));
        if (!t.keys || !t.values) {
                r = -ENOMEM;
                goto fail;
        }
        for (uint32_t i = 0; i < n; i++) {
                size_t kl, vl;
                if (!keys[i] || !values[i]) {
                        r = proto_invalid(why, why_len, "a metadata key or value is NULL");
                        goto fail;
                }
                kl = klen ? klen[i] : strlen(keys[i]);
                vl = vlen ? vlen[i] : strlen(values[i]);
                r = meta_str_ok(keys[i], kl, PROTO_USER_KEY_MAX, "key", why, why_len);
                if (r == 0)
                        r = meta_str_ok(values[i], vl, PROTO_USER_VALUE_MAX, "value", why,
                                        why_len);
                if (r < 0)
                        goto fail;
                t.keys[i] = strndup(keys[i], kl);
                t.values[i] = strndup(values[i], vl);
                t.n = i + 1;
                if (!t.keys[i] || !t.values[i]) {
                        r = -ENOMEM;
                        goto fail;
                }
        }
        gpuipc__meta_free(m);
        *m = t;
        return 0;
fail:
        if (r == -ENOMEM)
                proto_invalid(why, why_len, "out of memory");
        gpuipc__meta_free(&t);
        return r;
}

int gpuipc__meta_parse(const char *bin, struct gpuipc__meta *m, char *why, size_t why_len)
{
        const char *keys[PROTO_USER_MAX_ENTRIES], *values[PROTO_USER_MAX_ENTRIES];
        size_t klen[PROTO_USER_MAX_ENTRIES], vlen[PROTO_USER_MAX_ENTRIES];
        const char *p = bin;
        int32_t n;

        if (!bin)
                return gpuipc__meta_set(m, 0, NULL, NULL, NULL, NULL, why, why_len);
        /* Nothing bounds the encoding but its own lengths: each is checked
         * against the batch limits before the bytes it covers are read. */
        n = get_i32(p);
        p += 4;
        if (n < 0)
                return proto_invalid(why, why_len, "metadata with a negative pair count");
        if ((uint32_t)n > PROTO_USER_MAX_ENTRIES) {
                proto_invalid(why, why_len, "%d metadata entries (batches take at most %u)", n,
                              PROTO_USER_MAX_ENTRIES);
                return -E2BIG;
        }
        for (int32_t i = 0; i < n; i++) {
                int32_t kl = get_i32(p), vl;
                if (kl < 0 || (uint32_t)kl > PROTO_USER_KEY_MAX) {
                        proto_invalid(why, why_len, "a metadata key of %d bytes (batches take "
                                      "at most %u)", kl, PROTO_USER_KEY_MAX);
                        return kl < 0 ? -EINVAL : -E2BIG;
                }
                keys[i] = p + 4;
                klen[i] = (size_t)kl;
                p += 4 + kl;
                vl = get_i32(p);
                if (vl < 0 || (uint32_t)vl > PROTO_USER_VALUE_MAX) {
                        proto_invalid(why, why_len, "the value of metadata key \"%.*s\" has %d "
                                      "bytes (batches take at most %u)", kl, keys[i], vl,
                                      PROTO_USER_VALUE_MAX);
                        return vl < 0 ? -EINVAL : -E2BIG;
                }
                values[i] = p + 4;
                vlen[i] = (size_t)vl;
                p += 4 + vl;
        }
        return gpuipc__meta_set(m, (uint32_t)n, keys, values, klen, vlen, why, why_len);
}

size_t gpuipc__meta_encoded_len(uint32_t n, const char *const *keys, const char *const *values)
{
        size_t len = 4;

        for (uint32_t i = 0; i < n; i++)
                len += 8 + strlen(keys[i]) + strlen(values[i]);
        return len;
}

void gpuipc__meta_encode(char *out, uint32_t n, const char *const *keys,
                         const char *const *values)
{
        int32_t v = (int32_t)n;

        memcpy(out, &v, 4);
        out += 4;
        for (uint32_t i = 0; i < n; i++) {
                const char *s[2] = { keys[i], values[i] };
                for (int k = 0; k < 2; k++) {
                        size_t len = strlen(s[k]);
                        v = (int32_t)len;
                        memcpy(out, &v, 4);
                        memcpy(out + 4, s[k], len);
                        out += 4 + len;
                }
        }
}
