/* map.c: a msgpack map whose entry count is written when it is finished.
 *
 * proto_map_begin() reserves a map16 header; proto_map_end() writes the
 * count and, below 16 entries, moves the entries back over the two spare
 * bytes, so the bytes are those of msgpack_pack_map(count): the smallest
 * header.  Shrinking never allocates, so ending a map cannot fail.
 */
#include <assert.h>
#include <string.h>

#include "proto.h"

void proto_map_begin(struct proto_map *m, msgpack_packer *pk)
{
        static const char hdr[3] = { (char)0xde, 0, 0 };

        /* pk must write to an sbuffer.  Not checkable: msgpack_sbuffer_write
         * is static inline, with an address of its own in each file. */
        m->pk = pk;
        m->sb = pk->data;
        m->at = m->sb->size;
        m->n = 0;
        msgpack_sbuffer_write(m->sb, hdr, sizeof(hdr));
}

void proto_map_end(struct proto_map *m)
{
        char *p;

        assert(m->n <= UINT16_MAX);
        /* A failed write left no header: the packer's errors are the
         * caller's to find (proto_out_finish, or sb->data NULL). */
        if (!m->sb->data || m->sb->size < m->at + 3)
                return;
        p = m->sb->data + m->at;
        if (m->n < 16) {
                p[0] = (char)(0x80 | m->n);
                memmove(p + 1, p + 3, m->sb->size - m->at - 3);
                m->sb->size -= 2;
        } else {
                p[1] = (char)(m->n >> 8);
                p[2] = (char)m->n;
        }
}

void proto_map_add(struct proto_map *m)
{
        m->n++;
}

void proto_map_key(struct proto_map *m, const char *key)
{
        m->n++;
        proto_pack_str(m->pk, key);
}

void proto_map_kstr(struct proto_map *m, const char *key, const char *val)
{
        m->n++;
        proto_pack_kstr(m->pk, key, val);
}

void proto_map_kstrn(struct proto_map *m, const char *key, const char *val, size_t len)
{
        proto_map_key(m, key);
        proto_pack_strn(m->pk, val, len);
}

void proto_map_ku64(struct proto_map *m, const char *key, uint64_t val)
{
        m->n++;
        proto_pack_ku64(m->pk, key, val);
}

void proto_map_ki64(struct proto_map *m, const char *key, int64_t val)
{
        m->n++;
        proto_pack_ki64(m->pk, key, val);
}

void proto_map_kbool(struct proto_map *m, const char *key, bool val)
{
        m->n++;
        proto_pack_kbool(m->pk, key, val);
}

void proto_map_kbin(struct proto_map *m, const char *key, const void *p, size_t len)
{
        proto_map_key(m, key);
        msgpack_pack_bin_with_body(m->pk, p, len);
}
