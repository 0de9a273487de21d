/* unpack.c: one frame body into msgpack-c objects, in one pass that also
 * checks its structure (the rules are in proto.h).
 *
 * msgpack-c's unpacker was a third of a client's CPU time for a batch
 * lookup reply (docs/performance.md, "Column batches"), and a structure
 * walk before it read the same bytes once more.  This decoder builds the
 * same objects msgpack_unpack() builds (strings and bins point into the
 * buffer, arrays and maps live in the zone), and never allocates more than
 * the frame's bytes can justify: an array (map) is allocated only when its
 * elements (pairs x2) fit the bytes that remain.  The old walk stays in the
 * tests as the oracle it is checked against (tests/fuzz/walk.c). */
#include <errno.h>
#include <string.h>

#include "proto.h"

struct unpacker {
        const uint8_t *p, *end;
        msgpack_zone *z;
        const char *why;
        int err;
};

static int fail(struct unpacker *u, int err, const char *why)
{
        u->why = why;
        u->err = err;
        return err;
}

static uint64_t be(const uint8_t *p, unsigned n)
{
        uint64_t v = 0;

        for (unsigned i = 0; i < n; i++)
                v = (v << 8) | p[i];
        return v;
}

/* n bytes, or a truncation failure. */
static const uint8_t *take(struct unpacker *u, uint64_t n)
{
        const uint8_t *at = u->p;

        if ((uint64_t)(u->end - u->p) < n) {
                fail(u, -EBADMSG, "truncated msgpack value");
                return NULL;
        }
        u->p += n;
        return at;
}

static int take_be(struct unpacker *u, unsigned n, uint64_t *ret)
{
        const uint8_t *at = take(u, n);

        if (!at)
                return u->err;
        *ret = be(at, n);
        return 0;
}

static int raw(struct unpacker *u, msgpack_object *o, msgpack_object_type t, uint64_t n)
{
        const uint8_t *at = take(u, n);

        if (!at)
                return u->err;
        o->type = t;
        /* str and bin share their layout in msgpack_object_union */
        o->via.str.size = (uint32_t)n;
        o->via.str.ptr = (const char *)at;
        return 0;
}

static int sint(struct unpacker *u, msgpack_object *o, unsigned n)
{
        uint64_t v = 0;
        int64_t s;
        int r = take_be(u, n, &v);

        if (r < 0)
                return r;
        /* sign-extend the n-byte two's complement value */
        s = n == 8 ? (int64_t)v : (int64_t)(v ^ (UINT64_C(1) << (8 * n - 1))) -
                                  (int64_t)(UINT64_C(1) << (8 * n - 1));
        if (s < 0) {
                o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
                o->via.i64 = s;
        } else {
                o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
                o->via.u64 = (uint64_t)s;
        }
        return 0;
}

static int uint_(struct unpacker *u, msgpack_object *o, unsigned n)
{
        o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
        return take_be(u, n, &o->via.u64);
}

static int real(struct unpacker *u, msgpack_object *o, unsigned n)
{
        uint64_t v = 0;
        int r = take_be(u, n, &v);

        if (r < 0)
                return r;
        if (n == 4) {
                uint32_t b = (uint32_t)v;
                float f;
                memcpy(&f, &b, sizeof(f));
                o->type = MSGPACK_OBJECT_FLOAT32;
                o->via.f64 = f;
        } else {
                double d;
                memcpy(&d, &v, sizeof(d));
                o->type = MSGPACK_OBJECT_FLOAT64;
                o->via.f64 = d;
        }
        return 0;
}

static int value(struct unpacker *u, msgpack_object *o, unsigned depth);

