/* ledger.c: what records and metrics show of registrations beyond the
 * registry: the executable of each connection (read at accept), copied to
 * the registrations it makes (owner.exe), and the registrations and bytes
 * per (kind, device).  One entry per connection that said hello and per
 * registration not yet freed.  The daemon is a single instance, so the
 * tables are the module's own. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batch.h"
#include "conn.h"
#include "cuda/driver.h"
#include "cuda_reg.h"
#include "ledger.h"

#define CONN_KEY(id) ((id) | (1ull << 63))      /* conn entries beside reg ids */

/* An executable path, shared by a connection's entry and the entries of
 * the registrations it made: one copy per connection, not one each. */
struct exe {
        uint32_t refs;
        char s[];
};

/* One per connection that said hello and per registration not yet freed. */
struct entry {
        struct hmap_node node;
        uint64_t key;
        struct exe *exe;                /* a reference; NULL for "" */
        int16_t bytes_slot;             /* registrations: index in bytes[], or -1 */
};

struct bytes_slot {
        unsigned __int128 bytes;        /* exact; reported saturated at UINT64_MAX */
        uint64_t count;                 /* registrations */
        uint8_t kind;
        char device[CUDA_UUID_STR_LEN + 1];
};

static struct hmap entries;
static bool entries_ready;
static struct bytes_slot bytes[LEDGER_DEVICES_MAX];
static unsigned n_bytes;

static struct entry *entry_find(uint64_t key)
{
        struct hmap_node *n = entries_ready ? hmap_find_u64(&entries, key) : NULL;

        return n ? container_of(n, struct entry, node) : NULL;
}

/* A new exe with one reference, or NULL for "" and when out of memory
 * (best effort: the record then shows ""). */
static struct exe *exe_new(const char *path)
{
        size_t n = strlen(path);
        struct exe *x;

        if (n == 0)
                return NULL;
        x = malloc(sizeof(*x) + n + 1);
        if (!x)
                return NULL;
        x->refs = 1;
        memcpy(x->s, path, n + 1);
        return x;
}

static void exe_unref(struct exe *x)
{
        if (x && --x->refs == 0)
                free(x);
}

static void entry_free(struct entry *e)
{
        exe_unref(e->exe);
        free(e);
}

/* Adds an entry for key holding a reference to exe (may be NULL); best
 * effort. */
static struct entry *entry_add(uint64_t key, struct exe *exe)
{
        struct entry *e;

        if (!entries_ready) {
                hmap_init(&entries);
                entries_ready = true;
        }
        e = malloc(sizeof(*e));
        if (!e)
                return NULL;
        e->key = key;
        e->bytes_slot = -1;
        e->exe = exe;
        if (hmap_insert(&entries, &e->node, hmap_hash_u64(key)) < 0) {
                free(e);
                return NULL;
        }
        if (exe)
                exe->refs++;
        return e;
}

static void entry_drop(uint64_t key)
{
        struct entry *e = entry_find(key);

        if (!e)
                return;
        hmap_remove(&entries, &e->node);
        entry_free(e);
}

void ledger_conn_accepted(struct conn *c)
{
        char path[64], exe[LEDGER_EXE_MAX + 1];
        struct exe *x;
        ssize_t n;

        if (entry_find(CONN_KEY(c->id)))
                return;
        snprintf(path, sizeof(path), "/proc/%" PRIu32 "/exe", c->party.pid);
        n = readlink(path, exe, sizeof(exe) - 1);
        /* Unreadable (another user's process without CAP_SYS_PTRACE, another
         * PID namespace) or longer than we keep: "" rather than a guess. */
        if (n < 0 || (size_t)n >= sizeof(exe) - 1)
                n = 0;
        exe[n] = '\0';
        x = exe_new(exe);
        (void)entry_add(CONN_KEY(c->id), x);
        exe_unref(x);           /* the entry holds it, or nobody */
}

void ledger_conn_closed(struct conn *c)
{
        entry_drop(CONN_KEY(c->id));
}

const char *ledger_party_exe(const struct reg_party *p)
{
        const struct entry *e;

        if (!p || p->detached)
                return "";
        e = entry_find(CONN_KEY(conn_from_party((struct reg_party *)p)->id));
        return e && e->exe ? e->exe->s : "";
}

