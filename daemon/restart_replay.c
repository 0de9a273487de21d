/* restart_replay.c: journal replay into a fresh registry. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_reg.h"
#include "daemon.h"
#include "host.h"
#include "ledger.h"
#include "log.h"
#include "quota.h"
#include "restart_codec.h"
#include "restart_journal.h"
#include "restart_persist.h"
#include "restart_replay.h"
#include "session.h"

struct restore_ctx {
        struct daemon *d;
        struct sd_fd *fds;
        bool *claimed;                  /* stays in the store */
        bool *owned;                    /* the fd is a registration's now */
        size_t n;
        struct restore_result *res;
        struct hmap alloc_ids;          /* ids of the allocations created, never twice */
        uint64_t records;               /* applied so far */
};

struct id_node {
        struct hmap_node node;
        uint64_t id;
};

static bool id_seen(const struct hmap *h, uint64_t id)
{
        return hmap_find_u64(h, id) != NULL;
}

static int id_add(struct hmap *h, uint64_t id)
{
        struct id_node *n = malloc(sizeof(*n));

        if (!n)
                return -ENOMEM;
        n->id = id;
        if (hmap_insert(h, &n->node, hmap_hash_u64(id)) < 0) {
                free(n);
                return -ENOMEM;
        }
        return 0;
}

static void ids_free(struct hmap *h)
{
        struct hmap_node *n, *next;

        hmap_for_each_safe(n, next, h)
                free(container_of(n, struct id_node, node));
        hmap_free(h);
}

static int stored_fd(struct restore_ctx *x, const char *name)
{
        for (size_t i = 0; i < x->n; i++)
                if (!x->owned[i] && strcmp(x->fds[i].name, name) == 0)
                        return (int)i;
        return -1;
}

/* One allocation entry of a CUDA record (the fields pack_alloc_fields()
 * wrote into m), under its old id where it is new.  pool: the entry of a
 * cuda-pool pointer's pool, else NULL. */
static int decode_entry(struct restore_ctx *x, const msgpack_object *m, uint64_t want_kind,
                        const uint8_t device[], struct alloc *pool, struct alloc **ret)
{
        struct alloc_table *T = &x->d->allocs;
        struct jrec_alloc e;
        uint64_t aid, akind, saved;
        char name[32];
        int i, fd, r;

        if (jrec_decode_alloc(m, &e) < 0 || e.kind != want_kind)
                return -EINVAL;
        aid = e.id;
        akind = e.kind;
        saved = T->next_id;
        T->next_id = aid;
        if (akind == PROTO_KIND_CUDA_IPC) {
                r = alloc_get_ipc(T, device, e.handle, e.buffer_id, e.size, ret);
        } else if (akind == PROTO_KIND_CUDA_POOL) {
                r = alloc_get_pool_ptr(T, pool, e.handle, e.buffer_id, e.size, ret);
        } else if (akind == PROTO_KIND_CUDA_VMM || akind == ALLOC_KIND_POOL) {
                snprintf(name, sizeof(name), "vmm-%" PRIu64, aid);
                i = stored_fd(x, name);
                /* Every registration of the allocation dups the one fd; the
                 * table keeps the first and closes the others. */
                fd = i < 0 ? -1 : dup(x->fds[i].fd);
                r = fd < 0 ? -ENOENT
                    : akind == ALLOC_KIND_POOL
                    ? alloc_get_pool_entry(T, device, e.key, &fd, e.uid, ret)
                    : alloc_get_vmm_as(T, device, e.key, &fd, e.size, e.uid, ret);
                if (fd >= 0)
                        close(fd);
                if (r == 0)
                        x->claimed[i] = true;
        } else {
                r = -EINVAL;
        }
        T->next_id = saved > aid + 1 ? saved : aid + 1;
        if (r < 0)
                return r;
        if ((*ret)->regs == 1) {
                /* A new entry: its id must be new too, or two allocations
                 * would share the id consumers key their mappings by. */
                if ((*ret)->id != aid || id_seen(&x->alloc_ids, aid) ||
                    id_add(&x->alloc_ids, aid) < 0) {
                        alloc_put(T, *ret);
                        return -EINVAL;
                }
        } else if ((*ret)->id != aid) {
                alloc_put(T, *ret);
                return -EINVAL;         /* a known key under another id */
        }
        return 0;
}