static int container(struct unpacker *u, msgpack_object *o, uint64_t count, bool is_map,
                     unsigned depth)
{
        uint64_t items = is_map ? count * 2 : count;
        size_t each = is_map ? sizeof(msgpack_object_kv) : sizeof(msgpack_object);
        void *mem;
        int r;

        if (depth >= PROTO_MAX_DEPTH)
                return fail(u, -EBADMSG, "maps and arrays nested too deeply");
        /* Every element takes at least one byte. */
        if (items > (uint64_t)(u->end - u->p))
                return fail(u, -EBADMSG, is_map ? "map declares more entries than the frame holds"
                                                : "array declares more elements than the frame "
                                                  "holds");
        /* count fits in 32 bits (a 32-bit header at most) and below the
         * frame's length, so count * each cannot overflow */
        mem = msgpack_zone_malloc(u->z, (size_t)count * each);
        if (!mem)
                return fail(u, -ENOMEM, "out of memory");
        if (is_map) {
                msgpack_object_kv *kv = mem;
                o->type = MSGPACK_OBJECT_MAP;
                o->via.map.size = (uint32_t)count;
                o->via.map.ptr = kv;
                for (uint64_t i = 0; i < count; i++) {
                        r = value(u, &kv[i].key, depth + 1);
                        if (r == 0)
                                r = value(u, &kv[i].val, depth + 1);
                        if (r < 0)
                                return r;
                }
        } else {
                msgpack_object *e = mem;
                o->type = MSGPACK_OBJECT_ARRAY;
                o->via.array.size = (uint32_t)count;
                o->via.array.ptr = e;
                for (uint64_t i = 0; i < count; i++) {
                        r = value(u, &e[i], depth + 1);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

static int value(struct unpacker *u, msgpack_object *o, unsigned depth)
{
        const uint8_t *at = take(u, 1);
        uint64_t n;
        uint8_t t;
        int r;

        if (!at)
                return u->err;
        t = *at;
        if (t <= 0x7f) {                        /* positive fixint */
                o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
                o->via.u64 = t;
                return 0;
        }
        if (t >= 0xe0) {                        /* negative fixint */
                o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
                o->via.i64 = (int64_t)t - 256;
                return 0;
        }
        if (t >= 0xa0 && t <= 0xbf)             /* fixstr */
                return raw(u, o, MSGPACK_OBJECT_STR, t & 0x1f);
        if (t <= 0x8f)                          /* fixmap */
                return container(u, o, t & 0x0f, true, depth);
        if (t <= 0x9f)                          /* fixarray */
                return container(u, o, t & 0x0f, false, depth);

        switch (t) {
        case 0xc0:
                o->type = MSGPACK_OBJECT_NIL;
                return 0;
        case 0xc2: case 0xc3:
                o->type = MSGPACK_OBJECT_BOOLEAN;
                o->via.boolean = t == 0xc3;
                return 0;
        case 0xc4: case 0xc5: case 0xc6:        /* bin 8, 16, 32 */
                r = take_be(u, 1u << (t - 0xc4), &n);
                return r < 0 ? r : raw(u, o, MSGPACK_OBJECT_BIN, n);
        case 0xd9: case 0xda: case 0xdb:        /* str 8, 16, 32 */
                r = take_be(u, 1u << (t - 0xd9), &n);
                return r < 0 ? r : raw(u, o, MSGPACK_OBJECT_STR, n);
        case 0xca: return real(u, o, 4);
        case 0xcb: return real(u, o, 8);
        case 0xcc: return uint_(u, o, 1);
        case 0xcd: return uint_(u, o, 2);
        case 0xce: return uint_(u, o, 4);
        case 0xcf: return uint_(u, o, 8);
        case 0xd0: return sint(u, o, 1);
        case 0xd1: return sint(u, o, 2);
        case 0xd2: return sint(u, o, 4);
        case 0xd3: return sint(u, o, 8);
        case 0xdc: case 0xdd:                   /* array 16, 32 */
                r = take_be(u, t == 0xdc ? 2 : 4, &n);
                return r < 0 ? r : container(u, o, n, false, depth);
        case 0xde: case 0xdf:                   /* map 16, 32 */
                r = take_be(u, t == 0xde ? 2 : 4, &n);
                return r < 0 ? r : container(u, o, n, true, depth);
        case 0xc1:
                return fail(u, -EBADMSG, "reserved msgpack byte 0xc1");
        default:                                /* 0xc7-0xc9, 0xd4-0xd8: ext */
                return fail(u, -EBADMSG, "msgpack ext types are not used by this protocol");
        }
}

int proto_unpack(const uint8_t *buf, size_t len, msgpack_zone *z, msgpack_object *ret,
                 const char **ret_why)
{
        struct unpacker u = { .p = buf, .end = buf + len, .z = z };
        int r;

        if (!buf || len == 0) {
                r = fail(&u, -EBADMSG, "empty frame");
        } else if (!((buf[0] >= 0x80 && buf[0] <= 0x8f) || buf[0] == 0xde || buf[0] == 0xdf)) {
                r = fail(&u, -EBADMSG, "frame body is not a msgpack map");
        } else {
                r = value(&u, ret, 0);
                if (r == 0 && u.p != u.end)
                        r = fail(&u, -EBADMSG, "trailing bytes after the map");
        }
        if (r < 0 && ret_why)
                *ret_why = u.why;
        return r;
}
