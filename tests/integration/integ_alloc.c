/* integ_alloc.c: the memory users' allocators really hand out, between
 * real processes, through a real gpuipcd and the CUDA driver double:
 * VMM ranges over several chunks (PyTorch's expandable segments),
 * stream-ordered pools with and without an export handle type, register
 * with copy, gpuipc_cuda_explain(), and legacy IPC across PID namespaces.  The
 * producers are helper-alloc. */
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"
#include "cuda/driver.h"

#define CHUNK (2ull << 20)

static const char *double_path(void)
{
        return h_path("tests/cuda-double/libcuda.so.1");
}

static void alloc_setup(void)
{
        setenv("GPUIPC_LIBCUDA", double_path(), 1);
        unsetenv("CUDA_VISIBLE_DEVICES");
        h_setup();
}

TestSuite(alloc, .init = alloc_setup, .fini = h_teardown, .timeout = 30);

static long dcount(const char *fn)
{
        void *dl = dlopen(double_path(), RTLD_NOW | RTLD_LOCAL);
        long (*count)(const char *);
        long n;

        cr_assert_not_null(dl, "dlopen %s: %s", double_path(), dlerror());
        count = (long (*)(const char *))dlsym(dl, "gpuipc_cuda_double_count");
        cr_assert_not_null(count);
        n = count(fn);
        dlclose(dl);
        return n;
}

static gpuipc_client *connect_client(void)
{
        gpuipc_client *c = NULL;
        int r = gpuipc_client_connect(h_d.sock, &c);
        cr_assert_eq(r, 0, "gpuipc_client_connect: %s", gpuipc_strerror(r));
        return c;
}

/* Bytes at data are h_pattern(from + j, seed). */
static void check_bytes(const void *data, size_t n, uint64_t from, uint32_t seed)
{
        const uint8_t *p = data;
        for (size_t j = 0; j < n; j++)
                if (p[j] != h_pattern(from + j, seed))
                        cr_assert_fail("byte %zu is 0x%02x, want 0x%02x", j, p[j],
                                       h_pattern(from + j, seed));
}

static void spawn(struct h_child *ch, const char *mode, const char *name, const char *seed)
{
        const char *args[] = { mode, name, seed, NULL };
        h_spawn(ch, "helper-alloc", args, true);
}

/* The next line of ch, which must start with want. */
static void expect_line(struct h_child *ch, const char *want, char *line, size_t len)
{
        int n = h_read_line(ch, line, len, 15000);
        if (n < 0)
                cr_assert_fail("helper-alloc: no \"%s\" line (exit %d)", want, h_wait(ch, 5000));
        cr_assert_eq(strncmp(line, want, strlen(want)), 0, "got \"%s\", want \"%s...\"", line,
                     want);
}

static gpuipc_view *lookup(gpuipc_client *c, const char *name)
{
        gpuipc_view *v = NULL;
        int r = gpuipc_view_lookup(c, name, 5000, 0, &v);
        cr_assert_eq(r, 0, "lookup %s: %s", name, gpuipc_errmsg(c));
        return v;
}

static void end_child(struct h_child *ch)
{
        close(ch->in);
        ch->in = -1;
        cr_assert_eq(h_wait(ch, 10000), 0);
}

Test(alloc, vmm_range_over_three_chunks)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v, *vb;
        const gpuipc_info *in;
        char line[512];

        spawn(&prod, "chunks", "es/t", "5");
        expect_line(&prod, "ready", line, sizeof(line));
        c = connect_client();
        v = lookup(c, "es/t");
        in = gpuipc_view_info(v);
        cr_assert_eq(in->kind, GPUIPC_KIND_CUDA_VMM);
        cr_assert_eq(in->n_chunks, 3);
        cr_assert_eq(in->alloc_size, 3 * CHUNK);
        cr_assert_eq(in->offset, CHUNK / 2);
        cr_assert_eq(in->size, 2 * CHUNK);
        /* Contiguous across both chunk boundaries. */
        check_bytes(gpuipc_view_data(v), 2 * CHUNK, CHUNK / 2, 5);
        cr_assert_eq(dcount("cuMemImportFromShareableHandle"), 3);
        /* The second range shares the imports of its two chunks. */
        vb = lookup(c, "es/t-b");
        in = gpuipc_view_info(vb);
        cr_assert_eq(in->n_chunks, 2);
        cr_assert_eq(in->offset, CHUNK / 2);
        check_bytes(gpuipc_view_data(vb), 3 * CHUNK / 2, 3 * CHUNK / 2, 5);
        cr_assert_eq(dcount("cuMemImportFromShareableHandle"), 3);
        cr_assert_eq(dcount("cuMemMap"), 5);
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(gpuipc_view_release(vb), 0);
        /* Both ranges stay mapped in the cache until trimmed. */
        cr_assert_eq(dcount("cuMemRelease"), 0);
        cr_assert_eq(gpuipc_cache_trim(c), 2);
        cr_assert_eq(dcount("cuMemRelease"), 3);
        /* Durable: the chunks outlive the producer. */
        end_child(&prod);
        v = lookup(c, "es/t");
        check_bytes(gpuipc_view_data(v), 2 * CHUNK, CHUNK / 2, 5);
        cr_assert_eq(gpuipc_view_release(v), 0);
        gpuipc_client_free(c);
}

Test(alloc, vmm_chunk_without_export_type_copies)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v;
        gpuipc_stats *s;
        const gpuipc_info *in;
        char line[1024];

        spawn(&prod, "noexport", "ne/t", "9");
        expect_line(&prod, "refused: ", line, sizeof(line));
        cr_assert_not_null(strstr(line, "without an exportable handle type"), "%s", line);
        cr_assert_not_null(strstr(line, "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR"), "%s", line);
        cr_assert_not_null(strstr(line, "GPUIPC_REGISTER_COPY"), "%s", line);
        expect_line(&prod, "ready", line, sizeof(line));
        c = connect_client();
        v = lookup(c, "ne/t");
        in = gpuipc_view_info(v);
        cr_assert_eq(in->kind, GPUIPC_KIND_CUDA_VMM);
        cr_assert_not_null(strstr(in->copied, "exportable handle type"), "copied: %s",
                           in->copied);
        check_bytes(gpuipc_view_data(v), CHUNK, 0, 9);
        cr_assert_eq(gpuipc_stats_fetch(c, &s), 0);
        cr_assert_eq(s->copies, 1);
        cr_assert_eq(s->copied_bytes, CHUNK);
        gpuipc_stats_free(s);
        cr_assert_eq(gpuipc_view_release(v), 0);
        end_child(&prod);
        gpuipc_client_free(c);
}

