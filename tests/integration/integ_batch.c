/* integ_batch.c: batches (docs/protocol.md, "Batches") over raw
 * connections: register and lookup of host, cuda-vmm, cuda-ipc and
 * cuda-pool parts, the arrow description, refusals, lifetimes, events,
 * quotas and restarts with the fd store.  Device parts are made with the
 * CUDA driver double in a producer process and read back through it. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "cuda/driver.h"
#include "harness.h"
#include "sdhost.h"

TestSuite(batch, .init = h_setup, .fini = h_teardown, .timeout = 30);

/* ---- building requests --------------------------------------------------- */

/* A part as a test describes it; zeroes leave fields out. */
struct tp {
        const char *kind;
        uint64_t size, offset;
        int nfdi;                       /* entries of fdi; -1: no fds key */
        int fdi[4];
        const char *device;
        uint64_t alloc_size;
        const uint8_t *key;             /* alloc_key (cuda-vmm) or pool_key (cuda-pool) */
        const uint8_t *handle;          /* cuda-ipc, cuda-pool */
        uint64_t buffer_id;
        bool shared_write, event, cacheable;
};

/* A column node; nbufs entries of bufs. */
struct tn {
        const char *name, *format;
        uint64_t flags, length, children;
        int64_t nulls;
        int nbufs;
        int bufs[4];
};

struct treq {
        const char *name;
        const struct tp *parts;
        unsigned np;
        const msgpack_sbuffer *arrow;   /* packed arrow map; NULL: no arrow */
        int ephemeral;                  /* -1: absent */
        const uint8_t *event;
        uint64_t ttl_ms;
        bool meta;
};

static const uint8_t KEY_A[16] = "alloc-key-A.....";
static const uint8_t KEY_B[16] = "alloc-key-B.....";
static const uint8_t POOL_K[16] = "pool-key-P......";
static const uint8_t HANDLE[64] = "a cuda-ipc handle: sixty-four bytes of the test's own...........";
static const uint8_t EVENT[64] = "the batch's event: sixty-four bytes of an IPC event handle......";
#define UUID0 "GPU-67707569-7063-2d64-6f75-626c652d3000"

static void pack_part(msgpack_packer *pk, const struct tp *p)
{
        struct proto_map m;

        proto_map_begin(&m, pk);
        proto_map_kstr(&m, "kind", p->kind);
        proto_map_ku64(&m, "size", p->size);
        if (p->offset)
                proto_map_ku64(&m, "offset", p->offset);
        if (p->nfdi >= 0) {
                proto_map_key(&m, "fds");
                msgpack_pack_array(pk, (uint32_t)p->nfdi);
                for (int i = 0; i < p->nfdi; i++)
                        msgpack_pack_int64(pk, p->fdi[i]);
        }
        if (p->shared_write)
                proto_map_kbool(&m, "shared_write", true);
        if (p->device)
                proto_map_kstr(&m, "device", p->device);
        if (p->alloc_size)
                proto_map_ku64(&m, "alloc_size", p->alloc_size);
        if (p->key)
                proto_map_kbin(&m, strcmp(p->kind, "cuda-pool") == 0 ? "pool_key" : "alloc_key",
                               p->key, 16);
        if (p->handle) {
                proto_map_kbin(&m, "handle", p->handle, 64);
                proto_map_ku64(&m, "buffer_id", p->buffer_id);
        }
        if (p->event)
                proto_map_kbin(&m, "event", EVENT, 64);
        if (p->cacheable)
                proto_map_kbool(&m, "cacheable", true);
        proto_map_end(&m);
}

/* The arrow map of nodes into sb (initialised here), with rows and one
 * schema metadata entry. */
static void build_arrow(msgpack_sbuffer *sb, uint64_t rows, const struct tn *nodes, unsigned n)
{
        msgpack_packer pk;
        struct proto_map m, nm, md;

        msgpack_sbuffer_init(sb);
        msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
        proto_map_begin(&m, &pk);
        proto_map_ku64(&m, "rows", rows);
        proto_map_key(&m, "metadata");
        proto_map_begin(&md, &pk);
        proto_map_kstr(&md, "origin", "integ_batch");
        proto_map_end(&md);
        proto_map_key(&m, "columns");
        msgpack_pack_array(&pk, n);
        for (unsigned i = 0; i < n; i++) {
                const struct tn *t = &nodes[i];
                proto_map_begin(&nm, &pk);
                proto_map_kstr(&nm, "name", t->name ? t->name : "");
                proto_map_kstr(&nm, "format", t->format);
                if (t->flags)
                        proto_map_ku64(&nm, "flags", t->flags);
                proto_map_ku64(&nm, "length", t->length);
                proto_map_ki64(&nm, "null_count", t->nulls);
                if (t->children)
                        proto_map_ku64(&nm, "children", t->children);
                proto_map_key(&nm, "buffers");
                msgpack_pack_array(&pk, (uint32_t)t->nbufs);
                for (int b = 0; b < t->nbufs; b++)
                        msgpack_pack_int64(&pk, t->bufs[b]);
                proto_map_end(&nm);
        }
        proto_map_end(&m);
}

/* Sends register of batch r with fds attached. */
static void send_batch(int fd, uint64_t seq, const struct treq *r, const int *fds, unsigned nfds)
{
        struct proto_out o;
        struct proto_map m;
        uint8_t *b;
        size_t n;

        proto_out_init(&o);
        proto_map_begin(&m, &o.pk);
        proto_map_kstr(&m, "op", "register");
        proto_map_ku64(&m, "seq", seq);
        proto_map_kstr(&m, "name", r->name);
        proto_map_kstr(&m, "kind", "batch");
        proto_map_ku64(&m, "fds", nfds);
        if (r->ephemeral >= 0)
                proto_map_kbool(&m, "ephemeral", r->ephemeral);
        if (r->event)
                proto_map_kbin(&m, "event", r->event, 64);
        if (r->ttl_ms)
                proto_map_ku64(&m, "ttl_ms", r->ttl_ms);
        if (r->meta) {
                proto_map_key(&m, "meta");
                msgpack_pack_map(&o.pk, 1);
                proto_pack_kstr(&o.pk, "dtype", "u8");
        }
        proto_map_key(&m, "parts");
        msgpack_pack_array(&o.pk, r->np);
        for (unsigned i = 0; i < r->np; i++)
                pack_part(&o.pk, &r->parts[i]);
        if (r->arrow) {
                proto_map_key(&m, "arrow");
                msgpack_sbuffer_write(&o.sb, r->arrow->data, r->arrow->size);
        }
        proto_map_end(&m);
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT), 0);
        b = proto_out_release(&o, &n);
        cr_assert_eq(h_raw_send(fd, b, n, fds, nfds), 0);
        free(b);
        proto_out_free(&o);
}

static void recv_reply(int fd, uint64_t seq, const char *code, struct h_frame *f)
{
        int r = h_raw_recv(fd, 5000, f);

        cr_assert_eq(r, 1, "no reply to seq %" PRIu64 ": %s", seq,
                     r == 0 ? "connection closed" : strerror(-r));
        h_expect_reply(f, seq, code);
}

static uint64_t get_u64(const msgpack_object *map, const char *key)
{
        uint64_t v = 0;

        cr_assert_eq(proto_get_u64(map, key, &v), 0, "no uint %s", key);
        return v;
}

/* Registers r, expecting success; its id. */
static uint64_t reg_ok(int fd, uint64_t seq, const struct treq *r, const int *fds, unsigned nfds)
{
        struct h_frame f;
        uint64_t id;

        send_batch(fd, seq, r, fds, nfds);
        recv_reply(fd, seq, "", &f);
        id = get_u64(f.m.root, "id");
        cr_expect_null(proto_get(f.m.root, "alloc"), "a batch's register reply has no alloc");
        h_frame_free(&f);
        return id;
}

/* Registers r, expecting code and a message containing want. */
static void reg_refused(int fd, uint64_t seq, const struct treq *r, const int *fds,
                        unsigned nfds, const char *code, const char *want)
{
        struct h_frame f;
        const char *msg;
        size_t len;

        send_batch(fd, seq, r, fds, nfds);
        recv_reply(fd, seq, code, &f);
        msg = h_error_message(&f, &len);
        cr_expect(memmem(msg, len, want, strlen(want)) != NULL,
                  "seq %" PRIu64 ": message '%.*s' lacks '%s'", seq, (int)len, msg, want);
        h_frame_free(&f);
}

/* A request with one str field (name) or none; fds none. */
static void send_op(int fd, uint64_t seq, const char *op, const char *key, const char *val)
{
        struct proto_out o;
        uint8_t *b;
        size_t n;

        proto_out_init(&o);
        msgpack_pack_map(&o.pk, key ? 3 : 2);
        proto_pack_kstr(&o.pk, "op", op);
        proto_pack_ku64(&o.pk, "seq", seq);
        if (key)
                proto_pack_kstr(&o.pk, key, val);
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT), 0);
        b = proto_out_release(&o, &n);
        cr_assert_eq(h_raw_send(fd, b, n, NULL, 0), 0);
        free(b);
        proto_out_free(&o);
}

static void send_op_u64(int fd, uint64_t seq, const char *op, const char *key, uint64_t val,
                        const char *key2, bool val2)
{
        struct proto_out o;
        uint8_t *b;
        size_t n;

        proto_out_init(&o);
        msgpack_pack_map(&o.pk, key2 ? 4 : 3);
        proto_pack_kstr(&o.pk, "op", op);
        proto_pack_ku64(&o.pk, "seq", seq);
        proto_pack_ku64(&o.pk, key, val);
        if (key2)
                proto_pack_kbool(&o.pk, key2, val2);
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT), 0);
        b = proto_out_release(&o, &n);
        cr_assert_eq(h_raw_send(fd, b, n, NULL, 0), 0);
        free(b);
        proto_out_free(&o);
}

static int conn(void)
{
        int fd = h_raw_connect(h_d.sock);

        h_raw_hello(fd, 1);
        return fd;
}

/* A memfd of size bytes of h_pattern(i, seed), sealed as register wants. */
static int memfd_with(size_t size, uint32_t seed)
{
        int fd = memfd_create("batch", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        uint8_t *p;

        cr_assert_geq(fd, 0);
        cr_assert_eq(ftruncate(fd, (off_t)size), 0);
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        cr_assert_neq(p, MAP_FAILED);
        for (size_t i = 0; i < size; i++)
                p[i] = h_pattern(i, seed);
        munmap(p, size);
        cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE |
                                            F_SEAL_SEAL), 0);
        return fd;
}

