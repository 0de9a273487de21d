/* integ_batch_client.c: libgpuipc's batches (gpuipc_batch_*): Arrow C
 * Data Interface structs in, one register, one lookup, Arrow structs out.
 *
 * Suite bscript plays the daemon (batch_script.h): it checks the register
 * frames against docs/protocol.md and answers from them, so the library's
 * encoding and its reading of replies are tested byte for byte, and the
 * release callbacks are counted exactly.  Suite batch runs real round
 * trips against gpuipcd, a producer process (helper-batch) and this one.
 * Device batches use the CUDA driver double, whose device pointers are
 * host addresses. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"
#include "batch_fixture.h"
#include "batch_script.h"

#define DEV_ROWS_T 1000         /* helper-batch device's rows */

static struct bs srv;

static void script_setup(void)
{
        signal(SIGPIPE, SIG_IGN);
        setenv("GPUIPC_LIBCUDA", h_path("tests/cuda-double/libcuda.so.1"), 1);
        setenv("GPUIPC_MAP_CACHE_ENTRIES", "0", 1);
        unsetenv("CUDA_VISIBLE_DEVICES");
        bs_start(&srv);
}

static void script_teardown(void)
{
        bs_stop(&srv);
}

TestSuite(bscript, .init = script_setup, .fini = script_teardown, .timeout = 30);

static gpuipc_client *sconnect(void)
{
        gpuipc_client *c = NULL;
        int r = gpuipc_client_connect(srv.path, &c);

        cr_assert_eq(r, 0, "connect: %s", gpuipc_errmsg(NULL));
        return c;
}

/* Registers fixture f as "t/b" on c. */
static void register_fx(gpuipc_client *c, struct fx *f)
{
        gpuipc_batch *b = NULL;
        uint64_t id = 0;
        int r;

        cr_assert_eq(gpuipc_batch_new(&b), 0);
        r = gpuipc_batch_add_record_batch(b, &f->s, &f->a);
        cr_assert_eq(r, 0, "add_record_batch: %s", gpuipc_batch_errmsg(b));
        r = gpuipc_batch_register(c, "t/b", b, 0, &id);
        cr_assert_eq(r, 0, "register: %d %s (server: %s)", r, gpuipc_errmsg(c), srv.last_error);
        cr_assert_neq(id, 0);
        /* The library reads the caller's structs, never releases them. */
        cr_assert_not_null(f->a.release);
        cr_assert_not_null(f->ca[3].release);
        gpuipc_batch_free(b);
}

/* The register frame the server kept. */
static const msgpack_object *sent(void)
{
        cr_assert_eq(srv.nregs, 1);
        return srv.regs[0].f.m.root;
}

Test(bscript, host_in_place)
{
        const msgpack_object *parts, *arrow, *cols;
        gpuipc_client *c = sconnect();
        struct fx f;
        uint64_t off;

        cr_assert_eq(fx_build(&f, true, 0, 0), 0);
        register_fx(c, &f);
        /* Every buffer is a host part at its offset in the one memfd,
         * attached once. */
        cr_assert_eq(srv.regs[0].f.nfds, 1);
        cr_assert_eq(proto_get_array(sent(), "parts", &parts), 0);
        /* 11 buffers: the struct's and the absent validity bitmaps are -1 */
        cr_assert_eq(parts->via.array.size, 11, "%u parts", parts->via.array.size);
        for (uint32_t i = 0; i < parts->via.array.size; i++) {
                const msgpack_object *p = &parts->via.array.ptr[i], *fa;
                cr_assert(proto_obj_str_eq(proto_get(p, "kind"), "host"));
                cr_assert_eq(proto_get_u64(p, "offset", &off), 0);
                cr_assert_lt(off, FX_MEM);
                cr_assert_eq(off % 64, 0, "the fixture's buffers are 64-aligned in the memfd");
                cr_assert_eq(proto_get_array(p, "fds", &fa), 0);
                cr_assert_eq(fa->via.array.size, 1);
                cr_assert_eq(fa->via.array.ptr[0].via.u64, 0);
        }
        cr_assert_eq(proto_get_map(sent(), "arrow", &arrow), 0);
        cr_assert_null(proto_get(arrow, "copied"), "nothing was copied");
        cr_assert_eq(proto_get_array(arrow, "columns", &cols), 0);
        /* 7 columns, pt's 2 children, lst's 1 */
        cr_assert_eq(cols->via.array.size, 10);
        cr_assert(proto_obj_str_eq(proto_get(&cols->via.array.ptr[5], "format"), "+s"));
        cr_assert_eq(proto_get(&cols->via.array.ptr[5], "children")->via.u64, 2);
        cr_assert(proto_obj_str_eq(proto_get(&cols->via.array.ptr[6], "name"), "x"));
        fx_free(&f);
        gpuipc_client_free(c);
}

Test(bscript, host_copied_when_outside_a_hostbuf)
{
        const msgpack_object *parts, *arrow;
        gpuipc_client *c = sconnect();
        gpuipc_batch_view *v = NULL;
        uint64_t off, size, end = 0;
        struct fx f;

        cr_assert_eq(fx_build(&f, false, 0, 0), 0);
        register_fx(c, &f);
        cr_assert_eq(srv.regs[0].f.nfds, 1, "one memfd for the copy");
        cr_assert_eq(proto_get_array(sent(), "parts", &parts), 0);
        for (uint32_t i = 0; i < parts->via.array.size; i++) {
                const msgpack_object *p = &parts->via.array.ptr[i];
                cr_assert_eq(proto_get_u64(p, "offset", &off), 0);
                cr_assert_eq(proto_get_u64(p, "size", &size), 0);
                cr_assert_eq(off % 64, 0, "part %u at %llu", i, (unsigned long long)off);
                cr_assert_geq(off, end, "parts do not overlap");
                end = off + size;
        }
        cr_assert_eq(proto_get_map(sent(), "arrow", &arrow), 0);
        cr_assert_not_null(proto_get(arrow, "copied"));
        /* The producer may free its memory: the copy is the daemon's. */
        fx_free(&f);
        cr_assert_eq(gpuipc_batch_view_lookup(c, "t/b", 0, 0, &v), 0, "%s", gpuipc_errmsg(c));
        cr_assert_str_neq(gpuipc_batch_view_info(v)->copied, "");
        {
                struct ArrowSchema s;
                struct ArrowArray a;
                char why[128] = "";
                cr_assert_eq(gpuipc_batch_view_export(v, -1, &s, &a), 0, "%s",
                             gpuipc_errmsg(c));
                cr_assert_eq(fx_check(&s, &a, why, sizeof(why)), 0, "%s", why);
                a.release(&a);
                s.release(&s);
        }
        gpuipc_batch_view_release(v);
        gpuipc_client_free(c);
}

