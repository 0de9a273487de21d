/* batch_script.h: a scripted gpuipcd that knows batches only, for
 * integ_batch_client.c: it checks each batch register frame against
 * docs/protocol.md ("Batches") and answers lookups, stats and releases
 * from what it was sent, so that the test sees the exact frames the
 * library sends and the library reads replies whose every byte the test
 * chose.  One thread serves any number of connections. */
#ifndef GPUIPC_BATCH_SCRIPT_H
#define GPUIPC_BATCH_SCRIPT_H

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <msgpack.h>

#include "harness.h"
#include "proto.h"

#define BS_REGS  8
#define BS_CONNS 8

struct bs_reg {
        char name[256];
        uint64_t id;
        struct h_frame f;               /* the register frame, its fds kept */
        unsigned leases, releases;
};

struct bs {
        char path[108];
        int lfd, stop[2];
        pthread_t thread;
        pthread_mutex_t lock;
        struct bs_reg regs[BS_REGS];
        unsigned nregs;
        uint64_t next_lease;
        char last_error[256];           /* why the last register was refused */
        char reject_code[32];           /* when set: refuse registers with it */
};

static void bs_send(int fd, struct proto_out *o, const int *fds, unsigned nfds)
{
        if (proto_out_finish(o, PROTO_MAX_FRAME_LIMIT) == 0)
                h_raw_send(fd, o->sb.data, o->sb.size, fds, nfds);
        proto_out_free(o);
}

static void bs_error(int fd, uint64_t seq, const char *code, const char *msg)
{
        struct proto_out o;

        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 2);
        proto_pack_ku64(&o.pk, "seq", seq);
        proto_pack_str(&o.pk, "error");
        msgpack_pack_map(&o.pk, 2);
        proto_pack_kstr(&o.pk, "code", code);
        proto_pack_kstr(&o.pk, "message", msg);
        bs_send(fd, &o, NULL, 0);
}

/* The protocol's checks of a batch register (those the library must meet). */
static const char *bs_check(const struct h_frame *f)
{
        const msgpack_object *parts, *arrow, *cols;
        bool named[64] = { false }, used[256] = { false };
        uint64_t nfds = 0, idx;

        if (!proto_obj_str_eq(proto_get(f->m.root, "kind"), "batch"))
                return "kind is not batch";
        if (proto_get(f->m.root, "meta") || proto_get(f->m.root, "size"))
                return "meta or size at the top level";
        (void)proto_get_u64(f->m.root, "fds", &nfds);
        if (nfds != f->nfds)
                return "fds is not the number of fds attached";
        if (proto_get_array(f->m.root, "parts", &parts) < 0 || parts->via.array.size == 0 ||
            parts->via.array.size > 256)
                return "no parts";
        for (uint32_t i = 0; i < parts->via.array.size; i++) {
                const msgpack_object *p = &parts->via.array.ptr[i], *fa;
                uint64_t size = 0;
                if (proto_get_u64(p, "size", &size) < 0 || size == 0 || proto_get(p, "event"))
                        return "a part without a size, or with an event";
                if (proto_get_array(p, "fds", &fa) < 0)
                        continue;
                for (uint32_t j = 0; j < fa->via.array.size; j++) {
                        if (proto_obj_u64(&fa->via.array.ptr[j], &idx) < 0 || idx >= nfds)
                                return "a part names an fd index out of range";
                        named[idx] = true;
                }
        }
        for (uint64_t i = 0; i < nfds; i++)
                if (!named[i])
                        return "an attached fd that no part names";
        if (proto_get_map(f->m.root, "arrow", &arrow) < 0 ||
            proto_get_array(arrow, "columns", &cols) < 0 || cols->via.array.size == 0 ||
            proto_get_u64(arrow, "rows", &idx) < 0)
                return "no arrow, columns or rows";
        for (uint32_t i = 0; i < cols->via.array.size; i++) {
                const msgpack_object *n = &cols->via.array.ptr[i], *b;
                int64_t v;
                if (proto_get_array(n, "buffers", &b) < 0 || b->via.array.size > 3 ||
                    !proto_get(n, "format") || !proto_get(n, "length") ||
                    proto_get_i64(n, "null_count", &v) < 0 || v < -1)
                        return "a node without buffers, format, length or null_count";
                for (uint32_t j = 0; j < b->via.array.size; j++) {
                        if (proto_obj_i64(&b->via.array.ptr[j], &v) < 0 || v < -1 ||
                            v >= (int64_t)parts->via.array.size)
                                return "a buffer index out of range";
                        if (v >= 0)
                                used[v] = true;
                }
        }
        for (uint32_t i = 0; i < parts->via.array.size; i++)
                if (!used[i])
                        return "a part that no node names";
        return NULL;
}