/* The allocation of a CUDA record: its device, and for a cuda-pool pointer
 * its pool's entry first. */
static int decode_alloc(struct restore_ctx *x, const msgpack_object *m, uint64_t want_kind,
                        uint8_t device[], struct alloc **ret)
{
        const msgpack_object *sub;
        struct alloc *pool;
        int r;

        if (jrec_get_device(m, device) < 0)
                return -EINVAL;
        if (want_kind != PROTO_KIND_CUDA_POOL)
                return decode_entry(x, m, want_kind, device, NULL, ret);
        sub = jrec_get_pool(m);
        if (!sub)
                return -EINVAL;
        r = decode_entry(x, sub, ALLOC_KIND_POOL, device, NULL, &pool);
        if (r < 0)
                return r;
        r = decode_entry(x, m, want_kind, device, pool, ret);
        alloc_put(&x->d->allocs, pool);         /* the pointer holds its own */
        return r;
}

/* The chunks after the first of a cuda-vmm registration over several. */
static int decode_chunks(struct restore_ctx *x, const msgpack_object *a, struct reg_cuda *rc)
{
        uint32_t n = a->via.array.size;
        int r;

        if (n < 1 || n >= PROTO_CHUNKS_MAX)
                return -EINVAL;
        r = reg_cuda_set_chunks(rc, n + 1);
        if (r < 0)
                return r;
        rc->chunks[0] = rc->alloc;
        for (uint32_t i = 0; i < n; i++) {
                r = decode_entry(x, &a->via.array.ptr[i], PROTO_KIND_CUDA_VMM, rc->device, NULL,
                                 &rc->chunks[i + 1]);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int decode_cuda(struct restore_ctx *x, const msgpack_object *m, uint64_t kind,
                       struct reg_cuda **ret)
{
        struct reg_cuda *rc = reg_cuda_new();
        const msgpack_object *chunks;
        const char *copied;
        size_t len;
        int r;

        if (!rc)
                return -ENOMEM;
        r = decode_alloc(x, m, kind, rc->device, &rc->alloc);
        if (r < 0) {
                free(rc);
                return r;
        }
        rc->has_event = jrec_get_event(m, rc->event);
        if (jrec_get_cacheable(m))
                rc->alloc->cacheable = true;
        r = jrec_get_chunks(m, &chunks);
        if (r == 0)
                r = kind == PROTO_KIND_CUDA_VMM ? decode_chunks(x, chunks, rc) : -EINVAL;
        else if (r == -ENOENT)
                r = 0;
        if (r == 0 && jrec_get_copied(m, &copied, &len) == 0) {
                r = len == 0 || len > REG_CUDA_COPIED_MAX ? -EINVAL
                                                          : reg_cuda_set_copied(rc, copied, len);
        }
        if (r < 0) {
                reg_cuda_free(&x->d->allocs, rc);
                return r;
        }
        *ret = rc;
        return 0;
}

static int apply_add(struct restore_ctx *x, const msgpack_object *m)
{
        struct daemon *d = x->d;
        struct reg_params p = { .fd = -1 };
        const msgpack_object *sub;
        struct reg_party *owner = NULL;
        uint8_t token[PROTO_SESSION_LEN];
        const char *exe = "", *why;
        char fdname[32], exe_buf[LEDGER_EXE_MAX + 1];
        size_t exe_len = 0;
        struct reg *r;
        int i = -1, ro_fd = -1, k;

        if (jrec_decode_reg(m, &p) < 0)
                return -EINVAL;
        /* Never reuse the id, whether or not it comes back. */
        registry_raise_ids(d->reg, p.id + 1, 0);
        jrec_get_exe(m, &exe, &exe_len);
        /* Optional: a TTL that passed while the daemon was down ends at once. */
        if (jrec_get_expires(m, &p.expires_ms) < 0)
                return -EINVAL;
        /* An ephemeral one of a session that ended went with it; without
         * a session it had lost its owner already and lives on for its
         * leases (its U record follows them). */
        if (jrec_get_token(m, token) == 0) {
                owner = session_detached_find(d, token);
                if (!owner && p.ephemeral)
                        return -ESRCH;
        }
        k = jrec_get_meta(m, &p.meta, &p.meta_len);
        if (k == 0)
                k = jrec_get_access(m, &p.access);
        if (k < 0)
                return k;
        if (p.kind == PROTO_KIND_HOST) {
                snprintf(fdname, sizeof(fdname), "host-%" PRIu64, p.id);
                i = stored_fd(x, fdname);
                /* Most often freed before the restart (its U came later). */
                k = i < 0 ? -ENOENT : host_check_fd(x->fds[i].fd, p.offset, p.size, HOST_RESTORED,
                                                    &why);
                if (k == 0)
                        ro_fd = k = host_open_read_only(x->fds[i].fd);
                if (k < 0)
                        goto fail;
                p.fd = x->fds[i].fd;
        } else {
                sub = jrec_get_cuda(m);
                k = !sub ? -EINVAL : decode_cuda(x, sub, p.kind, &p.cuda);
                if (k < 0)
                        goto fail;
                /* cuda-vmm lookups send the allocation's fd (as register does) */
                if (p.kind == PROTO_KIND_CUDA_VMM)
                        p.fd = p.cuda->alloc->fd;
        }
        snprintf(exe_buf, sizeof(exe_buf), "%.*s", (int)(exe_len > LEDGER_EXE_MAX ? 0 : exe_len),
                 exe);
        ledger_set_restored_exe(exe_buf);
        k = registry_add(d->reg, owner, &p, &r);
        ledger_set_restored_exe(NULL);
        if (k < 0) {
                reg_cuda_free(&d->allocs, p.cuda);
                goto fail;
        }
        if (i >= 0)
                x->claimed[i] = x->owned[i] = true;
        r->ro_fd = ro_fd;
        x->res->regs++;
        return 0;
fail:
        free(p.access);
        if (ro_fd >= 0)
                close(ro_fd);
        return k;
}

static int apply_cuda(struct restore_ctx *x, const msgpack_object *m)
{
        struct jrec_cuda_changed c;
        uint8_t device[PROTO_UUID_LEN];
        struct alloc *a, *old;
        struct reg *r;
        int k;

        if (jrec_decode_cuda_changed(m, &c) < 0)
                return -EINVAL;
        r = registry_find_id(x->d->reg, c.id);
        if (!r || !r->cuda)
                return -ENOENT;
        k = decode_alloc(x, c.cuda, c.kind, device, &a);
        if (k < 0)
                return k;
        /* As adopt does it (ops_adopt.c). */
        old = r->cuda->alloc;
        r->cuda->alloc = a;
        alloc_put(&x->d->allocs, old);
        registry_set_kind(x->d->reg, r, (unsigned)c.kind);
        quota_charge(x->d, r);
        r->offset = c.offset;
        r->fd = c.kind == PROTO_KIND_CUDA_VMM ? a->fd : -1;
        r->ephemeral = c.ephemeral;
        r->revocable = c.revocable;
        r->cuda->has_event = jrec_get_event(c.cuda, r->cuda->event);
        return 0;
}

static int apply_lease(struct restore_ctx *x, const msgpack_object *m)
{
        struct reg_party *holder;
        struct jrec_lease j;
        struct lease *l;
        struct reg *r;
        int k;

        if (jrec_decode_lease(m, &j) < 0)
                return -EINVAL;
        registry_raise_ids(x->d->reg, 0, j.id + 1);
        r = registry_find_id(x->d->reg, j.reg);
        holder = session_detached_find(x->d, j.token);
        if (!r || !holder)
                return -ESRCH;
        k = registry_lease_id(x->d->reg, r, holder, j.id, &l);
        if (k == 0)
                x->res->leases++;
        return k;
}

static int apply_missed(struct restore_ctx *x, const msgpack_object *m)
{
        struct jrec_missed j;
        struct reg_party *p;

        if (jrec_decode_missed(m, &j) < 0)
                return -EINVAL;
        p = session_detached_find(x->d, j.token);
        if (!p)
                return -ESRCH;
        if (session_note_released(x->d, p, j.id, j.name, j.name_len))
                persist_missed(x->d, p, j.id, j.name, j.name_len);
        return 0;
}

static int apply_session(struct restore_ctx *x, const msgpack_object *m)
{
        struct jrec_session j;
        int k;

        if (jrec_decode_session(m, &j) < 0)
                return -EINVAL;
        if (!session_detached_add(x->d, j.token, j.pid, j.uid, j.gid, j.start_time, &k))
                return k;
        return 0;
}

static int apply_header(struct restore_ctx *x, const msgpack_object *m)
{
        struct jrec_header h;
        int k = jrec_decode_header(m, &h);

        if (k < 0)
                return k;
        registry_raise_ids(x->d->reg, h.next_id, h.next_lease);
        if (h.next_alloc > x->d->allocs.next_id)
                x->d->allocs.next_id = h.next_alloc;
        return 0;
}

/* E: a session ended (it may have been ended already). */
static int apply_session_end(struct restore_ctx *x, const msgpack_object *m)
{
        uint8_t token[PROTO_SESSION_LEN];
        struct reg_party *p;
        int k = jrec_get_token(m, token);

        if (k == 0 && (p = session_detached_find(x->d, token)))
                session_detached_end(x->d, p, false);
        return k;
}

/* U and R: a registration was unregistered, a lease released; either may
 * be gone already. */
static int apply_ended(struct restore_ctx *x, const msgpack_object *m, char t)
{
        struct registry *R = x->d->reg;
        struct lease *l;
        struct reg *r;
        uint64_t id;
        int k = jrec_get_id(m, &id);

        if (k < 0)
                return k;
        if (t == 'U' && (r = registry_find_id(R, id)) && r->live)
                registry_unregister(R, r);
        if (t == 'R' && (l = registry_find_lease(R, id)))
                (void)registry_release(R, l->holder, id);
        return 0;
}

static int apply_unregister(struct restore_ctx *x, const msgpack_object *m)
{
        return apply_ended(x, m, 'U');
}

static int apply_release(struct restore_ctx *x, const msgpack_object *m)
{
        return apply_ended(x, m, 'R');
}

/* What each type of record does to the state being restored. */
static const struct {
        char t;
        int (*apply)(struct restore_ctx *x, const msgpack_object *m);
} appliers[] = {
        { 'H', apply_header },  { 'S', apply_session }, { 'E', apply_session_end },
        { 'A', apply_add },     { 'U', apply_unregister }, { 'C', apply_cuda },
        { 'M', apply_missed },  { 'L', apply_lease },   { 'R', apply_release },
};

int restore_apply(struct restore_ctx *x, const uint8_t *body, size_t len)
{
        struct proto_msg m;
        char t;
        int k = 0;

        if (proto_decode(body, len, &m, NULL) < 0)
                return x->records++ == 0 ? -EPROTONOSUPPORT : -EINVAL;
        if (jrec_type(m.root, &t) < 0) {
                k = -EINVAL;
                goto out;
        }
        /* A journal starts with its header, and has one. */
        if ((x->records++ == 0) != (t == 'H')) {
                k = x->records == 1 ? -EPROTONOSUPPORT : -EINVAL;
                goto out;
        }
        /* A type not listed is a later version's record: skipped. */
        for (size_t i = 0; i < sizeof(appliers) / sizeof(appliers[0]); i++)
                if (appliers[i].t == t)
                        k = appliers[i].apply(x, m.root);
out:
        proto_msg_free(&m);
        return k;
}

struct restore_ctx *restore_ctx_new(struct daemon *d, struct sd_fd *fds, size_t n)
{
        struct {
                struct restore_ctx x;
                struct restore_result res;
        } *b = calloc(1, sizeof(*b));

        if (!b)
                return NULL;
        b->x.claimed = calloc(n ? n : 1, sizeof(*b->x.claimed));
        b->x.owned = calloc(n ? n : 1, sizeof(*b->x.owned));
        if (!b->x.claimed || !b->x.owned) {
                free(b->x.claimed);
                free(b->x.owned);
                free(b);
                return NULL;
        }
        b->x.d = d;
        b->x.fds = fds;
        b->x.n = n;
        b->x.res = &b->res;
        hmap_init(&b->x.alloc_ids);
        return &b->x;
}

void restore_ctx_free(struct restore_ctx *x)
{
        if (!x)
                return;
        for (size_t i = 0; i < x->n; i++)
                if (!x->owned[i])
                        close(x->fds[i].fd);
        free(x->fds);
        free(x->claimed);
        free(x->owned);
        ids_free(&x->alloc_ids);
        free(x);                /* the first member of its block */
}

static int replay_one(const uint8_t *body, size_t len, void *data)
{
        struct restore_ctx *x = data;
        int k = restore_apply(x, body, len);

        if (k == -EPROTONOSUPPORT)
                return k;       /* another version's journal: stop */
        if (k == -ENOENT)
                x->res->missing++;
        else if (k < 0 && k != -ESRCH) {
                x->res->skipped++;
                log_warn("restore: skipping a journal record: %s", strerror(-k));
        }
        return 0;
}

/* The serial of a journal's first record, 0 when it has none. */
static uint64_t journal_serial(int fd)
{
        uint8_t hdr[JOURNAL_HDR_LEN + 256];
        const uint8_t *body;
        struct proto_msg m;
        uint64_t serial;
        uint32_t blen;

        if (journal_first(fd, hdr, sizeof(hdr), &body, &blen) < 0 ||
            proto_decode(body, blen, &m, NULL) < 0)
                return 0;
        serial = jrec_header_serial(m.root);
        proto_msg_free(&m);
        return serial;
}

void restore_run(struct daemon *d, struct sd_fd *fds, size_t n, struct restore_result *ret)
{
        struct restore_ctx *x;
        uint8_t *buf = NULL;
        size_t len = 0, tail = 0;
        int best = -1;
        long k;

        memset(ret, 0, sizeof(*ret));
        ret->gen = -1;
        if (n == 0) {
                free(fds);
                return;
        }
        x = restore_ctx_new(d, fds, n);
        if (!x) {
                log_error("restore: out of memory; the stored state is dropped");
                for (size_t i = 0; i < n; i++) {
                        persist_store_remove(fds[i].name);
                        close(fds[i].fd);
                }
                free(fds);
                return;
        }
        x->res = ret;
        for (size_t i = 0; i < n; i++) {
                uint64_t s;
                if (strcmp(fds[i].name, PERSIST_STATE_NAME "0") != 0 &&
                    strcmp(fds[i].name, PERSIST_STATE_NAME "1") != 0)
                        continue;
                s = journal_serial(fds[i].fd);
                if (best < 0 || s > ret->serial) {
                        best = (int)i;
                        ret->serial = s;
                }
        }
        if (best < 0 || !persist_enabled()) {
                log_warn("restore: %zu stored fds but %s; they are dropped", n,
                         best < 0 ? "no journal" : "fdstore is off");
                goto out;
        }
        if (journal_slurp(fds[best].fd, &buf, &len) < 0) {
                log_error("restore: cannot read the journal; the stored state is dropped");
                goto out;
        }
        d->restoring = true;
        k = journal_parse(buf, len, replay_one, x, &tail);
        d->restoring = false;
        if (k < 0) {
                log_error("restore: the journal was written by another version (%s); "
                          "starting empty", strerror((int)-k));
                goto out;
        }
        /* persist_start() replaces it under the other name. */
        ret->gen = fds[best].name[sizeof(PERSIST_STATE_NAME) - 1] - '0';
        x->claimed[best] = true;
        if (tail > 0)
                log_warn("restore: %zu bytes at the journal's end were torn or corrupt and "
                         "are ignored", tail);
        /* What is left once the journal's later records have applied. */
        ret->regs = registry_counters(d->reg)->registrations;
        ret->leases = registry_counters(d->reg)->leases;
        ret->sessions = session_detached_count(d);
        log_info("restored %" PRIu64 " registrations, %" PRIu64 " leases and %" PRIu64
                 " sessions from the fd store (%" PRIu64 " records skipped, %" PRIu64
                 " naming a registration or allocation gone before the restart)", ret->regs,
                 ret->leases, ret->sessions, ret->skipped, ret->missing);
out:
        /* What nothing claimed leaves the store; restore_ctx_free() closes
         * the fds no registration took. */
        for (size_t i = 0; i < n; i++) {
                if (x->claimed[i])
                        ret->kept++;
                else
                        persist_store_remove(fds[i].name);
        }
        free(buf);
        restore_ctx_free(x);
}
