/* batch.c: a batch registration's parts, their fds and costs, and the
 * batch's part of records. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batch.h"
#include "closer.h"
#include "host.h"

struct reg_batch *batch_new(uint32_t n_parts, uint32_t n_memfds)
{
        struct reg_batch *b;

        if (n_parts == 0 || n_parts > PROTO_BATCH_PARTS_MAX || n_memfds > PROTO_MAX_FDS)
                return NULL;
        b = calloc(1, sizeof(*b));
        if (!b)
                return NULL;
        b->parts = calloc(n_parts, sizeof(*b->parts));
        b->memfds = calloc(n_memfds ? n_memfds : 1, sizeof(*b->memfds));
        if (!b->parts || !b->memfds) {
                free(b->parts);
                free(b->memfds);
                free(b);
                return NULL;
        }
        b->n_parts = n_parts;
        b->n_memfds = n_memfds;
        for (uint32_t i = 0; i < n_memfds; i++)
                b->memfds[i].fd = b->memfds[i].ro_fd = -1;
        return b;
}

void batch_free(struct alloc_table *T, struct reg_batch *b)
{
        if (!b)
                return;
        for (uint32_t i = 0; i < b->n_parts; i++)
                reg_cuda_free(T, b->parts[i].cuda);
        for (uint32_t i = 0; i < b->n_memfds; i++) {
                closer_close(b->memfds[i].fd);
                closer_close(b->memfds[i].ro_fd);
        }
        rel_events_done(&b->rel);
        free(b->parts);
        free(b->memfds);
        free(b->arrow);
        free(b->lookup_parts);
        free(b);
}

int batch_set_arrow_bytes(struct reg_batch *b, const uint8_t *p, size_t len)
{
        if (len == 0 || len > UINT32_MAX)
                return -EINVAL;
        b->arrow = malloc(len);
        if (!b->arrow)
                return -ENOMEM;
        memcpy(b->arrow, p, len);
        b->arrow_len = (uint32_t)len;
        return 0;
}

int batch_set_arrow(struct reg_batch *b, const msgpack_object *arrow)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int r;

        /* The same values, each in msgpack-c's shortest encoding. */
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (msgpack_pack_object(&pk, *arrow) < 0 || !sb.data) {
                msgpack_sbuffer_destroy(&sb);
                return -ENOMEM;
        }
        r = batch_set_arrow_bytes(b, (const uint8_t *)sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
        return r;
}

bool batch_has_cuda(const struct reg_batch *b)
{
        for (uint32_t i = 0; i < b->n_parts; i++)
                if (b->parts[i].cuda)
                        return true;
        return false;
}

bool batch_bound(const struct reg_batch *b)
{
        for (uint32_t i = 0; i < b->n_parts; i++)
                if (b->parts[i].kind == PROTO_KIND_CUDA_IPC ||
                    b->parts[i].kind == PROTO_KIND_CUDA_POOL)
                        return true;
        return false;
}

uint64_t batch_size(const struct reg_batch *b)
{
        uint64_t n = 0;

        for (uint32_t i = 0; i < b->n_parts; i++)
                n = b->parts[i].size > UINT64_MAX - n ? UINT64_MAX : n + b->parts[i].size;
        return n;
}

/* The fds part p sends, in its order (chunk order for cuda-vmm). */
static unsigned part_fds(const struct reg_batch *b, const struct batch_part *p, int *fds)
{
        if (p->kind == PROTO_KIND_HOST) {
                fds[0] = b->memfds[p->memfd].ro_fd;
                return 1;
        }
        if (p->kind == PROTO_KIND_CUDA_IPC || !p->cuda)
                return 0;
        return reg_cuda_fds(p->cuda, fds);
}

static int index_of(const int *fds, unsigned n, int fd)
{
        for (unsigned i = 0; i < n; i++)
                if (fds[i] == fd)
                        return (int)i;
        return -1;
}

int batch_fds(const struct reg_batch *b, int fds[PROTO_MAX_FDS])
{
        int mine[PROTO_MAX_FDS];
        unsigned n = 0, k;

        for (uint32_t i = 0; i < b->n_parts; i++) {
                k = part_fds(b, &b->parts[i], mine);
                for (unsigned j = 0; j < k; j++) {
                        if (index_of(fds, n, mine[j]) >= 0)
                                continue;
                        if (n == PROTO_MAX_FDS)
                                return -E2BIG;
                        fds[n++] = mine[j];
                }
        }
        return (int)n;
}

