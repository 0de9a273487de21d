/* restart_persist.c: journalling the registry into systemd's fd store. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <msgpack.h>
#include <uv.h>

#include "conn.h"
#include "cuda_reg.h"
#include "daemon.h"
#include "host.h"
#include "restart_codec.h"
#include "restart_journal.h"
#include "ledger.h"
#include "log.h"
#include "restart_persist.h"
#include "proto.h"
#include "sd.h"
#include "session.h"

#define COMPACT_MIN (UINT64_C(4) << 20)
#define ENTRY_NAME_MAX 32       /* "host-" or "vmm-" and a uint64 */

static struct {
        bool enabled, frozen;
        bool compact_due;               /* run from the check handle */
        bool check_on;
        uv_check_t check;
        struct journal j;
        int gen;                        /* the stored name is state<gen & 1> */
        uint64_t serial;                /* of the last snapshot */
        uint64_t compact_at;
        uint64_t stored, max;           /* entries pushed; $FDSTORE, 0 if unknown */
        struct daemon *d;
} P = { .j = { .fd = -1 }, .gen = -1 };

void persist_init(struct daemon *d)
{
        const char *ns = getenv("NOTIFY_SOCKET");

        const char *max = getenv("FDSTORE");

        P.d = d;
        P.enabled = d->cfg.fdstore && ns && *ns;
        /* systemd 254 and later say how many fds the store takes; older
         * ones drop the excess without a word. */
        P.max = max && *max ? strtoull(max, NULL, 10) : 0;
}

bool persist_enabled(void)
{
        return P.enabled && !P.frozen;
}

/* ---- the store --------------------------------------------------------- */

bool persist_store_room(uint64_t *ret_used, uint64_t *ret_pool)
{
        if (!persist_enabled() || P.max == 0)
                return false;
        *ret_used = P.stored;
        *ret_pool = P.max > PERSIST_STORE_RESERVE ? P.max - PERSIST_STORE_RESERVE : 0;
        return true;
}

static bool store_send(const char *msg, int fd)
{
        int r = sd_notify_with_fd(msg, fd);

        if (r > 0)
                return true;
        log_warn("fd store: cannot send '%s': %s", msg, r < 0 ? strerror(-r) : "no NOTIFY_SOCKET");
        return false;
}

static void give_up(int err);

/* A push that did not arrive would make the journal name an fd the next
 * start cannot have: then nothing is kept rather than something wrong. */
static void store_push(const char *name, int fd)
{
        char msg[64 + SD_FDNAME_MAX];

        /* FDPOLL=0: systemd must not drop an fd whose poll() says HUP or ERR
         * (a device fd of the GPU driver may). */
        snprintf(msg, sizeof(msg), "FDSTORE=1\nFDPOLL=0\nFDNAME=%s", name);
        if (P.max > 0 && P.stored >= P.max) {
                log_error("fd store: it holds its maximum of %" PRIu64 " fds "
                          "(FileDescriptorStoreMax=)", P.max);
                give_up(-ENOSPC);
                return;
        }
        if (!store_send(msg, fd))
                give_up(-EIO);
        else
                P.stored++;
}

void persist_store_remove(const char *name)
{
        char msg[64 + SD_FDNAME_MAX];

        snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s", name);
        if (store_send(msg, -1) && P.stored > 0)
                P.stored--;
}

static void state_name(int gen, char buf[16])
{
        snprintf(buf, 16, PERSIST_STATE_NAME "%d", gen & 1);
}

/* The state can no longer be trusted to match the registry: a replay of
 * it could bring back what is gone.  Better none than a wrong one. */
static void forget_entries(const struct reg *r);

static void give_up(int err)
{
        char name[ENTRY_NAME_MAX];

        if (!P.enabled)
                return;
        log_error("fd store: cannot keep the registry (%s); registrations will not survive "
                  "a restart", strerror(-err));
        P.enabled = false;
        if (P.gen >= 0) {
                state_name(P.gen, name);
                persist_store_remove(name);
        }
        journal_close(&P.j);
        /* Without a journal the stored fds would only pin memory. */
        for (const struct reg *r = P.d ? registry_first(P.d->reg) : NULL; r; r = r->next)
                forget_entries(r);
}

/* ---- records ----------------------------------------------------------- */

static int append(struct journal *j, msgpack_sbuffer *sb)
{
        int r;

        if (!sb->data)
                return -ENOMEM;
        r = journal_append(j, sb->data, sb->size);
        msgpack_sbuffer_clear(sb);
        return r;
}

/* ---- snapshots --------------------------------------------------------- */

struct snap {
        struct journal *j;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int err;
};

static void snap_session(const struct reg_party *p, void *data)
{
        struct snap *s = data;

        if (s->err < 0)
                return;
        jrec_pack_session(&s->pk, p);
        s->err = append(s->j, &s->sb);
        if (!p->detached)
                return;
        for (const struct session_missed *m = session_missed_of(p); m && s->err == 0;
             m = m->next) {
                jrec_pack_missed(&s->pk, p, m->id, m->name, m->name_len);
                s->err = append(s->j, &s->sb);
        }
}

