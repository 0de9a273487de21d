/* info.c: buffer metadata out to the wire, registration records back in.
 *
 * A decoded record lives in one heap block: the gpuipc_info first, then its
 * arrays, then its strings.  One free() releases it, and no pointer inside
 * can outlive the others.
 */
#include <errno.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "batchint.h"

/* ---- meta -> wire ------------------------------------------------------ */

int gpuipc__sized_check(const void *p, size_t size, size_t v1, size_t known,
                        const char **ret_why)
{
        const unsigned char *b = p;

        if (size < v1) {
                *ret_why = "its size field is not set: initialise it with its _INIT macro";
                return -EINVAL;
        }
        for (size_t i = known; i < size; i++)
                if (b[i]) {
                        *ret_why = "it sets fields this version of libgpuipc does not know";
                        return -E2BIG;
                }
        return 0;
}

int gpuipc__meta_check(const gpuipc_meta *m, const char **ret_why)
{
        const char *why = NULL;
        int r;

        if (!m)
                return 0;
        r = gpuipc__sized_check(m, m->size, GPUIPC__META_V1, sizeof(*m), ret_why);
        if (r < 0)
                return r;
        if (m->dtype && strlen(m->dtype) > PROTO_DTYPE_MAX)
                why = "dtype is longer than 32 bytes";
        else if (m->ndim > PROTO_NDIM_MAX)
                why = "more than 32 dimensions";
        else if (m->ndim > 0 && !m->shape)
                why = "ndim is set but shape is NULL";
        else if (m->n_user > PROTO_USER_MAX_ENTRIES)
                why = "more than 32 user metadata entries";
        else if (m->n_user > 0 && (!m->user_keys || !m->user_values))
                why = "n_user is set but user_keys or user_values is NULL";
        for (uint32_t i = 0; !why && i < m->ndim; i++)
                if (m->shape[i] < 0)
                        why = "a shape entry is negative";
        for (uint32_t i = 0; !why && i < m->n_user; i++) {
                if (!m->user_keys[i] || !m->user_values[i])
                        why = "a user metadata key or value is NULL";
                else if (strlen(m->user_keys[i]) > PROTO_USER_KEY_MAX)
                        why = "a user metadata key is longer than 64 bytes";
                else if (strlen(m->user_values[i]) > PROTO_USER_VALUE_MAX)
                        why = "a user metadata value is longer than 1024 bytes";
        }
        if (why) {
                *ret_why = why;
                return -EINVAL;
        }
        return 0;
}

uint32_t gpuipc__meta_keys(const gpuipc_meta *m)
{
        if (!m)
                return 0;
        return (m->dtype && m->dtype[0]) + (m->ndim > 0) + (m->ndim > 0 && m->strides) +
               (m->n_user > 0);
}

static void pack_i64_array(struct proto_map *map, const char *key, const int64_t *v,
                           uint32_t n)
{
        proto_map_key(map, key);
        msgpack_pack_array(map->pk, n);
        for (uint32_t i = 0; i < n; i++)
                msgpack_pack_int64(map->pk, v[i]);
}

/* The keys match gpuipc__meta_keys(), which callers count the meta by. */
void gpuipc__meta_pack(msgpack_packer *pk, const gpuipc_meta *m)
{
        struct proto_map map, user;

        proto_map_begin(&map, pk);
        if (m->dtype && m->dtype[0])
                proto_map_kstr(&map, "dtype", m->dtype);
        if (m->ndim > 0)
                pack_i64_array(&map, "shape", m->shape, m->ndim);
        if (m->ndim > 0 && m->strides)
                pack_i64_array(&map, "strides", m->strides, m->ndim);
        if (m->n_user > 0) {
                proto_map_key(&map, "user");
                proto_map_begin(&user, pk);
                for (uint32_t i = 0; i < m->n_user; i++)
                        proto_map_kstr(&user, m->user_keys[i], m->user_values[i]);
                proto_map_end(&user);
        }
        proto_map_end(&map);
}

/* ---- wire -> gpuipc_info ----------------------------------------------- */

/* The fields of a record, checked, before they are copied out. */
struct rec {
        gpuipc_info info;               /* the scalar fields */
        const msgpack_object *name, *device, *dtype, *shape, *strides, *user, *exe;
        struct proto_access access;
        const msgpack_object *copied;
        const msgpack_object *holders;  /* array of maps, or NULL */
        struct gpuipc__batchrec batch;  /* GPUIPC_KIND_BATCH */
        size_t bytes;                   /* size of the block to allocate */
};