/* Maps size bytes at offset of fd read-only and checks them against the
 * pattern of seed at those offsets. */
static void check_fd_bytes(int fd, uint64_t offset, uint64_t size, uint32_t seed, const char *what)
{
        size_t len = (size_t)(offset + size);
        uint8_t *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);

        cr_assert_neq(p, MAP_FAILED, "%s: mmap: %s", what, strerror(errno));
        for (uint64_t i = offset; i < offset + size; i++)
                if (p[i] != h_pattern(i, seed))
                        cr_assert_fail("%s: byte %" PRIu64 " is 0x%02x, want 0x%02x", what, i,
                                       p[i], h_pattern(i, seed));
        munmap(p, len);
}

/* The part array of a lookup or stat reply's reg. */
static const msgpack_object *reply_parts(const struct h_frame *f, const msgpack_object **ret_reg)
{
        const msgpack_object *reg, *parts;

        cr_assert_eq(proto_get_map(f->m.root, "reg", &reg), 0, "no reg");
        cr_assert_eq(proto_get_array(reg, "parts", &parts), 0, "no reg.parts");
        if (ret_reg)
                *ret_reg = reg;
        return parts;
}

/* The fd index j of part i's fds in a lookup reply. */
static uint64_t part_fd(const msgpack_object *parts, uint32_t i, uint32_t j)
{
        const msgpack_object *a;
        uint64_t v = UINT64_MAX;

        cr_assert_lt(i, parts->via.array.size);
        cr_assert_eq(proto_get_array(&parts->via.array.ptr[i], "fds", &a), 0, "parts[%u].fds", i);
        cr_assert_lt(j, a->via.array.size, "parts[%u].fds has %u entries", i, a->via.array.size);
        cr_assert_eq(proto_obj_u64(&a->via.array.ptr[j], &v), 0);
        return v;
}

static uint32_t part_nfds(const msgpack_object *parts, uint32_t i)
{
        const msgpack_object *a;

        cr_assert_eq(proto_get_array(&parts->via.array.ptr[i], "fds", &a), 0, "parts[%u].fds", i);
        return a->via.array.size;
}

/* Looks name up on fd, expecting success; the reply in f. */
static void lookup_ok(int fd, uint64_t seq, const char *name, struct h_frame *f)
{
        send_op(fd, seq, "lookup", "name", name);
        recv_reply(fd, seq, "", f);
}

/* The standard table: x int32 nullable (validity, data), s utf8 (offsets,
 * data), p a struct of two int64 a and b; six parts. */
static const struct tn TABLE[] = {
        { .name = "x", .format = "i", .flags = 2, .length = 3, .nulls = 1, .nbufs = 2,
          .bufs = { 0, 1 } },
        { .name = "s", .format = "u", .length = 3, .nulls = 0, .nbufs = 3, .bufs = { -1, 2, 3 } },
        { .name = "p", .format = "+s", .length = 3, .nulls = 0, .children = 2, .nbufs = 1,
          .bufs = { -1 } },
        { .name = "a", .format = "l", .length = 3, .nulls = 0, .nbufs = 2, .bufs = { -1, 4 } },
        { .name = "b", .format = "l", .length = 3, .nulls = 0, .nbufs = 2, .bufs = { -1, 5 } },
};
#define NT (sizeof(TABLE) / sizeof(TABLE[0]))

/* The six parts in one memfd (fd index 0), at these offsets. */
static const uint64_t TOFF[6] = { 0, 64, 128, 192, 256, 320 };
static const uint64_t TSIZE[6] = { 1, 12, 16, 11, 24, 24 };

static void table_parts(struct tp *p, int fdi)
{
        for (unsigned i = 0; i < 6; i++)
                p[i] = (struct tp){ .kind = "host", .size = TSIZE[i], .offset = TOFF[i],
                                    .nfdi = 1, .fdi = { fdi } };
}

/* ---- host batches --------------------------------------------------------- */

Test(batch, host_one_memfd_round_trip)
{
        int fd = conn(), mfd = memfd_with(4096, 11);
        struct tp parts[6];
        msgpack_sbuffer arrow, again;
        msgpack_packer pk;
        const msgpack_object *reg, *pa, *a;
        struct h_frame f;
        uint64_t id;

        table_parts(parts, 0);
        build_arrow(&arrow, 3, TABLE, NT);
        id = reg_ok(fd, 2, &(struct treq){ .name = "b/t", .parts = parts, .np = 6,
                                           .arrow = &arrow, .ephemeral = -1 }, &mfd, 1);
        lookup_ok(fd, 3, "b/t", &f);
        pa = reply_parts(&f, &reg);
        cr_assert_eq(get_u64(f.m.root, "fds"), 1, "one memfd travels once");
        cr_assert_eq(f.nfds, 1);
        cr_assert_eq(get_u64(reg, "id"), id);
        cr_assert(proto_obj_str_eq(proto_get(reg, "kind"), "batch"));
        cr_assert_eq(get_u64(reg, "size"), 1 + 12 + 16 + 11 + 24 + 24);
        cr_assert_eq(get_u64(reg, "n_parts"), 6);
        cr_assert_eq(pa->via.array.size, 6);
        for (uint32_t i = 0; i < 6; i++) {
                const msgpack_object *p = &pa->via.array.ptr[i];
                cr_assert(proto_obj_str_eq(proto_get(p, "kind"), "host"));
                cr_assert_eq(get_u64(p, "size"), TSIZE[i]);
                cr_assert_eq(get_u64(p, "offset"), TOFF[i]);
                cr_assert_eq(part_nfds(pa, i), 1);
                cr_assert_eq(part_fd(pa, i, 0), 0);
                check_fd_bytes(f.fds[0], TOFF[i], TSIZE[i], 11, "part");
        }
        /* Read-only: the memfd is sealed, and the fd is an O_RDONLY open. */
        cr_assert_eq(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, f.fds[0], 0),
                     MAP_FAILED);
        /* The arrow description comes back as it was sent. */
        cr_assert_eq(proto_get_map(reg, "arrow", &a), 0);
        msgpack_sbuffer_init(&again);
        msgpack_packer_init(&pk, &again, msgpack_sbuffer_write);
        msgpack_pack_object(&pk, *a);
        cr_assert_eq(again.size, arrow.size);
        cr_assert_eq(memcmp(again.data, arrow.data, arrow.size), 0, "arrow differs");
        msgpack_sbuffer_destroy(&again);
        h_frame_free(&f);
        msgpack_sbuffer_destroy(&arrow);
        close(mfd);
        close(fd);
}

Test(batch, host_separate_memfds_each_sent_once)
{
        int fd = conn();
        int mfds[3] = { memfd_with(4096, 1), memfd_with(4096, 2), memfd_with(8192, 3) };
        struct tp parts[4] = {
                { .kind = "host", .size = 100, .offset = 0, .nfdi = 1, .fdi = { 0 } },
                { .kind = "host", .size = 200, .offset = 0, .nfdi = 1, .fdi = { 1 } },
                { .kind = "host", .size = 300, .offset = 4096, .nfdi = 1, .fdi = { 2 } },
                { .kind = "host", .size = 50, .offset = 512, .nfdi = 1, .fdi = { 0 } },
        };
        static const struct tn nodes[] = {
                { .name = "v", .format = "b", .length = 8, .nulls = -1, .nbufs = 2,
                  .bufs = { 0, 1 } },
                { .name = "w", .format = "f", .length = 8, .nulls = 0, .nbufs = 2,
                  .bufs = { 3, 2 } },
        };
        static const uint32_t seed[4] = { 1, 2, 3, 1 };
        msgpack_sbuffer arrow;
        const msgpack_object *pa;
        struct h_frame f;

        build_arrow(&arrow, 8, nodes, 2);
        (void)reg_ok(fd, 2, &(struct treq){ .name = "b/sep", .parts = parts, .np = 4,
                                            .arrow = &arrow, .ephemeral = -1 }, mfds, 3);
        lookup_ok(fd, 3, "b/sep", &f);
        pa = reply_parts(&f, NULL);
        cr_assert_eq(get_u64(f.m.root, "fds"), 3);
        cr_assert_eq(f.nfds, 3);
        cr_assert_eq(part_fd(pa, 0, 0), 0);
        cr_assert_eq(part_fd(pa, 1, 0), 1);
        cr_assert_eq(part_fd(pa, 2, 0), 2);
        cr_assert_eq(part_fd(pa, 3, 0), 0, "parts 0 and 3 share a memfd: one fd");
        for (uint32_t i = 0; i < 4; i++)
                check_fd_bytes(f.fds[part_fd(pa, i, 0)], parts[i].offset, parts[i].size,
                               seed[i], "part");
        h_frame_free(&f);
        msgpack_sbuffer_destroy(&arrow);
        for (int i = 0; i < 3; i++)
                close(mfds[i]);
        close(fd);
}

/* The records of a batch: list shows n_parts only, stat the parts and
 * arrow without handle bytes, lookup the keys and handles. */