/* Looks "t/b" up on c and checks the view and its export against f. */
/* Bytes per value of the fixed-width formats the fixtures use; 0 else. */
static uint32_t fixed_width(const char *f)
{
        static const char *const widths[] = { "cC", "sSe", "iIf", "lLg" };

        if (f[0] && !f[1])
                for (unsigned w = 0; w < 4; w++)
                        if (strchr(widths[w], f[0]))
                                return 1u << w;
        return 0;
}

/* gpuipc_batch_view_values() says of every column what the export (s, a)
 * and the accessors say, and refuses ranges past the end. */
static void values_agree(gpuipc_batch_view *v, const struct ArrowSchema *s,
                         const struct ArrowArray *a)
{
        size_t n = gpuipc_batch_view_columns(v);
        gpuipc_batch_values got[16];

        cr_assert_leq(n, 16);
        cr_assert_eq(gpuipc_batch_view_values(v, 0, n, got), 0);
        for (size_t i = 0; i < n; i++) {
                const struct ArrowArray *ca = a->children[i];
                uint32_t w = fixed_width(s->children[i]->format);

                cr_assert_str_eq(got[i].name, s->children[i]->name);
                cr_assert_str_eq(got[i].format, s->children[i]->format);
                cr_assert_eq(got[i].node, gpuipc_info_batch_column(gpuipc_batch_view_info(v),
                                                                   i)->index);
                cr_assert_eq(got[i].length, ca->length);
                cr_assert_eq(got[i].null_count, ca->null_count);
                cr_assert_eq(got[i].width, w, "column %zu (%s): width %u, want %u", i,
                             got[i].format, got[i].width, w);
                if (!w) {
                        cr_assert_null(got[i].data, "column %zu has no fixed-width values", i);
                        cr_assert_eq(got[i].part, -1);
                        continue;
                }
                /* the first value, the offset applied, inside its mapping */
                cr_assert_eq(got[i].data, (const uint8_t *)ca->buffers[1] + ca->offset * w);
                cr_assert_eq(got[i].device, -1);
                cr_assert_geq(got[i].part, 0);
                cr_assert(got[i].map && (uint8_t *)got[i].map <= (uint8_t *)got[i].data &&
                          (uint8_t *)got[i].data + (uint64_t)ca->length * w <=
                          (uint8_t *)got[i].map + got[i].map_size);
        }
        if (n > 1) {
                gpuipc_batch_values one;
                cr_assert_eq(gpuipc_batch_view_values(v, n - 1, 1, &one), 0);
                cr_assert_eq(memcmp(&one, &got[n - 1], sizeof(one)), 0, "a range from n-1");
        }
        cr_assert_eq(gpuipc_batch_view_values(v, 0, n + 1, got), -EINVAL);
        cr_assert_eq(gpuipc_batch_view_values(v, n + 1, 0, got), -EINVAL);
        cr_assert_eq(gpuipc_batch_view_values(v, n, 0, got), 0, "an empty range at the end");
        cr_assert_eq(gpuipc_batch_view_values(NULL, 0, 0, got), -EINVAL);
}

static void consume(gpuipc_client *c, int64_t off)
{
        gpuipc_batch_view *v = NULL;
        const gpuipc_info *info;
        struct ArrowSchema s;
        struct ArrowArray a;
        char why[128] = "";
        void *data;
        uint64_t size;
        int dev, r;

        r = gpuipc_batch_view_lookup(c, "t/b", 0, 0, &v);
        cr_assert_eq(r, 0, "lookup: %s", gpuipc_errmsg(c));
        info = gpuipc_batch_view_info(v);
        cr_assert_eq(info->kind, GPUIPC_KIND_BATCH);
        cr_assert_eq(gpuipc_batch_view_rows(v), FX_ROWS);
        cr_assert_eq(gpuipc_batch_view_columns(v), FX_COLS);
        cr_assert_str_eq(gpuipc_batch_view_column_name(v, 3), "name");
        cr_assert_null(gpuipc_batch_view_column_name(v, FX_COLS));
        cr_assert_eq(gpuipc_batch_view_column_index(v, "opt"), 4);
        cr_assert_eq(gpuipc_batch_view_column_index(v, "nope"), -ENOENT);
        cr_assert_eq(gpuipc_info_batch_columns(info), FX_COLS);
        cr_assert_eq(gpuipc_info_batch_nodes(info), 10);
        cr_assert_eq(gpuipc_info_batch_column(info, 6)->index, 8);
        cr_assert_eq(gpuipc_info_batch_node(info, 9)->parent, 8);
        cr_assert_eq(gpuipc_info_batch_node(info, 7)->parent, 5);
        cr_assert_eq(gpuipc_info_batch_column(info, 4)->offset, off);
        cr_assert_eq(gpuipc_info_batch_column(info, 4)->flags, ARROW_FLAG_NULLABLE);
        cr_assert_eq(gpuipc_batch_view_buffer(v, 0, 1, &data, &size, &dev), 0);
        cr_assert_eq(size, (uint64_t)(FX_ROWS + off) * 4);
        cr_assert_eq(dev, -1);
        cr_assert_eq(gpuipc_batch_view_buffer(v, 0, 0, &data, &size, &dev), 0);
        cr_assert_null(data, "an absent validity bitmap");
        cr_assert_eq(gpuipc_batch_view_buffer(v, 0, 2, &data, NULL, NULL), -EINVAL);

        r = gpuipc_batch_view_export(v, -1, &s, &a);
        cr_assert_eq(r, 0, "export: %s", gpuipc_errmsg(c));
        cr_assert_eq(fx_check(&s, &a, why, sizeof(why)), 0, "%s", why);
        values_agree(v, &s, &a);
        /* Zero copy: the buffers are the view's mapped parts. */
        for (int col = 0; col < FX_COLS; col++)
                for (int k = 0; k < a.children[col]->n_buffers; k++) {
                        cr_assert_eq(gpuipc_batch_view_buffer(v, col, k, &data, NULL, NULL), 0);
                        if (data)
                                cr_assert_eq(a.children[col]->buffers[k], data);
                }
        a.release(&a);
        s.release(&s);
        cr_assert_null(a.release);
        gpuipc_batch_view_release(v);
}

static void counts_are(unsigned want_leases, unsigned want_releases)
{
        unsigned leases, releases;

        bs_counts(&srv, &leases, &releases);
        cr_assert_eq(leases, want_leases, "leases %u, want %u", leases, want_leases);
        cr_assert_eq(releases, want_releases, "releases %u, want %u", releases, want_releases);
}

/* The same, for a release sent without waiting (its reply is not read):
 * the server sees it soon, not at once. */
static void counts_become(unsigned want_leases, unsigned want_releases)
{
        unsigned leases = 0, releases = 0;

        for (int i = 0; i < 200; i++) {
                bs_counts(&srv, &leases, &releases);
                if (leases == want_leases && releases == want_releases)
                        return;
                h_sleep_ms(10);
        }
        cr_assert_fail("leases %u, releases %u; want %u, %u", leases, releases, want_leases,
                       want_releases);
}