static size_t str_bytes(const msgpack_object *o)
{
        return o ? o->via.str.size + 1 : 1;
}

/* Optional str: absent is fine, anything but a str is not. */
static int opt_str(const msgpack_object *map, const char *key, const msgpack_object **ret)
{
        const msgpack_object *o = proto_get_present(map, key);

        if (!o) {
                *ret = NULL;
                return 0;
        }
        if (o->type != MSGPACK_OBJECT_STR)
                return -EBADMSG;
        *ret = o;
        return 0;
}

static int opt_u32(const msgpack_object *map, const char *key, uint32_t *ret)
{
        uint64_t v = 0;
        int r = proto_get_u64(map, key, &v);

        if (r == -EINVAL || v > UINT32_MAX)
                return -EBADMSG;
        *ret = (uint32_t)v;
        return 0;
}

static int opt_u64(const msgpack_object *map, const char *key, uint64_t *ret)
{
        uint64_t v = 0;

        if (proto_get_u64(map, key, &v) == -EINVAL)
                return -EBADMSG;
        *ret = v;
        return 0;
}

/* The user metadata pairs: meta.user, or a batch's schema metadata (a
 * checked map of strs). */
static void set_user(struct rec *r, const msgpack_object *user)
{
        for (uint32_t i = 0; i < user->via.map.size; i++) {
                const msgpack_object_kv *kv = &user->via.map.ptr[i];
                r->bytes += str_bytes(&kv->key) + str_bytes(&kv->val);
        }
        r->user = user;
        r->info.n_user = user->via.map.size;
        r->bytes += 2 * (size_t)r->info.n_user * sizeof(char *);
}

/* A batch's parts and columns (batchdesc.c), laid out in the block too. */
static int parse_batch(const msgpack_object *reg, struct rec *r)
{
        int ret = gpuipc__batchrec_parse(reg, &r->batch);

        if (ret < 0)
                return ret;
        /* A batch carries no meta; its schema metadata is the user's. */
        if (r->batch.metadata)
                set_user(r, r->batch.metadata);
        r->copied = r->batch.copied;
        r->info.has_event = proto_get(reg, "event") != NULL;
        r->bytes += r->batch.struct_bytes + r->batch.string_bytes;
        return 0;
}

static int parse_meta(const msgpack_object *meta, struct rec *r)
{
        struct proto_meta m;
        char why[128];

        if (proto_meta_check(meta, &m, why, sizeof(why)) < 0)
                return -EBADMSG;
        r->dtype = m.dtype;
        r->shape = m.shape;
        r->info.ndim = m.shape ? m.shape->via.array.size : 0;
        r->strides = r->info.ndim > 0 ? m.strides : NULL;
        r->bytes += 2 * (size_t)r->info.ndim * sizeof(int64_t);
        if (m.user)
                set_user(r, m.user);
        return 0;
}

static int parse_owner(const msgpack_object *owner, struct rec *r)
{
        bool connected = true;

        if (opt_u32(owner, "pid", &r->info.owner_pid) < 0 ||
            opt_u32(owner, "uid", &r->info.owner_uid) < 0 ||
            opt_u32(owner, "gid", &r->info.owner_gid) < 0 ||
            proto_get_bool(owner, "connected", &connected) == -EINVAL ||
            opt_str(owner, "exe", &r->exe) < 0)
                return -EBADMSG;
        if (!connected)
                r->info.flags |= GPUIPC_INFO_OWNER_GONE;
        return 0;
}

int gpuipc__info_cuda(const msgpack_object *reg, gpuipc_info *info,
                      const msgpack_object **ret_copied)
{
        struct proto_cuda_view v;

        if (proto_cuda_decode(reg, info->kind == GPUIPC_KIND_CUDA_VMM, &v) < 0)
                return -EBADMSG;
        info->alloc_id = v.alloc_id;
        info->alloc_size = v.chunks ? v.chunks_size : v.alloc_size;
        info->alloc_regs = v.alloc_regs;
        info->n_chunks = v.n_chunks;
        info->buffer_id = v.buffer_id;
        info->has_event = v.has_event;
        *ret_copied = v.copied;
        return 0;
}

/* access {public, uids, gids, group, group_gid}. */
static int parse_access(const msgpack_object *acc, struct rec *r)
{
        char why[128];

        if (proto_access_decode(acc, 0, &r->access, why, sizeof(why)) < 0)
                return -EBADMSG;
        r->info.access_public = r->access.public_;
        r->info.n_access_uids = r->access.n_uids;
        r->info.n_access_gids = r->access.n_gids;
        r->bytes += ((size_t)r->info.n_access_uids + r->info.n_access_gids) * sizeof(uint32_t);
        return 0;
}