Test(alloc, exportable_pool_cross_process)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v, *vb;
        const gpuipc_info *in;
        char line[512];

        spawn(&prod, "pool", "pl/t", "3");
        expect_line(&prod, "ready", line, sizeof(line));
        c = connect_client();
        v = lookup(c, "pl/t");
        in = gpuipc_view_info(v);
        cr_assert_eq(in->kind, GPUIPC_KIND_CUDA_POOL);
        cr_assert_eq(in->alloc_size, 1u << 20);
        cr_assert(in->flags & GPUIPC_INFO_EPHEMERAL, "pool memory is the producer's");
        check_bytes(gpuipc_view_data(v), 1u << 20, 0, 3);
        vb = lookup(c, "pl/t-b");
        in = gpuipc_view_info(vb);
        cr_assert_eq(in->offset, 100);
        cr_assert_eq(in->alloc_size, 3000);
        check_bytes(gpuipc_view_data(vb), 2900, 100, 4);
        /* One pool import for both pointers. */
        cr_assert_eq(dcount("cuMemPoolImportFromShareableHandle"), 1);
        cr_assert_eq(dcount("cuMemPoolImportPointer"), 2);
        /* A second view shares the import. */
        {
                gpuipc_view *v2 = lookup(c, "pl/t");
                cr_assert_eq(gpuipc_view_data(v2), gpuipc_view_data(v));
                cr_assert_eq(dcount("cuMemPoolImportPointer"), 2);
                cr_assert_eq(gpuipc_view_release(v2), 0);
        }
        cr_assert_eq(dcount("cuMemFree_v2"), 0);
        /* Free order: our imports are freed before the releases go out,
         * and the producer frees only after both released events. */
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(dcount("cuMemFree_v2"), 1);
        cr_assert_eq(gpuipc_view_release(vb), 0);
        cr_assert_eq(dcount("cuMemFree_v2"), 2);
        expect_line(&prod, "released", line, sizeof(line));
        expect_line(&prod, "freed", line, sizeof(line));
        end_child(&prod);
        gpuipc_client_free(c);
}

Test(alloc, default_pool_refused_then_copied)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v;
        const gpuipc_info *in;
        char line[1024];

        spawn(&prod, "defpool", "dp/t", "11");
        expect_line(&prod, "refused: ", line, sizeof(line));
        cr_assert_not_null(strstr(line, "default pool"), "%s", line);
        cr_assert_not_null(strstr(line, "cudaMallocAsync"), "%s", line);
        cr_assert_not_null(strstr(line, "GPUIPC_REGISTER_COPY"), "%s", line);
        expect_line(&prod, "ready", line, sizeof(line));
        c = connect_client();
        v = lookup(c, "dp/t");
        in = gpuipc_view_info(v);
        cr_assert_eq(in->kind, GPUIPC_KIND_CUDA_VMM);
        cr_assert_not_null(strstr(in->copied, "stream-ordered pool"), "copied: %s", in->copied);
        cr_assert_eq(in->flags & GPUIPC_INFO_EPHEMERAL, 0, "a copy is durable");
        /* The producer overwrote and freed its memory: the copy is intact. */
        check_bytes(gpuipc_view_data(v), 1u << 20, 0, 11);
        cr_assert_eq(gpuipc_view_release(v), 0);
        end_child(&prod);
        gpuipc_client_free(c);
}

Test(alloc, explain_names_each_path)
{
        static const char *const want[][2] = {
                { "cuda-ipc", "legacy IPC handle" },
                { "cuda-vmm", "3 chunks" },
                { "cuda-pool", "exportable stream-ordered pool" },
                { "none", "GPUIPC_REGISTER_COPY" },
                { "copy", "cuda-vmm memory held by gpuipcd" },
        };
        const char *args[] = { "explain", NULL };
        struct h_child ch;
        char line[1024];

        h_spawn(&ch, "helper-alloc", args, true);
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
                expect_line(&ch, want[i][0], line, sizeof(line));
                cr_assert_not_null(strstr(line, want[i][1]), "line %zu: %s", i, line);
        }
        cr_assert_eq(h_wait(&ch, 10000), 0);
}

/* A consumer in PID and IPC namespaces of its own, with its own /proc, as
 * in another container (on an H200, cuInit fails in a new PID namespace
 * that still sees the old /proc). */
static void lookup_in_new_pidns(const char *name, char *line, size_t len)
{
        const char *args[] = { "--pid", "--ipc", "--fork", "--mount-proc",
                               h_path("tests/helper-alloc"), "lookup", name, NULL };
        struct h_child ch;

        h_spawn_path(&ch, "/usr/bin/unshare", args, true);
        if (h_read_line(&ch, line, len, 15000) < 0)
                cr_assert_fail("unshare helper-alloc lookup %s: no line (exit %d)", name,
                               h_wait(&ch, 5000));
        h_wait(&ch, 10000);
}

static bool can_unshare_pid(void)
{
        return geteuid() == 0 && access("/usr/bin/unshare", X_OK) == 0 &&
               system("/usr/bin/unshare --pid --ipc --fork --mount-proc true 2>/dev/null") == 0;
}

Test(alloc, pid_namespaces)
{
        const char *ipc[] = { "ipc", "ns/ipc", "0", "1", "1", "0", NULL };
        const char *vmm[] = { "vmm", "ns/vmm", "0", "65536", "0", NULL };
        struct h_child prod, vp;
        char line[1024];

        if (!can_unshare_pid()) {
                cr_log_warn("skipped: needs root and unshare --pid (CI runs as root)");
                cr_skip_test();
        }
        h_spawn(&prod, "helper-cuda-producer", ipc, true);
        cr_assert_geq(h_read_line(&prod, line, sizeof(line), 15000), 0);
        h_spawn(&vp, "helper-cuda-producer", vmm, true);
        cr_assert_geq(h_read_line(&vp, line, sizeof(line), 15000), 0);
        cr_assert_eq(h_wait(&vp, 10000), 0);
        /* cuda-vmm travels as fds: fine across namespaces. */
        lookup_in_new_pidns("ns/vmm", line, sizeof(line));
        cr_assert_str_eq(line, "ok cuda-vmm");
        /* cuda-ipc is refused by the daemon, which says why, before the
         * driver would answer CUDA_ERROR_INVALID_CONTEXT. */
        lookup_in_new_pidns("ns/ipc", line, sizeof(line));
        cr_assert_eq(strncmp(line, "err -95 ", 8), 0, "%s", line);
        cr_assert_not_null(strstr(line, "PID namespace"), "%s", line);
        cr_assert_not_null(strstr(line, "GPUIPC_REGISTER_COPY"), "%s", line);
        cr_assert_not_null(strstr(line, "adopt"), "%s", line);
        end_child(&prod);
}

