/* restart_codec.c: the journal's records, written and read. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "cuda_reg.h"
#include "restart_codec.h"

/* ---- writing ------------------------------------------------------------ */

/* Starts a record of type t in m: {t, ...}. */
static void begin(struct proto_map *m, msgpack_packer *pk, const char *t)
{
        proto_map_begin(m, pk);
        proto_map_kstr(m, "t", t);
}

/* Starts a record of type t about session p: {t, session, ...}. */
static void begin_session(struct proto_map *m, msgpack_packer *pk, const char *t,
                          const struct reg_party *p)
{
        begin(m, pk, t);
        proto_map_kbin(m, "session", p->session, PROTO_SESSION_LEN);
}

void jrec_pack_header(msgpack_packer *pk, uint64_t serial, uint64_t next_id,
                      uint64_t next_lease, uint64_t next_alloc)
{
        struct proto_map m;

        begin(&m, pk, "H");
        proto_map_ku64(&m, "version", JREC_VERSION);
        proto_map_ku64(&m, "serial", serial);
        proto_map_ku64(&m, "next_id", next_id);
        proto_map_ku64(&m, "next_lease", next_lease);
        proto_map_ku64(&m, "next_alloc", next_alloc);
        proto_map_end(&m);
}

void jrec_pack_session(msgpack_packer *pk, const struct reg_party *p)
{
        struct proto_map m;

        begin_session(&m, pk, "S", p);
        proto_map_ku64(&m, "pid", p->pid);
        proto_map_ku64(&m, "uid", p->uid);
        proto_map_ku64(&m, "gid", p->gid);
        proto_map_ku64(&m, "start_time", p->start_time);
        proto_map_end(&m);
}

void jrec_pack_session_end(msgpack_packer *pk, const struct reg_party *p)
{
        struct proto_map m;

        begin_session(&m, pk, "E", p);
        proto_map_end(&m);
}

void jrec_pack_missed(msgpack_packer *pk, const struct reg_party *p, uint64_t id,
                      const char *name, size_t len)
{
        struct proto_map m;

        begin_session(&m, pk, "M", p);
        proto_map_ku64(&m, "id", id);
        proto_map_kstrn(&m, "name", name, len);
        proto_map_end(&m);
}

/* An allocation entry's fields, flat in map m. */
static void pack_alloc_fields(struct proto_map *m, const struct alloc *a)
{
        proto_map_ku64(m, "alloc", a->id);
        proto_map_ku64(m, "akind", a->kind);
        proto_map_ku64(m, "asize", a->size);
        proto_map_ku64(m, "buffer_id", a->buffer_id);
        proto_map_ku64(m, "auid", a->uid);
        proto_map_kbin(m, "handle", a->handle, PROTO_IPC_HANDLE_LEN);
        proto_map_kbin(m, "key", a->key, PROTO_ALLOC_KEY_LEN);
}

/* An allocation entry as a map of its own. */
static void pack_alloc(msgpack_packer *pk, const struct alloc *a)
{
        struct proto_map m;

        proto_map_begin(&m, pk);
        pack_alloc_fields(&m, a);
        proto_map_end(&m);
}

static void pack_cuda(msgpack_packer *pk, const struct reg_cuda *rc)
{
        const struct alloc *a = rc->alloc;
        struct proto_map m;

        proto_map_begin(&m, pk);
        proto_map_kbin(&m, "device", rc->device, PROTO_UUID_LEN);
        pack_alloc_fields(&m, a);
        if (rc->has_event)
                proto_map_kbin(&m, "event", rc->event, PROTO_IPC_HANDLE_LEN);
        if (rc->n_chunks > 1) {
                /* The chunks after the first, in address order. */
                proto_map_key(&m, "chunks");
                msgpack_pack_array(pk, rc->n_chunks - 1);
                for (uint32_t i = 1; i < rc->n_chunks; i++)
                        pack_alloc(pk, rc->chunks[i]);
        }
        if (a->pool) {
                proto_map_key(&m, "pool");
                pack_alloc(pk, a->pool);
        }
        if (rc->copied)
                proto_map_kstr(&m, "copied", rc->copied);
        if (a->cacheable)
                proto_map_kbool(&m, "cacheable", true);
        proto_map_end(&m);
}