/* Most holders a record may list (the daemon sends at most 32). */
#define HOLDERS_MAX 1024u

/* holders [{lease, pid, uid, exe, since_ms}]: each checked here, copied
 * out in gpuipc__info_decode. */
static int parse_holders(const msgpack_object *reg, struct rec *r)
{
        const msgpack_object *a = proto_get_present(reg, "holders");

        if (!a)
                return 0;
        if (a->type != MSGPACK_OBJECT_ARRAY || a->via.array.size > HOLDERS_MAX)
                return -EBADMSG;
        for (uint32_t i = 0; i < a->via.array.size; i++) {
                const msgpack_object *h = &a->via.array.ptr[i], *exe;
                uint64_t u64;
                uint32_t u32;
                if (h->type != MSGPACK_OBJECT_MAP || opt_u64(h, "lease", &u64) < 0 ||
                    opt_u64(h, "since_ms", &u64) < 0 || opt_u32(h, "pid", &u32) < 0 ||
                    opt_u32(h, "uid", &u32) < 0 || opt_str(h, "exe", &exe) < 0)
                        return -EBADMSG;
                r->bytes += sizeof(gpuipc_holder) + str_bytes(exe);
        }
        r->holders = a;
        r->info.n_holders = a->via.array.size;
        return 0;
}

static int parse_rec(const msgpack_object *reg, struct rec *r)
{
        const msgpack_object *kind, *meta, *owner, *acc;
        bool ephemeral = false;
        int k;

        memset(r, 0, sizeof(*r));
        r->bytes = sizeof(gpuipc_info);
        if (!reg || reg->type != MSGPACK_OBJECT_MAP)
                return -EBADMSG;
        if (proto_get_u64(reg, "id", &r->info.id) < 0 ||
            proto_get_u64(reg, "size", &r->info.size) < 0 ||
            opt_str(reg, "name", &r->name) < 0 || !r->name ||
            r->name->via.str.size == 0 ||
            memchr(r->name->via.str.ptr, '\0', r->name->via.str.size) ||
            opt_str(reg, "kind", &kind) < 0 || !kind)
                return -EBADMSG;
        k = proto_kind_from_name(kind->via.str.ptr, kind->via.str.size);
        if (k < 0)
                return -EBADMSG;
        r->info.kind = (gpuipc_kind)k;
        if (opt_u64(reg, "offset", &r->info.offset) < 0 ||
            opt_u64(reg, "created_ms", &r->info.created_ms) < 0 ||
            opt_u32(reg, "leases", &r->info.leases) < 0 ||
            opt_u64(reg, "expires_ms", &r->info.expires_ms) < 0 ||
            opt_str(reg, "device", &r->device) < 0 ||
            proto_get_bool(reg, "ephemeral", &ephemeral) == -EINVAL)
                return -EBADMSG;
        if (ephemeral)
                r->info.flags |= GPUIPC_INFO_EPHEMERAL;
        if (proto_obj_str_eq(proto_get(reg, "state"), "unregistered"))
                r->info.flags |= GPUIPC_INFO_UNREGISTERED;
        if (proto_get_map(reg, "owner", &owner) == 0 && parse_owner(owner, r) < 0)
                return -EBADMSG;
        if (proto_get_map(reg, "meta", &meta) == 0 && parse_meta(meta, r) < 0)
                return -EBADMSG;
        if (r->info.kind == GPUIPC_KIND_BATCH) {
                k = parse_batch(reg, r);
                if (k < 0)
                        return k;
        } else if (r->info.kind != GPUIPC_KIND_HOST &&
                   gpuipc__info_cuda(reg, &r->info, &r->copied) < 0) {
                return -EBADMSG;
        }
        if (proto_get_map(reg, "access", &acc) == 0 && parse_access(acc, r) < 0)
                return -EBADMSG;
        if (parse_holders(reg, r) < 0)
                return -EBADMSG;
        r->bytes += str_bytes(r->name) + str_bytes(r->device) + str_bytes(r->dtype) +
                    str_bytes(r->exe) + strlen(r->access.group) + 1 + str_bytes(r->copied);
        return 0;
}

/* An embedded NUL simply ends the C string early, which is all a C caller
 * could see anyway. */