const char *ledger_reg_exe(uint64_t id)
{
        struct entry *e = entry_find(id);

        return e && e->exe ? e->exe->s : "";
}

static int bytes_slot(unsigned kind, const char *device)
{
        for (unsigned i = 0; i < n_bytes; i++)
                if (bytes[i].kind == kind && strcmp(bytes[i].device, device) == 0)
                        return (int)i;
        if (n_bytes == LEDGER_DEVICES_MAX)
                return -1;
        bytes[n_bytes].kind = (uint8_t)kind;
        snprintf(bytes[n_bytes].device, sizeof(bytes[0].device), "%s", device);
        bytes[n_bytes].bytes = bytes[n_bytes].count = 0;
        return (int)n_bytes++;
}

void ledger_bytes_each(void (*fn)(unsigned kind, const char *device, uint64_t count,
                                 uint64_t b, void *data),
                      void *data)
{
        for (unsigned i = 0; i < n_bytes; i++)
                if (bytes[i].count > 0 || bytes[i].bytes > 0)
                        fn(bytes[i].kind, bytes[i].device, bytes[i].count,
                           bytes[i].bytes > UINT64_MAX ? UINT64_MAX : (uint64_t)bytes[i].bytes,
                           data);
}

/* A batch's parts count their bytes under their own kind and device (the
 * batch itself counts as one registration of kind batch, with none): the
 * slots found at add are found again at free, as slots are never removed. */
static void batch_bytes_count(const struct reg_batch *b, bool add)
{
        for (uint32_t i = 0; i < b->n_parts; i++) {
                const struct batch_part *p = &b->parts[i];
                char device[CUDA_UUID_STR_LEN + 1] = "";
                int slot;

                if (p->cuda)
                        cuda_uuid_format(p->cuda->device, device);
                slot = bytes_slot(p->kind, device);
                if (slot < 0)
                        continue;
                if (add)
                        bytes[slot].bytes += p->size;
                else
                        bytes[slot].bytes -= bytes[slot].bytes < p->size ? bytes[slot].bytes
                                                                         : p->size;
        }
}

static const char *restored_exe;

void ledger_set_restored_exe(const char *exe)
{
        restored_exe = exe;
}

void ledger_reg_added(struct reg *r)
{
        const struct entry *ce = r->owner && !r->owner->detached
                ? entry_find(CONN_KEY(conn_from_party(r->owner)->id)) : NULL;
        /* A restored registration brings its own path: one copy each. */
        struct exe *own = restored_exe ? exe_new(restored_exe) : NULL;
        char device[CUDA_UUID_STR_LEN + 1] = "";
        struct entry *e;
        int slot;

        if (r->cuda)
                cuda_uuid_format(r->cuda->device, device);
        e = entry_add(r->id, restored_exe ? own : ce ? ce->exe : NULL);
        restored_exe = NULL;
        exe_unref(own);         /* the entry holds it, or nobody */
        slot = bytes_slot(r->kind, device);
        if (e && slot >= 0) {
                e->bytes_slot = (int16_t)slot;
                bytes[slot].bytes += r->batch ? 0 : r->size;
                bytes[slot].count++;
        }
        if (e && slot >= 0 && r->batch)
                batch_bytes_count(r->batch, true);
}

void ledger_reg_freed(struct reg *r)
{
        struct entry *e = entry_find(r->id);

        if (e && e->bytes_slot >= 0) {
                uint64_t n = r->batch ? 0 : r->size;
                bytes[e->bytes_slot].bytes -= bytes[e->bytes_slot].bytes < n
                                                      ? bytes[e->bytes_slot].bytes : n;
                bytes[e->bytes_slot].count--;
                if (r->batch)
                        batch_bytes_count(r->batch, false);
        }
        entry_drop(r->id);
}

void ledger_done(void)
{
        struct hmap_node *n, *next;

        if (!entries_ready)
                return;
        /* Every registration was freed through watch_reg_freed and every
         * connection closed; anything left is freed bucket by bucket. */
        hmap_for_each_safe(n, next, &entries) {
                hmap_remove(&entries, n);
                entry_free(container_of(n, struct entry, node));
        }
        hmap_free(&entries);
        entries_ready = false;
}