/* A batch's parts, memfd count, arrow description and event. */
static void pack_batch(msgpack_packer *pk, const struct reg_batch *b)
{
        struct proto_map m, pm;

        proto_map_begin(&m, pk);
        proto_map_ku64(&m, "memfds", b->n_memfds);
        proto_map_kbin(&m, "arrow", b->arrow, b->arrow_len);
        if (b->has_event)
                proto_map_kbin(&m, "event", b->event, PROTO_IPC_HANDLE_LEN);
        proto_map_key(&m, "parts");
        msgpack_pack_array(pk, b->n_parts);
        for (uint32_t i = 0; i < b->n_parts; i++) {
                const struct batch_part *p = &b->parts[i];
                proto_map_begin(&pm, pk);
                proto_map_ku64(&pm, "kind", p->kind);
                proto_map_ku64(&pm, "size", p->size);
                proto_map_ku64(&pm, "offset", p->offset);
                if (p->kind == PROTO_KIND_HOST) {
                        proto_map_ku64(&pm, "memfd", p->memfd);
                        proto_map_kbool(&pm, "shared_write", p->shared_write);
                }
                if (p->cuda) {
                        proto_map_key(&pm, "cuda");
                        pack_cuda(pk, p->cuda);
                }
                proto_map_end(&pm);
        }
        proto_map_end(&m);
}

void jrec_pack_reg(msgpack_packer *pk, const struct reg *r, const char *exe)
{
        struct proto_map m;

        begin(&m, pk, "A");
        proto_map_ku64(&m, "id", r->id);
        proto_map_kstrn(&m, "name", r->name, r->name_len);
        proto_map_ku64(&m, "kind", r->kind);
        proto_map_ku64(&m, "size", r->size);
        proto_map_ku64(&m, "offset", r->offset);
        proto_map_ku64(&m, "created_ms", r->created_ms);
        proto_map_kbool(&m, "ephemeral", r->ephemeral);
        proto_map_kbool(&m, "revocable", r->revocable);
        proto_map_ku64(&m, "pid", r->pid);
        proto_map_ku64(&m, "uid", r->uid);
        proto_map_ku64(&m, "gid", r->gid);
        proto_map_kstr(&m, "exe", exe ? exe : "");
        if (r->owner)
                proto_map_kbin(&m, "session", r->owner->session, PROTO_SESSION_LEN);
        if (r->meta_len > 0)
                proto_map_kbin(&m, "meta", r->meta, r->meta_len);
        if (r->access) {
                proto_map_key(&m, "access");
                proto_access_pack(pk, r->access);
        }
        if (r->cuda) {
                proto_map_key(&m, "cuda");
                pack_cuda(pk, r->cuda);
        }
        if (r->batch) {
                proto_map_key(&m, "batch");
                pack_batch(pk, r->batch);
        }
        if (r->expires_ms)
                proto_map_ku64(&m, "expires_ms", r->expires_ms);
        proto_map_end(&m);
}

void jrec_pack_cuda_changed(msgpack_packer *pk, const struct reg *r)
{
        struct proto_map m;

        begin(&m, pk, "C");
        proto_map_ku64(&m, "id", r->id);
        proto_map_ku64(&m, "kind", r->kind);
        proto_map_ku64(&m, "offset", r->offset);
        proto_map_kbool(&m, "ephemeral", r->ephemeral);
        proto_map_kbool(&m, "revocable", r->revocable);
        proto_map_key(&m, "cuda");
        pack_cuda(pk, r->cuda);
        proto_map_end(&m);
}