/* ---- the mapping cache --------------------------------------------------- */

static void send_line(struct h_child *ch, const char *s)
{
        cr_assert_eq(write(ch->in, s, strlen(s)), (ssize_t)strlen(s));
}

/* Sends cmd (an unregister) to a cacheipc or cachebatch producer; c's
 * next call reads the uncache events and closes, which makes `closes`
 * closes in all, its trim sends the unholds, and only then does the
 * producer's wait_unmapped end, with 0.  Ends the producer. */
static void unmapped_after_ping(struct h_child *prod, gpuipc_client *c, const char *cmd,
                                long closes)
{
        char line[256];

        send_line(prod, cmd);
        usleep(200 * 1000);
        cr_assert_eq(gpuipc_client_ping(c), 0);        /* reads the uncache events */
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), closes);
        cr_assert_eq(gpuipc_cache_trim(c), 0);          /* sends the unholds */
        expect_line(prod, "unmapped 0", line, sizeof(line));
        end_child(prod);
}

Test(alloc, cacheable_ipc_stays_mapped_until_unmapped)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v;
        char line[128];

        spawn(&prod, "cacheipc", "ca/t", "13");
        expect_line(&prod, "ready", line, sizeof(line));
        c = connect_client();
        v = lookup(c, "ca/t/a");
        check_bytes(gpuipc_view_data(v), 4u << 20, 0, 13);
        cr_assert_eq(gpuipc_view_release(v), 0);
        /* The producer is told of the release as without the cache. */
        expect_line(&prod, "released 0", line, sizeof(line));
        /* Kept mapped: the producer promised to wait for unmapped. */
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 0);
        v = lookup(c, "ca/t/b");
        check_bytes(gpuipc_view_data(v), 4u << 20, 4u << 20, 13);
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 1, "the second block was a warm lookup");
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 0);
        /* Unregistered: the daemon says uncache; our next call closes and
         * unholds; only then may the producer free. */
        unmapped_after_ping(&prod, c, "unregister\n", 1);
        gpuipc_client_free(c);
}

/* Tells the cacheipc producer to unregister and free, while c waits in a
 * lookup of next, a name nobody registers: c must let go of the mapping
 * from inside that wait (uncache), and the producer's wait_unmapped end. */
static void producer_frees(struct h_child *prod, gpuipc_client *c, const char *next)
{
        gpuipc_view *v = NULL;
        char line[128];

        send_line(prod, "unregister\n");
        cr_assert_eq(gpuipc_view_lookup(c, next, 1500, 0, &v), -ETIMEDOUT);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 1);
        expect_line(prod, "unmapped 0", line, sizeof(line));
        end_child(prod);
}

/* A cacheipc producer under prefix whose NAME/a a new client looked up
 * and released, and which then unregistered both names and registered the
 * same block again as NAME/c.  Returns the client. */
static gpuipc_client *registered_again(struct h_child *prod, const char *prefix,
                                       const char *seed)
{
        char line[128], name[64];
        gpuipc_client *c;

        spawn(prod, "cacheipc", prefix, seed);
        expect_line(prod, "ready", line, sizeof(line));
        c = connect_client();
        snprintf(name, sizeof(name), "%s/a", prefix);
        cr_assert_eq(gpuipc_view_release(lookup(c, name)), 0);
        expect_line(prod, "released 0", line, sizeof(line));
        send_line(prod, "again\n");
        expect_line(prod, "again 0", line, sizeof(line));
        return c;
}

/* A block the producer registers again after its last unregister (a
 * caching allocator handing it back) stays mapped in between: the daemon
 * tells holders to let go only when the producer is about to free it. */
Test(alloc, cacheable_ipc_stays_mapped_over_reregistration)
{
        struct h_child prod;
        gpuipc_client *c = registered_again(&prod, "cr/t", "16");
        gpuipc_view *v;
        long calls, gets;

        usleep(100 * 1000);
        cr_assert_eq(gpuipc_client_ping(c), 0);        /* would read an uncache */
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 0, "no uncache at the last unregister");
        calls = dcount("*");
        gets = dcount("cuCtxGetCurrent");
        v = lookup(c, "cr/t/c");
        /* A warm lookup makes no driver call, not even for the context. */
        cr_assert_eq(dcount("cuCtxGetCurrent"), gets, "a warm lookup enters no context");
        cr_assert_eq(dcount("*"), calls, "a warm lookup makes no driver call");
        check_bytes(gpuipc_view_data(v), 4u << 20, 0, 16);
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 1, "registered again: a warm lookup");
        cr_assert_eq(gpuipc_view_release(v), 0);
        /* The producer's wait_unmapped says unmap: only now do we let go. */
        producer_frees(&prod, c, "cr/t/next");
        gpuipc_client_free(c);
}

/* adopt of an allocation's last registration is its last registration
 * going, for the consumers that keep it mapped: the producer's
 * wait_unmapped asks them to let go, and only then may it free.  Both
 * ways: adopting the only registrations the allocation ever had (before,
 * nobody was told, and the producer waited in vain), and adopting one made
 * again after the producer's unregister. */
static void adopted_then_unmapped(bool again)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v;
        char line[128];
        const char *name = again ? "ad/t/c" : "ad/t/a";

        if (again) {
                c = registered_again(&prod, "ad/t", "17");
        } else {
                spawn(&prod, "cacheipc", "ad/t", "17");
                expect_line(&prod, "ready", line, sizeof(line));
                c = connect_client();
        }
        v = lookup(c, name);
        check_bytes(gpuipc_view_data(v), 4u << 20, 0, 17);
        cr_assert_eq(gpuipc_view_release(v), 0);
        if (!again)
                expect_line(&prod, "released 0", line, sizeof(line));
        send_line(&prod, "adopt\n");
        expect_line(&prod, "adopt 0 0", line, sizeof(line));
        /* The copy is what the name refers to now. */
        v = lookup(c, name);
        check_bytes(gpuipc_view_data(v), 4u << 20, 0, 17);
        cr_assert_eq(gpuipc_view_release(v), 0);
        /* The producer waits for unmapped: our next call reads the uncache
         * and closes the producer's mapping; the trim unholds. */
        usleep(200 * 1000);
        cr_assert_eq(gpuipc_client_ping(c), 0);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 1, "the producer's mapping was not let go");
        cr_assert_geq(gpuipc_cache_trim(c), 0);         /* the copy's mapping too */
        expect_line(&prod, "unmapped 0", line, sizeof(line));
        end_child(&prod);
        gpuipc_client_free(c);
}

