/* test_lib_info.c: the library's registration records (client/lib/info.c):
 * a record as the daemon sends it decoded into one gpuipc_info block, and
 * records no daemon sends refused; metadata checked and packed for the
 * wire.  Linked from the library's objects. */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "internal.h"

/* Ways to spoil a record. */
enum spoil {
        INTACT, CUDA_INTACT,
        NO_ID, ID_STR, NO_SIZE, SIZE_NEGATIVE, NO_NAME, EMPTY_NAME, NAME_WITH_NUL, NAME_INT,
        NO_KIND, UNKNOWN_KIND, LEASES_OVER_U32, OFFSET_STR, DEVICE_BIN, EPHEMERAL_STR,
        OWNER_PID_STR, OWNER_CONNECTED_INT, OWNER_EXE_INT, META_SHAPE_NEGATIVE,
        META_STRIDES_SHORT, META_USER_INT, META_33_USER, ACCESS_UIDS_STR, HOLDERS_MAP,
        HOLDER_NOT_MAP, HOLDER_EXE_INT, HOLDER_PID_OVER_U32, HOLDERS_TOO_MANY, CUDA_EVENT_STR,
        CUDA_ALLOC_REGS_OVER_U32, NOT_A_MAP,
        N_SPOILS
};

static void pack_record(msgpack_packer *pk, enum spoil s)
{
        struct proto_map m, sub, user;

        if (s == NOT_A_MAP) {
                msgpack_pack_array(pk, 0);
                return;
        }
        proto_map_begin(&m, pk);
        if (s == ID_STR)
                proto_map_kstr(&m, "id", "7");
        else if (s != NO_ID)
                proto_map_ku64(&m, "id", 7);
        if (s == NAME_WITH_NUL)
                proto_map_kstrn(&m, "name", "a\0b", 3);
        else if (s == EMPTY_NAME)
                proto_map_kstr(&m, "name", "");
        else if (s == NAME_INT)
                proto_map_ku64(&m, "name", 1);
        else if (s != NO_NAME)
                proto_map_kstr(&m, "name", "spark/batch-1");
        if (s == UNKNOWN_KIND)
                proto_map_kstr(&m, "kind", "floppy");
        else if (s == CUDA_INTACT || s == CUDA_EVENT_STR || s == CUDA_ALLOC_REGS_OVER_U32)
                proto_map_kstr(&m, "kind", "cuda-ipc");
        else if (s != NO_KIND)
                proto_map_kstr(&m, "kind", "host");
        if (s == SIZE_NEGATIVE)
                proto_map_ki64(&m, "size", -1);
        else if (s != NO_SIZE)
                proto_map_ku64(&m, "size", 4096);
        if (s == OFFSET_STR)
                proto_map_kstr(&m, "offset", "0");
        else
                proto_map_ku64(&m, "offset", 512);
        proto_map_ku64(&m, "leases", s == LEASES_OVER_U32 ? (uint64_t)UINT32_MAX + 1 : 2);
        proto_map_ku64(&m, "created_ms", 1700000000000ull);
        proto_map_ku64(&m, "expires_ms", 1700000060000ull);
        if (s == DEVICE_BIN)
                proto_map_kbin(&m, "device", "GPU", 3);
        else
                proto_map_kstr(&m, "device", "");
        if (s == EPHEMERAL_STR)
                proto_map_kstr(&m, "ephemeral", "yes");
        else
                proto_map_kbool(&m, "ephemeral", true);
        proto_map_kstr(&m, "state", "unregistered");

        proto_map_key(&m, "owner");
        proto_map_begin(&sub, pk);
        if (s == OWNER_PID_STR)
                proto_map_kstr(&sub, "pid", "4242");
        else
                proto_map_ku64(&sub, "pid", 4242);
        proto_map_ku64(&sub, "uid", 1000);
        proto_map_ku64(&sub, "gid", 1001);
        if (s == OWNER_CONNECTED_INT)
                proto_map_ku64(&sub, "connected", 0);
        else
                proto_map_kbool(&sub, "connected", false);
        if (s == OWNER_EXE_INT)
                proto_map_ku64(&sub, "exe", 1);
        else
                proto_map_kstr(&sub, "exe", "/usr/bin/spark");
        proto_map_end(&sub);

        proto_map_key(&m, "meta");
        proto_map_begin(&sub, pk);
        proto_map_kstr(&sub, "dtype", "float32");
        proto_map_key(&sub, "shape");
        msgpack_pack_array(pk, 2);
        msgpack_pack_int64(pk, 2);
        msgpack_pack_int64(pk, s == META_SHAPE_NEGATIVE ? -3 : 3);
        proto_map_key(&sub, "strides");
        msgpack_pack_array(pk, s == META_STRIDES_SHORT ? 1 : 2);
        msgpack_pack_int64(pk, 12);
        if (s != META_STRIDES_SHORT)
                msgpack_pack_int64(pk, 4);
        proto_map_key(&sub, "user");
        proto_map_begin(&user, pk);
        if (s == META_USER_INT)
                proto_map_ku64(&user, "k", 1);
        else
                proto_map_kstr(&user, "k", "v");
        proto_map_kstr(&user, "epoch", "3");
        for (int i = 0; s == META_33_USER && i < 31; i++) {
                char k[8];
                snprintf(k, sizeof(k), "u%d", i);
                proto_map_kstr(&user, k, "x");
        }
        proto_map_end(&user);
        proto_map_end(&sub);

        proto_map_key(&m, "access");
        proto_map_begin(&sub, pk);
        proto_map_kbool(&sub, "public", false);
        proto_map_key(&sub, "uids");
        if (s == ACCESS_UIDS_STR) {
                proto_pack_str(pk, "1002");
        } else {
                msgpack_pack_array(pk, 2);
                msgpack_pack_uint32(pk, 1002);
                msgpack_pack_uint32(pk, 1003);
        }
        proto_map_key(&sub, "gids");
        msgpack_pack_array(pk, 1);
        msgpack_pack_uint32(pk, 50);
        proto_map_kstr(&sub, "group", "spark");
        proto_map_ku64(&sub, "group_gid", 60);
        proto_map_end(&sub);

        proto_map_key(&m, "holders");
        if (s == HOLDERS_MAP) {
                msgpack_pack_map(pk, 0);
        } else {
                unsigned n = s == HOLDERS_TOO_MANY ? 1025 : 2;
                msgpack_pack_array(pk, n);
                for (unsigned i = 0; i < n; i++) {
                        if (s == HOLDER_NOT_MAP && i == 1) {
                                msgpack_pack_uint32(pk, 1);
                                continue;
                        }
                        proto_map_begin(&sub, pk);
                        proto_map_ku64(&sub, "lease", 100 + i);
                        proto_map_ku64(&sub, "pid", s == HOLDER_PID_OVER_U32 ? 1ull << 33 : 500 + i);
                        proto_map_ku64(&sub, "uid", 2000 + i);
                        proto_map_ku64(&sub, "since_ms", 1700000001000ull + i);
                        if (s == HOLDER_EXE_INT)
                                proto_map_ku64(&sub, "exe", 0);
                        else if (i == 0)
                                proto_map_kstr(&sub, "exe", "/usr/bin/consumer");
                        proto_map_end(&sub);
                }
        }
        if (s == CUDA_EVENT_STR)
                proto_map_kstr(&m, "event", "not a handle");
        else if (s == CUDA_INTACT)
                proto_map_kbin(&m, "event", "\1\2\3\4", 4);
        if (s == CUDA_INTACT || s == CUDA_ALLOC_REGS_OVER_U32) {
                proto_map_key(&m, "alloc");
                proto_map_begin(&sub, pk);
                proto_map_ku64(&sub, "id", 31);
                proto_map_ku64(&sub, "size", 1 << 20);
                proto_map_ku64(&sub, "regs", s == CUDA_INTACT ? 3 : 1ull << 32);
                proto_map_end(&sub);
                proto_map_ku64(&m, "buffer_id", 77);
                proto_map_kstr(&m, "copied", "no export handle type");
        }
        proto_map_end(&m);
}