Test(batch, records_in_list_stat_lookup)
{
        int fd = conn(), mfds[2] = { memfd_with(4096, 5), memfd_with(4096, 6) };
        struct tp parts[3] = {
                { .kind = "host", .size = 64, .nfdi = 1, .fdi = { 0 } },
                { .kind = "cuda-vmm", .size = 4096, .offset = 8192, .nfdi = 1, .fdi = { 1 },
                  .device = UUID0, .alloc_size = 2u << 20, .key = KEY_A },
                { .kind = "host", .size = 64, .offset = 64, .nfdi = 1, .fdi = { 0 } },
        };
        static const struct tn nodes[] = {
                { .name = "h", .format = "C", .length = 64, .nulls = 0, .nbufs = 2,
                  .bufs = { -1, 0 } },
                { .name = "d", .format = "i", .length = 1024, .nulls = 0, .nbufs = 2,
                  .bufs = { 2, 1 } },
        };
        const msgpack_object *regs, *r, *pa, *alloc;
        msgpack_sbuffer arrow;
        struct h_frame f;
        const uint8_t *key;
        size_t klen;

        build_arrow(&arrow, 1024, nodes, 2);
        (void)reg_ok(fd, 2, &(struct treq){ .name = "rec/b", .parts = parts, .np = 3,
                                            .arrow = &arrow, .ephemeral = -1,
                                            .event = EVENT }, mfds, 2);
        send_op(fd, 3, "list", "prefix", "rec");
        recv_reply(fd, 3, "", &f);
        cr_assert_eq(proto_get_array(f.m.root, "regs", &regs), 0);
        cr_assert_eq(regs->via.array.size, 1);
        r = &regs->via.array.ptr[0];
        cr_assert(proto_obj_str_eq(proto_get(r, "kind"), "batch"));
        cr_assert_eq(get_u64(r, "n_parts"), 3);
        cr_assert_eq(get_u64(r, "size"), 64 + 4096 + 64);
        cr_assert_null(proto_get(r, "parts"), "list records carry no parts");
        cr_assert_null(proto_get(r, "arrow"), "list records carry no arrow");
        h_frame_free(&f);

        send_op(fd, 4, "stat", "name", "rec/b");
        recv_reply(fd, 4, "", &f);
        pa = reply_parts(&f, &r);
        cr_assert_not_null(proto_get(r, "arrow"));
        cr_assert_eq(proto_get_bin(r, "event", &key, &klen), 0);
        cr_assert_eq(klen, 64);
        cr_assert_eq(memcmp(key, EVENT, 64), 0);
        cr_assert_eq(pa->via.array.size, 3);
        cr_assert(proto_obj_str_eq(proto_get(&pa->via.array.ptr[1], "device"), UUID0));
        cr_assert_eq(proto_get_map(&pa->via.array.ptr[1], "alloc", &alloc), 0);
        cr_assert_null(proto_get(alloc, "key"), "stat shows no alloc.key");
        cr_assert_null(proto_get(&pa->via.array.ptr[1], "fds"), "stat shows no fds");
        h_frame_free(&f);

        lookup_ok(fd, 5, "rec/b", &f);
        pa = reply_parts(&f, NULL);
        cr_assert_eq(get_u64(f.m.root, "fds"), 2);
        cr_assert_eq(part_fd(pa, 0, 0), 0);
        cr_assert_eq(part_fd(pa, 1, 0), 1);
        cr_assert_eq(part_fd(pa, 2, 0), 0);
        cr_assert_eq(proto_get_map(&pa->via.array.ptr[1], "alloc", &alloc), 0);
        cr_assert_eq(proto_get_bin(alloc, "key", &key, &klen), 0, "lookup shows alloc.key");
        cr_assert_eq(klen, 16);
        cr_assert_eq(memcmp(key, KEY_A, 16), 0);
        cr_assert_eq(get_u64(alloc, "size"), 2u << 20);
        /* The VMM fd is the producer's, passed on: here a memfd of seed 6. */
        check_fd_bytes(f.fds[1], 0, 4096, 6, "vmm");
        check_fd_bytes(f.fds[0], 0, 128, 5, "host");
        h_frame_free(&f);
        msgpack_sbuffer_destroy(&arrow);
        close(mfds[0]);
        close(mfds[1]);
        close(fd);
}

/* Parts of one VMM allocation share its entry (and its fd), with each
 * other and with a single registration. */
Test(batch, vmm_parts_share_an_allocation)
{
        int fd = conn(), vfd = memfd_with(4096, 7), dup1;
        struct tp parts[2] = {
                { .kind = "cuda-vmm", .size = 4096, .offset = 0, .nfdi = 1, .fdi = { 0 },
                  .device = UUID0, .alloc_size = 2u << 20, .key = KEY_B },
                { .kind = "cuda-vmm", .size = 4096, .offset = 65536, .nfdi = 1, .fdi = { 0 },
                  .device = UUID0, .alloc_size = 2u << 20, .key = KEY_B },
        };
        static const struct tn nodes[] = {
                { .name = "d", .format = "i", .flags = 2, .length = 1024, .nulls = 0,
                  .nbufs = 2, .bufs = { 1, 0 } },
        };
        const msgpack_object *pa, *a0, *a1;
        msgpack_sbuffer arrow;
        struct h_frame f;
        bool held = false;
        uint64_t id;
        struct proto_out o;
        struct proto_map m;
        uint8_t *b;
        size_t n;

        build_arrow(&arrow, 1024, nodes, 1);
        id = reg_ok(fd, 2, &(struct treq){ .name = "v/b", .parts = parts, .np = 2,
                                           .arrow = &arrow, .ephemeral = -1 }, &vfd, 1);
        /* A single registration of the same allocation joins the entry. */
        dup1 = dup(vfd);
        proto_out_init(&o);
        proto_map_begin(&m, &o.pk);
        proto_map_kstr(&m, "op", "register");
        proto_map_ku64(&m, "seq", 3);
        proto_map_kstr(&m, "name", "v/single");
        proto_map_kstr(&m, "kind", "cuda-vmm");
        proto_map_ku64(&m, "size", 4096);
        proto_map_ku64(&m, "offset", 4096);
        proto_map_kstr(&m, "device", UUID0);
        proto_map_ku64(&m, "alloc_size", 2u << 20);
        proto_map_kbin(&m, "alloc_key", KEY_B, 16);
        proto_map_ku64(&m, "fds", 1);
        proto_map_end(&m);
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT), 0);
        b = proto_out_release(&o, &n);
        cr_assert_eq(h_raw_send(fd, b, n, &dup1, 1), 0);
        free(b);
        proto_out_free(&o);
        close(dup1);
        recv_reply(fd, 3, "", &f);
        h_frame_free(&f);

        send_op_u64(fd, 4, "lookup", "id", id, "cache", true);
        recv_reply(fd, 4, "", &f);
        pa = reply_parts(&f, NULL);
        cr_assert_eq(get_u64(f.m.root, "fds"), 1, "one allocation, one fd");
        cr_assert_eq(part_fd(pa, 0, 0), 0);
        cr_assert_eq(part_fd(pa, 1, 0), 0);
        cr_assert_eq(proto_get_map(&pa->via.array.ptr[0], "alloc", &a0), 0);
        cr_assert_eq(proto_get_map(&pa->via.array.ptr[1], "alloc", &a1), 0);
        cr_assert_eq(get_u64(a0, "id"), get_u64(a1, "id"));
        cr_assert_eq(get_u64(a0, "regs"), 3, "two parts and a registration");
        cr_assert_eq(proto_get_bool(&pa->via.array.ptr[0], "held", &held), 0);
        cr_assert(held, "cache: the part's allocation is held");
        h_frame_free(&f);
        msgpack_sbuffer_destroy(&arrow);
        close(vfd);
        close(fd);
}

/* ---- refusals -------------------------------------------------------------- */

/* One valid batch to vary: the table in one memfd. */
struct variant {
        struct tp parts[8];
        struct tn nodes[8];
        unsigned np, nn;
        msgpack_sbuffer arrow;
        struct treq r;
};

static void variant_init(struct variant *v, const char *name)
{
        memset(v, 0, sizeof(*v));
        table_parts(v->parts, 0);
        memcpy(v->nodes, TABLE, sizeof(TABLE));
        v->np = 6;
        v->nn = NT;
        v->r = (struct treq){ .name = name, .parts = v->parts, .np = 6, .ephemeral = -1 };
}

/* Packs v's arrow and sends it expecting code and message want. */
static void variant_refused(int fd, uint64_t seq, struct variant *v, const int *fds,
                            unsigned nfds, const char *code, const char *want)
{
        build_arrow(&v->arrow, 3, v->nodes, v->nn);
        v->r.arrow = &v->arrow;
        v->r.parts = v->parts;
        v->r.np = v->np;
        reg_refused(fd, seq, &v->r, fds, nfds, code, want);
        msgpack_sbuffer_destroy(&v->arrow);
}

