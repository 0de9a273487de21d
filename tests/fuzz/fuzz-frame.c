/* fuzz-frame.c: libFuzzer entry point for the frame parser in proto/.
 *
 * The input is split in two: the first byte picks a max_frame and a chunk
 * pattern, the rest is the byte stream a peer sends.  The stream is fed to
 * proto_reader in chunks whose sizes come from the input itself (so partial
 * reads at every boundary get exercised), and each complete frame goes
 * through proto_decode and every getter, as the daemon does.  The decode
 * must succeed exactly when the independent structure walk (walk.c)
 * accepts the frame, and a frame that decodes is decoded again by
 * msgpack-c's own msgpack_unpack(): the two object trees must be the same
 * (proto_unpack() stands in for msgpack-c).
 *
 * Build and run with `make fuzz` (FUZZ_SECONDS=N): libFuzzer over proto/
 * without the CUDA loader, and walk.c.
 * Replay without libFuzzer: see replay.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "walk.h"
#include "same_objects.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const keys[] = {
        "op", "seq", "name", "id", "kind", "size", "offset", "fds", "meta", "error",
        "code", "message", "version", "dtype", "shape", "user", "",
};

static void touch(const uint8_t *p, size_t n)
{
        /* Read every byte a getter points at, so ASan sees bad pointers. */
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < n; i++)
                sink ^= p[i];
        (void)sink;
}

static void visit(const msgpack_object *map, unsigned depth)
{
        if (!map || map->type != MSGPACK_OBJECT_MAP || depth > PROTO_MAX_DEPTH)
                return;
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
                const char *key = keys[k];
                uint64_t u;
                int64_t i;
                bool b;
                const char *s;
                const uint8_t *bin;
                size_t n;
                const msgpack_object *o;
                char *dup;

                o = proto_get(map, key);
                if (proto_get_u64(map, key, &u) == 0)
                        (void)u;
                if (proto_get_i64(map, key, &i) == 0)
                        (void)i;
                if (proto_get_bool(map, key, &b) == 0)
                        (void)b;
                if (proto_get_str(map, key, &s, &n) == 0) {
                        touch((const uint8_t *)s, n);
                        (void)proto_name_check(s, n, NULL);
                        (void)proto_name_in(s, n, "spark/app-4", 11);
                        (void)proto_errno_from_code(s, n);
                        (void)proto_kind_from_name(s, n);
                }
                if (proto_get_bin(map, key, &bin, &n) == 0)
                        touch(bin, n);
                if (proto_obj_strdup(o, &dup) == 0) {
                        if (strlen(dup) != o->via.str.size)
                                abort();
                        free(dup);
                }
                (void)proto_obj_str_eq(o, "host");
                if (proto_get_map(map, key, &o) == 0)
                        visit(o, depth + 1);
                if (proto_get_array(map, key, &o) == 0) {
                        for (uint32_t j = 0; j < o->via.array.size; j++) {
                                const msgpack_object *e = &o->via.array.ptr[j];
                                (void)proto_obj_u64(e, &u);
                                (void)proto_obj_i64(e, &i);
                                visit(e, depth + 1);
                        }
                }
        }
        /* every key of the map, whatever its name */
        for (uint32_t j = 0; j < map->via.map.size; j++) {
                const msgpack_object_kv *kv = &map->via.map.ptr[j];
                if (kv->key.type == MSGPACK_OBJECT_STR)
                        touch((const uint8_t *)kv->key.via.str.ptr, kv->key.via.str.size);
                if (kv->val.type == MSGPACK_OBJECT_MAP)
                        visit(&kv->val, depth + 1);
        }
}

static void one_frame(const uint8_t *body, uint32_t len)
{
        struct proto_msg m;
        const char *why = NULL;
        int r, c;

        c = walk_check(body, len, &why);
        if (c < 0 && (c != -EBADMSG || !why))
                abort();
        r = proto_decode(body, len, &m, &why);
        /* decode succeeds exactly when the check does (or runs out of memory) */
        if ((c == 0) != (r == 0) && r != -ENOMEM)
                abort();
        if (r == 0) {
                if (!m.root || m.root->type != MSGPACK_OBJECT_MAP)
                        abort();
                if (!same_as_msgpack_c(body, len, m.root))
                        abort();
                visit(m.root, 1);
        }
        proto_msg_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static const uint32_t max_frames[] = { PROTO_MAX_FRAME, 16, 64, 4096 };
        struct proto_reader r;
        uint8_t ctl, *space;
        size_t done = 0, ci = 0, room, k;
        uint64_t last_off = 0;
        bool first = true;

        if (size < 1)
                return 0;
        ctl = data[0];
        data++;
        size--;
        if (proto_reader_init(&r, max_frames[ctl & 3]) < 0)
                abort();
        while (done < size) {
                const uint8_t *body;
                uint32_t len;
                uint64_t off;
                int rc;

                if (proto_reader_space(&r, &space, &room) < 0)
                        break;
                if (room == 0)
                        abort();
                /* chunk sizes: 1..256, drawn from the input itself when
                 * ctl asks for it, else everything at once */
                if (ctl & 4) {
                        k = (size_t)data[ci++ % size] + 1;
                } else {
                        k = size - done;
                }
                if (k > size - done)
                        k = size - done;
                if (k > room)
                        k = room;
                memcpy(space, data + done, k);
                proto_reader_commit(&r, k);
                done += k;
                if (proto_reader_received(&r) != done)
                        abort();
                while ((rc = proto_reader_next(&r, &body, &len, &off)) == 1) {
                        if (len == 0 || len > r.max_frame || off + PROTO_HDR_LEN + len > done)
                                abort();
                        if (!first && off <= last_off)
                                abort();
                        first = false;
                        last_off = off;
                        one_frame(body, len);
                }
                if (rc < 0) {
                        if (rc != -EMSGSIZE)
                                abort();
                        break;          /* the stream cannot be resynchronised */
                }
        }
        proto_reader_free(&r);

        /* and the whole input as one body, unframed */
        one_frame(data, (uint32_t)(size > UINT32_MAX ? UINT32_MAX : size));
        return 0;
}