void jrec_pack_lease(msgpack_packer *pk, const struct lease *l)
{
        struct proto_map m;

        begin(&m, pk, "L");
        proto_map_ku64(&m, "id", l->id);
        proto_map_ku64(&m, "reg", l->reg->id);
        proto_map_kbin(&m, "session", l->holder->session, PROTO_SESSION_LEN);
        proto_map_end(&m);
}

void jrec_pack_id(msgpack_packer *pk, char type, uint64_t id)
{
        const char t[2] = { type, '\0' };
        struct proto_map m;

        begin(&m, pk, t);
        proto_map_ku64(&m, "id", id);
        proto_map_end(&m);
}

/* ---- reading ------------------------------------------------------------ */

static int get_u32(const msgpack_object *m, const char *key, uint32_t *ret)
{
        uint64_t v;

        if (proto_get_u64(m, key, &v) < 0 || v > UINT32_MAX)
                return -EINVAL;
        *ret = (uint32_t)v;
        return 0;
}

static int get_fixed_bin(const msgpack_object *m, const char *key, uint8_t *out, size_t len)
{
        const uint8_t *b;
        size_t n;

        if (proto_get_bin(m, key, &b, &n) < 0 || n != len)
                return -EINVAL;
        memcpy(out, b, len);
        return 0;
}

int jrec_type(const msgpack_object *m, char *ret)
{
        const char *t;
        size_t tlen;

        if (proto_get_str(m, "t", &t, &tlen) < 0 || tlen != 1)
                return -EINVAL;
        *ret = t[0];
        return 0;
}

int jrec_decode_header(const msgpack_object *m, struct jrec_header *ret)
{
        uint64_t version;

        if (proto_get_u64(m, "version", &version) < 0 ||
            proto_get_u64(m, "next_id", &ret->next_id) < 0 ||
            proto_get_u64(m, "next_lease", &ret->next_lease) < 0 ||
            proto_get_u64(m, "next_alloc", &ret->next_alloc) < 0)
                return -EINVAL;
        if (version != JREC_VERSION)
                return -EPROTONOSUPPORT;
        if (ret->next_id >= JREC_ID_LIMIT || ret->next_lease >= JREC_ID_LIMIT ||
            ret->next_alloc >= JREC_ID_LIMIT)
                return -EINVAL;
        return 0;
}

uint64_t jrec_header_serial(const msgpack_object *m)
{
        uint64_t serial = 0;

        (void)proto_get_u64(m, "serial", &serial);
        return serial;
}

int jrec_get_token(const msgpack_object *m, uint8_t token[PROTO_SESSION_LEN])
{
        return get_fixed_bin(m, "session", token, PROTO_SESSION_LEN);
}

int jrec_decode_session(const msgpack_object *m, struct jrec_session *ret)
{
        if (jrec_get_token(m, ret->token) < 0 || get_u32(m, "pid", &ret->pid) < 0 ||
            get_u32(m, "uid", &ret->uid) < 0 || get_u32(m, "gid", &ret->gid) < 0 ||
            proto_get_u64(m, "start_time", &ret->start_time) < 0)
                return -EINVAL;
        return 0;
}

int jrec_decode_missed(const msgpack_object *m, struct jrec_missed *ret)
{
        if (jrec_get_token(m, ret->token) < 0 || proto_get_u64(m, "id", &ret->id) < 0 ||
            proto_get_str(m, "name", &ret->name, &ret->name_len) < 0 || ret->name_len == 0 ||
            ret->name_len > PROTO_NAME_MAX)
                return -EINVAL;
        return 0;
}

int jrec_decode_lease(const msgpack_object *m, struct jrec_lease *ret)
{
        if (proto_get_u64(m, "id", &ret->id) < 0 || ret->id == 0 || ret->id >= JREC_ID_LIMIT ||
            proto_get_u64(m, "reg", &ret->reg) < 0 || jrec_get_token(m, ret->token) < 0)
                return -EINVAL;
        return 0;
}

int jrec_get_id(const msgpack_object *m, uint64_t *ret)
{
        return proto_get_u64(m, "id", ret);
}