Test(bscript, host_round_trip)
{
        gpuipc_client *p = sconnect(), *c = sconnect();
        struct fx f;

        cr_assert_eq(fx_build(&f, true, 0, 0), 0);
        register_fx(p, &f);
        consume(c, 0);
        /* The release is sent without waiting: the server sees it soon. */
        counts_become(0, 1);
        fx_free(&f);
        gpuipc_client_free(c);
        gpuipc_client_free(p);
}

Test(bscript, sliced)
{
        gpuipc_client *c = sconnect();
        struct fx f;

        /* columns skip 3 of their own, the record batch 5 more */
        cr_assert_eq(fx_build(&f, true, 3, 5), 0);
        register_fx(c, &f);
        consume(c, 8);
        fx_free(&f);
        gpuipc_client_free(c);
}

/* ---- the lease comes back once, whatever order things are released in -- */


static gpuipc_batch_view *lookup_fx(gpuipc_client *c)
{
        gpuipc_batch_view *v = NULL;
        int r = gpuipc_batch_view_lookup(c, "t/b", 0, 0, &v);

        cr_assert_eq(r, 0, "lookup: %s", gpuipc_errmsg(c));
        return v;
}

Test(bscript, release_view_then_array)
{
        gpuipc_client *c = sconnect();
        gpuipc_batch_view *v;
        struct ArrowArray a;
        struct fx f;

        cr_assert_eq(fx_build(&f, true, 0, 0), 0);
        register_fx(c, &f);
        v = lookup_fx(c);
        cr_assert_eq(gpuipc_batch_view_export(v, -1, NULL, &a), 0);
        cr_assert_eq(gpuipc_batch_view_release(v), 0);
        counts_are(1, 0);               /* the array still maps it */
        a.release(&a);
        counts_are(1, 0);               /* queued: a callback sends nothing */
        cr_assert_eq(gpuipc_client_ping(c), 0);
        counts_are(0, 1);
        cr_assert_eq(gpuipc_client_ping(c), 0);
        counts_are(0, 1);
        fx_free(&f);
        gpuipc_client_free(c);
}

Test(bscript, release_array_then_view)
{
        gpuipc_client *c = sconnect();
        gpuipc_batch_view *v;
        struct ArrowSchema s;
        struct ArrowArray a, a2;
        struct fx f;

        cr_assert_eq(fx_build(&f, true, 0, 0), 0);
        register_fx(c, &f);
        v = lookup_fx(c);
        cr_assert_eq(gpuipc_batch_view_export(v, -1, &s, &a), 0);
        cr_assert_eq(gpuipc_batch_view_export(v, 3, NULL, &a2), 0, "one column");
        cr_assert_eq(a2.length, FX_ROWS);
        cr_assert_eq(a2.n_buffers, 3);
        a.release(&a);
        s.release(&s);
        a2.release(&a2);
        counts_are(1, 0);
        cr_assert_eq(gpuipc_batch_view_release(v), 0);
        counts_become(0, 1);            /* sent at once, not waited for */
        fx_free(&f);
        gpuipc_client_free(c);
}

static void *release_in_thread(void *arg)
{
        struct ArrowArray *a = arg;

        a->release(a);
        return NULL;
}

/* A child moved out of its parent (as the specification allows) outlives
 * it, and is released on another thread, last. */
Test(bscript, moved_child_released_last_elsewhere)
{
        gpuipc_client *c = sconnect();
        struct ArrowArray a, moved;
        struct ArrowSchema s, smoved;
        gpuipc_batch_view *v;
        pthread_t t;
        struct fx f;
        char why[128] = "";

        cr_assert_eq(fx_build(&f, true, 0, 0), 0);
        register_fx(c, &f);
        v = lookup_fx(c);
        cr_assert_eq(gpuipc_batch_view_export(v, -1, &s, &a), 0);
        moved = *a.children[5];
        a.children[5]->release = NULL;
        smoved = *s.children[5];
        s.children[5]->release = NULL;
        a.release(&a);
        s.release(&s);
        cr_assert_eq(gpuipc_batch_view_release(v), 0);
        counts_are(1, 0);
        cr_assert_eq(fx_check_column(5, &smoved, &moved, why, sizeof(why)), 0, "%s", why);
        smoved.release(&smoved);
        cr_assert_eq(pthread_create(&t, NULL, release_in_thread, &moved), 0);
        pthread_join(t, NULL);
        cr_assert_null(moved.release);
        counts_are(1, 0);
        gpuipc_client_free(c);          /* sends what the callback queued */
        counts_become(0, 1);
        fx_free(&f);
}

/* An array released after its client is gone: nothing to send, nothing
 * touched that went. */
Test(bscript, array_outlives_client)
{
        gpuipc_client *c = sconnect();
        gpuipc_batch_view *v;
        struct ArrowArray a;
        char why[128] = "";
        struct ArrowSchema s;
        struct fx f;

        cr_assert_eq(fx_build(&f, true, 0, 0), 0);
        register_fx(c, &f);
        v = lookup_fx(c);
        cr_assert_eq(gpuipc_batch_view_export(v, -1, &s, &a), 0);
        gpuipc_batch_view_release(v);
        gpuipc_client_free(c);
        cr_assert_eq(fx_check(&s, &a, why, sizeof(why)), 0, "still mapped: %s", why);
        a.release(&a);
        s.release(&s);
        counts_are(1, 0);               /* the daemon drops it with the connection */
        fx_free(&f);
}

/* ---- what is refused --------------------------------------------------- */

static void refused(struct fx *f, int want, const char *msg)
{
        gpuipc_batch *b = NULL;
        int r;

        cr_assert_eq(gpuipc_batch_new(&b), 0);
        r = gpuipc_batch_add_record_batch(b, &f->s, &f->a);
        cr_assert_eq(r, want, "%d (%s), want %d", r, gpuipc_batch_errmsg(b), want);
        cr_assert(strstr(gpuipc_batch_errmsg(b), msg), "message: %s", gpuipc_batch_errmsg(b));
        gpuipc_batch_free(b);
}