Test(alloc, cacheable_ipc_adopted_then_unmapped)
{
        adopted_then_unmapped(false);
}

Test(alloc, cacheable_ipc_adopted_again_then_unmapped)
{
        adopted_then_unmapped(true);
}

/* A producer that goes away without unmap: its lingering allocation's
 * holders are told to let go. */
Test(alloc, lingering_hold_ends_with_the_producer)
{
        struct h_child prod;
        gpuipc_client *c = registered_again(&prod, "cl/t", "17");
        gpuipc_view *v;

        v = lookup(c, "cl/t/c");
        cr_assert_eq(gpuipc_view_release(v), 0);
        /* Unregistered (same uid) without unmap: it lingers for the producer. */
        cr_assert_eq(gpuipc_name_unregister(c, "cl/t/c"), 0);
        usleep(100 * 1000);
        cr_assert_eq(gpuipc_client_ping(c), 0);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 0);
        kill(prod.pid, SIGKILL);
        h_wait(&prod, 10000);
        cr_assert_eq(gpuipc_view_lookup(c, "cl/t/next", 500, 0, &v), -ETIMEDOUT);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 1, "uncached when the producer went");
        gpuipc_client_free(c);
}

Test(alloc, cacheable_hold_ends_with_the_consumer)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v;
        char line[128];

        spawn(&prod, "cacheipc", "cb/t", "14");
        expect_line(&prod, "ready", line, sizeof(line));
        c = connect_client();
        v = lookup(c, "cb/t/a");
        cr_assert_eq(gpuipc_view_release(v), 0);
        expect_line(&prod, "released 0", line, sizeof(line));
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 0);
        send_line(&prod, "unregister\n");
        usleep(100 * 1000);
        /* Closing the client closes the mapping and the daemon drops the hold. */
        gpuipc_client_free(c);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 1);
        expect_line(&prod, "unmapped 0", line, sizeof(line));
        end_child(&prod);
}

/* A connection keeps at most max-leases allocations mapped past their
 * views: a cache lookup beyond that is answered but not held, and its
 * mapping closes with the view. */
Test(alloc, holds_are_bounded_by_max_leases)
{
        struct h_child prod[3];
        gpuipc_client *c;
        gpuipc_view *v;
        char line[128], name[32];

        h_daemon_stop(&h_d);
        h_daemon_start(&h_d, (const char *const[]){ "--max-leases", "2", NULL });
        for (int i = 0; i < 3; i++) {
                char seed[8];

                snprintf(name, sizeof(name), "hb/%d", i);
                snprintf(seed, sizeof(seed), "%d", 20 + i);
                spawn(&prod[i], "cacheipc", name, seed);
                expect_line(&prod[i], "ready", line, sizeof(line));
        }
        c = connect_client();
        for (int i = 0; i < 3; i++) {
                snprintf(name, sizeof(name), "hb/%d/a", i);
                v = lookup(c, name);
                check_bytes(gpuipc_view_data(v), 4u << 20, 0, 20 + (uint32_t)i);
                cr_assert_eq(gpuipc_view_release(v), 0);
                expect_line(&prod[i], "released 0", line, sizeof(line));
                cr_assert_eq(dcount("cuIpcCloseMemHandle"), i < 2 ? 0 : 1,
                             "allocation %d: held while holds are under max-leases", i);
        }
        /* The two held stay mapped: their other blocks are warm lookups. */
        for (int i = 0; i < 2; i++) {
                snprintf(name, sizeof(name), "hb/%d/b", i);
                cr_assert_eq(gpuipc_view_release(lookup(c, name)), 0);
        }
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 3);
        for (int i = 0; i < 3; i++)
                send_line(&prod[i], "unregister\n");
        gpuipc_client_free(c);  /* closes the two, drops their holds */
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 3);
        for (int i = 0; i < 3; i++) {
                expect_line(&prod[i], "unmapped 0", line, sizeof(line));
                end_child(&prod[i]);
        }
}

/* The cachebatch producer's batch NAME, looked up by c, its three columns
 * checked (two in one allocation, one in another); then released. */
static void batch_round_trip(gpuipc_client *c, const char *name, uint32_t seed)
{
        const uint64_t from[3] = { 0, 4u << 20, 0 };
        const uint32_t seeds[3] = { seed, seed, seed + 1 };
        gpuipc_batch_view *bv = NULL;
        int r = gpuipc_batch_view_lookup(c, name, 5000, 0, &bv);

        cr_assert_eq(r, 0, "lookup %s: %s", name, gpuipc_errmsg(c));
        for (unsigned i = 0; i < 3; i++) {
                void *data = NULL;
                uint64_t size = 0;
                int dev = -2;

                cr_assert_eq(gpuipc_batch_view_buffer(bv, i, 1, &data, &size, &dev), 0);
                cr_assert_eq(size, 4u << 20);
                cr_assert_eq(dev, 0);
                check_bytes(data, size, from[i], seeds[i]);
        }
        cr_assert_eq(gpuipc_batch_view_release(bv), 0);
}

/* A batch registered cacheable: its parts' allocations stay mapped after
 * the view, one open each however many columns share it, and the
 * producer's wait_unmapped of the batch's id ends once neither is held. */
Test(alloc, cacheable_batch_stays_mapped_until_unmapped)
{
        struct h_child prod;
        gpuipc_client *c;
        char line[256];

        spawn(&prod, "cachebatch", "cb/t", "31");
        expect_line(&prod, "ready", line, sizeof(line));
        c = connect_client();
        batch_round_trip(c, "cb/t", 31);
        expect_line(&prod, "released 0", line, sizeof(line));
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 2, "one open per allocation");
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 0, "kept mapped after the view");
        batch_round_trip(c, "cb/t", 31);
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 2, "the second lookup was warm");
        unmapped_after_ping(&prod, c, "unregister 10000\n", 2);
        gpuipc_client_free(c);
}