/* A part as a lookup (fds true) or stat record shows it: the register's
 * fields, alloc_key/pool_key and alloc_size become `alloc`. */
static void bs_pack_part(msgpack_packer *pk, const msgpack_object *p, unsigned i, bool fds)
{
        const uint8_t *key = NULL;
        uint64_t asize = 0;
        size_t klen = 0;
        uint32_t n = 0;
        bool dev = !proto_obj_str_eq(proto_get(p, "kind"), "host");

        (void)proto_get_u64(p, "alloc_size", &asize);
        if (proto_get_bin(p, "alloc_key", &key, &klen) < 0)
                (void)proto_get_bin(p, "pool_key", &key, &klen);
        for (uint32_t k = 0; k < p->via.map.size; k++) {
                const msgpack_object *kk = &p->via.map.ptr[k].key;
                n += !(proto_obj_str_eq(kk, "alloc_key") || proto_obj_str_eq(kk, "pool_key") ||
                       proto_obj_str_eq(kk, "alloc_size") ||
                       (!fds && proto_obj_str_eq(kk, "fds")));
        }
        msgpack_pack_map(pk, n + dev);
        for (uint32_t k = 0; k < p->via.map.size; k++) {
                const msgpack_object_kv *kv = &p->via.map.ptr[k];
                if (proto_obj_str_eq(&kv->key, "alloc_key") ||
                    proto_obj_str_eq(&kv->key, "pool_key") ||
                    proto_obj_str_eq(&kv->key, "alloc_size") ||
                    (!fds && proto_obj_str_eq(&kv->key, "fds")))
                        continue;
                msgpack_pack_object(pk, kv->key);
                msgpack_pack_object(pk, kv->val);
        }
        if (dev) {
                proto_pack_str(pk, "alloc");
                msgpack_pack_map(pk, 3 + (key != NULL));
                proto_pack_ku64(pk, "id", 100 + i);
                proto_pack_ku64(pk, "size", asize);
                proto_pack_ku64(pk, "regs", 1);
                if (key) {
                        proto_pack_str(pk, "key");
                        msgpack_pack_bin_with_body(pk, key, klen);
                }
        }
}