Test(batch, refusals_name_what_is_wrong)
{
        int fd = conn(), mfd = memfd_with(4096, 1), two[2], before;
        int unsealed = memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        struct variant v;
        uint64_t seq = 10;

        cr_assert_eq(ftruncate(unsealed, 4096), 0);
        two[0] = mfd;
        two[1] = memfd_with(4096, 2);
        before = h_daemon_fd_count(&h_d);

        variant_init(&v, "r/a");
        v.nodes[0].bufs[1] = 9;
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "arrow.columns[0].buffers[1]");

        variant_init(&v, "r/a");
        v.nodes[4].bufs[1] = 4;         /* part 5 is named by nobody */
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "parts[5] is named by no column");

        variant_init(&v, "r/a");
        v.parts[2].fdi[0] = 3;
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "parts[2].fds[0] must be the index");

        variant_init(&v, "r/a");
        variant_refused(fd, seq++, &v, two, 2, "bad_request", "fd 1 of the frame is named by no part");

        variant_init(&v, "r/a");
        v.nodes[2].children = 5;
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request",
                        "arrow.columns[2] has 5 children but only 2 nodes follow");

        variant_init(&v, "r/a");
        v.nodes[0] = (struct tn){ .format = "+s", .length = 3, .children = 2, .nbufs = 1,
                                  .bufs = { 0 } };
        v.nodes[1] = (struct tn){ .format = "+s", .length = 3, .children = 1, .nbufs = 1,
                                  .bufs = { 1 } };
        v.nodes[2] = (struct tn){ .format = "i", .length = 3, .nbufs = 4, .bufs = { 2, 3, 4 } };
        v.nodes[2].nbufs = 3;
        v.nodes[3] = (struct tn){ .format = "i", .length = 3, .nbufs = 1, .bufs = { 5 } };
        v.nn = 3;                       /* node 0's second child is missing */
        v.nodes[2].bufs[2] = 4;
        v.parts[5] = v.parts[4];
        v.np = 5;
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request",
                        "arrow.columns[0] has 1 children too many");

        variant_init(&v, "r/a");
        v.nodes[1].nbufs = 4;
        v.nodes[1].bufs[3] = 2;
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "at most 3 part indexes");

        variant_init(&v, "r/a");
        v.nodes[1].format = "";
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "arrow.columns[1].format");
        variant_init(&v, "r/a");
        v.nodes[1].format = "u\x01";
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "printable ASCII");
        variant_init(&v, "r/a");
        v.nodes[1].format = "ttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt";
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "1 to 64 bytes");

        variant_init(&v, "r/a");
        v.nodes[3].nulls = -2;
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "arrow.columns[3].null_count");
        variant_init(&v, "r/a");
        v.nodes[3].nulls = 4;           /* more nulls than rows */
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "arrow.columns[3].null_count");

        variant_init(&v, "r/a");
        v.parts[3].event = true;
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "parts[3]: a part has no event");

        variant_init(&v, "r/a");
        v.r.meta = true;
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "a batch has no meta");

        variant_init(&v, "r/a");
        v.parts[1].kind = "batch";
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "parts[1]: unknown part kind");

        variant_init(&v, "r/a");
        v.parts[1].nfdi = 0;
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_fd", "a host part names exactly one fd");

        variant_init(&v, "r/a");
        v.parts[0].size = 0;
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "parts[0]: size must be");

        variant_init(&v, "r/a");
        v.parts[4].offset = 4090;       /* past the memfd's end */
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_fd", "parts[4]: ");

        variant_init(&v, "r/a");
        variant_refused(fd, seq++, &v, &unsealed, 1, "bad_fd", "parts[0]: ");

        /* A cuda-ipc part makes the batch ephemeral. */
        variant_init(&v, "r/a");
        v.parts[5] = (struct tp){ .kind = "cuda-ipc", .size = 24, .offset = 0, .nfdi = -1,
                                  .device = UUID0, .alloc_size = 1u << 20, .handle = HANDLE,
                                  .buffer_id = 3 };
        v.r.ephemeral = 0;
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "is ephemeral");

        /* One fd for a host part and a cuda-vmm part. */
        variant_init(&v, "r/a");
        v.parts[5] = (struct tp){ .kind = "cuda-vmm", .size = 24, .nfdi = 1, .fdi = { 0 },
                                  .device = UUID0, .alloc_size = 2u << 20, .key = KEY_A };
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "one fd stands for one object");

        /* One fd for two VMM allocations. */
        variant_init(&v, "r/a");
        v.parts[4] = (struct tp){ .kind = "cuda-vmm", .size = 24, .nfdi = 1, .fdi = { 1 },
                                  .device = UUID0, .alloc_size = 2u << 20, .key = KEY_A };
        v.parts[5] = (struct tp){ .kind = "cuda-vmm", .size = 24, .nfdi = 1, .fdi = { 1 },
                                  .device = UUID0, .alloc_size = 2u << 20, .key = KEY_B };
        variant_refused(fd, seq++, &v, two, 2, "bad_request", "stands for another allocation");

        /* A part's own CUDA checks, prefixed. */
        variant_init(&v, "r/a");
        v.parts[5] = (struct tp){ .kind = "cuda-vmm", .size = 24, .nfdi = 1, .fdi = { 1 },
                                  .device = UUID0, .alloc_size = 2u << 20 };
        variant_refused(fd, seq++, &v, two, 2, "bad_request", "parts[5]: alloc_key is required");

        variant_init(&v, "r/a");
        v.r.arrow = NULL;
        v.r.parts = v.parts;
        v.r.np = 6;
        reg_refused(fd, seq++, &v.r, &mfd, 1, "bad_request", "arrow must be a map");

        /* Every str in arrow is UTF-8, keys the daemon does not know
         * included: it returns them to every reader as they came. */
        variant_init(&v, "r/a");
        v.nodes[2].name = "col\xc3\x28";
        variant_refused(fd, seq++, &v, &mfd, 1, "bad_request", "arrow.columns[2].name");
        {
                /* {"x\xff": "ok", rows..., metadata..., columns...} */
                static const char extra[] = "\x84\xa2x\xff\xa2ok";
                msgpack_sbuffer arrow;

                variant_init(&v, "r/a");
                build_arrow(&v.arrow, 3, v.nodes, v.nn);
                cr_assert_eq((uint8_t)v.arrow.data[0], 0x83, "build_arrow: a map of 3");
                msgpack_sbuffer_init(&arrow);
                msgpack_sbuffer_write(&arrow, extra, sizeof(extra) - 1);
                msgpack_sbuffer_write(&arrow, v.arrow.data + 1, v.arrow.size - 1);
                v.r.arrow = &arrow;
                reg_refused(fd, seq++, &v.r, &mfd, 1, "bad_request", "every str in arrow");
                /* The same key in UTF-8 is kept. */
                arrow.data[3] = 'y';
                reg_ok(fd, seq++, &v.r, &mfd, 1);
                send_op(fd, seq, "unregister", "name", "r/a");
                h_raw_expect_reply(fd, seq++, "");
                msgpack_sbuffer_destroy(&arrow);
                msgpack_sbuffer_destroy(&v.arrow);
        }

        {
                /* 257 parts; 1025 nodes. */
                static struct tp many[PROTO_BATCH_PARTS_MAX + 1];
                static struct tn nodes[PROTO_BATCH_NODES_MAX + 1];
                msgpack_sbuffer arrow;

                for (unsigned i = 0; i <= PROTO_BATCH_PARTS_MAX; i++)
                        many[i] = (struct tp){ .kind = "host", .size = 1, .offset = i,
                                               .nfdi = 1, .fdi = { 0 } };
                for (unsigned i = 0; i <= PROTO_BATCH_NODES_MAX; i++)
                        nodes[i] = (struct tn){ .format = "c", .length = 1, .nbufs = 1,
                                                .bufs = { 0 } };
                build_arrow(&arrow, 1, nodes, 1);
                reg_refused(fd, seq++, &(struct treq){ .name = "r/a", .parts = many,
                                                       .np = PROTO_BATCH_PARTS_MAX + 1,
                                                       .arrow = &arrow, .ephemeral = -1 },
                            &mfd, 1, "bad_request", "parts must be an array of 1 to 256");
                msgpack_sbuffer_destroy(&arrow);
                build_arrow(&arrow, 1, nodes, PROTO_BATCH_NODES_MAX + 1);
                reg_refused(fd, seq++, &(struct treq){ .name = "r/a", .parts = many, .np = 1,
                                                       .arrow = &arrow, .ephemeral = -1 },
                            &mfd, 1, "bad_request", "1 to 1024 nodes");
                msgpack_sbuffer_destroy(&arrow);
                /* 256 parts and 1024 nodes are fine. */
                for (unsigned i = 0; i < PROTO_BATCH_NODES_MAX; i++)
                        nodes[i].bufs[0] = (int)(i % PROTO_BATCH_PARTS_MAX);
                build_arrow(&arrow, 1, nodes, PROTO_BATCH_NODES_MAX);
                (void)reg_ok(fd, seq++, &(struct treq){ .name = "r/max", .parts = many,
                                                        .np = PROTO_BATCH_PARTS_MAX,
                                                        .arrow = &arrow, .ephemeral = -1 },
                             &mfd, 1);
                msgpack_sbuffer_destroy(&arrow);
        }

        /* Nothing was kept of the refused ones: the daemon holds the fds of
         * the one batch registered (its memfd and its read-only open). */
        cr_expect_eq(h_daemon_fd_settle(&h_d, before + 2, 2000), before + 2);
        /* And the connection still serves. */
        variant_init(&v, "r/ok");
        build_arrow(&v.arrow, 3, v.nodes, v.nn);
        v.r.arrow = &v.arrow;
        (void)reg_ok(fd, seq++, &v.r, &mfd, 1);
        reg_refused(fd, seq++, &v.r, &mfd, 1, "exists", "r/ok is already registered");
        msgpack_sbuffer_destroy(&v.arrow);
        close(two[1]);
        close(unsealed);
        close(mfd);
        close(fd);
}

/* An arrow description whose lookup reply would not fit a frame. */
Test(batch, too_large_at_register)
{
        int fd = conn(), mfd = memfd_with(4096, 1);
        struct tp part = { .kind = "host", .size = 16, .nfdi = 1, .fdi = { 0 } };
        msgpack_sbuffer sb;
        msgpack_packer pk;
        struct proto_map m, nm, md;
        char key[16], val[PROTO_USER_VALUE_MAX];

        memset(val, 'v', sizeof(val));
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        proto_map_begin(&m, &pk);
        proto_map_ku64(&m, "rows", 1);
        proto_map_key(&m, "columns");
        msgpack_pack_array(&pk, 2);
        for (int c = 0; c < 2; c++) {
                proto_map_begin(&nm, &pk);
                proto_map_kstr(&nm, "name", "c");
                proto_map_kstr(&nm, "format", "i");
                proto_map_ku64(&nm, "length", 1);
                proto_map_ki64(&nm, "null_count", 0);
                proto_map_key(&nm, "buffers");
                msgpack_pack_array(&pk, 1);
                msgpack_pack_int64(&pk, 0);
                proto_map_key(&nm, "metadata");
                proto_map_begin(&md, &pk);
                for (int i = 0; i < 31; i++) {
                        snprintf(key, sizeof(key), "k%d", i);
                        proto_map_kstrn(&md, key, val, sizeof(val));
                }
                proto_map_end(&md);
                proto_map_end(&nm);
        }
        /* A key the daemon does not know, kept as sent: it pads the
         * description so that the register fits a frame and the lookup
         * reply, with the record around it, does not. */
        {
                static char pad[4096];
                size_t want = 65300 - sb.size - 8;

                cr_assert_lt(want, sizeof(pad));
                memset(pad, 'p', want);
                proto_map_kstrn(&m, "pad", pad, want);
        }
        proto_map_end(&m);
        cr_assert_gt(sb.size, 65200);
        cr_assert_lt(sb.size, 65400);
        reg_refused(fd, 2, &(struct treq){ .name = "big/b", .parts = &part, .np = 1,
                                           .arrow = &sb, .ephemeral = -1 }, &mfd, 1,
                    "too_large", "would not fit max_frame");
        send_op(fd, 3, "lookup", "name", "big/b");
        h_raw_expect_reply(fd, 3, "not_found");
        msgpack_sbuffer_destroy(&sb);
        close(mfd);
        close(fd);
}

/* ---- lifetimes and events ---------------------------------------------------- */

static void register_table(int fd, uint64_t seq, const char *name, int mfd, int ephemeral,
                           uint64_t ttl_ms, uint64_t *ret_id)
{
        struct tp parts[6];
        msgpack_sbuffer arrow;
        uint64_t id;

        table_parts(parts, 0);
        build_arrow(&arrow, 3, TABLE, NT);
        id = reg_ok(fd, seq, &(struct treq){ .name = name, .parts = parts, .np = 6,
                                             .arrow = &arrow, .ephemeral = ephemeral,
                                             .ttl_ms = ttl_ms }, &mfd, 1);
        msgpack_sbuffer_destroy(&arrow);
        if (ret_id)
                *ret_id = id;
}

static void release(int fd, uint64_t seq, uint64_t lease)
{
        send_op_u64(fd, seq, "release", "lease", lease, NULL, false);
        h_raw_expect_reply(fd, seq, "");
}

/* Receives an event frame of that name within ms. */
static void expect_event(int fd, const char *name, int ms, struct h_frame *f)
{
        int r = h_raw_recv(fd, ms, f);

        cr_assert_eq(r, 1, "no %s event: %s", name, r == 0 ? "closed" : strerror(-r));
        cr_assert(proto_obj_str_eq(proto_get(f->m.root, "event"), name), "not a %s event", name);
}