Test(bscript, unsupported_and_invalid)
{
        struct ArrowSchema dict;
        struct fx f;

        cr_assert_eq(fx_build(&f, false, 0, 0), 0);
        f.cs[1].format = "+us:0,1";
        refused(&f, -ENOTSUP, "union");
        f.cs[1].format = "+r";
        refused(&f, -ENOTSUP, "run-end");
        f.cs[1].format = "vu";
        refused(&f, -ENOTSUP, "view");
        f.cs[1].format = "+vl";
        refused(&f, -ENOTSUP, "list view");
        f.cs[1].format = "q";
        refused(&f, -EINVAL, "unknown format");
        f.cs[1].format = "g";
        dict = f.cs[1];
        f.cs[1].dictionary = &dict;
        refused(&f, -ENOTSUP, "dictionary");
        f.cs[1].dictionary = NULL;
        f.ka[1].release = NULL;
        refused(&f, -EINVAL, "released");
        f.ka[1].release = fx_release_array;
        f.ca[2].n_buffers = 3;
        refused(&f, -EINVAL, "buffers");
        f.ca[2].n_buffers = 2;
        f.ca[4].buffers = (const void *[]){ NULL, f.bufs[4][1] };
        refused(&f, -EINVAL, "no validity bitmap");
        f.ca[4].buffers = f.bufs[4];
        f.ca[0].length = 2;             /* shorter than the record batch */
        refused(&f, -EINVAL, "shorter");
        fx_free(&f);
}

Test(bscript, failed_add_leaves_the_batch)
{
        gpuipc_client *c = sconnect();
        gpuipc_batch *b = NULL;
        struct fx f;
        int r;

        cr_assert_eq(fx_build(&f, true, 0, 0), 0);
        cr_assert_eq(gpuipc_batch_new(&b), 0);
        cr_assert_eq(gpuipc_batch_add_column(b, &f.cs[0], &f.ca[0], -1), 0);
        f.cs[6].format = "+r";          /* the last column fails */
        cr_assert_eq(gpuipc_batch_add_record_batch(b, &f.s, &f.a), -ENOTSUP);
        f.cs[6].format = "+l";
        /* a column of another length */
        f.ca[1].length = 3;
        cr_assert_eq(gpuipc_batch_add_column(b, &f.cs[1], &f.ca[1], -1), -EINVAL);
        f.ca[1].length = FX_ROWS;
        cr_assert_eq(gpuipc_batch_add_column(b, &f.cs[3], &f.ca[3], -1), 0);
        r = gpuipc_batch_register(c, "t/b", b, 0, NULL);
        cr_assert_eq(r, 0, "%s (%s)", gpuipc_errmsg(c), srv.last_error);
        {
                const msgpack_object *cols, *arrow;
                cr_assert_eq(proto_get_map(sent(), "arrow", &arrow), 0);
                cr_assert_eq(proto_get_array(arrow, "columns", &cols), 0);
                cr_assert_eq(cols->via.array.size, 2, "only the columns that were added");
        }
        cr_assert_eq(gpuipc_batch_register(c, "t/e", NULL, 0, NULL), -EINVAL);
        gpuipc_batch_free(b);
        cr_assert_eq(gpuipc_batch_new(&b), 0);
        cr_assert_eq(gpuipc_batch_register(c, "t/e", b, 0, NULL), -EINVAL, "an empty batch");
        gpuipc_batch_free(b);
        fx_free(&f);
        gpuipc_client_free(c);
}

/* ---- metadata ------------------------------------------------------------ */

/* Arrow's binary metadata of n pairs. */
static char *meta_bin(int n, const char *const *kv)
{
        char *m = malloc(4096), *p = m + 4;
        int32_t k = n;

        memcpy(m, &k, 4);
        for (int i = 0; i < 2 * n; i++) {
                k = (int32_t)strlen(kv[i]);
                memcpy(p, &k, 4);
                memcpy(p + 4, kv[i], (size_t)k);
                p += 4 + k;
        }
        return m;
}

Test(bscript, metadata)
{
        gpuipc_client *c = sconnect();
        gpuipc_batch_view *v;
        const gpuipc_info *info;
        struct ArrowSchema s;
        struct fx f;
        char *rbm = meta_bin(2, (const char *[]){ "origin", "spark", "part", "3" });
        char *fm = meta_bin(1, (const char *[]){ "unit", "m/s" });
        char *big = calloc(1, 2000);

        cr_assert_eq(fx_build(&f, true, 0, 0), 0);
        f.s.metadata = rbm;
        f.cs[1].metadata = fm;
        register_fx(c, &f);
        v = lookup_fx(c);
        info = gpuipc_batch_view_info(v);
        cr_assert_eq(info->n_user, 2);
        cr_assert_str_eq(info->user_keys[0], "origin");
        cr_assert_str_eq(info->user_values[1], "3");
        cr_assert_eq(gpuipc_info_batch_column(info, 1)->n_meta, 1);
        cr_assert_str_eq(gpuipc_info_batch_column(info, 1)->meta_values[0], "m/s");
        cr_assert_eq(gpuipc_batch_view_export(v, -1, &s, NULL), 0);
        cr_assert_not_null(s.metadata);
        cr_assert_eq(memcmp(s.metadata, rbm, 4 + 2 * 8 + 6 + 5 + 4 + 1), 0, "the same bytes");
        cr_assert_eq(memcmp(s.children[1]->metadata, fm, 4 + 8 + 4 + 3), 0);
        cr_assert_null(s.children[0]->metadata);
        cr_assert_eq(s.children[4]->flags, ARROW_FLAG_NULLABLE);
        s.release(&s);
        gpuipc_batch_view_release(v);
        {
                gpuipc_batch *b = NULL;
                int32_t n = 1, kl = 1, vl = 1500;
                memcpy(big, &n, 4);
                memcpy(big + 4, &kl, 4);
                big[8] = 'k';
                memcpy(big + 9, &vl, 4);
                memset(big + 13, 'x', 1500);
                f.s.metadata = big;
                cr_assert_eq(gpuipc_batch_new(&b), 0);
                cr_assert_eq(gpuipc_batch_add_record_batch(b, &f.s, &f.a), -E2BIG);
                cr_assert(strstr(gpuipc_batch_errmsg(b), "1024"), "%s", gpuipc_batch_errmsg(b));
                cr_assert_eq(gpuipc_batch_set_metadata(b, 1, (const char *[]){ "a" },
                                                       (const char *[]){ "b" }), 0);
                /* set metadata wins over the record batch's */
                cr_assert_eq(gpuipc_batch_add_record_batch(b, &f.s, &f.a), 0);
                gpuipc_batch_free(b);
        }
        free(big);
        free(rbm);
        free(fm);
        fx_free(&f);
        gpuipc_client_free(c);
}