/* The record of r: lookup (fds), stat (parts, no fds) or list (count). */
static void bs_pack_rec(msgpack_packer *pk, const struct bs_reg *r, int form)
{
        const msgpack_object *parts, *arrow, *ev = proto_get(r->f.m.root, "event");
        uint64_t size = 0, s;

        (void)proto_get_array(r->f.m.root, "parts", &parts);
        (void)proto_get_map(r->f.m.root, "arrow", &arrow);
        for (uint32_t i = 0; i < parts->via.array.size; i++)
                if (proto_get_u64(&parts->via.array.ptr[i], "size", &s) == 0)
                        size += s;
        msgpack_pack_map(pk, 9 + (form < 2 ? 2 + (ev != NULL) : 0));
        proto_pack_ku64(pk, "id", r->id);
        proto_pack_kstr(pk, "name", r->name);
        proto_pack_kstr(pk, "kind", "batch");
        proto_pack_ku64(pk, "size", size);
        proto_pack_ku64(pk, "offset", 0);
        proto_pack_ku64(pk, "n_parts", parts->via.array.size);
        proto_pack_ku64(pk, "leases", r->leases);
        proto_pack_kstr(pk, "state", "live");
        proto_pack_kbool(pk, "ephemeral", false);
        if (form == 2)
                return;
        proto_pack_str(pk, "arrow");
        msgpack_pack_object(pk, *arrow);
        proto_pack_str(pk, "parts");
        msgpack_pack_array(pk, parts->via.array.size);
        for (uint32_t i = 0; i < parts->via.array.size; i++)
                bs_pack_part(pk, &parts->via.array.ptr[i], i, form == 0);
        if (ev) {
                proto_pack_str(pk, "event");
                msgpack_pack_object(pk, *ev);
        }
}

static struct bs_reg *bs_find(struct bs *s, const msgpack_object *root)
{
        const char *name;
        size_t n;

        if (proto_get_str(root, "name", &name, &n) < 0)
                return NULL;
        for (unsigned i = 0; i < s->nregs; i++)
                if (strlen(s->regs[i].name) == n && !memcmp(s->regs[i].name, name, n))
                        return &s->regs[i];
        return NULL;
}

static void bs_request(struct bs *s, int fd, struct h_frame *f)
{
        const msgpack_object *root = f->m.root;
        struct proto_out o;
        struct bs_reg *r;
        const char *why, *name;
        uint64_t seq = 0, lease;
        size_t n;

        (void)proto_get_u64(root, "seq", &seq);
        proto_out_init(&o);
        pthread_mutex_lock(&s->lock);
        if (proto_obj_str_eq(proto_get(root, "op"), "hello")) {
                msgpack_pack_map(&o.pk, 4);
                proto_pack_ku64(&o.pk, "seq", seq);
                proto_pack_ku64(&o.pk, "version", PROTO_VERSION);
                proto_pack_ku64(&o.pk, "max_frame", 65536);
                proto_pack_kstr(&o.pk, "server", "scripted");
        } else if (proto_obj_str_eq(proto_get(root, "op"), "register")) {
                why = bs_check(f);
                if (s->reject_code[0] || why || s->nregs == BS_REGS ||
                    proto_get_str(root, "name", &name, &n) < 0 || n >= 256) {
                        snprintf(s->last_error, sizeof(s->last_error), "%s",
                                 why ? why : "refused");
                        proto_out_free(&o);
                        bs_error(fd, seq, s->reject_code[0] ? s->reject_code : "bad_request",
                                 s->last_error);
                        goto out;
                }
                r = &s->regs[s->nregs++];
                memset(r, 0, sizeof(*r));
                memcpy(r->name, name, n);
                r->id = 40 + s->nregs;
                r->f = *f;              /* keeps the body and fds */
                r->f.m.root = &r->f.m.up.data;
                memset(f, 0, sizeof(*f));
                msgpack_unpacked_init(&f->m.up);
                msgpack_pack_map(&o.pk, 3);
                proto_pack_ku64(&o.pk, "seq", seq);
                proto_pack_ku64(&o.pk, "id", r->id);
                proto_pack_kstr(&o.pk, "name", r->name);
        } else if (proto_obj_str_eq(proto_get(root, "op"), "lookup") ||
                   proto_obj_str_eq(proto_get(root, "op"), "stat")) {
                bool lookup = proto_obj_str_eq(proto_get(root, "op"), "lookup");
                r = bs_find(s, root);
                if (!r) {
                        proto_out_free(&o);
                        bs_error(fd, seq, "not_found", "no such batch");
                        goto out;
                }
                if (lookup)
                        r->leases++;
                lease = ++s->next_lease;
                msgpack_pack_map(&o.pk, lookup ? 4 : 2);
                proto_pack_ku64(&o.pk, "seq", seq);
                if (lookup) {
                        proto_pack_ku64(&o.pk, "lease", lease);
                        proto_pack_ku64(&o.pk, "fds", r->f.nfds);
                }
                proto_pack_str(&o.pk, "reg");
                bs_pack_rec(&o.pk, r, lookup ? 0 : 1);
                pthread_mutex_unlock(&s->lock);
                bs_send(fd, &o, lookup ? r->f.fds : NULL, lookup ? r->f.nfds : 0);
                return;
        } else if (proto_obj_str_eq(proto_get(root, "op"), "release")) {
                /* One batch per test: the lease is its. */
                if (s->nregs > 0 && s->regs[0].leases > 0) {
                        s->regs[0].leases--;
                        s->regs[0].releases++;
                }
                msgpack_pack_map(&o.pk, 1);
                proto_pack_ku64(&o.pk, "seq", seq);
        } else {
                msgpack_pack_map(&o.pk, 1);
                proto_pack_ku64(&o.pk, "seq", seq);
        }
        pthread_mutex_unlock(&s->lock);
        bs_send(fd, &o, NULL, 0);
        return;
out:
        pthread_mutex_unlock(&s->lock);
}