static void expect_nothing(int fd, int ms)
{
        struct h_frame f;
        int r = h_raw_recv(fd, ms, &f);

        if (r == 1)
                h_frame_free(&f);
        cr_assert_eq(r, -ETIMEDOUT, "a frame came where none should");
}

Test(batch, one_released_event_per_last_release)
{
        int owner = conn(), cons = conn(), mfd = memfd_with(4096, 3);
        struct h_frame f, g;
        uint64_t id, l1, l2;

        register_table(owner, 2, "ev/b", mfd, -1, 0, &id);
        lookup_ok(cons, 3, "ev/b", &f);
        l1 = get_u64(f.m.root, "lease");
        lookup_ok(cons, 4, "ev/b", &g);
        l2 = get_u64(g.m.root, "lease");
        h_frame_free(&f);
        h_frame_free(&g);
        release(cons, 5, l1);
        expect_nothing(owner, 300);
        release(cons, 6, l2);
        expect_event(owner, "released", 2000, &f);
        cr_assert_eq(get_u64(f.m.root, "id"), id);
        cr_assert(proto_obj_str_eq(proto_get(f.m.root, "name"), "ev/b"));
        h_frame_free(&f);
        expect_nothing(owner, 300);
        close(mfd);
        close(owner);
        close(cons);
}

Test(batch, unregister_while_leased_keeps_the_memory)
{
        int owner = conn(), cons = conn(), mfd = memfd_with(4096, 4), base;
        const msgpack_object *reg;
        struct h_frame f, st;
        uint64_t id, lease;
        char idbuf[32];

        base = h_daemon_fd_count(&h_d);
        register_table(owner, 2, "ul/b", mfd, -1, 0, &id);
        close(mfd);             /* the daemon's copies keep it */
        lookup_ok(cons, 3, "ul/b", &f);
        lease = get_u64(f.m.root, "lease");
        send_op(owner, 4, "unregister", "name", "ul/b");
        recv_reply(owner, 4, "", &st);
        cr_assert_eq(get_u64(st.m.root, "leases"), 1);
        h_frame_free(&st);
        send_op(cons, 5, "lookup", "name", "ul/b");
        h_raw_expect_reply(cons, 5, "not_found");
        send_op_u64(cons, 6, "stat", "id", id, NULL, false);
        recv_reply(cons, 6, "", &st);
        cr_assert_eq(proto_get_map(st.m.root, "reg", &reg), 0);
        cr_assert(proto_obj_str_eq(proto_get(reg, "state"), "unregistered"));
        h_frame_free(&st);
        for (unsigned i = 0; i < 6; i++)
                check_fd_bytes(f.fds[0], TOFF[i], TSIZE[i], 4, "leased part");
        release(cons, 7, lease);
        expect_event(owner, "released", 2000, &st);
        h_frame_free(&st);
        h_frame_free(&f);
        /* Freed with the last lease: the daemon's memfd and its read-only open. */
        cr_expect_eq(h_daemon_fd_settle(&h_d, base, 2000), base);
        snprintf(idbuf, sizeof(idbuf), "%" PRIu64, id);
        send_op_u64(cons, 8, "stat", "id", id, NULL, false);
        h_raw_expect_reply(cons, 8, "not_found");
        close(owner);
        close(cons);
}

Test(batch, unregister_by_prefix_ttl_and_watch)
{
        int owner = conn(), w = conn(), mfd = memfd_with(4096, 5);
        struct h_frame f;
        uint64_t id;

        send_op(w, 2, "watch", "prefix", "px");
        h_raw_expect_reply(w, 2, "");
        register_table(owner, 3, "px/a", mfd, -1, 0, &id);
        expect_event(w, "watch", 2000, &f);
        cr_assert(proto_obj_str_eq(proto_get(f.m.root, "type"), "registered"));
        cr_assert(proto_obj_str_eq(proto_get(f.m.root, "kind"), "batch"));
        cr_assert_eq(get_u64(f.m.root, "size"), 1 + 12 + 16 + 11 + 24 + 24);
        cr_assert_eq(get_u64(f.m.root, "id"), id);
        h_frame_free(&f);
        expect_nothing(w, 200);         /* one event per batch, not per part */
        register_table(owner, 4, "px/b", mfd, -1, 0, NULL);
        expect_event(w, "watch", 2000, &f);
        h_frame_free(&f);
        send_op(owner, 5, "unregister", "prefix", "px");
        recv_reply(owner, 5, "", &f);
        cr_assert_eq(get_u64(f.m.root, "removed"), 2);
        h_frame_free(&f);
        for (int i = 0; i < 2; i++) {
                expect_event(w, "watch", 2000, &f);
                cr_assert(proto_obj_str_eq(proto_get(f.m.root, "type"), "unregistered"));
                h_frame_free(&f);
        }
        /* A TTL ends a batch as it ends any registration. */
        register_table(owner, 6, "px/ttl", mfd, -1, 150, NULL);
        expect_event(w, "watch", 2000, &f);
        h_frame_free(&f);
        expect_event(w, "watch", 3000, &f);
        cr_assert(proto_obj_str_eq(proto_get(f.m.root, "type"), "unregistered"));
        h_frame_free(&f);
        send_op(owner, 7, "lookup", "name", "px/ttl");
        h_raw_expect_reply(owner, 7, "not_found");
        close(mfd);
        close(owner);
        close(w);
}

/* An ephemeral batch ends with its owner's connection; one with a cuda-ipc
 * part is revoked from its lease holders. */
Test(batch, ephemeral_owner_death)
{
        int owner = conn(), cons = conn(), mfd = memfd_with(4096, 6);
        struct tp parts[2] = {
                { .kind = "host", .size = 64, .nfdi = 1, .fdi = { 0 } },
                { .kind = "cuda-ipc", .size = 4096, .offset = 4096, .nfdi = -1,
                  .device = UUID0, .alloc_size = 1u << 20, .handle = HANDLE, .buffer_id = 9 },
        };
        static const struct tn nodes[] = {
                { .name = "d", .format = "l", .flags = 2, .length = 512, .nulls = 0, .nbufs = 2,
                  .bufs = { 0, 1 } },
        };
        const msgpack_object *reg, *pa;
        const uint8_t *h;
        msgpack_sbuffer arrow;
        struct h_frame f;
        bool eph = false;
        size_t hlen;

        register_table(owner, 2, "eph/host", mfd, 1, 0, NULL);
        build_arrow(&arrow, 512, nodes, 1);
        (void)reg_ok(owner, 3, &(struct treq){ .name = "eph/dev", .parts = parts, .np = 2,
                                               .arrow = &arrow, .ephemeral = -1 }, &mfd, 1);
        msgpack_sbuffer_destroy(&arrow);
        lookup_ok(cons, 4, "eph/dev", &f);
        pa = reply_parts(&f, &reg);
        cr_assert_eq(proto_get_bool(reg, "ephemeral", &eph), 0);
        cr_assert(eph, "a batch with a cuda-ipc part is ephemeral");
        cr_assert_eq(part_nfds(pa, 1), 0);
        cr_assert_eq(proto_get_bin(&pa->via.array.ptr[1], "handle", &h, &hlen), 0);
        cr_assert_eq(hlen, 64);
        cr_assert_eq(memcmp(h, HANDLE, 64), 0);
        cr_assert_eq(get_u64(&pa->via.array.ptr[1], "buffer_id"), 9);
        h_frame_free(&f);
        close(owner);
        expect_event(cons, "revoked", 3000, &f);
        cr_assert(proto_obj_str_eq(proto_get(f.m.root, "name"), "eph/dev"));
        h_frame_free(&f);
        send_op(cons, 5, "lookup", "name", "eph/host");
        h_raw_expect_reply(cons, 5, "not_found");
        send_op(cons, 6, "lookup", "name", "eph/dev");
        h_raw_expect_reply(cons, 6, "not_found");
        close(mfd);
        close(cons);
}

/* revoke drops the batch's leases; adopt is refused; stats and metrics
 * count it. */
Test(batch, revoke_adopt_stats_metrics)
{
        int owner = conn(), cons = conn(), mfd = memfd_with(4096, 7);
        const msgpack_object *bytes;
        struct h_frame f;
        const char *text;
        size_t len;
        uint64_t id;

        register_table(owner, 2, "adm/b", mfd, -1, 0, &id);
        send_op(owner, 3, "adopt", "name", "adm/b");
        h_raw_expect_reply(owner, 3, "unsupported");
        send_op(owner, 4, "stats", NULL, NULL);
        recv_reply(owner, 4, "", &f);
        cr_assert_eq(proto_get_map(f.m.root, "bytes", &bytes), 0);
        cr_assert_eq(get_u64(bytes, "batch"), 1 + 12 + 16 + 11 + 24 + 24);
        h_frame_free(&f);
        send_op(owner, 5, "metrics", NULL, NULL);
        recv_reply(owner, 5, "", &f);
        cr_assert_eq(proto_get_str(f.m.root, "text", &text, &len), 0);
        cr_assert(memmem(text, len, "gpuipcd_registrations{kind=\"batch\"} 1\n", 38),
                  "metrics count the batch");
        cr_assert(memmem(text, len, "gpuipcd_bytes{kind=\"host\",device=\"host\"} 88\n", 44),
                  "its parts' bytes count under their kind: %.*s", (int)len, text);
        h_frame_free(&f);
        lookup_ok(cons, 6, "adm/b", &f);
        h_frame_free(&f);
        send_op(owner, 7, "revoke", "name", "adm/b");       /* the tests run as root */
        /* The owner's released event comes as the last lease goes, before
         * the reply. */
        expect_event(owner, "released", 2000, &f);
        cr_assert_eq(get_u64(f.m.root, "id"), id);
        h_frame_free(&f);
        recv_reply(owner, 7, "", &f);
        cr_assert_eq(get_u64(f.m.root, "leases"), 1);
        h_frame_free(&f);
        expect_event(cons, "revoked", 2000, &f);
        h_frame_free(&f);
        close(mfd);
        close(owner);
        close(cons);
}