static int write_snapshot(struct daemon *d, struct journal *j)
{
        struct snap s = { .j = j };
        uint64_t next_id, next_lease;

        msgpack_sbuffer_init(&s.sb);
        msgpack_packer_init(&s.pk, &s.sb, msgpack_sbuffer_write);
        registry_next_ids(d->reg, &next_id, &next_lease);
        jrec_pack_header(&s.pk, P.serial + 1, next_id, next_lease, d->allocs.next_id);
        s.err = append(j, &s.sb);
        for (struct conn *c = d->conns; c && s.err == 0; c = c->next)
                if (c->hello && !c->closed)
                        snap_session(&c->party, &s);
        session_detached_each(d, snap_session, &s);
        for (const struct reg *r = registry_first(d->reg); r && s.err == 0; r = r->next) {
                jrec_pack_reg(&s.pk, r, ledger_reg_exe(r->id));
                s.err = append(j, &s.sb);
                for (const struct lease *l = r->held; l && s.err == 0; l = l->rnext) {
                        jrec_pack_lease(&s.pk, l);
                        s.err = append(j, &s.sb);
                }
                /* After its leases: unregistered without them, it is freed. */
                if (s.err == 0 && !r->live) {
                        jrec_pack_id(&s.pk, 'U', r->id);
                        s.err = append(j, &s.sb);
                }
        }
        msgpack_sbuffer_destroy(&s.sb);
        return s.err;
}

/* A new snapshot under the other name, then the old one goes. */
static int compact(struct daemon *d)
{
        struct journal nj;
        char name[16];
        int r;

        r = journal_create("gpuipcd-state", &nj);
        if (r < 0)
                return r;
        r = write_snapshot(d, &nj);
        if (r < 0) {
                journal_close(&nj);
                return r;
        }
        state_name(P.gen + 1, name);
        store_push(name, nj.fd);
        if (!P.enabled) {
                journal_close(&nj);
                return -EIO;
        }
        if (P.gen >= 0) {
                state_name(P.gen, name);
                persist_store_remove(name);
        }
        journal_close(&P.j);
        P.j = nj;
        P.gen++;
        P.serial++;
        P.compact_at = 2 * nj.len > COMPACT_MIN ? 2 * nj.len : COMPACT_MIN;
        log_debug("fd store: state snapshot %d, %" PRIu64 " bytes", P.gen, nj.len);
        return 0;
}

/* Compaction runs between loop iterations, never inside a registry
 * callback: there the change that triggered it is not applied yet (a lease
 * still linked, a registration still live, a hello not done), and the
 * snapshot would miss it while the record that says so goes with the old
 * journal. */
static void on_check(uv_check_t *h)
{
        int r;

        if (!P.compact_due || !persist_enabled())
                return;
        P.compact_due = false;
        r = compact(h->data);
        if (r < 0)
                give_up(r);
}

int persist_start(struct daemon *d, int prev_gen, uint64_t prev_serial, uint64_t stored)
{
        int r;

        if (!P.enabled)
                return 0;
        P.gen = prev_gen;
        P.serial = prev_serial;
        P.stored = stored;
        r = compact(d);
        if (r < 0) {
                give_up(r);
                return r;
        }
        if (uv_check_init(d->loop, &P.check) == 0) {
                P.check.data = d;
                P.check_on = true;
                (void)uv_check_start(&P.check, on_check);
                uv_unref((uv_handle_t *)&P.check);
        }
        log_info("fd store: registrations and leases are kept across restarts");
        return 0;
}

void persist_freeze(void)
{
        P.frozen = true;
        if (P.check_on)
                uv_close((uv_handle_t *)&P.check, NULL);
        P.check_on = false;
}

void persist_done(void)
{
        journal_close(&P.j);
        sd_notify_close();
}

/* ---- the journal ------------------------------------------------------- */

/* One record being packed. */
struct rec {
        msgpack_sbuffer sb;
        msgpack_packer pk;
};

/* Starts a record; false (nothing to pack) while nothing is journalled. */
static bool rec_begin(struct rec *x)
{
        if (!persist_enabled() || P.j.fd < 0)
                return false;
        msgpack_sbuffer_init(&x->sb);
        msgpack_packer_init(&x->pk, &x->sb, msgpack_sbuffer_write);
        return true;
}

/* Appends the record; a compaction due runs later (on_check). */
static void rec_end(struct rec *x)
{
        int r = append(&P.j, &x->sb);

        msgpack_sbuffer_destroy(&x->sb);
        if (r == 0 && P.j.len > P.compact_at)
                P.compact_due = true;
        if (r < 0)
                give_up(r);
}

/* Journals the record that pack(packer, ...) packs, unless nothing is
 * journalled (or journalling gave up). */
#define JOURNAL(pack, ...)                                      \
        do {                                                    \
                struct rec x_;                                  \
                if (rec_begin(&x_)) {                           \
                        pack(&x_.pk, __VA_ARGS__);              \
                        rec_end(&x_);                           \
                }                                               \
        } while (0)