uint64_t batch_bytes(const struct reg_batch *b)
{
        uint64_t n = 0, k;

        for (uint32_t i = 0; i < b->n_memfds; i++) {
                /* What the fd pins: the memfd's whole size, fixed by its seals. */
                k = host_fd_bytes(b->memfds[i].fd, 0);
                n = k > UINT64_MAX - n ? UINT64_MAX : n + k;
        }
        for (uint32_t i = 0; i < b->n_parts; i++)
                if (b->parts[i].kind == PROTO_KIND_CUDA_VMM)
                        n = b->parts[i].size > UINT64_MAX - n ? UINT64_MAX
                                                               : n + b->parts[i].size;
        return n;
}

unsigned batch_store_cost(const struct reg_batch *b)
{
        int fds[PROTO_MAX_FDS];
        int n = batch_fds(b, fds);

        /* The memfds' read-only opens stand for their memfds. */
        return n < 0 ? PROTO_MAX_FDS : (unsigned)n;
}

unsigned batch_fd_cost(const struct reg_batch *b)
{
        /* Each memfd and its read-only open; each allocation's or pool's fd. */
        return batch_store_cost(b) + b->n_memfds;
}

/* How many (part, chunk) positions of b use entry a, and whether every
 * registration of a is one of them. */
static uint32_t refs_to(const struct reg_batch *b, const struct alloc *a)
{
        uint32_t n = 0;

        for (uint32_t i = 0; i < b->n_parts; i++) {
                const struct reg_cuda *rc = b->parts[i].cuda;
                for (uint32_t c = 0; rc && c < rc->n_chunks; c++)
                        n += reg_cuda_chunk(rc, c) == a;
        }
        return n;
}

/* Whether part i is the first to use entry a (by chunk or through its
 * pointer's pool), so that each entry is visited once. */
static bool first_use(const struct reg_batch *b, uint32_t i, const struct alloc *a)
{
        for (uint32_t j = 0; j < i; j++) {
                const struct reg_cuda *rc = b->parts[j].cuda;
                for (uint32_t c = 0; rc && c < rc->n_chunks; c++)
                        if (reg_cuda_chunk(rc, c) == a || reg_cuda_chunk(rc, c)->pool == a)
                                return false;
        }
        return true;
}

/* Whether only b uses pool entry pool: through pointers that b alone uses,
 * all of the pool's. */
static bool pool_alone(const struct reg_batch *b, const struct alloc *pool)
{
        uint32_t ptrs = 0;

        for (uint32_t i = 0; i < b->n_parts; i++) {
                const struct reg_cuda *rc = b->parts[i].cuda;
                if (!rc || rc->alloc->pool != pool || !first_use(b, i, rc->alloc))
                        continue;
                if (refs_to(b, rc->alloc) != rc->alloc->regs)
                        return false;
                ptrs++;
        }
        return ptrs == pool->regs;
}

void batch_each_own_fd(const struct reg_batch *b, void (*fn)(const struct alloc *a))
{
        for (uint32_t i = 0; i < b->n_parts; i++) {
                const struct reg_cuda *rc = b->parts[i].cuda;
                const struct alloc *a;

                if (!rc)
                        continue;
                if (b->parts[i].kind == PROTO_KIND_CUDA_POOL) {
                        a = rc->alloc->pool;
                        if (first_use(b, i, a) && pool_alone(b, a))
                                fn(a);
                        continue;
                }
                if (b->parts[i].kind != PROTO_KIND_CUDA_VMM)
                        continue;
                /* Once per entry, not again for a later chunk of this part. */
                for (uint32_t c = 0; c < rc->n_chunks; c++)
                        if (reg_cuda_chunk_first(rc, c) &&
                            batch_last_user(b, i, reg_cuda_chunk(rc, c)))
                                fn(reg_cuda_chunk(rc, c));
        }
}

bool batch_last_user(const struct reg_batch *b, uint32_t i, const struct alloc *a)
{
        return first_use(b, i, a) && refs_to(b, a) == a->regs;
}

struct rel_events *reg_events(struct reg *r)
{
        if (r->cuda)
                return &r->cuda->rel;
        if (r->batch && batch_has_cuda(r->batch))
                return &r->batch->rel;
        return NULL;
}