/* The record, packed and decoded as the library decodes a reply. */
static int decode(enum spoil s, gpuipc_info **ret)
{
        struct proto_out o;
        struct proto_msg msg;
        const msgpack_object *root;
        int r;

        proto_out_init(&o);
        /* In a reply {"reg": RECORD}, since a frame's body must be a map. */
        msgpack_pack_map(&o.pk, 1);
        proto_pack_str(&o.pk, "reg");
        pack_record(&o.pk, s);
        cr_assert_eq(proto_decode((const uint8_t *)o.sb.data + PROTO_HDR_LEN,
                                  o.sb.size - PROTO_HDR_LEN, &msg, NULL), 0);
        root = proto_get(msg.root, "reg");
        cr_assert_not_null(root);
        *ret = NULL;
        r = gpuipc__info_decode(root, ret);
        proto_msg_free(&msg);   /* the record must not point into the reply */
        proto_out_free(&o);
        return r;
}

Test(info, intact_record_in_one_block)
{
        gpuipc_info *i = NULL;
        const gpuipc_holder *h;

        cr_assert_eq(decode(INTACT, &i), 0);
        cr_assert_not_null(i);
        cr_expect_eq(i->id, 7);
        cr_expect_str_eq(i->name, "spark/batch-1");
        cr_expect_eq(i->kind, GPUIPC_KIND_HOST);
        cr_expect_eq(i->size, 4096);
        cr_expect_eq(i->offset, 512);
        cr_expect_eq(i->leases, 2);
        cr_expect_eq(i->created_ms, 1700000000000ull);
        cr_expect_eq(i->expires_ms, 1700000060000ull);
        cr_expect_str_eq(i->device, "");
        cr_expect_eq(i->flags, GPUIPC_INFO_EPHEMERAL | GPUIPC_INFO_UNREGISTERED |
                               GPUIPC_INFO_OWNER_GONE);
        cr_expect(i->owner_pid == 4242 && i->owner_uid == 1000 && i->owner_gid == 1001);
        cr_expect_str_eq(i->owner_exe, "/usr/bin/spark");
        cr_expect_str_eq(i->dtype, "float32");
        cr_assert_eq(i->ndim, 2);
        cr_expect(i->shape[0] == 2 && i->shape[1] == 3);
        cr_assert_not_null(i->strides);
        cr_expect(i->strides[0] == 12 && i->strides[1] == 4);
        cr_assert_eq(i->n_user, 2);
        cr_expect_str_eq(i->user_keys[0], "k");
        cr_expect_str_eq(i->user_values[0], "v");
        cr_expect_str_eq(i->user_keys[1], "epoch");
        cr_expect_str_eq(i->user_values[1], "3");
        cr_expect_eq(i->access_public, 0);
        cr_assert_eq(i->n_access_uids, 2);
        cr_expect(i->access_uids[0] == 1002 && i->access_uids[1] == 1003);
        cr_assert_eq(i->n_access_gids, 1);
        cr_expect_eq(i->access_gids[0], 50);
        cr_expect_str_eq(i->access_group, "spark");
        cr_expect_str_eq(i->copied, "");
        cr_expect_eq(i->alloc_id, 0, "host records have no CUDA fields");
        cr_assert_eq(i->n_holders, 2);
        h = gpuipc_info_holder(i, 0);
        cr_assert_not_null(h);
        cr_expect(h->lease == 100 && h->pid == 500 && h->uid == 2000);
        cr_expect_eq(h->since_ms, 1700000001000ull);
        cr_expect_str_eq(h->exe, "/usr/bin/consumer");
        h = gpuipc_info_holder(i, 1);
        cr_expect(h->lease == 101 && h->pid == 501);
        cr_expect_str_eq(h->exe, "", "no exe: \"\"");
        cr_expect_null(gpuipc_info_holder(i, 2));
        cr_expect_null(gpuipc_info_holder(NULL, 0));
        /* One block: the strings and arrays lie inside it, and one free()
         * releases them all. */
        {
                const char *lo = (const char *)i, *hi = lo + malloc_usable_size(i);
                const void *inside[] = { i->name, i->device, i->dtype, i->shape, i->strides,
                                         i->user_keys, i->user_values[1], i->access_uids,
                                         i->access_gids, i->access_group, i->owner_exe,
                                         i->copied, h, h->exe };
                for (size_t k = 0; k < sizeof(inside) / sizeof(inside[0]); k++)
                        cr_expect((const char *)inside[k] >= lo && (const char *)inside[k] < hi,
                                  "pointer %zu lies outside the record's block", k);
        }
        free(i);
}