int jrec_decode_reg(const msgpack_object *m, struct reg_params *p)
{
        const char *why;
        uint64_t kind;

        if (proto_get_u64(m, "id", &p->id) < 0 || p->id == 0 || p->id >= JREC_ID_LIMIT ||
            proto_get_str(m, "name", &p->name, &p->name_len) < 0 ||
            proto_name_check(p->name, p->name_len, &why) < 0 ||
            proto_get_u64(m, "kind", &kind) < 0 || kind >= _PROTO_KIND_MAX ||
            proto_get_u64(m, "size", &p->size) < 0 || p->size == 0 ||
            proto_get_u64(m, "offset", &p->offset) < 0 || p->offset > UINT64_MAX - p->size ||
            proto_get_u64(m, "created_ms", &p->created_ms) < 0 ||
            proto_get_bool(m, "ephemeral", &p->ephemeral) < 0 ||
            proto_get_bool(m, "revocable", &p->revocable) < 0 ||
            get_u32(m, "pid", &p->pid) < 0 || get_u32(m, "uid", &p->uid) < 0 ||
            get_u32(m, "gid", &p->gid) < 0)
                return -EINVAL;
        p->kind = (unsigned)kind;
        return 0;
}

void jrec_get_exe(const msgpack_object *m, const char **ret, size_t *ret_len)
{
        (void)proto_get_str(m, "exe", ret, ret_len);
}

int jrec_get_expires(const msgpack_object *m, uint64_t *ret)
{
        return proto_get_u64(m, "expires_ms", ret) == -EINVAL ? -EINVAL : 0;
}

/* The meta a record carries goes out as it is in every record of the
 * registration: it must be what register would have kept. */
int jrec_get_meta(const msgpack_object *m, const uint8_t **ret, size_t *ret_len)
{
        struct proto_meta meta;
        struct proto_msg msg;
        char why[128];
        int r;

        *ret = NULL;
        *ret_len = 0;
        if (proto_get_bin(m, "meta", ret, ret_len) == -EINVAL)
                return -EINVAL;
        if (*ret_len == 0)
                return 0;
        r = proto_decode(*ret, *ret_len, &msg, NULL);
        if (r < 0)
                return r == -ENOMEM ? r : -EINVAL;
        r = proto_meta_check(msg.root, &meta, why, sizeof(why));
        proto_msg_free(&msg);
        return r;
}

int jrec_get_access(const msgpack_object *m, struct proto_access **ret)
{
        const msgpack_object *sub;
        struct proto_access *a;
        char why[128];

        *ret = NULL;
        if (proto_get_map(m, "access", &sub) < 0)
                return 0;
        a = malloc(sizeof(*a));
        if (!a)
                return -ENOMEM;
        if (proto_access_decode(sub, PROTO_ACCESS_FULL, a, why, sizeof(why)) < 0) {
                free(a);
                return -EINVAL;
        }
        *ret = a;
        return 0;
}

const msgpack_object *jrec_get_cuda(const msgpack_object *m)
{
        const msgpack_object *sub;

        return proto_get_map(m, "cuda", &sub) < 0 ? NULL : sub;
}

int jrec_decode_cuda_changed(const msgpack_object *m, struct jrec_cuda_changed *ret)
{
        if (proto_get_u64(m, "id", &ret->id) < 0 || proto_get_u64(m, "kind", &ret->kind) < 0 ||
            ret->kind == PROTO_KIND_HOST || ret->kind >= PROTO_BUFFER_KINDS ||
            proto_get_u64(m, "offset", &ret->offset) < 0 ||
            proto_get_bool(m, "ephemeral", &ret->ephemeral) < 0 ||
            proto_get_bool(m, "revocable", &ret->revocable) < 0 ||
            !(ret->cuda = jrec_get_cuda(m)))
                return -EINVAL;
        return 0;
}

int jrec_get_device(const msgpack_object *cuda, uint8_t device[PROTO_UUID_LEN])
{
        return get_fixed_bin(cuda, "device", device, PROTO_UUID_LEN);
}

