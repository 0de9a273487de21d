/* admin.c: watch events, revoke and metrics. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* A queued event: the public struct and its strings in one block. */
struct gpuipc__wev {
        struct gpuipc__wev *next;
        gpuipc_event ev;
        char strings[];
};

static int64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void gpuipc__watch_push(gpuipc_client *c, const msgpack_object *root)
{
        const char *type = NULL, *name = NULL, *kind = NULL;
        size_t tlen = 0, nlen = 0, klen = 0;
        struct gpuipc__wev *w;
        uint64_t v;
        int k;

        if (proto_get_str(root, "type", &type, &tlen) < 0 ||
            proto_get_str(root, "name", &name, &nlen) < 0 ||
            proto_get_u64(root, "id", &v) < 0)
                return;         /* malformed: nothing a caller could use */
        if (c->wev_n == GPUIPC__WATCH_QUEUE_MAX) {
                w = c->wev_head;
                c->wev_head = w->next;
                if (!c->wev_head)
                        c->wev_tail = NULL;
                c->wev_n--;
                c->wev_dropped++;
                free(w);
        }
        w = calloc(1, sizeof(*w) + tlen + 1 + nlen + 1);
        if (!w) {
                c->wev_dropped++;
                return;
        }
        if (tlen)
                memcpy(w->strings, type, tlen);
        if (nlen)
                memcpy(w->strings + tlen + 1, name, nlen);
        w->ev.type = w->strings;
        w->ev.name = w->strings + tlen + 1;
        w->ev.id = v;
        if (proto_get_str(root, "kind", &kind, &klen) == 0 &&
            (k = proto_kind_from_name(kind, klen)) >= 0)
                w->ev.kind = (gpuipc_kind)k;
        (void)proto_get_u64(root, "size", &w->ev.size);
        (void)proto_get_u64(root, "lease", &w->ev.lease);
        (void)proto_get_u64(root, "time_ms", &w->ev.time_ms);
        if (proto_get_u64(root, "leases", &v) == 0 && v <= UINT32_MAX)
                w->ev.leases = (uint32_t)v;
        if (proto_get_u64(root, "pid", &v) == 0 && v <= UINT32_MAX)
                w->ev.pid = (uint32_t)v;
        if (proto_get_u64(root, "uid", &v) == 0 && v <= UINT32_MAX)
                w->ev.uid = (uint32_t)v;
        w->ev.dropped = c->wev_dropped;
        c->wev_dropped = 0;
        if (c->wev_tail)
                c->wev_tail->next = w;
        else
                c->wev_head = w;
        c->wev_tail = w;
        c->wev_n++;
}

void gpuipc__watch_clear(gpuipc_client *c)
{
        while (c->wev_head) {
                struct gpuipc__wev *w = c->wev_head;
                c->wev_head = w->next;
                free(w);
        }
        c->wev_tail = NULL;
        c->wev_n = 0;
}

static const struct gpuipc__op op_watch = {
        .name = "watch", .redo = GPUIPC__REDO_SEND, .keep = GPUIPC__KEEP_WATCH
};
static const struct gpuipc__op op_revoke = { .name = "revoke" };
static const struct gpuipc__op op_metrics = { .name = "metrics", .redo = GPUIPC__REDO_SEND };

int gpuipc_event_watch(gpuipc_client *c, const char *prefix)
{
        struct gpuipc__reply rp;
        struct gpuipc__req rq;
        const char *why;
        int r;

        r = gpuipc__begin(c);
        if (r < 0)
                return r;
        if (prefix && !prefix[0])
                prefix = NULL;
        if (prefix && proto_name_check(prefix, strlen(prefix), &why) < 0)
                return gpuipc__fail(c, -EINVAL, "invalid prefix: %s", why);
        gpuipc__request(c, &rq, &op_watch, prefix != NULL);
        if (prefix)
                proto_pack_kstr(&rq.o.pk, "prefix", prefix);
        r = gpuipc__call(c, &rq, NULL, 0, &rp);
        if (r == 0)
                gpuipc__reply_free(&rp);
        return gpuipc__end(c, r);
}

int gpuipc_event_next(gpuipc_client *c, int timeout_ms, gpuipc_event **ret_event)
{
        int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
        struct gpuipc__wev *w;
        int r;

        if (!c || !ret_event)
                return -EINVAL;
        r = gpuipc__begin(c);
        if (r < 0)
                return r;
        while (!c->wev_head) {
                int left = -1;
                if (deadline >= 0) {
                        int64_t d = deadline - now_ms();
                        if (d <= 0)
                                return gpuipc__fail(c, -ETIMEDOUT, "no event within %d ms",
                                                    timeout_ms);
                        left = d > 1000000 ? 1000000 : (int)d;
                }
                r = gpuipc__pump(c, left);
                if (r < 0)
                        return gpuipc__end(c, r);
        }
        w = c->wev_head;
        c->wev_head = w->next;
        if (!c->wev_head)
                c->wev_tail = NULL;
        c->wev_n--;
        /* The caller gets the public part; the block is freed through it. */
        *ret_event = &w->ev;
        return 0;
}

void gpuipc_event_free(gpuipc_event *e)
{
        if (e)
                free((char *)e - offsetof(struct gpuipc__wev, ev));
}

int gpuipc_name_revoke(gpuipc_client *c, const char *name, uint32_t *ret_leases)
{
        uint64_t n = 0;
        int r = gpuipc__name_op(c, &op_revoke, name, &n);

        if (r == 0 && ret_leases)
                *ret_leases = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
        return r;
}

int gpuipc_metrics_fetch(gpuipc_client *c, char **ret_text)
{
        struct gpuipc__reply rp;
        const char *text;
        size_t len;
        char *s;
        int r;

        if (!c || !ret_text)
                return -EINVAL;
        r = gpuipc__call_op(c, &op_metrics, &rp);
        if (r < 0)
                return r;
        if (proto_get_str(rp.msg.root, "text", &text, &len) < 0) {
                gpuipc__reply_free(&rp);
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's metrics reply has no text");
        }
        s = malloc(len + 1);
        if (s) {
                if (len)
                        memcpy(s, text, len);
                s[len] = '\0';
        }
        gpuipc__reply_free(&rp);
        if (!s)
                return gpuipc__end(c, -ENOMEM);
        *ret_text = s;
        return 0;
}
