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
#include "ops.h"
#include "quota.h"
#include "restart_codec.h"
#include "restart_decode.h"
#include "restart_journal.h"
#include "restart_persist.h"
#include "restart_replay.h"
#include "session.h"

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
        if (p.kind == PROTO_KIND_BATCH) {
                k = restore_decode_batch(x, m, &p, &p.batch);
                if (k < 0)
                        goto fail;
                /* What the parts say, whatever the record does. */
                p.size = batch_size(p.batch);
                p.offset = 0;
        } else if (p.kind == PROTO_KIND_HOST) {
                snprintf(fdname, sizeof(fdname), "host-%" PRIu64, p.id);
                i = restore_stored_fd(x, fdname);
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
                k = !sub ? -EINVAL : restore_decode_cuda(x, sub, p.kind, &p.cuda);
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
                batch_free(&d->allocs, p.batch);
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
        k = restore_decode_alloc(x, c.cuda, c.kind, device, &a);
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

int restore_apply(struct restore_ctx *x, const uint8_t *body, size_t len)
{
        struct registry *R = x->d->reg;
        uint8_t token[PROTO_SESSION_LEN];
        struct proto_msg m;
        struct reg_party *p;
        uint64_t id;
        struct lease *l;
        struct reg *r;
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
        switch (t) {
        case 'H':
                k = apply_header(x, m.root);
                break;
        case 'S':
                k = apply_session(x, m.root);
                break;
        case 'E':
                k = jrec_get_token(m.root, token);
                p = k == 0 ? session_detached_find(x->d, token) : NULL;
                if (p)
                        session_detached_end(x->d, p, false);
                break;
        case 'A':
                k = apply_add(x, m.root);
                break;
        case 'U':
                k = jrec_get_id(m.root, &id);
                r = k == 0 ? registry_find_id(R, id) : NULL;
                if (r && r->live)
                        registry_unregister(R, r);
                break;
        case 'C':
                k = apply_cuda(x, m.root);
                break;
        case 'M':
                k = apply_missed(x, m.root);
                break;
        case 'L':
                k = apply_lease(x, m.root);
                break;
        case 'R':
                k = jrec_get_id(m.root, &id);
                l = k == 0 ? registry_find_lease(R, id) : NULL;
                if (l)
                        (void)registry_release(R, l->holder, id);
                break;
        default:
                break;          /* a later version's record: skipped */
        }
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
        restore_ids_free(&x->alloc_ids);
        free(x);                /* the first member of its block */
}

/* What a log line names a journal record by: its number, type, and the id
 * and name it carries, where it decodes that far. */
static const char *record_label(const uint8_t *body, size_t len, uint64_t nr, char *buf,
                                size_t size)
{
        char quoted[REQ_QUOTE_SIZE(REQ_NAME_ECHO_MAX)] = "", ids[32] = "";
        const char *name = NULL;
        struct proto_msg m;
        size_t nlen = 0;
        uint64_t id;
        char t = '?';

        if (proto_decode(body, len, &m, NULL) < 0) {
                snprintf(buf, size, "record %" PRIu64 " (not msgpack)", nr);
                return buf;
        }
        if (jrec_type(m.root, &t) < 0 || (unsigned char)t < 0x21 || (unsigned char)t > 0x7e)
                t = '?';
        if (jrec_get_id(m.root, &id) == 0)
                snprintf(ids, sizeof(ids), ", id %" PRIu64, id);
        if (proto_get_str(m.root, "name", &name, &nlen) == 0)
                req_quote(quoted, name, nlen, REQ_NAME_ECHO_MAX);
        snprintf(buf, size, "record %" PRIu64 " (type %c%s%s%s%s)", nr, t, ids,
                 name ? ", name '" : "", quoted, name ? "'" : "");
        proto_msg_free(&m);
        return buf;
}

int restore_replay_one(const uint8_t *body, size_t len, void *data)
{
        struct restore_ctx *x = data;
        int k = restore_apply(x, body, len);

        x->walked++;

        if (k == -EPROTONOSUPPORT)
                return k;       /* another version's journal: stop */
        if (k == -ENOENT)
                x->res->missing++;
        else if (k < 0 && k != -ESRCH) {
                char label[REQ_QUOTE_SIZE(REQ_NAME_ECHO_MAX) + 96];
                x->res->skipped++;
                log_warn("restore: skipping journal %s: %s",
                         record_label(body, len, x->walked, label, sizeof(label)), strerror(-k));
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
        k = journal_parse(buf, len, restore_replay_one, x, &tail);
        d->restoring = false;
        if (k < 0) {
                log_error("restore: the journal was written by another version (%s); "
                          "starting empty", strerror((int)-k));
                goto out;
        }
        /* persist_start() replaces it under the other name. */
        ret->gen = fds[best].name[sizeof(PERSIST_STATE_NAME) - 1] - '0';
        x->claimed[best] = true;
        /* Past a bad record even the next one's place is not known. */
        if (tail > 0)
                log_warn("restore: the journal is torn or damaged at byte %zu of %zu; the "
                         "%zu bytes from there on are not replayed", len - tail, len, tail);
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