const char *gpuipc__put_str(char **pos, const msgpack_object *o)
{
        char *s = *pos;
        size_t n = o && o->type == MSGPACK_OBJECT_STR ? o->via.str.size : 0;

        if (n)
                memcpy(s, o->via.str.ptr, n);
        s[n] = '\0';
        *pos += n + 1;
        return s;
}

int gpuipc__info_decode(const msgpack_object *reg, gpuipc_info **ret_info)
{
        struct rec r;
        gpuipc_info *info;
        gpuipc_holder *holders;
        int64_t *shape, *strides;
        const char **keys, **values;
        uint32_t *uids, *gids;
        char *pos, *batch;
        int ret;

        ret = parse_rec(reg, &r);
        if (ret < 0) {
                gpuipc__batchrec_free(&r.batch);
                return ret;
        }
        _Static_assert(alignof(gpuipc_info) >= alignof(int64_t), "layout");
        _Static_assert(sizeof(gpuipc_info) % alignof(int64_t) == 0, "layout");
        _Static_assert(sizeof(gpuipc_holder) % alignof(int64_t) == 0, "layout");
        info = malloc(r.bytes);
        if (!info) {
                gpuipc__batchrec_free(&r.batch);
                return -ENOMEM;
        }
        *info = r.info;
        holders = (gpuipc_holder *)(info + 1);
        shape = (int64_t *)(holders + r.info.n_holders);
        strides = shape + r.info.ndim;
        keys = (const char **)(strides + r.info.ndim);
        values = keys + r.info.n_user;
        batch = (char *)(values + r.info.n_user);       /* 8-aligned, a multiple of 8 */
        uids = (uint32_t *)(batch + r.batch.struct_bytes);
        gids = uids + r.info.n_access_uids;
        pos = (char *)(gids + r.info.n_access_gids);

        for (uint32_t i = 0; i < r.info.ndim; i++) {
                (void)proto_obj_i64(&r.shape->via.array.ptr[i], &shape[i]);
                if (r.strides)
                        (void)proto_obj_i64(&r.strides->via.array.ptr[i], &strides[i]);
        }
        info->shape = r.info.ndim ? shape : NULL;
        info->strides = r.strides ? strides : NULL;
        for (uint32_t i = 0; i < r.info.n_user; i++) {
                keys[i] = gpuipc__put_str(&pos, &r.user->via.map.ptr[i].key);
                values[i] = gpuipc__put_str(&pos, &r.user->via.map.ptr[i].val);
        }
        info->user_keys = r.info.n_user ? keys : NULL;
        info->user_values = r.info.n_user ? values : NULL;
        info->name = gpuipc__put_str(&pos, r.name);
        info->device = gpuipc__put_str(&pos, r.device);
        info->dtype = gpuipc__put_str(&pos, r.dtype);
        info->owner_exe = gpuipc__put_str(&pos, r.exe);
        memcpy(uids, r.access.uids, r.info.n_access_uids * sizeof(uint32_t));
        memcpy(gids, r.access.gids, r.info.n_access_gids * sizeof(uint32_t));
        info->access_uids = r.info.n_access_uids ? uids : NULL;
        info->access_gids = r.info.n_access_gids ? gids : NULL;
        info->access_group = strcpy(pos, r.access.group);
        pos += strlen(pos) + 1;
        info->copied = gpuipc__put_str(&pos, r.copied);
        for (uint32_t i = 0; i < r.info.n_holders; i++) {
                const msgpack_object *h = &r.holders->via.array.ptr[i], *exe = NULL;
                uint64_t u64 = 0;
                uint32_t u32 = 0;
                (void)opt_u64(h, "lease", &u64);
                holders[i].lease = u64;
                u64 = 0;
                (void)opt_u64(h, "since_ms", &u64);
                holders[i].since_ms = u64;
                (void)opt_u32(h, "pid", &u32);
                holders[i].pid = u32;
                u32 = 0;
                (void)opt_u32(h, "uid", &u32);
                holders[i].uid = u32;
                (void)opt_str(h, "exe", &exe);
                holders[i].exe = gpuipc__put_str(&pos, exe);
        }
        info->batch = r.info.kind == GPUIPC_KIND_BATCH
                      ? gpuipc__batchdesc_put(&r.batch, batch, &pos) : NULL;
        gpuipc__batchrec_free(&r.batch);
        *ret_info = info;
        return 0;
}

/* The holders follow their gpuipc_info in its heap block (see above). */
const gpuipc_holder *gpuipc_info_holder(const gpuipc_info *info, size_t i)
{
        if (!info || i >= info->n_holders)
                return NULL;
        return (const gpuipc_holder *)(const void *)(info + 1) + i;
}