Test(bscript, lookup_of_the_wrong_kind)
{
        gpuipc_client *c = sconnect();
        gpuipc_view *hv = NULL;
        gpuipc_list *l = NULL;
        const gpuipc_info *info;
        struct ArrowDeviceArray da;
        gpuipc_batch_view *v;
        struct fx f;

        cr_assert_eq(fx_build(&f, true, 0, 0), 0);
        register_fx(c, &f);
        cr_assert_eq(gpuipc_view_lookup(c, "t/b", 0, 0, &hv), -EMEDIUMTYPE);
        cr_assert(strstr(gpuipc_errmsg(c), "gpuipc_batch_view_lookup"), "%s", gpuipc_errmsg(c));
        counts_become(0, 1);               /* its lease went back */
        cr_assert_eq(gpuipc_name_stat(c, "t/b", &l), 0, "%s", gpuipc_errmsg(c));
        info = gpuipc_list_get(l, 0);
        cr_assert_eq(info->kind, GPUIPC_KIND_BATCH);
        cr_assert_eq(gpuipc_info_batch_parts(info), 11);
        cr_assert_eq(gpuipc_info_batch_part(info, 3)->kind, GPUIPC_KIND_HOST);
        cr_assert_eq(gpuipc_info_batch_rows(info), FX_ROWS);
        cr_assert_str_eq(gpuipc_info_batch_column(info, 2)->format, "b");
        cr_assert_eq(gpuipc_info_batch_parts(NULL), 0);
        gpuipc_list_free(l);
        v = lookup_fx(c);
        /* A host batch exports as a CPU device array too. */
        cr_assert_eq(gpuipc_batch_view_export_device(v, 0, NULL, &da), 0);
        cr_assert_eq(da.device_type, ARROW_DEVICE_CPU);
        cr_assert_eq(da.device_id, -1);
        cr_assert_null(da.sync_event);
        da.array.release(&da.array);
        cr_assert_eq(gpuipc_batch_view_export(v, FX_COLS, NULL, &da.array), -EINVAL);
        cr_assert_eq(gpuipc_batch_view_export(v, 0, NULL, NULL), -EINVAL);
        gpuipc_batch_view_release(v);
        fx_free(&f);
        gpuipc_client_free(c);
}

/* ---- real round trips: gpuipcd, a producer process and this one ---------- */

static void real_setup(void)
{
        setenv("GPUIPC_LIBCUDA", h_path("tests/cuda-double/libcuda.so.1"), 1);
        setenv("GPUIPC_MAP_CACHE_ENTRIES", "0", 1);
        unsetenv("CUDA_VISIBLE_DEVICES");
        h_setup();
}

TestSuite(batch, .init = real_setup, .fini = h_teardown, .timeout = 30);

static gpuipc_client *dconnect(void)
{
        gpuipc_client *c = NULL;
        int r = gpuipc_client_connect(h_d.sock, &c);

        cr_assert_eq(r, 0, "connect: %s", gpuipc_errmsg(NULL));
        return c;
}

/* Starts helper-batch with args and reads its "id N". */
static uint64_t produce(struct h_child *ch, const char *const *args)
{
        char line[64];
        unsigned long long id = 0;

        h_spawn(ch, "helper-batch", args, true);
        if (h_read_line(ch, line, sizeof(line), 15000) < 0 || sscanf(line, "id %llu", &id) != 1)
                cr_assert_fail("helper-batch %s: no id line (exit %d)", args[0],
                               h_wait(ch, 5000));
        return id;
}

static uint32_t leases_of(gpuipc_client *c, const char *name)
{
        gpuipc_list *l = NULL;
        uint32_t n;
        int r = gpuipc_name_stat(c, name, &l);

        cr_assert_eq(r, 0, "stat: %s", gpuipc_errmsg(c));
        n = gpuipc_list_get(l, 0)->leases;
        gpuipc_list_free(l);
        return n;
}

static uint64_t daemon_errors(gpuipc_client *c)
{
        gpuipc_stats *s = NULL;
        uint64_t n;

        cr_assert_eq(gpuipc_stats_fetch(c, &s), 0);
        n = s->errors;
        gpuipc_stats_free(s);
        return n;
}

/* Checks that every buffer of v's export lies inside v's parts: the
 * memory the lookup mapped, not a copy. */
static void zero_copy(gpuipc_batch_view *v, const struct ArrowArray *a)
{
        const gpuipc_info *info = gpuipc_batch_view_info(v);

        for (size_t n = 0; n < gpuipc_info_batch_nodes(info); n++) {
                const gpuipc_batch_node *node = gpuipc_info_batch_node(info, n);
                for (unsigned k = 0; k < node->n_buffers; k++) {
                        void *data;
                        uint64_t size;
                        cr_assert_eq(gpuipc_batch_view_node_buffer(v, n, k, &data, &size, NULL),
                                     0);
                        cr_assert_eq(data != NULL, node->buffers[k] >= 0);
                        cr_assert_eq(size, node->buffers[k] >= 0
                                     ? gpuipc_info_batch_part(info, node->buffers[k])->size : 0);
                }
        }
        /* the columns' buffers are those pointers */
        for (size_t col = 0; col < gpuipc_batch_view_columns(v); col++)
                for (int k = 0; k < a->children[col]->n_buffers; k++) {
                        void *data;
                        cr_assert_eq(gpuipc_batch_view_buffer(v, col, k, &data, NULL, NULL), 0);
                        if (data)
                                cr_assert_eq(a->children[col]->buffers[k], data, "column %zu "
                                             "buffer %d", col, k);
                }
}