/* The batch's wait_unmapped covers each allocation: with one of the two
 * still held by a consumer it times out, naming how many are left. */
Test(alloc, cacheable_batch_waits_for_every_allocation)
{
        struct h_child prod;
        gpuipc_client *c;
        char line[256];

        cr_assert_eq(gpuipc_cache_set_limits(1ull << 30, 1), 0);   /* keeps one mapped */
        spawn(&prod, "cachebatch", "cw/t", "33");
        expect_line(&prod, "ready", line, sizeof(line));
        c = connect_client();
        batch_round_trip(c, "cw/t", 33);
        expect_line(&prod, "released 0", line, sizeof(line));
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 1, "the cache keeps one entry");
        cr_assert_eq(gpuipc_client_ping(c), 0);        /* the unhold of the other */
        send_line(&prod, "unregister 1000\n");
        expect_line(&prod, "unmapped -110 1 of the 2 allocations", line, sizeof(line));
        cr_assert_eq(gpuipc_client_ping(c), 0);        /* reads the uncache */
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 2);
        cr_assert_eq(gpuipc_cache_trim(c), 0);
        send_line(&prod, "wait 10000\n");
        expect_line(&prod, "unmapped 0", line, sizeof(line));
        end_child(&prod);
        gpuipc_client_free(c);
}

Test(alloc, not_cacheable_closes_with_the_view)
{
        const char *ipc[] = { "ipc", "nc/t", "0", "1", "1", "0", NULL };
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v;
        char line[64];

        h_spawn(&prod, "helper-cuda-producer", ipc, true);
        cr_assert_geq(h_read_line(&prod, line, sizeof(line), 15000), 0);
        c = connect_client();
        v = lookup(c, "nc/t");
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 1, "a producer that made no promise");
        gpuipc_client_free(c);
        end_child(&prod);
}

Test(alloc, vmm_cached_then_uncached_and_budget)
{
        const char *vmm[] = { "vmm", "vc/t", "0", "65536", "0", "65536", "1", NULL };
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v;
        char line[64];

        h_spawn(&prod, "helper-cuda-producer", vmm, true);
        cr_assert_geq(h_read_line(&prod, line, sizeof(line), 15000), 0);
        cr_assert_eq(h_wait(&prod, 10000), 0);
        c = connect_client();
        v = lookup(c, "vc/t/0");
        cr_assert_eq(gpuipc_view_release(v), 0);
        v = lookup(c, "vc/t/0");
        cr_assert_eq(dcount("cuMemImportFromShareableHandle"), 1, "cached: a warm lookup");
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(dcount("cuMemRelease"), 0);
        /* A budget of one entry: the second allocation evicts the first. */
        cr_assert_eq(gpuipc_cache_set_limits(1ull << 30, 1), 0);
        v = lookup(c, "vc/t/1");
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(dcount("cuMemRelease"), 1);
        /* Unregistered: uncached at our next call. */
        cr_assert_eq(gpuipc_name_unregister(c, "vc/t/1"), 0);
        usleep(100 * 1000);
        cr_assert_eq(gpuipc_client_ping(c), 0);
        cr_assert_eq(dcount("cuMemRelease"), 2);
        gpuipc_client_free(c);
}

/* ---- the producer's fast path ------------------------------------------- */

Test(alloc, known_allocation_costs_one_driver_call)
{
        void *dl = dlopen(double_path(), RTLD_NOW | RTLD_LOCAL);
        CUresult (*init)(unsigned), (*retain)(CUcontext *, CUdevice), (*set)(CUcontext);
        CUresult (*alloc)(CUdeviceptr *, size_t);
        gpuipc_client *c = connect_client();
        CUcontext ctx;
        CUdeviceptr p;
        long ranges, handles, attrs, retains;
        char name[32];

        cr_assert_not_null(dl);
        init = (CUresult (*)(unsigned))dlsym(dl, "cuInit");
        retain = (CUresult (*)(CUcontext *, CUdevice))dlsym(dl, "cuDevicePrimaryCtxRetain");
        set = (CUresult (*)(CUcontext))dlsym(dl, "cuCtxSetCurrent");
        alloc = (CUresult (*)(CUdeviceptr *, size_t))dlsym(dl, "cuMemAlloc_v2");
        cr_assert(init && retain && set && alloc);
        cr_assert_eq(init(0), 0);
        cr_assert_eq(retain(&ctx, 0), 0);
        cr_assert_eq(set(ctx), 0);
        cr_assert_eq(alloc(&p, 8u << 20), 0);
        retains = dcount("cuMemRetainAllocationHandle");
        attrs = dcount("cuPointerGetAttribute");
        cr_assert_eq(gpuipc_cuda_register(c, "fp/0", p + 100, 4096, NULL, NULL, 0, NULL), 0,
                     "%s", gpuipc_errmsg(c));
        /* The first register of cuMemAlloc memory: one cuPointerGetAttributes
         * says it is legacy-IPC capable, with its buffer id; no VMM probe. */
        cr_assert_eq(dcount("cuMemRetainAllocationHandle"), retains, "no VMM probe");
        cr_assert_eq(dcount("cuPointerGetAttribute"), attrs + 1, "the device ordinal only");
        ranges = dcount("cuMemGetAddressRange_v2");
        handles = dcount("cuIpcGetMemHandle");
        attrs = dcount("cuPointerGetAttribute");
        for (int i = 1; i <= 3; i++) {
                snprintf(name, sizeof(name), "fp/%d", i);
                cr_assert_eq(gpuipc_cuda_register(c, name, p + (uint64_t)i * (1u << 20), 4096,
                                                  NULL, NULL, 0, NULL), 0, "%s",
                             gpuipc_errmsg(c));
        }
        cr_assert_eq(dcount("cuMemGetAddressRange_v2"), ranges, "no range lookups again");
        cr_assert_eq(dcount("cuIpcGetMemHandle"), handles, "no handle export again");
        cr_assert_eq(dcount("cuPointerGetAttribute"), attrs + 3, "one buffer-id check each");
        gpuipc_client_free(c);
        dlclose(dl);
}