/* cuda-pool parts of one pool share the pool's fd: it travels once. */
Test(batch, pool_parts_share_the_pool_fd)
{
        int fd = conn(), pfd = memfd_with(4096, 8);
        uint8_t h2[64];
        struct tp parts[2] = {
                { .kind = "cuda-pool", .size = 1000, .nfdi = 1, .fdi = { 0 }, .device = UUID0,
                  .alloc_size = 1u << 20, .key = POOL_K, .handle = HANDLE, .buffer_id = 1 },
                { .kind = "cuda-pool", .size = 3000, .offset = 100, .nfdi = 1, .fdi = { 0 },
                  .device = UUID0, .alloc_size = 4096, .key = POOL_K, .handle = h2,
                  .buffer_id = 2 },
        };
        static const struct tn nodes[] = {
                { .name = "p", .format = "g", .length = 125, .nulls = 0, .nbufs = 2,
                  .bufs = { -1, 0 } },
                { .name = "q", .format = "z", .length = 1, .nulls = 0, .nbufs = 3,
                  .bufs = { -1, 0, 1 } },
        };
        const msgpack_object *pa, *reg, *a0, *a1;
        msgpack_sbuffer arrow;
        struct h_frame f;
        bool eph = false;

        memset(h2, 'h', sizeof(h2));
        build_arrow(&arrow, 125, nodes, 2);
        (void)reg_ok(fd, 2, &(struct treq){ .name = "pool/b", .parts = parts, .np = 2,
                                            .arrow = &arrow, .ephemeral = -1 }, &pfd, 1);
        lookup_ok(fd, 3, "pool/b", &f);
        pa = reply_parts(&f, &reg);
        cr_assert_eq(proto_get_bool(reg, "ephemeral", &eph), 0);
        cr_assert(eph, "a batch with a cuda-pool part is ephemeral");
        cr_assert_eq(get_u64(f.m.root, "fds"), 1);
        cr_assert_eq(part_fd(pa, 0, 0), 0);
        cr_assert_eq(part_fd(pa, 1, 0), 0);
        cr_assert_eq(proto_get_map(&pa->via.array.ptr[0], "alloc", &a0), 0);
        cr_assert_eq(proto_get_map(&pa->via.array.ptr[1], "alloc", &a1), 0);
        cr_assert_neq(get_u64(a0, "id"), get_u64(a1, "id"), "two pointers, two entries");
        check_fd_bytes(f.fds[0], 0, 4096, 8, "pool fd");
        h_frame_free(&f);
        msgpack_sbuffer_destroy(&arrow);
        close(pfd);
        close(fd);
}

/* ---- quotas: each against a daemon of its own ---------------------------- */

TestSuite(batch_limits, .fini = h_teardown, .timeout = 30);

static void start_with(const char *const *args)
{
        signal(SIGPIPE, SIG_IGN);
        h_daemon_start(&h_d, args);
}

/* n host parts of 64 bytes in memfd index 0, one node naming them all
 * (at most 3) and the rest in further nodes. */
static uint64_t reg_parts_in(int fd, uint64_t seq, const char *name, const int *mfds,
                             unsigned nmfd, unsigned nparts, const char *code, const char *want)
{
        struct tp parts[8];
        struct tn nodes[8];
        msgpack_sbuffer arrow;
        struct treq r;
        uint64_t id = 0;

        cr_assert_leq(nparts, 8);
        for (unsigned i = 0; i < nparts; i++) {
                parts[i] = (struct tp){ .kind = "host", .size = 64, .offset = 64 * i,
                                        .nfdi = 1, .fdi = { (int)(i % nmfd) } };
                nodes[i] = (struct tn){ .format = "l", .length = 8, .nbufs = 2,
                                        .bufs = { -1, (int)i } };
        }
        build_arrow(&arrow, 8, nodes, nparts);
        r = (struct treq){ .name = name, .parts = parts, .np = nparts, .arrow = &arrow,
                           .ephemeral = -1 };
        if (code)
                reg_refused(fd, seq, &r, mfds, nmfd, code, want);
        else
                id = reg_ok(fd, seq, &r, mfds, nmfd);
        msgpack_sbuffer_destroy(&arrow);
        return id;
}

/* fds count per distinct memfd (2 each: it and its read-only open), not
 * per part. */
Test(batch_limits, fd_budget_counts_each_memfd_once)
{
        int fd, m[2];

        start_with((const char *const[]){ "--max-fds-per-uid", "3", NULL });
        fd = conn();
        m[0] = memfd_with(4096, 1);
        m[1] = memfd_with(4096, 2);
        (void)reg_parts_in(fd, 2, "q/two", m, 2, 2, "limit", "fd budget");
        (void)reg_parts_in(fd, 3, "q/six", m, 1, 6, NULL, NULL);
        (void)reg_parts_in(fd, 4, "q/more", m, 1, 1, "limit", "--max-fds-per-uid 3");
        close(m[0]);
        close(m[1]);
        close(fd);
}

/* Bytes count each memfd's whole size once, however many parts use it. */
Test(batch_limits, bytes_count_each_memfd_once)
{
        int fd, m[2];

        start_with((const char *const[]){ "--max-bytes-per-uid", "8K", NULL });
        fd = conn();
        m[0] = memfd_with(4096, 1);
        m[1] = memfd_with(8192, 2);
        (void)reg_parts_in(fd, 2, "q/big", m, 2, 2, "limit", "--max-bytes-per-uid");
        (void)reg_parts_in(fd, 3, "q/a", m, 1, 8, NULL, NULL);
        (void)reg_parts_in(fd, 4, "q/b", m, 1, 3, NULL, NULL);
        (void)reg_parts_in(fd, 5, "q/c", m, 1, 1, "limit", "--max-bytes-per-uid");
        close(m[0]);
        close(m[1]);
        close(fd);
}

/* A batch is one registration. */
Test(batch_limits, one_registration_each)
{
        int fd, m;

        start_with((const char *const[]){ "--max-registrations-per-uid", "2", NULL });
        fd = conn();
        m = memfd_with(4096, 1);
        (void)reg_parts_in(fd, 2, "q/a", &m, 1, 8, NULL, NULL);
        (void)reg_parts_in(fd, 3, "q/b", &m, 1, 8, NULL, NULL);
        (void)reg_parts_in(fd, 4, "q/c", &m, 1, 1, "limit", "--max-registrations-per-uid 2");
        close(m);
        close(fd);
}

/* ---- device parts through the CUDA driver double ------------------------ */

#ifdef GPUIPC_HAVE_CUDA_H

#define DFNS(X) X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)        \
        X(cuMemAlloc_v2) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemCreate) X(cuMemMap)   \
        X(cuMemAddressReserve) X(cuMemSetAccess) X(cuMemExportToShareableHandle)             \
        X(cuMemImportFromShareableHandle) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle_v2)       \
        X(cuPointerGetAttribute)
#define DFIELD(n) __typeof__(n) *n;
static struct { DFNS(DFIELD) } drv;
#undef DFIELD

#define VMM_SIZE (2u << 20)
#define IPC_SIZE (1u << 20)

/* Loads the double and makes device 0's primary context current; false
 * when anything fails (the caller says so its own way: a producer child
 * must not use the test's asserts). */