Test(info, intact_cuda_record)
{
        gpuipc_info *i = NULL;

        cr_assert_eq(decode(CUDA_INTACT, &i), 0);
        cr_expect_eq(i->kind, GPUIPC_KIND_CUDA_IPC);
        cr_expect_eq(i->alloc_id, 31);
        cr_expect_eq(i->alloc_size, 1 << 20);
        cr_expect_eq(i->alloc_regs, 3);
        cr_expect_eq(i->buffer_id, 77);
        cr_expect(i->has_event);
        cr_expect_str_eq(i->copied, "no export handle type");
        cr_expect_eq(i->n_chunks, 0, "chunks are cuda-vmm's");
        free(i);
}

Test(info, hostile_records_are_refused)
{
        static const char *const names[N_SPOILS] = {
                [NO_ID] = "no id", [ID_STR] = "id a string", [NO_SIZE] = "no size",
                [SIZE_NEGATIVE] = "size negative", [NO_NAME] = "no name",
                [EMPTY_NAME] = "empty name", [NAME_WITH_NUL] = "a NUL in the name",
                [NAME_INT] = "name an int", [NO_KIND] = "no kind", [UNKNOWN_KIND] = "unknown kind",
                [LEASES_OVER_U32] = "leases over 32 bits", [OFFSET_STR] = "offset a string",
                [DEVICE_BIN] = "device a bin", [EPHEMERAL_STR] = "ephemeral a string",
                [OWNER_PID_STR] = "owner pid a string",
                [OWNER_CONNECTED_INT] = "owner connected an int",
                [OWNER_EXE_INT] = "owner exe an int", [META_SHAPE_NEGATIVE] = "negative shape",
                [META_STRIDES_SHORT] = "strides shorter than shape",
                [META_USER_INT] = "user value an int", [META_33_USER] = "33 user entries",
                [ACCESS_UIDS_STR] = "access uids a string", [HOLDERS_MAP] = "holders a map",
                [HOLDER_NOT_MAP] = "a holder not a map", [HOLDER_EXE_INT] = "holder exe an int",
                [HOLDER_PID_OVER_U32] = "holder pid over 32 bits",
                [HOLDERS_TOO_MANY] = "1025 holders", [CUDA_EVENT_STR] = "cuda event a string",
                [CUDA_ALLOC_REGS_OVER_U32] = "alloc regs over 32 bits",
                [NOT_A_MAP] = "not a map",
        };

        for (int s = CUDA_INTACT + 1; s < N_SPOILS; s++) {
                gpuipc_info *i = NULL;
                int r = decode((enum spoil)s, &i);

                cr_expect_eq(r, -EBADMSG, "%s: decoded with %d", names[s], r);
                cr_expect_null(i, "%s: a record came out", names[s]);
                free(i);
        }
        {
                gpuipc_info *i = NULL;
                cr_expect_eq(gpuipc__info_decode(NULL, &i), -EBADMSG);
                cr_expect_null(i);
        }
}