/* The double's VMM calls, for a range made in the test itself. */
struct vmm_drv {
        CUresult (*init)(unsigned);
        CUresult (*retain)(CUcontext *, CUdevice);
        CUresult (*set)(CUcontext);
        CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
        CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                           unsigned long long);
        CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                        unsigned long long);
        CUresult (*unmap)(CUdeviceptr, size_t);
        CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
        CUresult (*memset8)(CUdeviceptr, unsigned char, size_t);
};

static void vmm_drv_load(void *dl, struct vmm_drv *v)
{
        CUcontext ctx;

        *(void **)&v->init = dlsym(dl, "cuInit");
        *(void **)&v->retain = dlsym(dl, "cuDevicePrimaryCtxRetain");
        *(void **)&v->set = dlsym(dl, "cuCtxSetCurrent");
        *(void **)&v->reserve = dlsym(dl, "cuMemAddressReserve");
        *(void **)&v->create = dlsym(dl, "cuMemCreate");
        *(void **)&v->map = dlsym(dl, "cuMemMap");
        *(void **)&v->unmap = dlsym(dl, "cuMemUnmap");
        *(void **)&v->access = dlsym(dl, "cuMemSetAccess");
        *(void **)&v->memset8 = dlsym(dl, "cuMemsetD8_v2");
        cr_assert(v->init && v->retain && v->set && v->reserve && v->create && v->map &&
                  v->unmap && v->access && v->memset8);
        cr_assert_eq(v->init(0), 0);
        cr_assert_eq(v->retain(&ctx, 0), 0);
        cr_assert_eq(v->set(ctx), 0);
}

/* A new exportable allocation of n bytes on device 0. */
static CUmemGenericAllocationHandle vmm_create(const struct vmm_drv *v, size_t n)
{
        const CUmemAllocationProp prop = {
                .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
        };
        CUmemGenericAllocationHandle h;

        cr_assert_eq(v->create(&h, n, &prop, 0), 0);
        return h;
}

/* Maps allocation h (n bytes) at p, read-write for device 0. */
static void vmm_place(const struct vmm_drv *v, CUdeviceptr p, size_t n,
                      CUmemGenericAllocationHandle h)
{
        const CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
                                      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

        cr_assert_eq(v->map(p, n, 0, h, 0), 0);
        cr_assert_eq(v->access(p, n, &acc, 1), 0);
}

/* A new chunk mapped at p and filled with byte b. */
static void vmm_map_chunk(const struct vmm_drv *v, CUdeviceptr p, unsigned char b)
{
        vmm_place(v, p, CHUNK, vmm_create(v, CHUNK));
        cr_assert_eq(v->memset8(p, b, CHUNK), 0);
}

/* name's layout as its consumer sees it, and its first and last bytes. */
static void expect_vmm(gpuipc_client *c, const char *name, uint64_t offset, uint32_t n_chunks,
                       uint64_t alloc_size, unsigned char first, unsigned char last)
{
        gpuipc_view *v = lookup(c, name);
        const gpuipc_info *in = gpuipc_view_info(v);
        const unsigned char *data = gpuipc_view_data(v);

        cr_expect_eq(in->kind, GPUIPC_KIND_CUDA_VMM, "%s", name);
        cr_expect_eq(in->offset, offset, "%s: offset %llu", name, (unsigned long long)in->offset);
        cr_expect_eq(in->n_chunks, n_chunks, "%s: %u chunks", name, in->n_chunks);
        cr_expect_eq(in->alloc_size, alloc_size, "%s: alloc_size %llu", name,
                     (unsigned long long)in->alloc_size);
        cr_expect(data[0] == first && data[in->size - 1] == last,
                  "%s: bytes 0x%02x..0x%02x, want 0x%02x..0x%02x", name, data[0],
                  data[in->size - 1], first, last);
        cr_assert_eq(gpuipc_view_release(v), 0);
}

/* Registers n bytes at p as name with flags; its id. */
static uint64_t reg_vmm_flags(gpuipc_client *c, const char *name, CUdeviceptr p, size_t n,
                              unsigned flags)
{
        uint64_t id = 0;

        cr_assert_eq(gpuipc_cuda_register(c, name, p, n, NULL, NULL, flags, &id), 0, "%s: %s",
                     name, gpuipc_errmsg(c));
        return id;
}

static void reg_vmm(gpuipc_client *c, const char *name, CUdeviceptr p, size_t n)
{
        (void)reg_vmm_flags(c, name, p, n, 0);
}

/* The producer's fast path for VMM memory (PyTorch's expandable segments):
 * another block of a range whose chunks were exported costs a check of each
 * chunk's mapping and handle, not the walk and the export again; a chunk
 * unmapped and mapped again with another allocation is described afresh. */