static void host_round_trip(const char *const *args)
{
        struct h_child ch;
        gpuipc_client *c = dconnect();
        gpuipc_batch_view *v = NULL;
        struct ArrowSchema s;
        struct ArrowArray a;
        char why[128] = "", line[32];
        uint64_t errors;
        int r;

        produce(&ch, args);
        r = gpuipc_batch_view_lookup(c, "t/b", 5000, 0, &v);
        cr_assert_eq(r, 0, "lookup: %s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_batch_view_rows(v), FX_ROWS);
        cr_assert_eq(gpuipc_batch_view_export(v, -1, &s, &a), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(fx_check(&s, &a, why, sizeof(why)), 0, "%s", why);
        zero_copy(v, &a);
        cr_assert_eq(leases_of(c, "t/b"), 1);
        errors = daemon_errors(c);
        gpuipc_batch_view_release(v);
        cr_assert_eq(leases_of(c, "t/b"), 1, "the array holds the lease");
        s.release(&s);
        a.release(&a);
        cr_assert_eq(leases_of(c, "t/b"), 0, "the release went with that call");
        cr_assert_eq(leases_of(c, "t/b"), 0);
        cr_assert_eq(daemon_errors(c), errors, "no release was refused: each went once");
        cr_assert_eq(h_read_line(&ch, line, sizeof(line), 10000), 8, "producer: %s", line);
        cr_assert_str_eq(line, "released");
        cr_assert_eq(h_wait(&ch, 10000), 0);
        gpuipc_client_free(c);
}

Test(batch, host_in_place_between_processes)
{
        host_round_trip((const char *[]){ "host", "t/b", NULL });
}

Test(batch, host_copied_and_sliced)
{
        host_round_trip((const char *[]){ "host", "t/b", "--copy", "--slice", "2", "7", NULL });
}

/* Two views, four exports, released in a scrambled order: each lease goes
 * back once, and only when its last holder goes. */
Test(batch, leases_in_any_order)
{
        struct h_child ch;
        gpuipc_client *c = dconnect();
        gpuipc_batch_view *v1 = NULL, *v2 = NULL;
        struct ArrowArray a1, a2, c2, moved;
        uint64_t errors;

        produce(&ch, (const char *[]){ "host", "t/b", NULL });
        cr_assert_eq(gpuipc_batch_view_lookup(c, "t/b", 0, 0, &v1), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_batch_view_lookup(c, "t/b", 0, 0, &v2), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(leases_of(c, "t/b"), 2);
        errors = daemon_errors(c);
        cr_assert_eq(gpuipc_batch_view_export(v1, -1, NULL, &a1), 0);
        cr_assert_eq(gpuipc_batch_view_export(v2, -1, NULL, &a2), 0);
        cr_assert_eq(gpuipc_batch_view_export(v2, 5, NULL, &c2), 0);
        moved = *a2.children[3];
        a2.children[3]->release = NULL;
        cr_assert_eq(gpuipc_batch_view_release(v2), 0);
        a2.release(&a2);
        cr_assert_eq(leases_of(c, "t/b"), 2);
        a1.release(&a1);
        cr_assert_eq(leases_of(c, "t/b"), 2, "v1 is still held by the caller");
        cr_assert_eq(gpuipc_batch_view_release(v1), 0);
        cr_assert_eq(leases_of(c, "t/b"), 1);
        c2.release(&c2);
        cr_assert_eq(leases_of(c, "t/b"), 1, "a moved child still maps v2");
        moved.release(&moved);
        cr_assert_eq(leases_of(c, "t/b"), 0);
        cr_assert_eq(daemon_errors(c), errors);
        h_wait(&ch, 10000);
        gpuipc_client_free(c);
}

Test(batch, records_and_kinds)
{
        struct h_child ch;
        gpuipc_client *c = dconnect();
        gpuipc_list *l = NULL;
        gpuipc_view *hv = NULL;
        const gpuipc_info *info;
        gpuipc_hostbuf *hb = NULL;
        gpuipc_batch_view *v = NULL;

        produce(&ch, (const char *[]){ "host", "t/b", NULL });
        cr_assert_eq(gpuipc_list_fetch(c, "t", 0, &l), 0);
        info = gpuipc_list_get(l, 0);
        cr_assert_eq(info->kind, GPUIPC_KIND_BATCH);
        cr_assert_eq(gpuipc_info_batch_parts(info), 11, "the count, from list");
        cr_assert_null(gpuipc_info_batch_part(info, 0), "no parts in a list record");
        cr_assert_eq(gpuipc_info_batch_columns(info), 0);
        gpuipc_list_free(l);
        cr_assert_eq(gpuipc_name_stat(c, "t/b", &l), 0);
        info = gpuipc_list_get(l, 0);
        cr_assert_eq(gpuipc_info_batch_columns(info), FX_COLS);
        cr_assert_str_eq(gpuipc_info_batch_column(info, 3)->name, "name");
        cr_assert_eq(gpuipc_info_batch_part(info, 0)->kind, GPUIPC_KIND_HOST);
        cr_assert_str_eq(info->copied, "");
        gpuipc_list_free(l);
        cr_assert_eq(gpuipc_view_lookup(c, "t/b", 0, 0, &hv), -EMEDIUMTYPE);
        cr_assert_eq(gpuipc_hostbuf_new(4096, &hb), 0);
        cr_assert_eq(gpuipc_hostbuf_register(c, "t/h", hb, NULL, 0, NULL), 0);
        cr_assert_eq(gpuipc_batch_view_lookup(c, "t/h", 0, 0, &v), -EMEDIUMTYPE);
        cr_assert(strstr(gpuipc_errmsg(c), "not a batch"), "%s", gpuipc_errmsg(c));
        cr_assert_eq(leases_of(c, "t/h"), 0, "the lease it took went back");
        cr_assert_eq(leases_of(c, "t/b"), 0);
        gpuipc_hostbuf_free(hb);
        h_wait(&ch, 10000);
        gpuipc_client_free(c);
}

/* Every buffer of v lies inside the mapping gpuipc_batch_view_part_mapping()
 * gives for its part; the mapping bases of parts 0 .. n_parts-1 into
 * bases. */
static void mappings_hold_buffers(gpuipc_batch_view *v, void **bases)
{
        const gpuipc_info *info = gpuipc_batch_view_info(v);

        for (size_t n = 0; n < gpuipc_info_batch_nodes(info); n++) {
                const gpuipc_batch_node *node = gpuipc_info_batch_node(info, n);
                for (unsigned k = 0; k < node->n_buffers; k++) {
                        uint8_t *data, *base;
                        uint64_t size, msize;
                        if (node->buffers[k] < 0)
                                continue;
                        cr_assert_eq(gpuipc_batch_view_node_buffer(v, n, k, (void **)&data,
                                                                   &size, NULL), 0);
                        cr_assert_eq(gpuipc_batch_view_part_mapping(v, node->buffers[k],
                                                                    (void **)&base, &msize), 0);
                        cr_assert(base <= data && size <= msize &&
                                  (uint64_t)(data - base) <= msize - size,
                                  "node %zu buffer %u (%p, %llu) outside its mapping (%p, %llu)",
                                  n, k, (void *)data, (unsigned long long)size, (void *)base,
                                  (unsigned long long)msize);
                        bases[node->buffers[k]] = base;
                }
        }
        cr_assert_eq(gpuipc_batch_view_part_mapping(v, gpuipc_info_batch_parts(info), NULL,
                                                    NULL), -EINVAL);
        cr_assert_eq(gpuipc_batch_view_part_mapping(NULL, 0, NULL, NULL), -EINVAL);
}

/* Columns from bare pointers (gpuipc_batch_add_buffer): copied into one
 * memfd, so one mapping for all; a format of other buffers is refused and
 * leaves the batch as it was. */
Test(batch, columns_from_buffers)
{
        static const int32_t ints[5] = { 1, -2, 3, 0, 5 };
        static const double dbl[5] = { 0.5, 1.5, 2.5, 3.5, 4.5 };
        static const uint8_t valid = 0x17, bits = 0x0a;     /* row 3 null; rows 1, 3 true */
        gpuipc_client *c = dconnect();
        gpuipc_batch *b = NULL;
        gpuipc_batch_view *v = NULL;
        struct ArrowSchema s;
        struct ArrowArray a;
        void *bases[4] = { NULL };
        int r;

        cr_assert_eq(gpuipc_batch_new(&b), 0);
        cr_assert_eq(gpuipc_batch_add_buffer(b, "i", "i", 5, 1, &valid, ints, -1), 0, "%s",
                     gpuipc_batch_errmsg(b));
        cr_assert_eq(gpuipc_batch_add_buffer(b, "d", "g", 5, 0, NULL, dbl, -1), 0, "%s",
                     gpuipc_batch_errmsg(b));
        r = gpuipc_batch_add_buffer(b, "s", "u", 5, 0, NULL, ints, -1);
        cr_assert_eq(r, -EINVAL, "utf8 has an offsets buffer too: %d", r);
        cr_assert(strstr(gpuipc_batch_errmsg(b), "buffers"), "%s", gpuipc_batch_errmsg(b));
        r = gpuipc_batch_add_buffer(b, "n", "i", 5, 2, NULL, ints, -1);
        cr_assert_eq(r, -EINVAL, "nulls without a validity bitmap: %d", r);
        cr_assert_eq(gpuipc_batch_add_buffer(b, "b", "b", 5, 0, NULL, &bits, -1), 0, "%s",
                     gpuipc_batch_errmsg(b));
        cr_assert_eq(gpuipc_batch_add_buffer(b, "x", "i", 4, 0, NULL, ints, -1), -EINVAL,
                     "a column of another row count");
        cr_assert_eq(gpuipc_batch_add_buffer(b, "x", NULL, 5, 0, NULL, ints, -1), -EINVAL);
        {
                /* many at once: all, or on an error none */
                const char *names[2] = { "i2", "d2" }, *fmts[2] = { "i", "g" };
                const void *data[2] = { ints, dbl };
                int64_t lens[2] = { 5, 5 }, short_lens[2] = { 5, 4 };
                const char *bad_fmts[2] = { "i", "u" };

                r = gpuipc_batch_add_buffers(b, 2, names, fmts, short_lens, data, -1);
                cr_assert_eq(r, -EINVAL, "a column of another row count: %d", r);
                cr_assert(strstr(gpuipc_batch_errmsg(b), "d2"), "%s", gpuipc_batch_errmsg(b));
                r = gpuipc_batch_add_buffers(b, 2, names, bad_fmts, lens, data, -1);
                cr_assert_eq(r, -EINVAL, "utf8 in a run: %d", r);
                cr_assert_eq(gpuipc_batch_add_buffers(b, 2, names, fmts, lens, NULL, -1),
                             -EINVAL);
                cr_assert_eq(gpuipc_batch_add_buffers(b, 0, NULL, NULL, NULL, NULL, -1), 0);
                cr_assert_eq(gpuipc_batch_add_buffers(b, 2, names, fmts, lens, data, -1), 0,
                             "%s", gpuipc_batch_errmsg(b));
        }
        cr_assert_eq(gpuipc_batch_register(c, "t/f", b, 0, NULL), 0, "%s", gpuipc_errmsg(c));
        gpuipc_batch_free(b);
        cr_assert_eq(gpuipc_batch_view_lookup(c, "t/f", 0, 0, &v), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_batch_view_columns(v), 5, "the refused columns are not in it");
        cr_assert_str_eq(gpuipc_batch_view_column_name(v, 3), "i2");
        cr_assert_eq(gpuipc_batch_view_export(v, -1, &s, &a), 0, "%s", gpuipc_errmsg(c));
        cr_assert_str_eq(s.children[0]->format, "i");
        cr_assert_eq(s.children[0]->flags & ARROW_FLAG_NULLABLE, ARROW_FLAG_NULLABLE);
        cr_assert_eq(s.children[1]->flags & ARROW_FLAG_NULLABLE, 0);
        cr_assert_eq(a.children[0]->null_count, 1);
        cr_assert_eq(memcmp(a.children[0]->buffers[1], ints, sizeof(ints)), 0);
        cr_assert_eq(*(const uint8_t *)a.children[0]->buffers[0] & 0x1f, valid);
        cr_assert_eq(memcmp(a.children[1]->buffers[1], dbl, sizeof(dbl)), 0);
        cr_assert_eq(*(const uint8_t *)a.children[2]->buffers[1] & 0x1f, bits);
        values_agree(v, &s, &a);        /* "b" is bits: no width */
        cr_assert_eq(memcmp(a.children[3]->buffers[1], ints, sizeof(ints)), 0);
        cr_assert_eq(memcmp(a.children[4]->buffers[1], dbl, sizeof(dbl)), 0);
        cr_assert_eq(a.children[3]->null_count, 0);
        /* a validity bitmap and three values buffers (i2 and d2 share theirs) */
        cr_assert_eq(gpuipc_info_batch_parts(gpuipc_batch_view_info(v)), 4);
        mappings_hold_buffers(v, bases);
        cr_assert(bases[0] && bases[0] == bases[1] && bases[1] == bases[2] &&
                  bases[2] == bases[3], "copied into one memfd: one mapping");
        s.release(&s);
        a.release(&a);
        gpuipc_batch_view_release(v);
        gpuipc_client_free(c);
}

/* Calls of a driver entry point in this process, counted by the double. */
static long dcount(const char *fn)
{
        void *dl = dlopen(h_path("tests/cuda-double/libcuda.so.1"), RTLD_NOW | RTLD_LOCAL);
        long (*count)(const char *), n;

        cr_assert_not_null(dl, "dlopen: %s", dlerror());
        count = (long (*)(const char *))dlsym(dl, "gpuipc_cuda_double_count");
        cr_assert_not_null(count);
        n = count(fn);
        dlclose(dl);
        return n;
}

/* Device columns between processes: VMM parts sharing one export, a
 * cuda-ipc part, and the producer's event. */
static void device_round_trip(bool plain_event)
{
        const char *args[] = { "device", "t/d", plain_event ? "--plain-event" : NULL, NULL };
        struct h_child ch;
        gpuipc_client *c = dconnect();
        gpuipc_batch_view *v = NULL;
        const gpuipc_info *info;
        struct ArrowDeviceArray da;
        struct ArrowSchema s;
        struct ArrowArray ha;
        void *bases[4] = { NULL };
        char tmp[32];

        produce(&ch, args);
        cr_assert_eq(gpuipc_batch_view_lookup(c, "t/d", 0, 0, &v), 0, "%s", gpuipc_errmsg(c));
        info = gpuipc_batch_view_info(v);
        cr_assert_eq(gpuipc_info_batch_parts(info), 4);
        cr_assert_eq(gpuipc_info_batch_part(info, 0)->kind, GPUIPC_KIND_CUDA_VMM);
        cr_assert_eq(gpuipc_info_batch_part(info, 2)->kind, GPUIPC_KIND_CUDA_VMM);
        cr_assert_eq(gpuipc_info_batch_part(info, 3)->kind, GPUIPC_KIND_CUDA_IPC);
        cr_assert_eq(info->flags & GPUIPC_INFO_EPHEMERAL, GPUIPC_INFO_EPHEMERAL,
                     "a cuda-ipc part makes the batch ephemeral");
        cr_assert_eq(info->has_event, !plain_event);
        /* three parts of one VMM allocation: imported and mapped once */
        mappings_hold_buffers(v, bases);
        cr_assert(bases[0] == bases[1] && bases[1] == bases[2], "one VMM allocation");
        cr_assert_neq(bases[3], bases[0]);
        cr_assert_eq(dcount("cuMemImportFromShareableHandle"), 1);
        cr_assert_eq(dcount("cuMemMap"), 1);
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 1);
        cr_assert_eq(dcount("cuIpcOpenEventHandle"), !plain_event);
        cr_assert_eq(gpuipc_batch_view_export(v, -1, NULL, &ha), -EINVAL,
                     "device parts need an ArrowDeviceArray");
        cr_assert_eq(gpuipc_batch_view_export_device(v, -1, &s, &da), 0, "%s",
                     gpuipc_errmsg(c));
        cr_assert_eq(da.device_type, ARROW_DEVICE_CUDA);
        cr_assert_eq(da.device_id, 0);
        cr_assert_eq(da.sync_event != NULL, !plain_event);
        cr_assert_eq(da.array.n_children, 3);
        cr_assert_str_eq(s.children[1]->format, "u");
        for (int p = 0; p < DEV_ROWS_T; p++) {
                const struct ArrowArray *sv = da.array.children[1];
                const int32_t *o = sv->buffers[1];
                fx_name(p, tmp, sizeof(tmp));
                cr_assert_eq(((const int32_t *)da.array.children[0]->buffers[1])[p], 3 * p - 7);
                cr_assert_eq(((const float *)da.array.children[2]->buffers[1])[p], (float)p / 4);
                cr_assert_eq(memcmp((const char *)sv->buffers[2] + o[p], tmp, strlen(tmp)), 0);
        }
        s.release(&s);
        gpuipc_batch_view_release(v);
        cr_assert_eq(leases_of(c, "t/d"), 1);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 0, "mapped while the array lives");
        da.array.release(&da.array);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 1, "closed in the release callback");
        cr_assert_eq(dcount("cuMemUnmap"), 1);
        cr_assert_eq(gpuipc_client_ping(c), 0);
        cr_assert_eq(leases_of(c, "t/d"), 0);
        cr_assert_eq(h_wait(&ch, 10000), 0);
        gpuipc_client_free(c);
}