/* One map of reg.parts. */
static void pack_part(msgpack_packer *pk, const struct reg_batch *b, uint32_t i,
                      bool lookup, const int *fds, unsigned nfds, const uint8_t *held)
{
        const struct batch_part *p = &b->parts[i];
        int mine[PROTO_MAX_FDS];
        struct proto_map m;
        unsigned k;

        proto_map_begin(&m, pk);
        proto_map_kstr(&m, "kind", proto_kind_name(p->kind));
        proto_map_ku64(&m, "size", p->size);
        proto_map_ku64(&m, "offset", p->offset);
        if (p->shared_write)
                proto_map_kbool(&m, "shared_write", true);
        if (p->cuda)
                reg_cuda_pack(&m, p->kind, p->cuda, lookup);
        if (lookup) {
                k = part_fds(b, p, mine);
                proto_map_key(&m, "fds");
                msgpack_pack_array(pk, k);
                for (unsigned j = 0; j < k; j++) {
                        int at = index_of(fds, nfds, mine[j]);
                        msgpack_pack_uint32(pk, at < 0 ? 0 : (uint32_t)at);
                }
                if (held && p->cuda && (held[i / 8] & (1u << (i % 8))))
                        proto_map_kbool(&m, "held", true);
        }
        proto_map_end(&m);
}

void batch_pack_record(struct proto_map *m, const struct reg_batch *b, enum record_use use,
                       const struct record_lookup *lk)
{
        bool lookup = use == RECORD_LOOKUP;
        const int *fds = lk ? lk->fds : NULL;
        int mine[PROTO_MAX_FDS];
        int nfds = lk ? (int)lk->nfds : 0;

        proto_map_ku64(m, "n_parts", b->n_parts);
        if (use == RECORD_LIST)
                return;
        proto_map_key(m, "arrow");
        m->pk->callback(m->pk->data, (const char *)b->arrow, b->arrow_len);
        if (b->has_event)
                proto_map_kbin(m, "event", b->event, PROTO_IPC_HANDLE_LEN);
        if (lookup && !fds) {
                nfds = batch_fds(b, mine);
                fds = mine;
        }
        proto_map_key(m, "parts");
        /* The cached array names fds in batch_fds()'s order, as lk's are. */
        if (lookup && b->lookup_parts) {
                m->pk->callback(m->pk->data, (const char *)b->lookup_parts,
                                b->lookup_parts_len);
                return;
        }
        msgpack_pack_array(m->pk, b->n_parts);
        for (uint32_t i = 0; i < b->n_parts; i++)
                pack_part(m->pk, b, i, lookup, fds, nfds < 0 ? 0 : (unsigned)nfds,
                          lk ? lk->held : NULL);
}

/* A packer's buffer that remembers a failed write: msgpack-c's packer
 * drops the write that ran out of memory and goes on. */
struct sure_buf {
        msgpack_sbuffer sb;             /* first: proto_map_begin() takes it as the sbuffer */
        bool failed;
};

static int sure_write(void *data, const char *buf, size_t len)
{
        struct sure_buf *s = data;

        if (msgpack_sbuffer_write(&s->sb, buf, len) < 0)
                s->failed = true;
        return 0;
}

/* Whether sb holds exactly one array of n elements. */
static bool reads_back(const msgpack_sbuffer *sb, uint32_t n)
{
        msgpack_unpacked u;
        size_t off = 0;
        bool ok;

        msgpack_unpacked_init(&u);
        ok = msgpack_unpack_next(&u, sb->data, sb->size, &off) == MSGPACK_UNPACK_SUCCESS &&
             off == sb->size && u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == n;
        msgpack_unpacked_destroy(&u);
        return ok;
}

void batch_cache_lookup_parts(struct reg_batch *b)
{
        struct sure_buf out = { .failed = false };
        msgpack_packer pk;
        int fds[PROTO_MAX_FDS];
        int nfds;

        free(b->lookup_parts);
        b->lookup_parts = NULL;
        b->lookup_parts_len = 0;
        nfds = batch_fds(b, fds);
        if (batch_has_cuda(b) || nfds < 0)
                return;
        msgpack_sbuffer_init(&out.sb);
        msgpack_packer_init(&pk, &out, sure_write);
        msgpack_pack_array(&pk, b->n_parts);
        for (uint32_t i = 0; i < b->n_parts; i++)
                pack_part(&pk, b, i, true, fds, (unsigned)nfds, NULL);
        /* A map header is written past the packer (proto_map_begin): keep
         * only an array with no failed write that reads back whole. */
        if (!out.failed && out.sb.data && out.sb.size <= UINT32_MAX &&
            reads_back(&out.sb, b->n_parts)) {
                b->lookup_parts = (uint8_t *)out.sb.data;
                b->lookup_parts_len = (uint32_t)out.sb.size;
                return;
        }
        msgpack_sbuffer_destroy(&out.sb);
}