const msgpack_object *jrec_get_pool(const msgpack_object *cuda)
{
        const msgpack_object *sub;

        return proto_get_map(cuda, "pool", &sub) < 0 ? NULL : sub;
}

bool jrec_get_event(const msgpack_object *cuda, uint8_t event[PROTO_IPC_HANDLE_LEN])
{
        return get_fixed_bin(cuda, "event", event, PROTO_IPC_HANDLE_LEN) == 0;
}

bool jrec_get_cacheable(const msgpack_object *cuda)
{
        bool cacheable = false;

        return proto_get_bool(cuda, "cacheable", &cacheable) == 0 && cacheable;
}

int jrec_get_chunks(const msgpack_object *cuda, const msgpack_object **ret)
{
        return proto_get_array(cuda, "chunks", ret);
}

int jrec_get_copied(const msgpack_object *cuda, const char **ret, size_t *ret_len)
{
        return proto_get_str(cuda, "copied", ret, ret_len);
}

int jrec_decode_alloc(const msgpack_object *m, struct jrec_alloc *ret)
{
        if (m->type != MSGPACK_OBJECT_MAP || proto_get_u64(m, "alloc", &ret->id) < 0 ||
            proto_get_u64(m, "akind", &ret->kind) < 0 ||
            proto_get_u64(m, "asize", &ret->size) < 0 ||
            proto_get_u64(m, "buffer_id", &ret->buffer_id) < 0 ||
            get_u32(m, "auid", &ret->uid) < 0 ||
            get_fixed_bin(m, "handle", ret->handle, sizeof(ret->handle)) < 0 ||
            get_fixed_bin(m, "key", ret->key, sizeof(ret->key)) < 0 || ret->id == 0 ||
            ret->id >= JREC_ID_LIMIT)
                return -EINVAL;
        return 0;
}

int jrec_decode_batch(const msgpack_object *m, struct jrec_batch *ret)
{
        const msgpack_object *b;
        uint64_t n;
        size_t len = 0;
        int r;

        if (proto_get_map(m, "batch", &b) < 0 || proto_get_u64(b, "memfds", &n) < 0 ||
            n > PROTO_MAX_FDS || proto_get_bin(b, "arrow", &ret->arrow, &ret->arrow_len) < 0 ||
            ret->arrow_len == 0 || proto_get_array(b, "parts", &ret->parts) < 0 ||
            ret->parts->via.array.size == 0 ||
            ret->parts->via.array.size > PROTO_BATCH_PARTS_MAX)
                return -EINVAL;
        ret->n_memfds = (uint32_t)n;
        r = proto_get_bin(b, "event", &ret->event, &len);
        if (r == -EINVAL || (r == 0 && len != PROTO_IPC_HANDLE_LEN))
                return -EINVAL;
        if (r == -ENOENT)
                ret->event = NULL;
        return 0;
}

int jrec_decode_part(const msgpack_object *m, uint32_t n_memfds, struct jrec_part *ret)
{
        uint64_t kind, memfd = 0;

        memset(ret, 0, sizeof(*ret));
        if (m->type != MSGPACK_OBJECT_MAP || proto_get_u64(m, "kind", &kind) < 0 ||
            kind >= PROTO_BUFFER_KINDS || proto_get_u64(m, "size", &ret->size) < 0 ||
            ret->size == 0 || proto_get_u64(m, "offset", &ret->offset) < 0 ||
            ret->offset > UINT64_MAX - ret->size)
                return -EINVAL;
        ret->kind = (unsigned)kind;
        if (kind == PROTO_KIND_HOST) {
                if (proto_get_u64(m, "memfd", &memfd) < 0 || memfd >= n_memfds ||
                    proto_get_bool(m, "shared_write", &ret->shared_write) < 0)
                        return -EINVAL;
                ret->memfd = (uint32_t)memfd;
                return 0;
        }
        ret->cuda = jrec_get_cuda(m);
        return ret->cuda ? 0 : -EINVAL;
}