static void *bs_main(void *arg)
{
        struct bs *s = arg;
        struct pollfd p[BS_CONNS + 2];
        unsigned n = 2;

        p[0] = (struct pollfd){ .fd = s->stop[0], .events = POLLIN };
        p[1] = (struct pollfd){ .fd = s->lfd, .events = POLLIN };
        for (;;) {
                if (poll(p, n, -1) < 0)
                        continue;
                if (p[0].revents)
                        break;
                if ((p[1].revents & POLLIN) && n < BS_CONNS + 2) {
                        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
                        if (fd >= 0)
                                p[n++] = (struct pollfd){ .fd = fd, .events = POLLIN };
                }
                for (unsigned i = 2; i < n; i++) {
                        struct h_frame f;
                        if (!p[i].revents)
                                continue;
                        if (h_raw_recv(p[i].fd, 5000, &f) != 1 || !f.m.root) {
                                close(p[i].fd);
                                p[i--] = p[--n];
                                continue;
                        }
                        bs_request(s, p[i].fd, &f);
                        h_frame_free(&f);
                }
        }
        for (unsigned i = 2; i < n; i++)
                close(p[i].fd);
        return NULL;
}

static void bs_start(struct bs *s)
{
        struct sockaddr_un a = { .sun_family = AF_UNIX };

        memset(s, 0, sizeof(*s));
        pthread_mutex_init(&s->lock, NULL);
        snprintf(s->path, sizeof(s->path), "/tmp/gpuipc-batch-%d.sock", (int)getpid());
        unlink(s->path);
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", s->path);
        s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        cr_assert(s->lfd >= 0);
        cr_assert_eq(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
        cr_assert_eq(listen(s->lfd, 8), 0);
        cr_assert_eq(pipe2(s->stop, O_CLOEXEC), 0);
        cr_assert_eq(pthread_create(&s->thread, NULL, bs_main, s), 0);
}

static void bs_stop(struct bs *s)
{
        cr_assert_eq(write(s->stop[1], "x", 1), 1);
        pthread_join(s->thread, NULL);
        close(s->stop[0]);
        close(s->stop[1]);
        close(s->lfd);
        unlink(s->path);
        for (unsigned i = 0; i < s->nregs; i++)
                h_frame_free(&s->regs[i].f);
}

/* The leases and releases of the first batch, read under the lock. */
static void bs_counts(struct bs *s, unsigned *leases, unsigned *releases)
{
        pthread_mutex_lock(&s->lock);
        *leases = s->nregs ? s->regs[0].leases : 0;
        *releases = s->nregs ? s->regs[0].releases : 0;
        pthread_mutex_unlock(&s->lock);
}

#endif