Test(alloc, known_vmm_chunks_cost_a_check_each)
{
        void *dl = dlopen(double_path(), RTLD_NOW | RTLD_LOCAL);
        static const char *fns[] = { "*", "cuMemGetAddressRange_v2", "cuMemRetainAllocationHandle",
                                     "cuMemRelease", "cuPointerGetAttribute",
                                     "cuPointerGetAttributes", "cuMemExportToShareableHandle" };
        /* vk/1 to vk/3 touch 4 chunks: 3 calls each, and the context's
         * check on the way in and out of each register. */
        static const long more[] = { 4 * 3 + 3 * 2, 4, 4, 4, 0, 0, 0 };
        gpuipc_client *c = connect_client();
        long before[7];
        struct vmm_drv v;
        CUdeviceptr base;

        cr_assert_not_null(dl);
        vmm_drv_load(dl, &v);
        cr_assert_eq(v.reserve(&base, 3 * CHUNK, 0, 0, 0), 0);
        for (unsigned i = 0; i < 3; i++)
                vmm_map_chunk(&v, base + i * CHUNK, (unsigned char)(0x10 + i));
        /* Over chunks 0 and 1: the walk and one export each. */
        reg_vmm(c, "vk/0", base + CHUNK / 2, CHUNK);
        cr_assert_eq(dcount("cuMemExportToShareableHandle"), 2);
        for (int k = 0; k < 7; k++)
                before[k] = dcount(fns[k]);
        /* Chunk 0, then both across their boundary, then chunk 1. */
        reg_vmm(c, "vk/1", base + 100, 4096);
        reg_vmm(c, "vk/2", base + CHUNK - 8, 16);
        reg_vmm(c, "vk/3", base + CHUNK, CHUNK);
        for (int k = 0; k < 7; k++)
                cr_expect_eq(dcount(fns[k]), before[k] + more[k], "%s: %ld calls, want %ld",
                             fns[k], dcount(fns[k]) - before[k], more[k]);
        /* Chunk 2 was never exported: the walk and its export. */
        reg_vmm(c, "vk/4", base + CHUNK + 8, CHUNK);
        cr_expect_eq(dcount("cuMemExportToShareableHandle"), 3);
        cr_expect_gt(dcount("cuPointerGetAttributes"), before[5]);
        /* Chunk 1 unmapped and mapped again with another allocation. */
        cr_assert_eq(v.unmap(base + CHUNK, CHUNK), 0);
        vmm_map_chunk(&v, base + CHUNK, 0x21);
        reg_vmm(c, "vk/5", base + CHUNK, 4096);
        cr_expect_eq(dcount("cuMemExportToShareableHandle"), 4, "the new allocation exported");
        /* Known again, alone and beside chunk 0; and from a thread with no
         * context current. */
        reg_vmm(c, "vk/6", base + CHUNK + 4096, 4096);
        reg_vmm(c, "vk/7", base + CHUNK / 2, CHUNK);
        cr_assert_eq(v.set(NULL), 0);
        before[5] = dcount("cuPointerGetAttributes");
        reg_vmm(c, "vk/8", base + 4096, 4096);
        cr_expect_eq(dcount("cuPointerGetAttributes"), before[5], "vk/8 not described again");
        cr_expect_eq(dcount("cuMemExportToShareableHandle"), 4, "nothing exported again");
        /* What each consumer sees.  The daemon's fds keep the first chunk 1
         * for the registrations made before it was replaced. */
        expect_vmm(c, "vk/0", CHUNK / 2, 2, 2 * CHUNK, 0x10, 0x11);
        expect_vmm(c, "vk/1", 100, 1, 1 * CHUNK, 0x10, 0x10);
        expect_vmm(c, "vk/2", CHUNK - 8, 2, 2 * CHUNK, 0x10, 0x11);
        expect_vmm(c, "vk/3", 0, 1, 1 * CHUNK, 0x11, 0x11);
        expect_vmm(c, "vk/4", 8, 2, 2 * CHUNK, 0x11, 0x12);
        expect_vmm(c, "vk/5", 0, 1, 1 * CHUNK, 0x21, 0x21);
        expect_vmm(c, "vk/6", 4096, 1, 1 * CHUNK, 0x21, 0x21);
        expect_vmm(c, "vk/7", CHUNK / 2, 2, 2 * CHUNK, 0x10, 0x21);
        expect_vmm(c, "vk/8", 4096, 1, 1 * CHUNK, 0x10, 0x10);
        gpuipc_client_free(c);
        dlclose(dl);
}

/* An allocation the producer exported, unmapped and mapped again at
 * another address, so that its old place now lies inside its new mapping:
 * the fast path must not take the old place for a mapping's start, and the
 * export table keeps one entry (one fd) for it. */
Test(alloc, known_vmm_allocation_mapped_elsewhere)
{
        void *dl = dlopen(double_path(), RTLD_NOW | RTLD_LOCAL);
        gpuipc_client *c = connect_client();
        CUmemGenericAllocationHandle h;
        struct vmm_drv v;
        CUdeviceptr base;
        int fds, grew;

        cr_assert_not_null(dl);
        vmm_drv_load(dl, &v);
        cr_assert_eq(v.reserve(&base, 3 * CHUNK, 0, 0, 0), 0);
        h = vmm_create(&v, 2 * CHUNK);
        vmm_place(&v, base + CHUNK, 2 * CHUNK, h);
        cr_assert_eq(v.memset8(base + CHUNK, 0xaa, CHUNK), 0);
        cr_assert_eq(v.memset8(base + 2 * CHUNK, 0xbb, CHUNK), 0);
        fds = h_self_fd_count();
        reg_vmm(c, "vm/a", base + CHUNK + 100, 4096);
        grew = h_self_fd_count() - fds;        /* the export, and what the registration holds */
        cr_assert_eq(v.unmap(base + CHUNK, 2 * CHUNK), 0);
        vmm_place(&v, base, 2 * CHUNK, h);
        fds = h_self_fd_count();
        /* The old start is now the allocation's second half. */
        reg_vmm(c, "vm/b", base + CHUNK + 100, 4096);
        cr_expect_eq(h_self_fd_count() - fds, grew - 1,
                     "the old export's fd is closed as the new one opens: %d more fds, "
                     "the first export %d", h_self_fd_count() - fds, grew);
        expect_vmm(c, "vm/a", 100, 1, 2 * CHUNK, 0xaa, 0xaa);
        expect_vmm(c, "vm/b", CHUNK + 100, 1, 2 * CHUNK, 0xbb, 0xbb);
        gpuipc_client_free(c);
        dlclose(dl);
}

/* A consumer blocked in a waiting lookup still lets go at once: the
 * producer's wait_unmapped must not wait for the consumer's next call. */
Test(alloc, uncache_answered_during_a_waiting_lookup)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v = NULL;
        char line[128];

        spawn(&prod, "cacheipc", "cw/t", "15");
        expect_line(&prod, "ready", line, sizeof(line));
        c = connect_client();
        v = lookup(c, "cw/t/a");
        cr_assert_eq(gpuipc_view_release(v), 0);
        expect_line(&prod, "released 0", line, sizeof(line));
        producer_frees(&prod, c, "cw/t/next");
        gpuipc_client_free(c);
}

/* doctor says what the allocator of its environment needs. */
Test(alloc, doctor_names_the_allocators_needs)
{
        const char *args[] = { "--socket", h_d.sock, "doctor", NULL };
        struct h_child ch;
        char line[1024];
        bool warned = false;

        setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", 1);
        h_spawn_path(&ch, h_path("gpuipcctl"), args, true);
        while (h_read_line(&ch, line, sizeof(line), 10000) >= 0)
                if (strstr(line, "allocator") && strstr(line, "cudaMallocAsync") &&
                    strstr(line, "copy=True"))
                        warned = true;
        h_wait(&ch, 10000);
        cr_assert(warned, "doctor did not say what torch's cudaMallocAsync needs");
}

/* A host-only client never loads the CUDA driver, not even at its end
 * (the mapping cache's cleanup must not load it to find nothing). */