static bool load_double(void)
{
        void *dl = dlopen(h_path("tests/cuda-double/libcuda.so.1"), RTLD_NOW | RTLD_LOCAL);
        CUcontext ctx;
        CUdevice dev;

        if (!dl)
                return false;
#define DLOAD(n) if (!(drv.n = (__typeof__(n) *)dlsym(dl, #n))) return false;
        DFNS(DLOAD)
#undef DLOAD
        return drv.cuInit(0) == CUDA_SUCCESS && drv.cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
               drv.cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS &&
               drv.cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

static const CUmemAllocationProp VMM_PROP = {
        .type = CU_MEM_ALLOCATION_TYPE_PINNED,
        .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
};

/* Maps allocation h at a new range of size bytes; 0 on failure. */
static CUdeviceptr map_vmm(CUmemGenericAllocationHandle h, size_t size)
{
        CUmemAccessDesc acc = { .location = VMM_PROP.location,
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUdeviceptr base = 0;

        if (drv.cuMemAddressReserve(&base, size, 0, 0, 0) ||
            drv.cuMemMap(base, size, 0, h, 0) || drv.cuMemSetAccess(base, size, &acc, 1))
                return 0;
        return base;
}

static bool fill_device(CUdeviceptr p, size_t n, uint32_t seed)
{
        uint8_t *buf = malloc(n);
        bool ok;

        if (!buf)
                return false;
        for (size_t i = 0; i < n; i++)
                buf[i] = h_pattern(i, seed);
        ok = drv.cuMemcpyHtoD_v2(p, buf, n) == CUDA_SUCCESS;
        free(buf);
        return ok;
}

static void check_device(CUdeviceptr p, uint64_t offset, size_t n, uint32_t seed, const char *what)
{
        uint8_t *buf = malloc(n);

        cr_assert_not_null(buf);
        cr_assert_eq(drv.cuMemcpyDtoH_v2(buf, p + offset, n), CUDA_SUCCESS, "%s: copy", what);
        for (size_t i = 0; i < n; i++)
                if (buf[i] != h_pattern(offset + i, seed))
                        cr_assert_fail("%s: byte %zu is 0x%02x, want 0x%02x", what, i, buf[i],
                                       h_pattern(offset + i, seed));
        free(buf);
}

/* What the producer registered, for the consumer's checks. */
struct dev_shared {
        CUipcMemHandle ih;
        unsigned long long buffer_id;
};

/* The producer: device memory from the double, one batch of a cuda-vmm,
 * a cuda-ipc and a host part; writes what it shared to out and then 'r',
 * and keeps the memory until in closes.  Exit code 0, or the step that
 * failed. */
static int produce_device(int out, int in)
{
        CUmemGenericAllocationHandle h;
        struct dev_shared sh = { 0 };
        CUdeviceptr vbase, d;
        msgpack_sbuffer arrow;
        int vfd = -1, fds[2], sock;
        struct h_frame f;
        char c;
        static const struct tn nodes[] = {
                { .name = "v", .format = "i", .flags = 2, .length = 16384, .nulls = 0,
                  .nbufs = 2, .bufs = { 2, 0 } },
                { .name = "w", .format = "u", .length = 100, .nulls = 0, .nbufs = 3,
                  .bufs = { -1, 2, 1 } },
        };

        if (!load_double())
                return 2;
        if (drv.cuMemCreate(&h, VMM_SIZE, &VMM_PROP, 0) || !(vbase = map_vmm(h, VMM_SIZE)) ||
            !fill_device(vbase, VMM_SIZE, 21) ||
            drv.cuMemExportToShareableHandle(&vfd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                             0))
                return 3;
        if (drv.cuMemAlloc_v2(&d, IPC_SIZE) || !fill_device(d, IPC_SIZE, 22) ||
            drv.cuIpcGetMemHandle(&sh.ih, d) ||
            drv.cuPointerGetAttribute(&sh.buffer_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, d))
                return 4;
        struct tp parts[3] = {
                { .kind = "cuda-vmm", .size = 65536, .offset = 8192, .nfdi = 1, .fdi = { 0 },
                  .device = UUID0, .alloc_size = VMM_SIZE, .key = KEY_A },
                { .kind = "cuda-ipc", .size = 4000, .offset = 1000, .nfdi = -1,
                  .device = UUID0, .alloc_size = IPC_SIZE, .handle = (const uint8_t *)&sh.ih,
                  .buffer_id = sh.buffer_id },
                { .kind = "host", .size = 2048, .offset = 4096, .nfdi = 1, .fdi = { 1 } },
        };
        fds[0] = vfd;
        fds[1] = memfd_with(8192, 23);
        sock = conn();
        build_arrow(&arrow, 16384, nodes, 2);
        send_batch(sock, 2, &(struct treq){ .name = "dev/b", .parts = parts, .np = 3,
                                            .arrow = &arrow, .ephemeral = -1,
                                            .event = EVENT }, fds, 2);
        if (h_raw_recv(sock, 5000, &f) != 1 || proto_get(f.m.root, "error"))
                return 5;
        h_frame_free(&f);
        if (write(out, &sh, sizeof(sh)) != (ssize_t)sizeof(sh) || write(out, "r", 1) != 1)
                return 6;
        while (read(in, &c, 1) > 0)
                ;
        return 0;
}

TestSuite(batch_cuda, .init = h_setup, .fini = h_teardown, .timeout = 30);

Test(batch_cuda, vmm_ipc_host_parts_read_through_the_double)
{
        int to_child[2], from_child[2], status, fd;
        CUmemGenericAllocationHandle h;
        const msgpack_object *pa, *reg, *alloc;
        struct dev_shared sh;
        CUdeviceptr vbase, ip;
        const uint8_t *b;
        struct h_frame f;
        size_t blen;
        pid_t pid;
        char c = 0;

        /* Fork before any cuInit here: the double, as CUDA, refuses a child
         * forked after it. */
        cr_assert_eq(pipe(to_child), 0);
        cr_assert_eq(pipe(from_child), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                close(to_child[1]);
                close(from_child[0]);
                _exit(produce_device(from_child[1], to_child[0]));
        }
        close(to_child[0]);
        close(from_child[1]);
        if (read(from_child[0], &sh, sizeof(sh)) != (ssize_t)sizeof(sh) ||
            read(from_child[0], &c, 1) != 1 || c != 'r') {
                waitpid(pid, &status, 0);
                cr_assert_fail("the producer failed (exit %d)", WEXITSTATUS(status));
        }

        fd = conn();
        lookup_ok(fd, 2, "dev/b", &f);
        pa = reply_parts(&f, &reg);
        cr_assert_eq(get_u64(f.m.root, "fds"), 2);
        cr_assert_eq(f.nfds, 2);
        cr_assert_eq(part_fd(pa, 0, 0), 0);
        cr_assert_eq(part_nfds(pa, 1), 0);
        cr_assert_eq(part_fd(pa, 2, 0), 1);
        cr_assert_eq(proto_get_bin(reg, "event", &b, &blen), 0);
        cr_assert(blen == 64 && memcmp(b, EVENT, 64) == 0, "the batch's event");
        cr_assert_eq(proto_get_map(&pa->via.array.ptr[0], "alloc", &alloc), 0);
        cr_assert_eq(proto_get_bin(alloc, "key", &b, &blen), 0);
        cr_assert(blen == 16 && memcmp(b, KEY_A, 16) == 0);
        cr_assert_eq(proto_get_bin(&pa->via.array.ptr[1], "handle", &b, &blen), 0);
        cr_assert(blen == 64 && memcmp(b, &sh.ih, 64) == 0, "the cuda-ipc handle");
        cr_assert_eq(get_u64(&pa->via.array.ptr[1], "buffer_id"), sh.buffer_id);

        /* The consumer's side: import each part as the double's driver would. */
        cr_assert(load_double(), "cannot load the CUDA driver double");
        cr_assert_eq(drv.cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)f.fds[0],
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                     CUDA_SUCCESS);
        vbase = map_vmm(h, VMM_SIZE);
        cr_assert_neq(vbase, 0);
        check_device(vbase, 8192, 65536, 21, "cuda-vmm part");
        cr_assert_eq(drv.cuIpcOpenMemHandle_v2(&ip, sh.ih, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                     CUDA_SUCCESS);
        check_device(ip, 1000, 4000, 22, "cuda-ipc part");
        check_fd_bytes(f.fds[1], 4096, 2048, 23, "host part");
        h_frame_free(&f);
        close(fd);
        close(to_child[1]);
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "producer status %d", status);
        close(from_child[0]);
}

#endif

/* ---- restarts with the fd store -------------------------------------------- */

static struct h_sd sd;

static void restart_init(void)
{
        signal(SIGPIPE, SIG_IGN);
}

static void restart_fini(void)
{
        h_sd_stop(&sd);
}

TestSuite(batch_restart, .init = restart_init, .fini = restart_fini, .timeout = 60);

/* reg.parts and reg.arrow of a lookup reply, packed, into sb. */
static void pack_lookup_view(const struct h_frame *f, msgpack_sbuffer *sb)
{
        const msgpack_object *reg, *pa, *a;
        msgpack_packer pk;

        pa = reply_parts(f, &reg);
        cr_assert_eq(proto_get_map(reg, "arrow", &a), 0);
        msgpack_sbuffer_init(sb);
        msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
        msgpack_pack_object(&pk, *pa);
        msgpack_pack_object(&pk, *a);
        msgpack_pack_uint64(&pk, get_u64(reg, "id"));
        msgpack_pack_uint64(&pk, get_u64(reg, "size"));
}

/* release by the batch's owner: its released event comes first. */
static void release_own(int fd, uint64_t seq, uint64_t lease)
{
        struct h_frame f;

        send_op_u64(fd, seq, "release", "lease", lease, NULL, false);
        expect_event(fd, "released", 2000, &f);
        h_frame_free(&f);
        h_raw_expect_reply(fd, seq, "");
}

static void check_restored_bytes(const struct h_frame *f, const struct tp *parts,
                                 const uint32_t *seed, unsigned n)
{
        const msgpack_object *pa = reply_parts(f, NULL);

        for (unsigned i = 0; i < n; i++)
                check_fd_bytes(f->fds[part_fd(pa, i, 0)], parts[i].offset, parts[i].size,
                               seed[i], "restored part");
}

static void batch_survives(int sig)
{
        int fd, m[3] = { memfd_with(4096, 31), memfd_with(8192, 32), memfd_with(4096, 33) };
        struct tp parts[5] = {
                { .kind = "host", .size = 100, .offset = 0, .nfdi = 1, .fdi = { 0 } },
                { .kind = "host", .size = 200, .offset = 4096, .nfdi = 1, .fdi = { 1 } },
                { .kind = "host", .size = 300, .offset = 1024, .nfdi = 1, .fdi = { 0 } },
                { .kind = "cuda-vmm", .size = 1000, .offset = 64, .nfdi = 1, .fdi = { 2 },
                  .device = UUID0, .alloc_size = 2u << 20, .key = KEY_A },
                { .kind = "cuda-vmm", .size = 2000, .offset = 2048, .nfdi = 1, .fdi = { 2 },
                  .device = UUID0, .alloc_size = 2u << 20, .key = KEY_A },
        };
        static const uint32_t seed[5] = { 31, 32, 31, 33, 33 };
        static const struct tn nodes[] = {
                { .name = "n", .format = "+l", .length = 4, .nulls = 0, .children = 1,
                  .nbufs = 2, .bufs = { 0, 2 } },
                { .name = "item", .format = "s", .length = 50, .nulls = 0, .nbufs = 2,
                  .bufs = { -1, 1 } },
                { .name = "d", .format = "i", .length = 250, .nulls = 0, .nbufs = 2,
                  .bufs = { 3, 4 } },
        };
        msgpack_sbuffer arrow, before, after;
        struct h_frame f;
        uint64_t id;
        char name[48];

        h_sd_start(&sd, NULL);
        fd = conn();
        build_arrow(&arrow, 4, nodes, 3);
        id = reg_ok(fd, 2, &(struct treq){ .name = "rs/batch", .parts = parts, .np = 5,
                                           .arrow = &arrow, .ephemeral = -1, .event = EVENT },
                    m, 3);
        msgpack_sbuffer_destroy(&arrow);
        for (int i = 0; i < 3; i++)
                close(m[i]);
        lookup_ok(fd, 3, "rs/batch", &f);
        pack_lookup_view(&f, &before);
        /* Released before the kill: a lease of a live process's session
         * would be kept over the restart (and the batch with it). */
        release_own(fd, 4, get_u64(f.m.root, "lease"));
        h_frame_free(&f);
        /* Its two memfds as batch-ID-N, its allocation as vmm-ALLOC. */
        for (int i = 0; i < 2; i++) {
                snprintf(name, sizeof(name), "batch-%" PRIu64 "-%d", id, i);
                cr_assert_eq(h_sd_stored_name_settle(&sd, name, 1, 2000), 1,
                             "%s is not stored: [%s]", name, h_sd_store_str(&sd));
        }
        cr_assert_eq(h_sd_stored_settle(&sd, "vmm-", 1, 2000), 1, "store: [%s]",
                     h_sd_store_str(&sd));
        close(fd);

        /* Twice: the second start replays the snapshot the first wrote. */
        for (int round = 0; round < 2; round++) {
                h_sd_restart(&sd, sig);
                fd = conn();
                lookup_ok(fd, 2, "rs/batch", &f);
                pack_lookup_view(&f, &after);
                cr_assert_eq(get_u64(f.m.root, "fds"), 3);
                cr_assert_eq(after.size, before.size, "the restored batch differs");
                cr_assert_eq(memcmp(after.data, before.data, before.size), 0,
                             "the restored batch differs (round %d)", round);
                check_restored_bytes(&f, parts, seed, 5);
                release(fd, 3, get_u64(f.m.root, "lease"));  /* not the owner now */
                msgpack_sbuffer_destroy(&after);
                h_frame_free(&f);
                close(fd);
        }
        msgpack_sbuffer_destroy(&before);

        /* Freed (no leases): its entries leave the store. */
        fd = conn();
        send_op(fd, 3, "unregister", "name", "rs/batch");
        h_raw_expect_reply(fd, 3, "");
        cr_expect_eq(h_sd_stored_settle(&sd, "batch-", 0, 2000), 0, "store: [%s]",
                     h_sd_store_str(&sd));
        cr_expect_eq(h_sd_stored_settle(&sd, "vmm-", 0, 2000), 0, "store: [%s]",
                     h_sd_store_str(&sd));
        cr_expect_eq(h_sd_errors(&sd), 0, "notify protocol mistakes");
        close(fd);
}

Test(batch_restart, durable_batch_survives_sigkill)
{
        batch_survives(SIGKILL);
}

Test(batch_restart, durable_batch_survives_sigterm)
{
        batch_survives(SIGTERM);
}

/* A lookup that waits for the name gets the batch when it is registered;
 * owner_uid keeps out another uid's batch as it would any registration's. */
Test(batch, waiting_lookup_and_owner_uid)
{
        int owner = conn(), cons = conn(), mfd = memfd_with(4096, 9);
        const msgpack_object *pa;
        struct proto_out o;
        struct proto_map m;
        struct h_frame f;
        uint8_t *b;
        size_t n;

        proto_out_init(&o);
        proto_map_begin(&m, &o.pk);
        proto_map_kstr(&m, "op", "lookup");
        proto_map_ku64(&m, "seq", 2);
        proto_map_kstr(&m, "name", "wait/b");
        proto_map_ku64(&m, "wait_ms", 5000);
        proto_map_end(&m);
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT), 0);
        b = proto_out_release(&o, &n);
        cr_assert_eq(h_raw_send(cons, b, n, NULL, 0), 0);
        free(b);
        proto_out_free(&o);
        expect_nothing(cons, 200);
        register_table(owner, 3, "wait/b", mfd, -1, 0, NULL);
        recv_reply(cons, 2, "", &f);
        pa = reply_parts(&f, NULL);
        cr_assert_eq(pa->via.array.size, 6);
        cr_assert_eq(f.nfds, 1);
        check_fd_bytes(f.fds[0], TOFF[5], TSIZE[5], 9, "waited part");
        h_frame_free(&f);

        proto_out_init(&o);
        proto_map_begin(&m, &o.pk);
        proto_map_kstr(&m, "op", "lookup");
        proto_map_ku64(&m, "seq", 4);
        proto_map_kstr(&m, "name", "wait/b");
        proto_map_ku64(&m, "owner_uid", getuid() + 1);
        proto_map_end(&m);
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT), 0);
        b = proto_out_release(&o, &n);
        cr_assert_eq(h_raw_send(cons, b, n, NULL, 0), 0);
        free(b);
        proto_out_free(&o);
        h_raw_expect_reply(cons, 4, "not_found");
        close(mfd);
        close(owner);
        close(cons);
}

