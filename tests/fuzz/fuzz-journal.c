/* fuzz-journal.c: libFuzzer entry point for the fd store's journal replay.
 *
 * The input is a journal as restart_persist.c writes it (restart_journal.h:
 * length, FNV-1a hash, msgpack body, repeated).  Each input builds a fresh
 * daemon state as fuzz-ops.c does, without a socket (a libuv loop,
 * daemon_init), and a
 * small fixed set of stored fds as systemd would pass them back: "host-1"
 * and "host-2" (memfds sealed against shrinking, 8 KiB and 4 KiB),
 * "host-3" (unsealed, so it fails the check), "vmm-1" to "vmm-3" (memfds
 * standing in for exported CUDA fds), "batch-4-0" and "batch-4-1" (the
 * memfds of a batch of id 4, sealed, 8 KiB and 4 KiB).  journal_parse() walks the input and
 * restore_apply() applies each record, as restore_run() does.  Then the
 * restored state is checked (every registration and lease reachable the
 * ways the registry promises, owners and holders detached sessions, the
 * counters right, the id counters above every id handed out, host and
 * cuda-vmm fds open, allocations with ids of their own and the right
 * reference counts), the detached sessions end or stay (a bit of the
 * input's hash decides), and everything is torn down: uv_loop_close() must
 * succeed and no fd may be left.  FUZZ_JOURNAL_DEBUG=1 prints what each
 * record did.
 *
 * A custom mutator keeps most mutants valid journals: it mutates one
 * record's body (or drops, duplicates or swaps records) and writes the
 * framing again with the right lengths and hashes; one mutation in eight is
 * left raw, for the framing checks.  Replay ignores it.
 *
 * Build (libFuzzer; D = the daemon sources but main.c, P = the proto sources):
 *   clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=undefined -D_GNU_SOURCE -DGPUIPC_VERSION=\"fuzz\" \
 *         -Iproto -Iclient -Idaemon $D $P tests/fuzz/fuzz-journal.c -luv -lmsgpackc -ldl \
 *         -o build/fuzz/fuzz-journal
 *   build/fuzz/fuzz-journal -max_total_time=120 CORPUS_DIR tests/fuzz/corpus-journal
 * Replay without libFuzzer: link with replay.c instead of -fsanitize=fuzzer. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <uv.h>

#include "batch.h"
#include "cuda_reg.h"
#include "daemon.h"
#include "restart_journal.h"
#include "log.h"
#include "restart_persist.h"
#include "proto.h"
#include "restart_replay.h"
#include "session.h"
#include "ledger.h"
#include "watch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);
/* libFuzzer's own mutator; absent (NULL) in the replay build. */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size) __attribute__((weak));

#define FAIL(...)                                                               \
        do {                                                                    \
                fprintf(stderr, "fuzz-journal: " __VA_ARGS__);                  \
                fputc('\n', stderr);                                            \
                abort();                                                        \
        } while (0)

static struct daemon D;

/* ---- stored fds ----------------------------------------------------------- */

static const struct {
        const char *name;
        off_t size;
        bool seal;
} stored[] = {
        { "host-1", 8192, true },
        { "host-2", 4096, true },
        { "host-3", 4096, false },
        { "vmm-1", 4096, false },
        { "vmm-2", 4096, false },
        { "vmm-3", 4096, false },
        { "batch-4-0", 8192, true },
        { "batch-4-1", 4096, true },
};

#define NSTORED (sizeof(stored) / sizeof(stored[0]))

static struct sd_fd *make_stored(void)
{
        struct sd_fd *fds = calloc(NSTORED, sizeof(*fds));

