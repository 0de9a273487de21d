/* helper-resume: one libgpuipc client, driven line by line.
 *
 *   helper-resume            (connects to $GPUIPC_SOCKET at start)
 *
 * Reads commands on stdin and answers each with one line on stdout:
 *
 *   reg NAME SIZE SEED [eph] [keep]  host buffer of h_pattern(i, SEED)  -> id N
 *                                    (keep: hold the gpuipc_hostbuf until
 *                                    unreg, instead of freeing it at once as
 *                                    helper-producer does)
 *   unreg NAME                       -> ok
 *   lookup NAME                      keeps the view            -> id N
 *   check NAME SEED                  every byte of the view    -> ok | bad
 *   release NAME                     gpuipc_view_release()     -> ok
 *   ping                             -> ok
 *   waitrel ID MS                    gpuipc_reg_wait_released()    -> ok
 *   stat NAME                        -> id N leases L connected 0|1 pid P eph 0|1
 *   quit                             frees the client, exits 0 -> bye
 *
 * A failed call answers "err <negative errno> <gpuipc_strerror>: <gpuipc_errmsg>";
 * a malformed command "err usage ...".  EOF on stdin is a quiet quit.  The
 * library's own GPUIPC_RECONNECT_MS governs reconnecting. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuipc.h"
#include "harness.h"

#define MAX_ENTRIES 64

struct entry {
        char name[256];
        gpuipc_hostbuf *buf;    /* reg ... keep */
        gpuipc_view *view;      /* lookup */
};

static gpuipc_client *c;
static struct entry entries[MAX_ENTRIES];

static struct entry *find(const char *name, bool create)
{
        struct entry *free_slot = NULL;

        for (int i = 0; i < MAX_ENTRIES; i++) {
                if (entries[i].name[0] && strcmp(entries[i].name, name) == 0)
                        return &entries[i];
                if (!entries[i].name[0] && !free_slot)
                        free_slot = &entries[i];
        }
        if (!create || !free_slot)
                return NULL;
        snprintf(free_slot->name, sizeof(free_slot->name), "%s", name);
        return free_slot;
}

static void forget(struct entry *e)
{
        if (!e->buf && !e->view)
                e->name[0] = '\0';
}

static int reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int reply(const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        putchar('\n');
        fflush(stdout);
        return 0;
}

static int reply_err(int r)
{
        return reply("err %d %s: %s", r, gpuipc_strerror(r), gpuipc_errmsg(c));
}

static int do_reg(char *name, char *size_s, char *seed_s, char *opt1, char *opt2)
{
        bool eph = false, keep = false;
        gpuipc_hostbuf *b = NULL;
        struct entry *e;
        uint64_t id = 0;
        size_t size;
        uint32_t seed;
        uint8_t *p;
        int r;

        if (!name || !size_s || !seed_s)
                return reply("err usage reg NAME SIZE SEED [eph] [keep]");
        for (char *o = opt1; o; o = o == opt1 ? opt2 : NULL) {
                if (strcmp(o, "eph") == 0)
                        eph = true;
                else if (strcmp(o, "keep") == 0)
                        keep = true;
                else
                        return reply("err usage unknown option %s", o);
        }
        size = strtoull(size_s, NULL, 0);
        seed = (uint32_t)strtoul(seed_s, NULL, 0);
        r = gpuipc_hostbuf_new(size, &b);
        if (r < 0)
                return reply_err(r);
        p = gpuipc_hostbuf_data(b);
        for (size_t i = 0; i < size; i++)
                p[i] = h_pattern(i, seed);
        r = gpuipc_hostbuf_register(c, name, b, NULL, eph ? GPUIPC_REGISTER_EPHEMERAL : 0, &id);
        if (r < 0) {
                gpuipc_hostbuf_free(b);
                return reply_err(r);
        }
        e = keep ? find(name, true) : NULL;
        if (e && !e->buf)
                e->buf = b;
        else
                gpuipc_hostbuf_free(b);
        return reply("id %" PRIu64, id);
}

static int do_unreg(const char *name)
{
        struct entry *e;
        int r;

        if (!name)
                return reply("err usage unreg NAME");
        r = gpuipc_name_unregister(c, name);
        if (r < 0)
                return reply_err(r);
        e = find(name, false);
        if (e) {
                gpuipc_hostbuf_free(e->buf);
                e->buf = NULL;
                forget(e);
        }
        return reply("ok");
}

static int do_lookup(const char *name)
{
        gpuipc_view *v = NULL;
        struct entry *e;
        int r;

        if (!name)
                return reply("err usage lookup NAME");
        e = find(name, true);
        if (!e)
                return reply("err usage more than %d names", MAX_ENTRIES);
        if (e->view)
                return reply("err usage %s: a view is already held", name);
        r = gpuipc_view_lookup(c, name, 0, 0, &v);
        if (r < 0) {
                forget(e);
                return reply_err(r);
        }
        e->view = v;
        return reply("id %" PRIu64, gpuipc_view_info(v)->id);
}