/* unhold of allocation aid, expecting success. */
static void send_unhold(int fd, uint64_t seq, uint64_t aid)
{
        struct proto_out o;
        struct proto_map m;
        uint8_t *b;
        size_t n;

        proto_out_init(&o);
        proto_map_begin(&m, &o.pk);
        proto_map_kstr(&m, "op", "unhold");
        proto_map_ku64(&m, "seq", seq);
        proto_map_key(&m, "allocs");
        msgpack_pack_array(&o.pk, 1);
        msgpack_pack_uint64(&o.pk, aid);
        proto_map_end(&m);
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT), 0);
        b = proto_out_release(&o, &n);
        cr_assert_eq(h_raw_send(fd, b, n, NULL, 0), 0);
        free(b);
        proto_out_free(&o);
        h_raw_expect_reply(fd, seq, "");
}

/* owner registers batch name of one cuda-vmm part (allocation key, its fd
 * vfd) and cons looks it up with cache: true, holding the allocation; the
 * lease and the allocation's id. */
static void held_vmm_part(int owner, int cons, const char *name, const uint8_t key[16], int vfd,
                          uint64_t *ret_lease, uint64_t *ret_aid)
{
        struct tp parts[1] = {
                { .kind = "cuda-vmm", .size = 4096, .nfdi = 1, .fdi = { 0 }, .device = UUID0,
                  .alloc_size = 2u << 20, .key = key },
        };
        static const struct tn nodes[] = {
                { .name = "d", .format = "f", .length = 1024, .nulls = 0, .nbufs = 2,
                  .bufs = { -1, 0 } },
        };
        const msgpack_object *pa, *alloc;
        msgpack_sbuffer arrow;
        struct h_frame f;
        uint64_t id;

        build_arrow(&arrow, 1024, nodes, 1);
        id = reg_ok(owner, 2, &(struct treq){ .name = name, .parts = parts, .np = 1,
                                              .arrow = &arrow, .ephemeral = -1 }, &vfd, 1);
        msgpack_sbuffer_destroy(&arrow);
        send_op_u64(cons, 3, "lookup", "id", id, "cache", true);
        recv_reply(cons, 3, "", &f);
        *ret_lease = get_u64(f.m.root, "lease");
        pa = reply_parts(&f, NULL);
        cr_assert_eq(proto_get_map(&pa->via.array.ptr[0], "alloc", &alloc), 0);
        *ret_aid = get_u64(alloc, "id");
        h_frame_free(&f);
}

/* A device part's release event reaches the owner; a held allocation of a
 * part is uncached when the batch goes, and unmapped once let go. */
Test(batch, release_events_holds_uncache_unmapped)
{
        int owner = conn(), cons = conn(), vfd = memfd_with(4096, 10);
        const msgpack_object *evs;
        struct proto_out o;
        struct proto_map m;
        struct h_frame f;
        uint64_t lease, aid;
        uint8_t *b;
        size_t n;

        held_vmm_part(owner, cons, "hold/b", KEY_B, vfd, &lease, &aid);

        proto_out_init(&o);
        proto_map_begin(&m, &o.pk);
        proto_map_kstr(&m, "op", "release");
        proto_map_ku64(&m, "seq", 4);
        proto_map_ku64(&m, "lease", lease);
        proto_map_kbin(&m, "event", EVENT, 64);
        proto_map_end(&m);
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT), 0);
        b = proto_out_release(&o, &n);
        cr_assert_eq(h_raw_send(cons, b, n, NULL, 0), 0);
        free(b);
        proto_out_free(&o);
        h_raw_expect_reply(cons, 4, "");
        expect_event(owner, "released", 2000, &f);
        cr_assert_eq(proto_get_array(f.m.root, "events", &evs), 0, "released carries events");
        cr_assert_eq(evs->via.array.size, 1);
        cr_assert(evs->via.array.ptr[0].via.bin.size == 64 &&
                  memcmp(evs->via.array.ptr[0].via.bin.ptr, EVENT, 64) == 0);
        h_frame_free(&f);

        send_op(owner, 5, "unregister", "name", "hold/b");
        h_raw_expect_reply(owner, 5, "");
        expect_event(cons, "uncache", 2000, &f);
        cr_assert_eq(get_u64(f.m.root, "alloc"), aid);
        h_frame_free(&f);
        send_unhold(cons, 6, aid);
        expect_event(owner, "unmapped", 2000, &f);
        cr_assert_eq(get_u64(f.m.root, "alloc"), aid);
        h_frame_free(&f);
        close(vfd);
        close(owner);
        close(cons);
}

/* A single cuda-vmm registration whose chunk 0 is allocation key and whose
 * chunk 1 is malformed (a 3-byte key): refused after chunk 0 was taken. */
static void send_refused_chunks(int fd, uint64_t seq, const uint8_t key[16], uint64_t size0)
{
        int fds[2] = { memfd_with(4096, 21), memfd_with(4096, 22) };
        struct proto_out o;
        uint8_t *b;
        size_t n;

        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 9);
        proto_pack_kstr(&o.pk, "op", "register");
        proto_pack_ku64(&o.pk, "seq", seq);
        proto_pack_kstr(&o.pk, "name", "hold/refused");
        proto_pack_kstr(&o.pk, "kind", "cuda-vmm");
        proto_pack_ku64(&o.pk, "size", 4096);
        proto_pack_kstr(&o.pk, "device", UUID0);
        proto_pack_ku64(&o.pk, "alloc_size", size0 + 4096);
        proto_pack_ku64(&o.pk, "fds", 2);
        proto_pack_str(&o.pk, "chunks");
        msgpack_pack_array(&o.pk, 2);
        msgpack_pack_map(&o.pk, 2);
        proto_pack_str(&o.pk, "key");
        msgpack_pack_bin_with_body(&o.pk, key, 16);
        proto_pack_ku64(&o.pk, "size", size0);
        msgpack_pack_map(&o.pk, 2);
        proto_pack_str(&o.pk, "key");
        msgpack_pack_bin_with_body(&o.pk, "abc", 3);
        proto_pack_ku64(&o.pk, "size", 4096);
        cr_assert_eq(proto_out_finish(&o, PROTO_MAX_FRAME_LIMIT), 0);
        b = proto_out_release(&o, &n);
        cr_assert_eq(h_raw_send(fd, b, n, fds, 2), 0);
        free(b);
        proto_out_free(&o);
        h_raw_expect_reply(fd, seq, "bad_request");
        close(fds[0]);
        close(fds[1]);
}

/* A held allocation whose last registration went is still owed to its
 * producer: a registration of it refused in between (here one whose later
 * chunk is malformed) must not forget who gets `unmapped`, or the producer
 * waits for it for ever and never frees. */
Test(batch, refused_reregistration_keeps_the_unmapped_owner)
{
        static const uint8_t key[16] = "alloc-key-R.....";
        int owner = conn(), cons = conn(), vfd = memfd_with(4096, 12);
        struct h_frame f;
        uint64_t lease, aid;

        held_vmm_part(owner, cons, "hold/r", key, vfd, &lease, &aid);
        send_op_u64(cons, 4, "release", "lease", lease, NULL, false);
        h_raw_expect_reply(cons, 4, "");
        expect_event(owner, "released", 2000, &f);
        h_frame_free(&f);

        send_op(owner, 4, "unregister", "name", "hold/r");
        h_raw_expect_reply(owner, 4, "");
        expect_event(cons, "uncache", 2000, &f);
        h_frame_free(&f);
        /* Refused, by the owner and by another connection. */
        send_refused_chunks(owner, 5, key, 2u << 20);
        send_refused_chunks(cons, 5, key, 2u << 20);
        expect_nothing(owner, 100);

        send_unhold(cons, 6, aid);
        expect_event(owner, "unmapped", 2000, &f);
        cr_assert_eq(get_u64(f.m.root, "alloc"), aid);
        h_frame_free(&f);
        expect_nothing(cons, 100);      /* not the refused one's to hear */
        close(vfd);
        close(owner);
        close(cons);
}