Test(batch, device_with_interprocess_event)
{
        device_round_trip(false);
}

Test(batch, device_with_plain_event)
{
        device_round_trip(true);
}

Test(batch, not_device_memory)
{
        gpuipc_client *c = dconnect();
        gpuipc_batch *b = NULL;
        struct fx f;
        int r;

        cr_assert_eq(fx_build(&f, false, 0, 0), 0);
        cr_assert_eq(gpuipc_batch_new(&b), 0);
        cr_assert_eq(gpuipc_batch_add_column(b, &f.cs[0], &f.ca[0], 0), 0,
                     "a fixed-width column reads nothing at add time");
        r = gpuipc_batch_register(c, "t/x", b, 0, NULL);
        cr_assert_eq(r, -EINVAL, "%d %s", r, gpuipc_errmsg(c));
        cr_assert(strstr(gpuipc_errmsg(c), "not device memory"), "%s", gpuipc_errmsg(c));
        /* utf8 reads its last offset from the device: refused at once */
        r = gpuipc_batch_add_column(b, &f.cs[3], &f.ca[3], 0);
        cr_assert_eq(r, -EINVAL, "%d %s", r, gpuipc_batch_errmsg(b));
        cr_assert(strstr(gpuipc_batch_errmsg(b), "device 0"), "%s", gpuipc_batch_errmsg(b));
        gpuipc_batch_free(b);
        fx_free(&f);
        gpuipc_client_free(c);
}