/* ---- meta, out to the wire ------------------------------------------------ */

Test(info, meta_checked_before_it_is_sent)
{
        static const int64_t shape[2] = { 4, 5 }, bad_shape[2] = { 4, -5 };
        static const char *const keys[1] = { "k" }, *const values[1] = { "v" };
        static const char *const null_key[1] = { NULL };
        char long_key[PROTO_USER_KEY_MAX + 2], long_value[PROTO_USER_VALUE_MAX + 2];
        const char *lk[1] = { long_key }, *lv[1] = { long_value };
        const char *why = NULL;
        gpuipc_meta ok = GPUIPC_META_INIT;
        gpuipc_meta m;

        memset(long_key, 'k', sizeof(long_key) - 1);
        long_key[sizeof(long_key) - 1] = '\0';
        memset(long_value, 'v', sizeof(long_value) - 1);
        long_value[sizeof(long_value) - 1] = '\0';
        ok.dtype = "float32";
        ok.ndim = 2;
        ok.shape = shape;
        ok.n_user = 1;
        ok.user_keys = keys;
        ok.user_values = values;
        cr_expect_eq(gpuipc__meta_check(&ok, &why), 0);
        cr_expect_eq(gpuipc__meta_check(NULL, &why), 0, "no meta is fine");

#define REFUSED(field_change, want)                                                   \
        do {                                                                          \
                m = ok;                                                               \
                field_change;                                                         \
                why = NULL;                                                           \
                cr_expect_eq(gpuipc__meta_check(&m, &why), want, #field_change);      \
                cr_expect_not_null(why, #field_change ": no reason");                 \
        } while (0)
        REFUSED(m.dtype = "a-dtype-name-longer-than-thirty-two-bytes", -EINVAL);
        REFUSED(m.ndim = PROTO_NDIM_MAX + 1, -EINVAL);
        REFUSED(m.shape = NULL, -EINVAL);
        REFUSED(m.shape = bad_shape, -EINVAL);
        REFUSED(m.n_user = PROTO_USER_MAX_ENTRIES + 1, -EINVAL);
        REFUSED(m.user_values = NULL, -EINVAL);
        REFUSED(m.user_keys = null_key, -EINVAL);
        REFUSED(m.user_keys = lk, -EINVAL);
        REFUSED(m.user_values = lv, -EINVAL);
        REFUSED(m.size = 0, -EINVAL);
#undef REFUSED
}

Test(info, sized_structs_grow_without_breaking_old_callers)
{
        struct { uint32_t size; uint32_t a; uint32_t later[2]; } s = { .size = sizeof(s), .a = 1 };
        const char *why = NULL;

        /* v1 is the struct up to a; known is what this version knows. */
        cr_expect_eq(gpuipc__sized_check(&s, sizeof(s), 8, 8, &why), 0,
                     "fields it does not know, all zero");
        s.later[1] = 1;
        cr_expect_eq(gpuipc__sized_check(&s, sizeof(s), 8, 8, &why), -E2BIG);
        cr_expect_not_null(why);
        cr_expect_eq(gpuipc__sized_check(&s, 4, 8, 8, &why), -EINVAL, "size below version 1");
        cr_expect_eq(gpuipc__sized_check(&s, 8, 8, 16, &why), 0, "an older caller's struct");
}

Test(info, meta_packed_decodes_as_it_was)
{
        static const int64_t shape[3] = { 2, 3, 4 }, strides[3] = { 48, 16, 4 };
        static const char *const keys[2] = { "a", "b" }, *const values[2] = { "1", "" };
        gpuipc_meta m = GPUIPC_META_INIT;
        struct proto_out o;
        struct proto_msg msg;
        struct proto_meta pm;
        char why[128];

        m.dtype = "int32";
        m.ndim = 3;
        m.shape = shape;
        m.strides = strides;
        m.n_user = 2;
        m.user_keys = keys;
        m.user_values = values;
        cr_expect_eq(gpuipc__meta_keys(&m), 4);
        cr_expect_eq(gpuipc__meta_keys(NULL), 0);
        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 1);
        proto_pack_str(&o.pk, "meta");
        gpuipc__meta_pack(&o.pk, &m);
        cr_assert_eq(proto_decode((const uint8_t *)o.sb.data + PROTO_HDR_LEN,
                                  o.sb.size - PROTO_HDR_LEN, &msg, NULL), 0);
        cr_assert_eq(proto_meta_check(proto_get(msg.root, "meta"), &pm, why, sizeof(why)), 0,
                     "%s", why);
        cr_expect(proto_obj_str_eq(pm.dtype, "int32"));
        cr_assert_not_null(pm.shape);
        cr_expect_eq(pm.shape->via.array.size, 3);
        cr_assert_not_null(pm.strides);
        cr_expect_eq(pm.strides->via.array.ptr[0].via.u64, 48);
        cr_assert_not_null(pm.user);
        cr_expect_eq(pm.user->via.map.size, 2);
        proto_msg_free(&msg);
        proto_out_free(&o);

        /* Only what is set: an empty meta is an empty map. */
        m = (gpuipc_meta)GPUIPC_META_INIT;
        cr_expect_eq(gpuipc__meta_keys(&m), 0);
}