        if (!fds)
                abort();
        for (size_t i = 0; i < NSTORED; i++) {
                int fd = memfd_create(stored[i].name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
                if (fd < 0 || ftruncate(fd, stored[i].size) < 0)
                        abort();
                if (stored[i].seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
                        abort();
                fds[i].fd = fd;
                snprintf(fds[i].name, sizeof(fds[i].name), "%s", stored[i].name);
        }
        return fds;
}

/* ---- replay --------------------------------------------------------------- */

static bool debug;

static int apply_one(const uint8_t *body, size_t len, void *data)
{
        int k = restore_replay_one(body, len, data);

        if (debug)
                fprintf(stderr, "fuzz-journal: record of %zu bytes: %s\n", len,
                        k < 0 ? strerror(-k) : "applied or skipped");
        return k;
}

/* ---- checks of the restored state ------------------------------------------ */

struct party_check {
        uint32_t live, leases;          /* counted from the registry */
        unsigned n;
};

static void check_party(const struct reg_party *p, void *data)
{
        struct party_check *c = data;
        uint32_t owned_live = 0, held = 0;

        if (!p->detached)
                FAIL("a detached session's party is not marked detached");
        if (session_detached_find(&D, p->session) != p)
                FAIL("a detached session is not found by its token");
        for (const struct reg *r = p->owned; r; r = r->own_next) {
                if (r->owner != p)
                        FAIL("registration %llu is on a party's list but owned by another",
                             (unsigned long long)r->id);
                if (r->own_next && r->own_next->own_prev != r)
                        FAIL("owner list links broken");
                owned_live += r->live;
        }
        for (const struct lease *l = p->leases; l; l = l->next) {
                if (l->holder != p)
                        FAIL("lease %llu is on a party's list but held by another",
                             (unsigned long long)l->id);
                if (l->next && l->next->prev != l)
                        FAIL("holder list links broken");
                held++;
        }
        if (owned_live != p->n_live)
                FAIL("a session owns %u live registrations but counts %u", owned_live, p->n_live);
        if (held != p->n_leases)
                FAIL("a session holds %u leases but counts %u", held, p->n_leases);
        c->live += p->n_live;
        c->leases += p->n_leases;
        c->n++;
}

static bool fd_open(int fd)
{
        return fd >= 0 && fcntl(fd, F_GETFD) >= 0;
}

/* The references to allocation entry a of CUDA data rc: one per chunk
 * (chunk 0 is its allocation). */
static uint32_t refs_of(const struct reg_cuda *rc, const struct alloc *a)
{
        uint32_t n = 0;

        for (uint32_t c = 0; rc && c < rc->n_chunks; c++)
                n += reg_cuda_chunk(rc, c) == a;
        return n;
}

/* The registrations (and batch parts) that use a, and for a pool the
 * pointer entries of it. */
static uint32_t users_of(const struct alloc *a)
{
        const struct hmap *m = &D.allocs.map;
        uint32_t n = 0;

        for (const struct reg *r = registry_first(D.reg); r; r = r->next) {
                n += refs_of(r->cuda, a);
                for (uint32_t i = 0; r->batch && i < r->batch->n_parts; i++)
                        n += refs_of(r->batch->parts[i].cuda, a);
        }
        for (size_t b = 0; m->buckets && b <= m->mask; b++)
                for (const struct hmap_node *nd = m->buckets[b]; nd; nd = nd->next)
                        n += container_of(nd, struct alloc, node)->pool == a;
        return n;
}

/* A batch's memfds open, its parts' kinds and allocations right. */
static void check_batch(const struct reg *r)
{
        const struct reg_batch *b = r->batch;
        int fds[PROTO_MAX_FDS];

        if (!b || b->n_parts == 0 || !b->arrow)
                FAIL("batch registration %llu without its parts", (unsigned long long)r->id);
        for (uint32_t i = 0; i < b->n_memfds; i++)
                if (!fd_open(b->memfds[i].fd) || !fd_open(b->memfds[i].ro_fd))
                        FAIL("batch %llu without memfd %u", (unsigned long long)r->id, i);
        for (uint32_t i = 0; i < b->n_parts; i++) {
                const struct batch_part *p = &b->parts[i];
                if (p->kind >= PROTO_BUFFER_KINDS || (p->kind == PROTO_KIND_HOST) != !p->cuda ||
                    (p->kind == PROTO_KIND_HOST && p->memfd >= b->n_memfds))
                        FAIL("batch %llu: part %u of kind %u is not as its kind says",
                             (unsigned long long)r->id, i, p->kind);
        }
        if (batch_fds(b, fds) < 0)
                FAIL("batch %llu would send more fds than a frame carries",
                     (unsigned long long)r->id);
        if (r->size != batch_size(b) || r->cuda || r->fd >= 0)
                FAIL("batch %llu: size or fields not a batch's", (unsigned long long)r->id);
}

/* Each allocation: an id of its own below the next one, as many
 * references as registrations use it, a cuda-vmm one its fd. */
static void check_allocs(void)
{
        const struct hmap *m = &D.allocs.map;
        uint64_t n = 0;

        for (size_t b = 0; m->buckets && b <= m->mask; b++)
                for (const struct hmap_node *nd = m->buckets[b]; nd; nd = nd->next) {
                        const struct alloc *a = container_of(nd, struct alloc, node);
                        uint32_t regs = 0;

                        n++;
                        if (a->id == 0 || a->id >= D.allocs.next_id)
                                FAIL("allocation id %llu, but the next id is %llu",
                                     (unsigned long long)a->id,
                                     (unsigned long long)D.allocs.next_id);
                        for (size_t b2 = 0; b2 <= m->mask; b2++)
                                for (const struct hmap_node *o = m->buckets[b2]; o; o = o->next)
                                        if (o != nd && container_of(o, struct alloc, node)->id ==
                                            a->id)
                                                FAIL("two allocations with id %llu",
                                                     (unsigned long long)a->id);
                        regs = users_of(a);
                        if (regs != a->regs)
                                FAIL("allocation %llu: %u registrations use it, it counts %u",
                                     (unsigned long long)a->id, regs, a->regs);
                        if (a->kind == PROTO_KIND_CUDA_VMM && !fd_open(a->fd))
                                FAIL("cuda-vmm allocation %llu without its fd",
                                     (unsigned long long)a->id);
                }
        if (n != D.allocs.n)
                FAIL("%llu allocations in the table, %llu counted", (unsigned long long)n,
                     (unsigned long long)D.allocs.n);
}

static void check_state(void)
{
        const struct registry_counters *cnt = registry_counters(D.reg);
        struct party_check pc = { 0 };
        uint64_t next_id, next_lease, n = 0, live = 0, leases = 0, owned_live = 0;
        uint64_t owned_leases = 0, bytes[REGISTRY_KINDS] = { 0 };

        registry_next_ids(D.reg, &next_id, &next_lease);
        for (const struct reg *r = registry_first(D.reg); r; r = r->next) {
                uint32_t nl = 0;

                n++;
                if (r->next && r->next->prev != r)
                        FAIL("registration list links broken");
                if (r->id == 0 || r->id >= next_id)
                        FAIL("registration id %llu, but the next id is %llu",
                             (unsigned long long)r->id, (unsigned long long)next_id);
                if (!r->live && r->leases == 0)
                        FAIL("registration %llu is neither live nor leased",
                             (unsigned long long)r->id);
                if (registry_find_id(D.reg, r->id) != r)
                        FAIL("registration %llu is not found by its id", (unsigned long long)r->id);
                if (r->live && registry_find_name(D.reg, r->name, r->name_len) != r)
                        FAIL("live registration %llu is not found by its name",
                             (unsigned long long)r->id);
                if (r->owner && session_detached_find(&D, r->owner->session) != r->owner)
                        FAIL("registration %llu is owned by a party that is no session",
                             (unsigned long long)r->id);
                if (r->kind == PROTO_KIND_HOST && (!fd_open(r->fd) || !fd_open(r->ro_fd)))
                        FAIL("host registration %llu without its fds", (unsigned long long)r->id);
                if (r->kind == PROTO_KIND_BATCH)
                        check_batch(r);
                else if (r->kind != PROTO_KIND_HOST && !r->cuda)
                        FAIL("CUDA registration %llu without its allocation",
                             (unsigned long long)r->id);
                /* Lookups of a cuda-vmm registration send r->fd. */
                if (r->kind == PROTO_KIND_CUDA_VMM && r->cuda->alloc->kind == PROTO_KIND_CUDA_VMM &&
                    r->fd != r->cuda->alloc->fd)
                        FAIL("cuda-vmm registration %llu: fd %d, its allocation's %d",
                             (unsigned long long)r->id, r->fd, r->cuda->alloc->fd);
                for (const struct lease *l = r->held; l; l = l->rnext) {
                        if (l->reg != r)
                                FAIL("lease %llu on the wrong registration's list",
                                     (unsigned long long)l->id);
                        if (l->id == 0 || l->id >= next_lease)
                                FAIL("lease id %llu, but the next lease id is %llu",
                                     (unsigned long long)l->id, (unsigned long long)next_lease);
                        if (registry_find_lease(D.reg, l->id) != l)
                                FAIL("lease %llu is not found by its id",
                                     (unsigned long long)l->id);
                        if (session_detached_find(&D, l->holder->session) != l->holder)
                                FAIL("lease %llu is held by a party that is no session",
                                     (unsigned long long)l->id);
                        nl++;
                }
                if (nl != r->leases)
                        FAIL("registration %llu lists %u leases but counts %u",
                             (unsigned long long)r->id, nl, r->leases);
                live += r->live;
                leases += nl;
                owned_live += r->live && r->owner;
                owned_leases += nl;
                bytes[r->kind] += r->size;
        }
        if (n != cnt->registrations || live != cnt->live || leases != cnt->leases)
                FAIL("counters: %llu/%llu/%llu registrations/live/leases, counted %llu/%llu/%llu",
                     (unsigned long long)cnt->registrations, (unsigned long long)cnt->live,
                     (unsigned long long)cnt->leases, (unsigned long long)n,
                     (unsigned long long)live, (unsigned long long)leases);
        for (unsigned k = 0; k < REGISTRY_KINDS; k++)
                if (bytes[k] != cnt->bytes[k])
                        FAIL("kind %u: %llu bytes counted, %llu summed", k,
                             (unsigned long long)cnt->bytes[k], (unsigned long long)bytes[k]);
        check_allocs();
        session_detached_each(&D, check_party, &pc);
        if (pc.n != session_detached_count(&D))
                FAIL("%u detached sessions walked, %u counted", pc.n, session_detached_count(&D));
        if (pc.live != owned_live || pc.leases != owned_leases)
                FAIL("sessions count %u live registrations and %u leases; the registry %llu "
                     "and %llu", pc.live, pc.leases, (unsigned long long)owned_live,
                     (unsigned long long)owned_leases);
}

/* Ends every detached session, as their processes' exits would. */
struct tokens {
        uint8_t (*t)[PROTO_SESSION_LEN];
        unsigned n;
};

static void collect_token(const struct reg_party *p, void *data)
{
        struct tokens *t = data;

        memcpy(t->t[t->n++], p->session, PROTO_SESSION_LEN);
}

static void end_sessions(void)
{
        struct tokens t = { .t = calloc(session_detached_count(&D) + 1, PROTO_SESSION_LEN) };

        if (!t.t)
                abort();
        session_detached_each(&D, collect_token, &t);
        for (unsigned i = 0; i < t.n; i++) {
                struct reg_party *p = session_detached_find(&D, t.t[i]);
                if (!p)
                        FAIL("detached session %u of %u gone before its end", i, t.n);
                session_detached_end(&D, p, false);
        }
        free(t.t);
        if (session_detached_count(&D) != 0)
                FAIL("%u detached sessions left after ending them all",
                     session_detached_count(&D));
}

/* ---- one input ------------------------------------------------------------ */

static int fd_count(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        int n = 0;

        if (!d)
                abort();
        while ((e = readdir(d)))
                n += e->d_name[0] != '.';
        closedir(d);
        return n - 1;
}

static void setup_once(void)
{
        static bool done;

        if (done)
                return;
        done = true;
        setenv("GPUIPC_LIBCUDA", "/nonexistent/libcuda.so.1", 0);
        debug = getenv("FUZZ_JOURNAL_DEBUG") != NULL;
        log_set_level(debug ? LOG_LVL_DEBUG : 0);
        /* libuv's process-wide signal pipe opens with the first loop. */
        uv_loop_t l;
        if (uv_loop_init(&l) < 0 || uv_loop_close(&l) < 0)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct restore_ctx *x;
        uv_loop_t loop;
        size_t tail = 0;
        int fds0, r;

        setup_once();
        fds0 = fd_count();
        memset(&D, 0, sizeof(D));
        if (uv_loop_init(&loop) < 0)
                abort();
        D.loop = &loop;
        config_defaults(&D.cfg);
        D.cfg.log_level = log_get_level();
        if (daemon_init(&D) < 0)
                abort();
        if (persist_enabled())
                FAIL("the fd store must be off in the fuzzer");

        x = restore_ctx_new(&D, make_stored(), NSTORED);
        if (!x)
                abort();
        D.restoring = true;
        (void)journal_parse(data, size, apply_one, x, &tail);
        D.restoring = false;
        restore_ctx_free(x);

        if (debug)
                fprintf(stderr, "fuzz-journal: %llu registrations (%llu live), %llu leases, "
                        "%u sessions; %zu bytes of tail\n",
                        (unsigned long long)registry_counters(D.reg)->registrations,
                        (unsigned long long)registry_counters(D.reg)->live,
                        (unsigned long long)registry_counters(D.reg)->leases,
                        session_detached_count(&D), tail);
        check_state();
        if (journal_hash(data, size) & 1) {
                end_sessions();
                check_state();
        }
        ttl_stop(&D);          /* as shutdown does: a TTL's timer ends too */
        uv_run(&loop, UV_RUN_DEFAULT);
        daemon_done(&D);
        watch_done();
        ledger_done();
        r = uv_loop_close(&loop);
        if (r != 0) {
                fprintf(stderr, "fuzz-journal: handles left in the loop: %s\n", uv_strerror(r));
                uv_print_all_handles(&loop, stderr);
                abort();
        }
        if (fd_count() != fds0)
                FAIL("%d fds open after the input, %d before", fd_count(), fds0);
        return 0;
}

/* ---- the mutator ------------------------------------------------------------ */

#define MAX_RECS 256

static uint32_t rng_next(uint32_t *s)
{
        *s ^= *s << 13;
        *s ^= *s >> 17;
        *s ^= *s << 5;
        return *s;
}

static uint32_t get_be32(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
}

struct rec {
        size_t off, len;                /* of the body, in the input */
};

/* Splits buf by its length fields, ignoring the hashes; returns the count
 * and sets *tail_off where the rest begins. */
static unsigned split(const uint8_t *buf, size_t size, struct rec *recs, size_t *tail_off)
{
        size_t off = 0;
        unsigned n = 0;

        while (n < MAX_RECS && size - off >= JOURNAL_HDR_LEN) {
                uint32_t blen = get_be32(buf + off);
                if (blen == 0 || blen > JOURNAL_RECORD_MAX || blen > size - off - JOURNAL_HDR_LEN)
                        break;
                recs[n].off = off + JOURNAL_HDR_LEN;
                recs[n].len = blen;
                n++;
                off += JOURNAL_HDR_LEN + blen;
        }
        *tail_off = off;
        return n;
}

/* Appends a record to out (of room max), framed right; false if full. */
static bool emit(uint8_t *out, size_t *pos, size_t max, const uint8_t *body, size_t len)
{
        if (len == 0 || len > JOURNAL_RECORD_MAX || max - *pos < JOURNAL_HDR_LEN + len)
                return false;
        put_be32(out + *pos, (uint32_t)len);
        put_be32(out + *pos + 4, journal_hash(body, len));
        memmove(out + *pos + JOURNAL_HDR_LEN, body, len);
        *pos += JOURNAL_HDR_LEN + len;
        return true;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
        static struct rec recs[MAX_RECS];
        uint32_t s = seed | 1;
        uint8_t *src, *out, *body;
        size_t tail_off, pos = 0, cap;
        unsigned n, op, a, b;

        if (!LLVMFuzzerMutate)
                return size;
        op = rng_next(&s) % 8;
        if (op == 0 || size == 0)
                return LLVMFuzzerMutate(data, size, max_size);
        src = malloc(size);
        out = malloc(max_size);
        body = malloc(max_size);
        if (!src || !out || !body)
                abort();
        memcpy(src, data, size);
        n = split(src, size, recs, &tail_off);
        if (n == 0) {
                /* No record yet: mutate the lot and frame it as one. */
                size_t len = size < max_size ? size : max_size;
                memcpy(body, src, len);
                len = LLVMFuzzerMutate(body, len, max_size > JOURNAL_HDR_LEN ?
                                       max_size - JOURNAL_HDR_LEN : 1);
                if (!emit(out, &pos, max_size, body, len))
                        pos = 0;
                goto done;
        }
        a = rng_next(&s) % n;
        b = rng_next(&s) % n;
        for (unsigned i = 0; i < n; i++) {
                const uint8_t *p = src + recs[i].off;
                size_t len = recs[i].len;

                if (op == 1 && i == a)
                        continue;                       /* drop record a */
                if (op == 2 && n > 1 && (i == a || i == b)) {
                        unsigned j = i == a ? b : a;     /* swap a and b */
                        p = src + recs[j].off;
                        len = recs[j].len;
                }
                if (op >= 4 && i == a) {
                        /* Mutate record a's body, room left for the rest. */
                        size_t rest = size - (recs[i].off + recs[i].len);
                        cap = max_size - pos < rest + JOURNAL_HDR_LEN ? 0
                                : max_size - pos - rest - JOURNAL_HDR_LEN;
                        if (cap > JOURNAL_RECORD_MAX)
                                cap = JOURNAL_RECORD_MAX;
                        if (cap >= len) {
                                memcpy(body, p, len);
                                len = LLVMFuzzerMutate(body, len, cap);
                                p = body;
                        }
                }
                if (!emit(out, &pos, max_size, p, len))
                        break;
                if (op == 3 && i == a)                  /* duplicate record a */
                        (void)emit(out, &pos, max_size, p, len);
        }
        /* The torn tail, if any, stays. */
        if (tail_off < size && max_size - pos >= size - tail_off) {
                memcpy(out + pos, src + tail_off, size - tail_off);
                pos += size - tail_off;
        }
done:
        if (pos == 0) {
                free(src);
                free(out);
                free(body);
                return LLVMFuzzerMutate(data, size, max_size);
        }
        memcpy(data, out, pos);
        free(src);
        free(out);
        free(body);
        return pos;
}