/* Two parts in one allocation of an exportable pool (one export, one
 * import), and a part of the device's default pool, which cannot be
 * shared: refused, then copied with GPUIPC_REGISTER_COPY. */
Test(batch, device_pool_and_copy)
{
        const char *args[] = { "pool", "t/p", NULL };
        struct h_child ch;
        gpuipc_client *c = dconnect();
        gpuipc_batch_view *v = NULL;
        const gpuipc_info *info;
        struct ArrowDeviceArray da;
        char line[512];

        h_spawn(&ch, "helper-batch", args, true);
        cr_assert_gt(h_read_line(&ch, line, sizeof(line), 15000), 0, "exit %d", h_wait(&ch, 5000));
        cr_assert_eq(strncmp(line, "refused ", 8), 0, "%s", line);
        cr_assert(strstr(line, "pool"), "the refusal names the pool: %s", line);
        cr_assert_gt(h_read_line(&ch, line, sizeof(line), 15000), 0);
        cr_assert_eq(strncmp(line, "id ", 3), 0, "%s", line);
        cr_assert_eq(gpuipc_batch_view_lookup(c, "t/p", 0, 0, &v), 0, "%s", gpuipc_errmsg(c));
        info = gpuipc_batch_view_info(v);
        cr_assert_eq(gpuipc_info_batch_parts(info), 3);
        cr_assert_eq(gpuipc_info_batch_part(info, 0)->kind, GPUIPC_KIND_CUDA_POOL);
        cr_assert_eq(gpuipc_info_batch_part(info, 1)->kind, GPUIPC_KIND_CUDA_POOL);
        cr_assert_eq(gpuipc_info_batch_part(info, 2)->kind, GPUIPC_KIND_CUDA_VMM);
        cr_assert(strstr(info->copied, "zero-copy impossible"), "copied: %s", info->copied);
        cr_assert_eq(dcount("cuMemPoolImportFromShareableHandle"), 1);
        cr_assert_eq(dcount("cuMemPoolImportPointer"), 1, "one allocation, imported once");
        cr_assert_eq(gpuipc_batch_view_export_device(v, -1, NULL, &da), 0, "%s",
                     gpuipc_errmsg(c));
        cr_assert_eq(da.device_type, ARROW_DEVICE_CUDA);
        for (int p = 0; p < DEV_ROWS_T; p++) {
                const struct ArrowArray *pa = da.array.children[0], *qa = da.array.children[1];
                cr_assert_eq(fx_getbit(pa->buffers[0], p), fx_valid(p));
                cr_assert_eq(((const int64_t *)pa->buffers[1])[p], p);
                cr_assert_eq(((const float *)qa->buffers[1])[p], (float)p / 4,
                             "the copy holds the data");
        }
        cr_assert_eq(da.array.children[0]->null_count, (DEV_ROWS_T + 4) / 5);
        gpuipc_batch_view_release(v);
        da.array.release(&da.array);
        cr_assert_eq(dcount("cuMemFree_v2"), 1, "the pool import freed in the callback");
        cr_assert_eq(gpuipc_client_ping(c), 0);
        cr_assert_eq(leases_of(c, "t/p"), 0);
        cr_assert_eq(h_wait(&ch, 10000), 0);
        gpuipc_client_free(c);
}
