/* query.c: list, stat and stats. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct gpuipc_list {
        gpuipc_info **items;
        size_t n, cap;
};

size_t gpuipc_list_count(const gpuipc_list *l)
{
        return l ? l->n : 0;
}

const gpuipc_info *gpuipc_list_get(const gpuipc_list *l, size_t i)
{
        return l && i < l->n ? l->items[i] : NULL;
}

void gpuipc_list_free(gpuipc_list *l)
{
        if (!l)
                return;
        for (size_t i = 0; i < l->n; i++)
                free(l->items[i]);
        free(l->items);
        free(l);
}

static int list_add(gpuipc_list *l, const msgpack_object *reg)
{
        gpuipc_info *info;
        int r;

        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 16;
                gpuipc_info **p;
                if (l->n >= GPUIPC__LIST_MAX)
                        return -ENOBUFS;
                p = realloc(l->items, cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                l->items = p;
                l->cap = cap;
        }
        r = gpuipc__info_decode(reg, &info);
        if (r < 0)
                return r;
        l->items[l->n++] = info;
        return 0;
}

static const struct gpuipc__op op_list = { .name = "list", .redo = GPUIPC__REDO_SEND };
static const struct gpuipc__op op_stat = { .name = "stat", .redo = GPUIPC__REDO_SEND };
static const struct gpuipc__op op_stats = { .name = "stats", .redo = GPUIPC__REDO_SEND };

/* Fetches one page: records after `after` into l; *next is 0 when done. */
static int list_page(gpuipc_client *c, const char *prefix, unsigned flags, uint64_t after,
                     gpuipc_list *l, uint64_t *next)
{
        struct gpuipc__reply rp;
        const msgpack_object *regs;
        struct gpuipc__req rq;
        int r;

        gpuipc__request(c, &rq, &op_list, (prefix != NULL) + (after > 0) +
                        !!(flags & GPUIPC_LIST_ALL) + !!(flags & GPUIPC_LIST_HOLDERS));
        if (prefix)
                proto_pack_kstr(&rq.o.pk, "prefix", prefix);
        if (flags & GPUIPC_LIST_ALL)
                proto_pack_kbool(&rq.o.pk, "all", true);
        if (flags & GPUIPC_LIST_HOLDERS)
                proto_pack_kbool(&rq.o.pk, "holders", true);
        if (after > 0)
                proto_pack_ku64(&rq.o.pk, "after", after);
        r = gpuipc__call(c, &rq, NULL, 0, &rp);
        if (r < 0)
                return r;
        r = proto_get_array(rp.msg.root, "regs", &regs);
        if (r < 0) {
                r = gpuipc__fail(c, -EBADMSG, "gpuipcd's list reply has no regs");
                goto out;
        }
        for (uint32_t i = 0; i < regs->via.array.size; i++) {
                r = list_add(l, &regs->via.array.ptr[i]);
                if (r < 0)
                        goto out;
        }
        *next = 0;
        r = proto_get_u64(rp.msg.root, "next", next);
        if (r == -ENOENT)
                r = 0;
        /* The cursor must move forward, or a confused daemon loops us. */
        else if (r < 0 || *next <= after)
                r = gpuipc__fail(c, -EBADMSG, "gpuipcd's list reply has a bad cursor");
out:
        gpuipc__reply_free(&rp);
        return r;
}

int gpuipc_list_fetch(gpuipc_client *c, const char *prefix, unsigned flags,
                      gpuipc_list **ret_list)
{
        gpuipc_list *l;
        uint64_t after = 0, next;
        int r;

        if (!c || !ret_list || (flags & ~(GPUIPC_LIST_ALL | GPUIPC_LIST_HOLDERS)))
                return -EINVAL;
        r = gpuipc__begin(c);
        if (r < 0)
                return r;
        if (prefix && !prefix[0])
                prefix = NULL;
        l = calloc(1, sizeof(*l));
        if (!l)
                return gpuipc__end(c, -ENOMEM);
        do {
                r = list_page(c, prefix, flags, after, l, &next);
                if (r < 0) {
                        gpuipc_list_free(l);
                        return gpuipc__end(c, r);
                }
                after = next;
        } while (next > 0);
        *ret_list = l;
        return 0;
}

