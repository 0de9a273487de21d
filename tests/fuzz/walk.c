/* walk.c: the structure rules of a frame body (walk.h), walked on their
 * own without allocating: the oracle that proto_unpack() (proto/unpack.c),
 * which decodes and checks in one pass, is tested against in test_proto
 * and the frame fuzzer.  This walker was the daemon's check before
 * msgpack-c decoded a frame; msgpack-c 4.0 allocates room for every
 * element an array or map header declares (upstream issue 1013: five bytes
 * can ask for ~96 GB), so a header that declares more than the frame could
 * hold is refused. */
#include <errno.h>

#include "proto.h"
#include "walk.h"

struct walker {
        const uint8_t *p, *end;
        const char *why;
};

static int fail(struct walker *w, const char *why)
{
        w->why = why;
        return -EBADMSG;
}

static int need(struct walker *w, uint64_t n)
{
        if ((uint64_t)(w->end - w->p) < n)
                return fail(w, "truncated msgpack value");
        return 0;
}

static uint64_t be(const uint8_t *p, unsigned n)
{
        uint64_t v = 0;
        for (unsigned i = 0; i < n; i++)
                v = (v << 8) | p[i];
        return v;
}

/* Reads an n-byte big-endian length that follows the type byte. */
static int read_len(struct walker *w, unsigned n, uint64_t *ret)
{
        int r = need(w, n);
        if (r < 0)
                return r;
        *ret = be(w->p, n);
        w->p += n;
        return 0;
}

static int skip(struct walker *w, uint64_t n)
{
        int r = need(w, n);
        if (r < 0)
                return r;
        w->p += n;
        return 0;
}

static int walk(struct walker *w, unsigned depth);

static int walk_container(struct walker *w, uint64_t count, bool is_map, unsigned depth)
{
        uint64_t items = is_map ? count * 2 : count;
        if (depth >= PROTO_MAX_DEPTH)
                return fail(w, "maps and arrays nested too deeply");
        /* Every element takes at least one byte. */
        if (items > (uint64_t)(w->end - w->p))
                return fail(w, is_map ? "map declares more entries than the frame holds"
                                      : "array declares more elements than the frame holds");
        for (uint64_t i = 0; i < items; i++) {
                int r = walk(w, depth + 1);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int walk(struct walker *w, unsigned depth)
{
        uint64_t n;
        int r = need(w, 1);
        if (r < 0)
                return r;
        uint8_t t = *w->p++;

        if (t <= 0x7f || t >= 0xe0)             /* positive / negative fixint */
                return 0;
        if (t >= 0x80 && t <= 0x8f)
                return walk_container(w, t & 0x0f, true, depth);
        if (t >= 0x90 && t <= 0x9f)
                return walk_container(w, t & 0x0f, false, depth);
        if (t >= 0xa0 && t <= 0xbf)
                return skip(w, t & 0x1f);

        switch (t) {
        case 0xc0: case 0xc2: case 0xc3:        /* nil, false, true */
                return 0;
        case 0xc4: case 0xd9:                   /* bin 8, str 8 */
                return (r = read_len(w, 1, &n)) < 0 ? r : skip(w, n);
        case 0xc5: case 0xda:                   /* bin 16, str 16 */
                return (r = read_len(w, 2, &n)) < 0 ? r : skip(w, n);
        case 0xc6: case 0xdb:                   /* bin 32, str 32 */
                return (r = read_len(w, 4, &n)) < 0 ? r : skip(w, n);
        case 0xcc: case 0xd0: return skip(w, 1);
        case 0xcd: case 0xd1: return skip(w, 2);
        case 0xca: case 0xce: case 0xd2: return skip(w, 4);
        case 0xcb: case 0xcf: case 0xd3: return skip(w, 8);
        case 0xdc:                              /* array 16 */
                return (r = read_len(w, 2, &n)) < 0 ? r : walk_container(w, n, false, depth);
        case 0xdd:                              /* array 32 */
                return (r = read_len(w, 4, &n)) < 0 ? r : walk_container(w, n, false, depth);
        case 0xde:                              /* map 16 */
                return (r = read_len(w, 2, &n)) < 0 ? r : walk_container(w, n, true, depth);
        case 0xdf:                              /* map 32 */
                return (r = read_len(w, 4, &n)) < 0 ? r : walk_container(w, n, true, depth);
        case 0xc1:
                return fail(w, "reserved msgpack byte 0xc1");
        default:                                /* 0xc7-0xc9, 0xd4-0xd8: ext */
                return fail(w, "msgpack ext types are not used by this protocol");
        }
}

int walk_check(const uint8_t *buf, size_t len, const char **ret_why)
{
        struct walker w = { .p = buf, .end = buf + len, .why = NULL };
        int r;

        if (!buf || len == 0) {
                w.why = "empty frame";
                r = -EBADMSG;
                goto out;
        }
        if (!((buf[0] >= 0x80 && buf[0] <= 0x8f) || buf[0] == 0xde || buf[0] == 0xdf)) {
                r = fail(&w, "frame body is not a msgpack map");
                goto out;
        }
        r = walk(&w, 0);
        if (r == 0 && w.p != w.end)
                r = fail(&w, "trailing bytes after the map");
out:
        if (r < 0 && ret_why)
                *ret_why = w.why;
        return r;
}