Test(alloc, host_client_does_not_load_the_driver)
{
        gpuipc_client *c = connect_client();
        gpuipc_hostbuf *b = NULL;
        gpuipc_view *v = NULL;

        cr_assert_eq(gpuipc_hostbuf_new(4096, &b), 0);
        cr_assert_eq(gpuipc_hostbuf_register(c, "host/x", b, NULL, 0, NULL), 0, "%s",
                     gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_view_lookup(c, "host/x", 0, 0, &v), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(gpuipc_cache_trim(c), 0);
        gpuipc_client_free(c);
        gpuipc_hostbuf_free(b);
        cr_assert_null(dlopen(double_path(), RTLD_NOW | RTLD_NOLOAD),
                       "libgpuipc loaded the CUDA driver for a host-only client");
}

/* cuda-vmm registered GPUIPC_REGISTER_CACHEABLE: a block the producer
 * unregisters and registers again (a caching allocator handing it back)
 * stays mapped in the consumer in between, a warm lookup; the producer's
 * wait_unmapped asks the consumer to let go.  Without the flag, the last
 * unregister does (vmm_cached_then_uncached_and_budget). */
Test(alloc, cacheable_vmm_stays_mapped_over_reregistration)
{
        void *dl = dlopen(double_path(), RTLD_NOW | RTLD_LOCAL);
        gpuipc_client *prod = connect_client(), *cons = connect_client();
        gpuipc_view *v;
        struct vmm_drv drv;
        CUdeviceptr base;
        uint64_t id;
        long imports, frees, calls;

        cr_assert_not_null(dl);
        vmm_drv_load(dl, &drv);
        cr_assert_eq(drv.reserve(&base, CHUNK, 0, 0, 0), 0);
        vmm_map_chunk(&drv, base, 0x5a);
        id = reg_vmm_flags(prod, "cv/a", base, CHUNK, GPUIPC_REGISTER_CACHEABLE);
        imports = dcount("cuMemImportFromShareableHandle");
        frees = dcount("cuMemAddressFree");
        v = lookup(cons, "cv/a");
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(dcount("cuMemImportFromShareableHandle"), imports + 1);
        /* The last registration goes: no uncache, the consumer keeps it. */
        cr_assert_eq(gpuipc_name_unregister(prod, "cv/a"), 0);
        usleep(100 * 1000);
        cr_assert_eq(gpuipc_client_ping(cons), 0);     /* would read an uncache */
        cr_assert_eq(dcount("cuMemAddressFree"), frees, "no uncache at the last unregister");
        id = reg_vmm_flags(prod, "cv/b", base, CHUNK, GPUIPC_REGISTER_CACHEABLE);
        calls = dcount("*");
        v = lookup(cons, "cv/b");
        cr_assert_eq(dcount("*"), calls, "registered again: a warm lookup, no driver call");
        cr_assert_eq(((const unsigned char *)gpuipc_view_data(v))[CHUNK - 1], 0x5a);
        cr_assert_eq(gpuipc_view_release(v), 0);
        /* wait_unmapped says unmap; the consumer lets go at its next call
         * (here after the first wait timed out: one thread plays both). */
        cr_assert_eq(gpuipc_name_unregister(prod, "cv/b"), 0);
        cr_assert_eq(gpuipc_reg_wait_unmapped(prod, id, 200), -ETIMEDOUT);
        cr_assert_eq(gpuipc_client_ping(cons), 0);     /* reads the uncache */
        cr_assert_eq(dcount("cuMemAddressFree"), frees + 1, "uncached after unmap");
        cr_assert_eq(gpuipc_cache_trim(cons), 0);      /* sends the unhold */
        cr_assert_eq(gpuipc_reg_wait_unmapped(prod, id, 5000), 0, "%s", gpuipc_errmsg(prod));
        gpuipc_client_free(cons);
        gpuipc_client_free(prod);
        dlclose(dl);
}

/* Chunk A alone is registration W; Y spans chunk Z and A, so the daemon's
 * holds for Y are on Z.  A consumer holds A through W.  When W goes, then
 * Y, A loses its last registration as Y's second chunk: its holders must
 * still be told, and W's producer still gets `unmapped` for it. */
Test(alloc, cacheable_vmm_chunk_freed_by_a_later_registration)
{
        void *dl = dlopen(double_path(), RTLD_NOW | RTLD_LOCAL);
        gpuipc_client *prod = connect_client(), *cons = connect_client();
        struct vmm_drv drv;
        CUdeviceptr base;
        uint64_t idw, idy;
        long frees;

        cr_assert_not_null(dl);
        vmm_drv_load(dl, &drv);
        cr_assert_eq(drv.reserve(&base, 2 * CHUNK, 0, 0, 0), 0);
        vmm_map_chunk(&drv, base, 0x31);                /* Z */
        vmm_map_chunk(&drv, base + CHUNK, 0x32);        /* A */
        idw = reg_vmm_flags(prod, "cz/w", base + CHUNK, CHUNK, GPUIPC_REGISTER_CACHEABLE);
        idy = reg_vmm_flags(prod, "cz/y", base + CHUNK / 2, CHUNK, GPUIPC_REGISTER_CACHEABLE);
        frees = dcount("cuMemAddressFree");
        cr_assert_eq(gpuipc_view_release(lookup(cons, "cz/w")), 0);     /* holds A */
        cr_assert_eq(gpuipc_view_release(lookup(cons, "cz/y")), 0);     /* holds Z */
        cr_assert_eq(gpuipc_name_unregister(prod, "cz/w"), 0);  /* A: Y still uses it */
        cr_assert_eq(gpuipc_name_unregister(prod, "cz/y"), 0);
        /* Both linger for the producer; its wait_unmapped of each asks the
         * consumer to let go, which it does at its next call. */
        cr_assert_eq(gpuipc_reg_wait_unmapped(prod, idw, 200), -ETIMEDOUT);
        cr_assert_eq(gpuipc_reg_wait_unmapped(prod, idy, 200), -ETIMEDOUT);
        cr_assert_eq(gpuipc_client_ping(cons), 0);
        cr_assert_eq(dcount("cuMemAddressFree"), frees + 2, "both mappings closed");
        cr_assert_eq(gpuipc_cache_trim(cons), 0);
        cr_assert_eq(gpuipc_reg_wait_unmapped(prod, idw, 5000), 0, "%s", gpuipc_errmsg(prod));
        cr_assert_eq(gpuipc_reg_wait_unmapped(prod, idy, 5000), 0, "%s", gpuipc_errmsg(prod));
        gpuipc_client_free(cons);
        gpuipc_client_free(prod);
        dlclose(dl);
}