int gpuipc_name_stat(gpuipc_client *c, const char *name, gpuipc_list **ret_list)
{
        struct gpuipc__reply rp;
        const msgpack_object *reg;
        struct gpuipc__req rq;
        gpuipc_list *l;
        int r;

        if (!c || !ret_list)
                return -EINVAL;
        r = gpuipc__begin_named(c, name);
        if (r < 0)
                return r;
        gpuipc__request(c, &rq, &op_stat, 1);
        proto_pack_kstr(&rq.o.pk, "name", name);
        r = gpuipc__call(c, &rq, NULL, 0, &rp);
        if (r < 0)
                return gpuipc__end(c, r);
        l = calloc(1, sizeof(*l));
        if (!l)
                r = -ENOMEM;
        else if (proto_get_map(rp.msg.root, "reg", &reg) < 0)
                r = gpuipc__fail(c, -EBADMSG, "gpuipcd's stat reply has no record");
        else
                r = list_add(l, reg);
        gpuipc__reply_free(&rp);
        if (r < 0) {
                gpuipc_list_free(l);
                return gpuipc__end(c, r);
        }
        *ret_list = l;
        return 0;
}

/* ---- stats ------------------------------------------------------------- */

int gpuipc_stats_fetch(gpuipc_client *c, gpuipc_stats **ret_stats)
{
        struct gpuipc__reply rp;
        const msgpack_object *bytes, *cuda = NULL;
        gpuipc_stats *s;
        const char *server = "", *reason = "";
        size_t server_len = 0, reason_len = 0;
        bool avail = false;
        uint64_t v;
        int r;

        if (!c || !ret_stats)
                return -EINVAL;
        r = gpuipc__call_op(c, &op_stats, &rp);
        if (r < 0)
                return r;
        (void)proto_get_str(rp.msg.root, "server", &server, &server_len);
        if (proto_get_map(rp.msg.root, "cuda", &cuda) == 0)
                (void)proto_get_str(cuda, "reason", &reason, &reason_len);
        s = calloc(1, sizeof(*s) + server_len + 1 + reason_len + 1);
        if (!s) {
                gpuipc__reply_free(&rp);
                return gpuipc__end(c, -ENOMEM);
        }
        /* The string sits right after the struct, in the same block. */
        /* Empty strings may come with NULL pointers from msgpack-c. */
        if (server_len)
                memcpy(s + 1, server, server_len);
        s->server = (const char *)(s + 1);
        if (reason_len)
                memcpy((char *)(s + 1) + server_len + 1, reason, reason_len);
        s->cuda_reason = (const char *)(s + 1) + server_len + 1;
        if (cuda && proto_get_bool(cuda, "available", &avail) == 0 && avail)
                s->cuda_available = 1;
        if (cuda && proto_get_u64(cuda, "driver_version", &v) == 0 && v <= UINT32_MAX)
                s->cuda_driver_version = (uint32_t)v;
        if (proto_get_u64(rp.msg.root, "pid", &v) == 0 && v <= UINT32_MAX)
                s->pid = (uint32_t)v;
        if (proto_get_u64(rp.msg.root, "version", &v) == 0 && v <= UINT32_MAX)
                s->protocol = (uint32_t)v;
        (void)proto_get_u64(rp.msg.root, "uptime_ms", &s->uptime_ms);
        (void)proto_get_u64(rp.msg.root, "connections", &s->connections);
        (void)proto_get_u64(rp.msg.root, "registrations", &s->registrations);
        (void)proto_get_u64(rp.msg.root, "leases", &s->leases);
        (void)proto_get_u64(rp.msg.root, "requests", &s->requests);
        (void)proto_get_u64(rp.msg.root, "errors", &s->errors);
        (void)proto_get_u64(rp.msg.root, "copies", &s->copies);
        (void)proto_get_u64(rp.msg.root, "copied_bytes", &s->copied_bytes);
        if (proto_get_map(rp.msg.root, "bytes", &bytes) == 0) {
                (void)proto_get_u64(bytes, "host", &s->bytes_host);
                (void)proto_get_u64(bytes, "cuda-ipc", &s->bytes_cuda_ipc);
                (void)proto_get_u64(bytes, "cuda-vmm", &s->bytes_cuda_vmm);
                (void)proto_get_u64(bytes, "cuda-pool", &s->bytes_cuda_pool);
                (void)proto_get_u64(bytes, "batch", &s->bytes_batch);
        }
        gpuipc__reply_free(&rp);
        *ret_stats = s;
        return 0;
}

void gpuipc_stats_free(gpuipc_stats *s)
{
        free(s);
}