void persist_session(struct daemon *d, const struct reg_party *p)
{
        (void)d;
        JOURNAL(jrec_pack_session, p);
}

void persist_missed(struct daemon *d, const struct reg_party *p, uint64_t id, const char *name,
                    size_t len)
{
        (void)d;
        JOURNAL(jrec_pack_missed, p, id, name, len);
}

void persist_session_end(struct daemon *d, const struct reg_party *p)
{
        (void)d;
        JOURNAL(jrec_pack_session_end, p);
}

/* The name of the store entry of host registration r's memfd. */
static void host_entry_name(const struct reg *r, char name[ENTRY_NAME_MAX])
{
        snprintf(name, ENTRY_NAME_MAX, "host-%" PRIu64, r->id);
}

/* The store entry of an allocation entry's fd, shared by the registrations
 * that use it ("vmm-" for cuda-vmm chunks and pools alike). */
static void alloc_entry_name(const struct alloc *a, char name[ENTRY_NAME_MAX])
{
        snprintf(name, ENTRY_NAME_MAX, "vmm-%" PRIu64, a->id);
}

/* Calls fn on each allocation entry of r that keeps an fd and that r is
 * alone in using: just created when r is added, about to go when r is
 * freed.  (A pool's entry is shared by its pointers' entries.) */
static void each_fd_entry_of(const struct reg *r, void (*fn)(const struct alloc *a))
{
        const struct reg_cuda *rc = r->cuda;
        const struct alloc *a;

        if (!rc)
                return;
        a = rc->alloc;
        if (a->kind == PROTO_KIND_CUDA_POOL) {
                if (a->regs == 1 && a->pool->regs == 1)
                        fn(a->pool);
                return;
        }
        if (a->kind != PROTO_KIND_CUDA_VMM)
                return;
        for (uint32_t i = 0; i < rc->n_chunks; i++)
                if (reg_cuda_chunk(rc, i)->regs == 1)
                        fn(reg_cuda_chunk(rc, i));
}

static void remove_entry(const struct alloc *a)
{
        char name[ENTRY_NAME_MAX];

        alloc_entry_name(a, name);
        persist_store_remove(name);
}

/* Removes every store entry r uses (a shared one may go more than once). */
static void forget_entries(const struct reg *r)
{
        const struct reg_cuda *rc = r->cuda;
        char name[ENTRY_NAME_MAX];

        if (!rc) {
                host_entry_name(r, name);
                persist_store_remove(name);
        } else if (rc->alloc->pool) {
                remove_entry(rc->alloc->pool);
        } else if (rc->alloc->kind == PROTO_KIND_CUDA_VMM) {
                for (uint32_t i = 0; i < rc->n_chunks; i++)
                        remove_entry(reg_cuda_chunk(rc, i));
        }
}

static void push_entry(const struct alloc *a)
{
        char name[ENTRY_NAME_MAX];

        alloc_entry_name(a, name);
        store_push(name, a->fd);
}

void persist_added(struct daemon *d, const struct reg *r)
{
        char name[ENTRY_NAME_MAX];

        (void)d;
        /* Before persist_start() this is restore's replay: the store has
         * the fds already. */
        if (!persist_enabled() || P.j.fd < 0)
                return;
        if (r->kind == PROTO_KIND_HOST && r->fd >= 0) {
                /* A file description of its own: systemd ignores a push of
                 * one it holds already, and one memfd may back several
                 * registrations (at other offsets), each removed alone. */
                int fd = host_open_read_write(r->fd);
                if (fd < 0) {
                        give_up(fd);
                        return;
                }
                host_entry_name(r, name);
                store_push(name, fd);
                close(fd);
        }
        each_fd_entry_of(r, push_entry);
        JOURNAL(jrec_pack_reg, r, ledger_reg_exe(r->id));       /* not if a push gave up */
}

void persist_removed(struct daemon *d, const struct reg *r)
{
        (void)d;
        JOURNAL(jrec_pack_id, 'U', r->id);
}

void persist_freed(struct daemon *d, const struct reg *r)
{
        char name[ENTRY_NAME_MAX];

        (void)d;
        if (!persist_enabled())
                return;
        if (!r->cuda) {
                host_entry_name(r, name);
                persist_store_remove(name);
        }
        /* An allocation's entry goes with its last registration. */
        each_fd_entry_of(r, remove_entry);
}

void persist_leased(struct daemon *d, const struct lease *l)
{
        (void)d;
        JOURNAL(jrec_pack_lease, l);
}

void persist_unleased(struct daemon *d, const struct lease *l)
{
        (void)d;
        JOURNAL(jrec_pack_id, 'R', l->id);
}

void persist_cuda_changed(struct daemon *d, const struct reg *r)
{
        (void)d;
        if (!persist_enabled() || P.j.fd < 0)
                return;
        each_fd_entry_of(r, push_entry);
        JOURNAL(jrec_pack_cuda_changed, r);     /* not if the push gave up */
}