static int do_check(const char *name, const char *seed_s)
{
        struct entry *e = name ? find(name, false) : NULL;
        const uint8_t *p;
        uint32_t seed;
        size_t size;

        if (!name || !seed_s)
                return reply("err usage check NAME SEED");
        if (!e || !e->view)
                return reply("err usage %s: no view held", name);
        seed = (uint32_t)strtoul(seed_s, NULL, 0);
        p = gpuipc_view_data(e->view);
        size = gpuipc_view_size(e->view);
        for (size_t i = 0; i < size; i++) {
                if (p[i] != h_pattern(i, seed)) {
                        fprintf(stderr, "helper-resume: %s byte %zu is 0x%02x, want 0x%02x\n", name,
                                i, p[i], h_pattern(i, seed));
                        return reply("bad");
                }
        }
        return reply("ok");
}

static int do_release(const char *name)
{
        struct entry *e = name ? find(name, false) : NULL;
        int r;

        if (!name)
                return reply("err usage release NAME");
        if (!e || !e->view)
                return reply("err usage %s: no view held", name);
        r = gpuipc_view_release(e->view);      /* frees the view either way */
        e->view = NULL;
        forget(e);
        if (r < 0)
                return reply_err(r);
        return reply("ok");
}

static int do_waitrel(const char *id_s, const char *ms_s)
{
        int r;

        if (!id_s || !ms_s)
                return reply("err usage waitrel ID MS");
        r = gpuipc_reg_wait_released(c, strtoull(id_s, NULL, 0), atoi(ms_s));
        if (r < 0)
                return reply_err(r);
        return reply("ok");
}

static int do_stat(const char *name)
{
        gpuipc_list *l = NULL;
        const gpuipc_info *i;
        int r;

        if (!name)
                return reply("err usage stat NAME");
        r = gpuipc_name_stat(c, name, &l);
        if (r < 0)
                return reply_err(r);
        if (gpuipc_list_count(l) != 1) {
                reply("err usage stat %s: %zu entries", name, gpuipc_list_count(l));
                gpuipc_list_free(l);
                return 0;
        }
        i = gpuipc_list_get(l, 0);
        reply("id %" PRIu64 " leases %" PRIu32 " connected %d pid %" PRIu32 " eph %d", i->id,
              i->leases, !(i->flags & GPUIPC_INFO_OWNER_GONE), i->owner_pid,
              !!(i->flags & GPUIPC_INFO_EPHEMERAL));
        gpuipc_list_free(l);
        return 0;
}

static void cleanup(void)
{
        for (int i = 0; i < MAX_ENTRIES; i++) {
                gpuipc_view_release(entries[i].view);
                gpuipc_hostbuf_free(entries[i].buf);
        }
        gpuipc_client_free(c);
}

int main(void)
{
        char line[1024];
        int r;

        r = gpuipc_client_connect(NULL, &c);
        if (r < 0) {
                fprintf(stderr, "helper-resume: connect: %s\n", gpuipc_strerror(r));
                return 3;
        }
        while (fgets(line, sizeof(line), stdin)) {
                char *save = NULL, *cmd = strtok_r(line, " \t\r\n", &save), *a[5];

                if (!cmd)
                        continue;
                for (int i = 0; i < 5; i++)
                        a[i] = strtok_r(NULL, " \t\r\n", &save);
                if (strcmp(cmd, "reg") == 0)
                        do_reg(a[0], a[1], a[2], a[3], a[4]);
                else if (strcmp(cmd, "unreg") == 0)
                        do_unreg(a[0]);
                else if (strcmp(cmd, "lookup") == 0)
                        do_lookup(a[0]);
                else if (strcmp(cmd, "check") == 0)
                        do_check(a[0], a[1]);
                else if (strcmp(cmd, "release") == 0)
                        do_release(a[0]);
                else if (strcmp(cmd, "ping") == 0) {
                        r = gpuipc_client_ping(c);
                        if (r < 0)
                                reply_err(r);
                        else
                                reply("ok");
                } else if (strcmp(cmd, "waitrel") == 0)
                        do_waitrel(a[0], a[1]);
                else if (strcmp(cmd, "stat") == 0)
                        do_stat(a[0]);
                else if (strcmp(cmd, "quit") == 0) {
                        cleanup();
                        reply("bye");
                        return 0;
                } else
                        reply("err usage unknown command %s", cmd);
        }
        cleanup();
        return 0;
}
