/* integ_handoff.c: buffers handed from one process to another through a
 * real gpuipcd, and what a consumer's fd lets it do: read-only fds, the
 * producer's seals, writable lookups. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"

TestSuite(handoff, .init = h_setup, .fini = h_teardown, .timeout = 20);

static gpuipc_client *connect_client(void)
{
        gpuipc_client *c = NULL;
        int r = gpuipc_client_connect(h_d.sock, &c);
        cr_assert_eq(r, 0, "gpuipc_client_connect(%s): %s", h_d.sock, gpuipc_strerror(r));
        cr_assert_not_null(c);
        return c;
}

static int run_helper(const char *helper, const char *const *args, int timeout_ms)
{
        struct h_child ch;
        h_spawn(&ch, helper, args, false);
        return h_wait(&ch, timeout_ms);
}

static void produce(const char *name, const char *size, const char *seed)
{
        const char *args[] = { name, size, seed, NULL };
        int st = run_helper("helper-producer", args, 10000);
        cr_assert_eq(st, 0, "helper-producer %s: exit %d", name, st);
}

static int consume(const char *name, const char *size, const char *seed)
{
        const char *args[] = { name, size, seed, NULL };
        return run_helper("helper-consumer", args, 10000);
}

static void check_pattern(const void *data, size_t size, uint32_t seed)
{
        const uint8_t *p = data;
        for (size_t i = 0; i < size; i++)
                if (p[i] != h_pattern(i, seed))
                        cr_assert_fail("byte %zu is 0x%02x, want 0x%02x", i, p[i], h_pattern(i, seed));
}

static gpuipc_hostbuf *filled(size_t size, uint32_t seed)
{
        gpuipc_hostbuf *b = NULL;
        uint8_t *p;
        cr_assert_eq(gpuipc_hostbuf_new(size, &b), 0);
        cr_assert_eq(gpuipc_hostbuf_size(b), size);
        p = gpuipc_hostbuf_data(b);
        for (size_t i = 0; i < size; i++)
                p[i] = h_pattern(i, seed);
        return b;
}

/* stat by name: 0 and *ret_info filled from the one-entry list, or the error */
static int stat_one(gpuipc_client *c, const char *name, gpuipc_info *ret_info)
{
        gpuipc_list *l = NULL;
        int r = gpuipc_name_stat(c, name, &l);
        if (r < 0)
                return r;
        cr_assert_eq(gpuipc_list_count(l), 1, "stat %s: %zu entries", name, gpuipc_list_count(l));
        *ret_info = *gpuipc_list_get(l, 0);
        ret_info->name = NULL;  /* owned by l */
        ret_info->dtype = ret_info->device = NULL;
        ret_info->shape = ret_info->strides = NULL;
        ret_info->user_keys = ret_info->user_values = NULL;
        gpuipc_list_free(l);
        return 0;
}

Test(handoff, producer_exits_before_consumer_starts)
{
        produce("handoff/a", "1048576", "7");
        cr_expect_eq(consume("handoff/a", "1048576", "7"), 0);
        /* the consumer really checks the bytes: another seed must fail */
        cr_expect_eq(consume("handoff/a", "1048576", "8"), 8);
        /* and a second consumer sees the same */
        cr_expect_eq(consume("handoff/a", "1048576", "7"), 0);
}

Test(handoff, sixty_four_mib)
{
        produce("handoff/big", "67108864", "99");
        cr_expect_eq(consume("handoff/big", "67108864", "99"), 0);
}

Test(handoff, odd_size)
{
        produce("handoff/odd", "12345", "3");
        cr_expect_eq(consume("handoff/odd", "12345", "3"), 0);
}

Test(handoff, metadata_round_trip)
{
        static const int64_t shape[] = { 4, 8 }, strides[] = { 32, 4 };
        static const char *const keys[] = { "codec", "origin" };
        static const char *const vals[] = { "none", "spark/app-42 \xc3\xa9" };
        gpuipc_meta meta = { .size = sizeof(gpuipc_meta),
                .dtype = "float32", .ndim = 2, .shape = shape, .strides = strides,
                .n_user = 2, .user_keys = keys, .user_values = vals,
        };
        gpuipc_client *p = connect_client(), *c = connect_client();
        gpuipc_hostbuf *b = filled(128, 5);
        gpuipc_view *v = NULL;
        const gpuipc_info *in;
        uint64_t id = 0;
        struct timeval tv;
        uint64_t now_ms;

        cr_assert_eq(gpuipc_hostbuf_register(p, "meta/x", b, &meta, 0, &id), 0, "%s", gpuipc_errmsg(p));
        cr_expect_geq(id, 1);
        cr_assert_eq(gpuipc_view_lookup(c, "meta/x", 0, 0, &v), 0, "%s", gpuipc_errmsg(c));
        check_pattern(gpuipc_view_data(v), 128, 5);
        in = gpuipc_view_info(v);
        cr_assert_not_null(in);
        cr_expect_eq(in->id, id);
        cr_expect_str_eq(in->name, "meta/x");
        cr_expect_eq(in->kind, GPUIPC_KIND_HOST);
        cr_expect_eq(in->size, 128);
        cr_expect_eq(in->offset, 0);
        cr_assert_not_null(in->device);
        cr_expect_str_eq(in->device, "");
        cr_assert_not_null(in->dtype);
        cr_expect_str_eq(in->dtype, "float32");
        cr_assert_eq(in->ndim, 2);
        cr_assert_not_null(in->shape);
        cr_expect_eq(in->shape[0], 4);
        cr_expect_eq(in->shape[1], 8);
        cr_assert_not_null(in->strides);
        cr_expect_eq(in->strides[0], 32);
        cr_expect_eq(in->strides[1], 4);
        cr_assert_eq(in->n_user, 2);
        /* order is not promised for a map: match by key */
        for (unsigned i = 0; i < 2; i++) {
                unsigned j = strcmp(in->user_keys[i], "codec") == 0 ? 0 : 1;
                cr_expect_str_eq(in->user_keys[i], keys[j]);
                cr_expect_str_eq(in->user_values[i], vals[j]);
        }
        cr_expect_eq(in->owner_pid, (uint32_t)getpid());
        cr_expect_eq(in->owner_uid, (uint32_t)getuid());
        cr_expect_eq(in->owner_gid, (uint32_t)getgid());
        cr_expect_eq(in->leases, 1);
        cr_expect_eq(in->flags, 0, "flags 0x%x", in->flags);
        gettimeofday(&tv, NULL);
        now_ms = (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
        cr_expect(in->created_ms <= now_ms && in->created_ms + 10000 > now_ms,
                  "created_ms %" PRIu64 ", now %" PRIu64, in->created_ms, now_ms);
        cr_expect_eq(gpuipc_view_release(v), 0);

        /* no meta: empty strings and no arrays */
        cr_assert_eq(gpuipc_hostbuf_register(p, "meta/none", b, NULL, GPUIPC_REGISTER_EPHEMERAL, NULL), 0);
        cr_assert_eq(gpuipc_view_lookup(c, "meta/none", 0, 0, &v), 0);
        in = gpuipc_view_info(v);
        cr_expect_str_eq(in->dtype, "");
        cr_expect_eq(in->ndim, 0);
        cr_expect_null(in->shape);
        cr_expect_null(in->strides);
        cr_expect_eq(in->n_user, 0);
        cr_expect_eq(in->flags, GPUIPC_INFO_EPHEMERAL, "flags 0x%x", in->flags);
        cr_expect_eq(gpuipc_view_release(v), 0);

        /* C-order meta without strides comes back without strides */
        meta.strides = NULL;
        meta.n_user = 0;
        cr_assert_eq(gpuipc_hostbuf_register(p, "meta/c-order", b, &meta, 0, NULL), 0);
        cr_assert_eq(gpuipc_view_lookup(c, "meta/c-order", 0, 0, &v), 0);
        in = gpuipc_view_info(v);
        cr_expect_eq(in->ndim, 2);
        cr_expect_null(in->strides);
        cr_expect_eq(gpuipc_view_release(v), 0);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
        gpuipc_client_free(p);
}

/* Mappings in /proc/self/maps of the file behind addr. */
static int mappings_of(const void *addr, char *ret_ident, size_t ident_len)
{
        FILE *f = fopen("/proc/self/maps", "r");
        char line[512], ident[128] = "";
        int n = 0;

        cr_assert_not_null(f);
        if (addr) {
                while (fgets(line, sizeof(line), f)) {
                        unsigned long lo, hi, ino;
                        char dev[32];
                        if (sscanf(line, "%lx-%lx %*s %*s %31s %lu", &lo, &hi, dev, &ino) != 4)
                                continue;
                        if ((uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
                                snprintf(ident, sizeof(ident), "%s %lu", dev, ino);
                                break;
                        }
                }
                cr_assert(ident[0], "address %p is not mapped", addr);
                snprintf(ret_ident, ident_len, "%s", ident);
        } else {
                snprintf(ident, sizeof(ident), "%s", ret_ident);
        }
        rewind(f);
        while (fgets(line, sizeof(line), f)) {
                unsigned long ino;
                char dev[32], id2[128];
                if (sscanf(line, "%*s %*s %*s %31s %lu", dev, &ino) != 2)
                        continue;
                snprintf(id2, sizeof(id2), "%s %lu", dev, ino);
                if (strcmp(id2, ident) == 0)
                        n++;
        }
        fclose(f);
        return n;
}

/* Caller-filled structs carry their size: an unset one is refused, a
 * larger one (a newer header) is read as far as this library knows, and
 * refused only when it sets fields the library does not know. */
Test(handoff, sized_structs_and_versions)
{
        struct { gpuipc_meta m; uint64_t later; } big = { .m = GPUIPC_META_INIT };
        struct { gpuipc_access a; uint64_t later; } bigacc = { .a = GPUIPC_ACCESS_INIT };
        gpuipc_meta unset = { .dtype = "float32" };
        gpuipc_access unset_acc = { .public_ = 1 };
        gpuipc_client *p = connect_client();
        gpuipc_hostbuf *b = filled(64, 1);
        char v[32];

        cr_expect_eq(gpuipc_hostbuf_register(p, "sz/a", b, &unset, 0, NULL), -EINVAL);
        cr_expect(strstr(gpuipc_errmsg(p), "GPUIPC_META_INIT") || strstr(gpuipc_errmsg(p), "_INIT"),
                  "%s", gpuipc_errmsg(p));
        big.m.size = sizeof(big);
        big.m.dtype = "uint8";
        cr_expect_eq(gpuipc_hostbuf_register(p, "sz/b", b, &big.m, 0, NULL), 0, "%s",
                     gpuipc_errmsg(p));
        big.later = 1;
        cr_expect_eq(gpuipc_hostbuf_register(p, "sz/c", b, &big.m, 0, NULL), -E2BIG);
        cr_expect_eq(gpuipc_client_set_access(p, &unset_acc), -EINVAL);
        bigacc.a.size = sizeof(bigacc);
        bigacc.a.public_ = 1;
        cr_expect_eq(gpuipc_client_set_access(p, &bigacc.a), 0, "%s", gpuipc_errmsg(p));
        bigacc.later = 7;
        cr_expect_eq(gpuipc_client_set_access(p, &bigacc.a), -E2BIG);

        snprintf(v, sizeof(v), "%d.%d.%d", GPUIPC_VERSION_MAJOR, GPUIPC_VERSION_MINOR,
                 GPUIPC_VERSION_PATCH);
        cr_expect_str_eq(gpuipc_version_string(), v);
        cr_expect_eq(gpuipc_version(), (unsigned)GPUIPC_VERSION_HEX);
        gpuipc_free(NULL);
        /* arrays inside returned structs are read through accessors */
        gpuipc_cuda_status *st = NULL;
        cr_assert_eq(gpuipc_cuda_status_get(&st), 0);
        cr_expect_null(gpuipc_cuda_status_device(st, st->n_devices));
        cr_expect_eq(gpuipc_cuda_status_peer(st, st->n_devices, 0), -1);
        cr_expect_null(gpuipc_cuda_status_device(NULL, 0));
        gpuipc_cuda_status_free(st);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(p);
}

Test(handoff, same_buffer_mapped_once_per_process)
{
        gpuipc_client *c1, *c2;
        gpuipc_view *v1 = NULL, *v2 = NULL, *v3 = NULL;
        char ident[128];

        produce("once/x", "1048576", "11");
        c1 = connect_client();
        c2 = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c1, "once/x", 0, 0, &v1), 0);
        cr_assert_eq(gpuipc_view_lookup(c1, "once/x", 0, 0, &v2), 0);
        cr_expect_eq(gpuipc_view_data(v1), gpuipc_view_data(v2), "two lookups, two mappings");
        cr_expect_eq(mappings_of(gpuipc_view_data(v1), ident, sizeof(ident)), 1,
                     "/proc/self/maps shows more than one mapping of %s", ident);
        /* from another connection of the same process too */
        cr_assert_eq(gpuipc_view_lookup(c2, "once/x", 0, 0, &v3), 0);
        cr_expect_eq(gpuipc_view_data(v3), gpuipc_view_data(v1));
        cr_expect_eq(mappings_of(NULL, ident, sizeof(ident)), 1);

        /* releasing the first view keeps the others readable */
        cr_expect_eq(gpuipc_view_release(v1), 0);
        check_pattern(gpuipc_view_data(v2), 1048576, 11);
        cr_expect_eq(gpuipc_view_release(v3), 0);
        check_pattern(gpuipc_view_data(v2), 1048576, 11);
        cr_expect_eq(mappings_of(NULL, ident, sizeof(ident)), 1);
        cr_expect_eq(gpuipc_view_release(v2), 0);
        /* the mapping goes with the last view */
        cr_expect_eq(mappings_of(NULL, ident, sizeof(ident)), 0, "mapping %s left after the last release",
                     ident);
        gpuipc_client_free(c2);
        gpuipc_client_free(c1);
}

Test(handoff, lookup_waits_for_registration)
{
        const char *args[] = { "late/x", "65536", "21", "--delay", "300", NULL };
        gpuipc_client *c = connect_client();
        gpuipc_view *v = NULL;
        struct h_child ch;
        int64_t t0, dt;
        int r;

        h_spawn(&ch, "helper-producer", args, false);
        t0 = h_now_ms();
        r = gpuipc_view_lookup(c, "late/x", 5000, 0, &v);
        dt = h_now_ms() - t0;
        cr_assert_eq(r, 0, "waiting lookup: %s (%s) after %" PRId64 " ms", gpuipc_strerror(r),
                     gpuipc_errmsg(c), dt);
        cr_expect_geq(dt, 250, "lookup returned after %" PRId64 " ms, before the producer registered", dt);
        cr_expect_lt(dt, 4000);
        check_pattern(gpuipc_view_data(v), 65536, 21);
        cr_expect_eq(h_wait(&ch, 5000), 0);
        cr_expect_eq(gpuipc_view_release(v), 0);
        /* the connection is still in step after the wait */
        cr_expect_eq(gpuipc_client_ping(c), 0);
        gpuipc_client_free(c);
}

Test(handoff, lookup_times_out)
{
        gpuipc_client *c = connect_client();
        gpuipc_view *v = NULL;
        int64_t t0, dt;
        int r;

        t0 = h_now_ms();
        r = gpuipc_view_lookup(c, "never/x", 200, 0, &v);
        dt = h_now_ms() - t0;
        cr_expect_eq(r, -ETIMEDOUT, "lookup: %d (%s)", r, gpuipc_strerror(r));
        cr_expect_null(v);
        cr_expect_geq(dt, 200, "timed out after %" PRId64 " ms", dt);
        cr_expect_lt(dt, 3000, "timed out after %" PRId64 " ms", dt);
        cr_expect_eq(gpuipc_client_ping(c), 0);
        /* timeout 0 fails at once */
        t0 = h_now_ms();
        cr_expect_eq(gpuipc_view_lookup(c, "never/x", 0, 0, &v), -ENOENT);
        cr_expect_lt(h_now_ms() - t0, 1000);
        gpuipc_client_free(c);
}

Test(handoff, unregister_while_leased)
{
        gpuipc_client *c = connect_client();
        gpuipc_view *v = NULL;
        gpuipc_info old, now;

        produce("un/x", "262144", "1");
        cr_assert_eq(gpuipc_view_lookup(c, "un/x", 0, 0, &v), 0);
        old = *gpuipc_view_info(v);
        cr_assert_eq(gpuipc_name_unregister(c, "un/x"), 0, "%s", gpuipc_errmsg(c));
        check_pattern(gpuipc_view_data(v), 262144, 1);
        cr_expect_eq(stat_one(c, "un/x", &now), -ENOENT);
        cr_expect_eq(gpuipc_name_unregister(c, "un/x"), -ENOENT);
        /* the name is free again at once */
        produce("un/x", "131072", "2");
        cr_assert_eq(stat_one(c, "un/x", &now), 0);
        cr_expect_neq(now.id, old.id);
        cr_expect_gt(now.id, old.id, "ids are never reused");
        cr_expect_eq(now.size, 131072);
        cr_expect_eq(now.leases, 0);
        cr_expect_eq(now.flags & GPUIPC_INFO_UNREGISTERED, 0);
        cr_expect_eq(consume("un/x", "131072", "2"), 0);
        /* the old lease still reads the old bytes */
        check_pattern(gpuipc_view_data(v), 262144, 1);
        cr_expect_eq(gpuipc_view_release(v), 0);
        gpuipc_client_free(c);
}

/* A view open on a name makes later lookups of it reuse the mapping
 * (without the fd); a new buffer under the name must still be mapped anew. */
Test(handoff, repeated_lookup_and_name_reused)
{
        gpuipc_client *c = connect_client();
        gpuipc_view *v1 = NULL, *v2 = NULL, *v3 = NULL, *v4 = NULL, *w = NULL;

        produce("again/x", "65536", "7");
        cr_assert_eq(gpuipc_view_lookup(c, "again/x", 0, 0, &v1), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_view_lookup(c, "again/x", 0, 0, &v2), 0, "%s", gpuipc_errmsg(c));
        cr_expect_eq(gpuipc_view_data(v1), gpuipc_view_data(v2));
        cr_expect_eq(gpuipc_view_info(v1)->id, gpuipc_view_info(v2)->id);
        check_pattern(gpuipc_view_data(v2), 65536, 7);
        /* the newest view goes first; the older one still serves */
        cr_expect_eq(gpuipc_view_release(v2), 0);
        cr_assert_eq(gpuipc_view_lookup(c, "again/x", 0, 0, &v3), 0, "%s", gpuipc_errmsg(c));
        check_pattern(gpuipc_view_data(v3), 65536, 7);
        /* a writable view is not served by a read-only mapping */
        cr_assert_eq(gpuipc_view_lookup(c, "again/x", 0, GPUIPC_LOOKUP_WRITABLE, &w), -EPERM,
                     "write-sealed buffer mapped writable");
        /* the name now names another buffer: its bytes, not the old ones */
        cr_assert_eq(gpuipc_name_unregister(c, "again/x"), 0, "%s", gpuipc_errmsg(c));
        produce("again/x", "131072", "8");
        cr_assert_eq(gpuipc_view_lookup(c, "again/x", 0, 0, &v4), 0, "%s", gpuipc_errmsg(c));
        cr_expect_neq(gpuipc_view_info(v4)->id, gpuipc_view_info(v1)->id);
        cr_expect_eq(gpuipc_view_size(v4), 131072);
        check_pattern(gpuipc_view_data(v4), 131072, 8);
        check_pattern(gpuipc_view_data(v1), 65536, 7);
        cr_expect_eq(gpuipc_view_release(v1), 0);
        cr_expect_eq(gpuipc_view_release(v3), 0);
        cr_expect_eq(gpuipc_view_release(v4), 0);
        gpuipc_client_free(c);
}

Test(handoff, ephemeral_ends_with_producer_durable_stays)
{
        const char *eargs[] = { "eph/x", "4096", "4", "--ephemeral", "--hold", NULL };
        gpuipc_client *c = connect_client();
        struct h_child ch;
        gpuipc_info in;
        char line[64];
        int64_t deadline;
        int r;

        h_spawn(&ch, "helper-producer", eargs, true);
        cr_assert_geq(h_read_line(&ch, line, sizeof(line), 5000), 0, "producer did not register");
        cr_assert_eq(stat_one(c, "eph/x", &in), 0);
        cr_expect_eq(in.flags & GPUIPC_INFO_EPHEMERAL, GPUIPC_INFO_EPHEMERAL);
        cr_expect_eq(in.flags & GPUIPC_INFO_OWNER_GONE, 0);
        cr_expect_eq(consume("eph/x", "4096", "4"), 0);
        cr_expect_eq(h_wait(&ch, 5000), 0);     /* closes its stdin: it disconnects */
        deadline = h_now_ms() + 3000;
        while ((r = stat_one(c, "eph/x", &in)) == 0 && h_now_ms() < deadline)
                h_sleep_ms(10);
        cr_expect_eq(r, -ENOENT, "ephemeral registration outlived its producer");
        cr_expect_eq(consume("eph/x", "4096", "4"), 4);

        produce("dur/x", "4096", "5");
        cr_assert_eq(stat_one(c, "dur/x", &in), 0);
        cr_expect_eq(in.flags & GPUIPC_INFO_EPHEMERAL, 0);
        cr_expect_eq(in.flags & GPUIPC_INFO_OWNER_GONE, GPUIPC_INFO_OWNER_GONE,
                     "owner gone but flags 0x%x", in.flags);
        cr_expect_eq(consume("dur/x", "4096", "5"), 0);
        gpuipc_client_free(c);
}

Test(handoff, duplicate_name_exists)
{
        gpuipc_client *c = connect_client(), *c2 = connect_client();
        gpuipc_hostbuf *b = filled(4096, 1);
        uint64_t id = 0;
        const char *args[] = { "dup/x", "4096", "1", NULL };

        cr_assert_eq(gpuipc_hostbuf_register(c, "dup/x", b, NULL, 0, &id), 0);
        cr_expect_eq(gpuipc_hostbuf_register(c, "dup/x", b, NULL, 0, NULL), -EEXIST);
        cr_expect_eq(gpuipc_hostbuf_register(c2, "dup/x", b, NULL, GPUIPC_REGISTER_EPHEMERAL, NULL), -EEXIST);
        cr_expect_str_neq(gpuipc_errmsg(c2), "");
        cr_expect_eq(run_helper("helper-producer", args, 10000), 5);
        /* the connection is usable after the error */
        cr_expect_eq(gpuipc_client_ping(c2), 0);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c2);
        gpuipc_client_free(c);
}

Test(handoff, lookup_not_found_and_bad_names)
{
        gpuipc_client *c = connect_client();
        gpuipc_hostbuf *b = filled(4096, 1);
        gpuipc_view *v = NULL;

        cr_expect_eq(gpuipc_view_lookup(c, "no/such", 0, 0, &v), -ENOENT);
        cr_expect_null(v);
        cr_expect_str_neq(gpuipc_errmsg(c), "");
        cr_expect_eq(consume("no/such", "4096", "1"), 4);
        cr_expect_eq(gpuipc_view_lookup(c, "a//b", 0, 0, &v), -EINVAL);
        cr_expect_eq(gpuipc_hostbuf_register(c, "a//b", b, NULL, 0, NULL), -EINVAL);
        cr_expect_eq(gpuipc_hostbuf_register(c, "a/../b", b, NULL, 0, NULL), -EINVAL);
        cr_expect_eq(gpuipc_hostbuf_register(c, "", b, NULL, 0, NULL), -EINVAL);
        cr_expect_eq(gpuipc_client_ping(c), 0);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
}

static size_t list_count(gpuipc_client *c, const char *prefix, const char *must_start)
{
        gpuipc_list *l = NULL;
        uint64_t last = 0;
        size_t n;
        int r = gpuipc_list_fetch(c, prefix, 0, &l);

        cr_assert_eq(r, 0, "list %s: %s", prefix ? prefix : "(all)", gpuipc_strerror(r));
        n = gpuipc_list_count(l);
        for (size_t i = 0; i < n; i++) {
                const gpuipc_info *in = gpuipc_list_get(l, i);
                cr_assert_gt(in->id, last, "list %s not ordered by id at %zu", prefix, i);
                last = in->id;
                if (must_start)
                        cr_assert(strncmp(in->name, must_start, strlen(must_start)) == 0,
                                  "list %s returned %s", prefix, in->name);
        }
        gpuipc_list_free(l);
        return n;
}

Test(handoff, list_prefix_and_paging)
{
        gpuipc_client *c = connect_client();
        gpuipc_hostbuf *b = filled(4096, 1);
        char name[64];

        for (int i = 0; i < 1100; i++) {
                snprintf(name, sizeof(name), "many/a/item-%04d", i);
                cr_assert_eq(gpuipc_hostbuf_register(c, name, b, NULL, 0, NULL), 0, "%s: %s", name,
                             gpuipc_errmsg(c));
                if (i < 10) {
                        snprintf(name, sizeof(name), "many/ab/item-%d", i);
                        cr_assert_eq(gpuipc_hostbuf_register(c, name, b, NULL, 0, NULL), 0);
                }
                if (i < 5) {
                        snprintf(name, sizeof(name), "other/item-%d", i);
                        cr_assert_eq(gpuipc_hostbuf_register(c, name, b, NULL, 0, NULL), 0);
                }
        }
        cr_expect_eq(list_count(c, "many/a", "many/a/"), 1100);
        cr_expect_eq(list_count(c, "many/a/", "many/a/"), 1100);
        cr_expect_eq(list_count(c, "many/ab", "many/ab/"), 10);
        cr_expect_eq(list_count(c, "many", "many/"), 1110);
        cr_expect_eq(list_count(c, NULL, NULL), 1115);
        cr_expect_eq(list_count(c, "", NULL), 1115);
        cr_expect_eq(list_count(c, "many/a/item-0005", "many/a/item-0005"), 1);
        cr_expect_eq(list_count(c, "many/a/item-000", NULL), 0);
        cr_expect_eq(list_count(c, "nothing", NULL), 0);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
}

Test(handoff, stats_counts)
{
        gpuipc_client *c = connect_client(), *c2;
        gpuipc_hostbuf *b1 = filled(4096, 1), *b2 = filled(8192, 2);
        gpuipc_stats *s = NULL, *s2 = NULL;
        gpuipc_view *v = NULL, *none = NULL;
        int64_t deadline;

        cr_assert_eq(gpuipc_stats_fetch(c, &s), 0);
        cr_expect_eq(s->pid, (uint32_t)h_d.pid);
        cr_expect_eq(s->protocol, 1);
        cr_expect(strncmp(s->server, "gpuipcd ", 8) == 0, "server \"%s\"", s->server);
        cr_expect_eq(s->connections, 1);
        cr_expect_eq(s->registrations, 0);
        cr_expect_eq(s->leases, 0);
        cr_expect_eq(s->bytes_host, 0);
        gpuipc_stats_free(s);

        c2 = connect_client();
        cr_assert_eq(gpuipc_hostbuf_register(c, "st/a", b1, NULL, 0, NULL), 0);
        cr_assert_eq(gpuipc_hostbuf_register(c, "st/b", b2, NULL, 0, NULL), 0);
        cr_assert_eq(gpuipc_view_lookup(c2, "st/a", 0, 0, &v), 0);
        cr_assert_eq(gpuipc_stats_fetch(c, &s), 0);
        cr_expect_eq(s->connections, 2);
        cr_expect_eq(s->registrations, 2);
        cr_expect_eq(s->leases, 1);
        cr_expect_eq(s->bytes_host, 4096 + 8192);
        cr_expect_geq(s->requests, 4);
        cr_expect_geq(s->uptime_ms, 0);

        /* one failed request counts as one error */
        cr_expect_eq(gpuipc_view_lookup(c2, "st/none", 0, 0, &none), -ENOENT);
        cr_assert_eq(gpuipc_stats_fetch(c, &s2), 0);
        cr_expect_eq(s2->errors, s->errors + 1, "errors %" PRIu64 " -> %" PRIu64, s->errors, s2->errors);
        cr_expect_geq(s2->requests, s->requests + 2);
        gpuipc_stats_free(s);
        gpuipc_stats_free(s2);

        /* unregistered but leased still counts; released, it is gone */
        cr_assert_eq(gpuipc_name_unregister(c, "st/a"), 0);
        cr_assert_eq(gpuipc_name_unregister(c, "st/b"), 0);
        cr_assert_eq(gpuipc_stats_fetch(c, &s), 0);
        cr_expect_eq(s->registrations, 1);
        cr_expect_eq(s->leases, 1);
        cr_expect_eq(s->bytes_host, 4096);
        gpuipc_stats_free(s);
        cr_expect_eq(gpuipc_view_release(v), 0);
        gpuipc_client_free(c2);
        deadline = h_now_ms() + 3000;
        for (;;) {
                cr_assert_eq(gpuipc_stats_fetch(c, &s), 0);
                if ((s->connections == 1 && s->registrations == 0) || h_now_ms() > deadline)
                        break;
                gpuipc_stats_free(s);
                h_sleep_ms(10);
        }
        cr_expect_eq(s->connections, 1);
        cr_expect_eq(s->registrations, 0);
        cr_expect_eq(s->leases, 0);
        cr_expect_eq(s->bytes_host, 0);
        gpuipc_stats_free(s);
        gpuipc_hostbuf_free(b1);
        gpuipc_hostbuf_free(b2);
        gpuipc_client_free(c);
}

/* Permissions of the mapping behind addr, e.g. "r--s". */
static void perms_of(const void *addr, char ret[5])
{
        FILE *f = fopen("/proc/self/maps", "r");
        char line[512];

        cr_assert_not_null(f);
        ret[0] = '\0';
        while (fgets(line, sizeof(line), f)) {
                unsigned long lo, hi;
                char perms[5];
                if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && (uintptr_t)addr >= lo &&
                    (uintptr_t)addr < hi) {
                        memcpy(ret, perms, 5);
                        break;
                }
        }
        fclose(f);
        cr_assert(ret[0], "%p is not mapped", addr);
}

Test(handoff, views_read_only_unless_writable)
{
        gpuipc_client *c;
        gpuipc_view *ro = NULL, *rw = NULL;
        char perms[5];
        uint8_t *w;

        {
                /* consumers may write it only when it was shared writable */
                const char *args[] = { "rw/x", "65536", "12", "--shared-write", NULL };
                cr_assert_eq(run_helper("helper-producer", args, 10000), 0);
        }
        c = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c, "rw/x", 0, 0, &ro), 0);
        perms_of(gpuipc_view_data(ro), perms);
        cr_expect_eq(perms[1], '-', "a default view is mapped %s", perms);
        cr_expect_eq(perms[3], 's', "a view is not a shared mapping: %s", perms);
        cr_assert_eq(gpuipc_view_lookup(c, "rw/x", 0, GPUIPC_LOOKUP_WRITABLE, &rw), 0);
        w = gpuipc_view_data(rw);
        perms_of(w, perms);
        cr_assert_eq(perms[1], 'w', "a WRITABLE view is mapped %s", perms);
        /* the read-only view was not made writable behind the caller's back */
        perms_of(gpuipc_view_data(ro), perms);
        cr_expect_eq(perms[1], '-', "the read-only view became %s", perms);
        w[0] = (uint8_t)~h_pattern(0, 12);
        cr_expect_eq(((const uint8_t *)gpuipc_view_data(ro))[0], (uint8_t)~h_pattern(0, 12),
                     "a write through one view is not seen through the other");
        cr_expect_eq(gpuipc_view_release(rw), 0);
        cr_expect_eq(((const uint8_t *)gpuipc_view_data(ro))[1], h_pattern(1, 12));
        cr_expect_eq(gpuipc_view_release(ro), 0);
        /* other processes see the write: the buffer is shared */
        cr_expect_eq(consume("rw/x", "65536", "12"), 8);
        gpuipc_client_free(c);
}

Test(handoff, register_fd_checks)
{
        gpuipc_client *c = connect_client();
        int p[2], mfd = memfd_create("x", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        uint64_t id = 0;

        cr_assert_geq(mfd, 0);
        cr_assert_eq(ftruncate(mfd, 8192), 0);
        cr_assert_eq(pipe(p), 0);
        cr_expect_eq(gpuipc_fd_register(c, "fd/pipe", p[0], 0, 10, NULL, 0, NULL), -EBADF);
        cr_expect_eq(gpuipc_fd_register(c, "fd/big", mfd, 0, 8193, NULL, 0, NULL), -EINVAL);
        cr_expect_eq(gpuipc_fd_register(c, "fd/off", mfd, 4096, 4097, NULL, 0, NULL), -EINVAL);
        /* the library seals an unsealed memfd against shrinking (and,
         * but for SHARED_WRITE, against the pwrite below) */
        cr_expect_eq(gpuipc_fd_register(c, "fd/ok", mfd, 4096, 4096, NULL,
                                        GPUIPC_REGISTER_SHARED_WRITE, &id), 0, "%s",
                     gpuipc_errmsg(c));
        cr_expect(fcntl(mfd, F_GET_SEALS) & F_SEAL_SHRINK, "memfd not sealed against shrinking");
        cr_expect_eq(ftruncate(mfd, 100), -1, "a registered memfd could shrink");
        cr_expect(fcntl(mfd, F_GETFD) >= 0, "the library closed the caller's fd");
        {
                gpuipc_view *v = NULL;
                gpuipc_client *c2 = connect_client();
                cr_assert_eq(gpuipc_view_lookup(c2, "fd/ok", 0, 0, &v), 0);
                cr_expect_eq(gpuipc_view_size(v), 4096);
                cr_expect_eq(gpuipc_view_info(v)->offset, 4096);
                cr_expect_eq(gpuipc_view_info(v)->id, id);
                /* the view starts at the offset */
                cr_assert_eq(pwrite(mfd, "\x5a", 1, 4096), 1);
                cr_expect_eq(((const uint8_t *)gpuipc_view_data(v))[0], 0x5a);
                gpuipc_view_release(v);
                gpuipc_client_free(c2);
        }
        close(p[0]);
        close(p[1]);
        close(mfd);
        gpuipc_client_free(c);
}

Test(handoff, connect_errors)
{
        gpuipc_client *c = NULL;
        char path[400];

        memset(path, 'x', sizeof(path));
        path[0] = '/';
        path[150] = '\0';
        cr_expect_eq(gpuipc_client_connect(path, &c), -ENAMETOOLONG);
        cr_expect_null(c);
        snprintf(path, sizeof(path), "%s/nobody-here.sock", h_d.dir);
        cr_expect_eq(gpuipc_client_connect(path, &c), -ENOENT);
        cr_expect_null(c);
}

/* ---- what a consumer's fd lets it do ------------------------------------- */

#define RO_SIZE 4096u
#define RO_SEED 7u

/* A producer connection with a public "ro/buf" registered with flags and
 * filled with the pattern (public: writable_lookup_other_uid looks it up
 * as another uid). */
static gpuipc_client *ro_producer(unsigned flags)
{
        static const gpuipc_access pub = { .size = sizeof(gpuipc_access), .public_ = 1 };
        gpuipc_client *c = connect_client();
        gpuipc_hostbuf *b = filled(RO_SIZE, RO_SEED);

        cr_assert_eq(gpuipc_client_set_access(c, &pub), 0);
        cr_assert_eq(gpuipc_hostbuf_register(c, "ro/buf", b, NULL, flags, NULL), 0);
        gpuipc_hostbuf_free(b);
        return c;
}

static int hello_conn(void)
{
        int fd = h_raw_connect(h_d.sock);
        h_raw_hello(fd, 1);
        return fd;
}

static void pack_lookup(msgpack_packer *pk, void *data)
{
        proto_pack_kstr(pk, "name", "ro/buf");
        if (*(bool *)data)
                proto_pack_kbool(pk, "writable", true);
}

/* A raw lookup of ro/buf answered with code; the fd of a success. */
static int raw_lookup(int fd, uint64_t seq, bool writable, const char *code)
{
        struct h_frame f;
        int mfd = -1;

        cr_assert_eq(h_raw_request(fd, "lookup", seq, 1 + writable, pack_lookup, &writable, NULL, 0), 0);
        cr_assert_eq(h_raw_recv(fd, 5000, &f), 1);
        h_expect_reply(&f, seq, code);
        if (!*code) {
                cr_assert_eq(f.nfds, 1);
                mfd = f.fds[0];
                f.nfds = 0;
        }
        h_frame_free(&f);
        return mfd;
}

static void expect_ro_pattern(const char *what)
{
        gpuipc_client *c = connect_client();
        gpuipc_view *v = NULL;
        const uint8_t *p;

        cr_assert_eq(gpuipc_view_lookup(c, "ro/buf", 0, 0, &v), 0);
        p = gpuipc_view_data(v);
        for (size_t i = 0; i < RO_SIZE; i++)
                cr_assert_eq(p[i], h_pattern(i, RO_SEED), "byte %zu changed after %s", i, what);
        cr_assert_eq(gpuipc_view_release(v), 0);
        gpuipc_client_free(c);
}

/* A consumer's fd cannot punch holes in, truncate or seal the producer's memfd. */
Test(handoff, lookup_fd_is_read_only)
{
        gpuipc_client *prod = ro_producer(0);
        int fd = hello_conn(), mfd;
        void *p;

        mfd = raw_lookup(fd, 2, false, "");
        cr_assert_eq(fcntl(mfd, F_GETFL) & O_ACCMODE, O_RDONLY);
        cr_expect_eq(fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, RO_SIZE), -1);
        cr_expect_eq(errno, EBADF);
        cr_expect_eq(ftruncate(mfd, RO_SIZE * 4), -1);
        cr_expect_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_WRITE), -1);
        cr_expect_eq(errno, EPERM);
        cr_expect_eq(pwrite(mfd, "x", 1, 0), -1);
        p = mmap(NULL, RO_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        cr_expect_eq(p, MAP_FAILED);
        p = mmap(NULL, RO_SIZE, PROT_READ, MAP_SHARED, mfd, 0);
        cr_assert_neq(p, MAP_FAILED);
        cr_expect_eq(((uint8_t *)p)[0], h_pattern(0, RO_SEED));
        munmap(p, RO_SIZE);
        close(mfd);
        close(fd);
        expect_ro_pattern("a read-only consumer's attacks");
        gpuipc_client_free(prod);
}

/* Whether this kernel has F_SEAL_FUTURE_WRITE (Linux 5.1). */
static bool have_future_write_seal(void)
{
        int fd = memfd_create("probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        bool ok;

        cr_assert_geq(fd, 0);
        ok = fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0;
        close(fd);
        return ok;
}

/* A read-only fd is no write barrier by itself: a memfd's inode is mode
 * 0777, so /proc/self/fd/N reopens it read-write.  The library's
 * F_SEAL_FUTURE_WRITE makes writes through that reopen fail. */
Test(handoff, read_only_fd_reopened_read_write_cannot_write)
{
        gpuipc_client *prod, *c;
        gpuipc_view *v = NULL;
        char path[64];
        int fd, mfd, rw;
        void *p;

        if (!have_future_write_seal())
                cr_skip_test("the kernel has no F_SEAL_FUTURE_WRITE");
        prod = ro_producer(0);
        fd = hello_conn();
        mfd = raw_lookup(fd, 2, false, "");
        cr_assert_eq(fcntl(mfd, F_GETFL) & O_ACCMODE, O_RDONLY);
        cr_expect(fcntl(mfd, F_GET_SEALS) & F_SEAL_FUTURE_WRITE);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", mfd);
        rw = open(path, O_RDWR | O_CLOEXEC);
        cr_assert_geq(rw, 0, "reopen %s: %s", path, strerror(errno));
        errno = 0;
        cr_expect_eq(pwrite(rw, "x", 1, 0), -1);
        cr_expect_eq(errno, EPERM);
        errno = 0;
        p = mmap(NULL, RO_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
        cr_expect_eq(p, MAP_FAILED);
        cr_expect_eq(errno, EPERM);
        p = mmap(NULL, RO_SIZE, PROT_READ, MAP_SHARED, rw, 0);
        cr_assert_neq(p, MAP_FAILED);
        cr_expect_eq(mprotect(p, RO_SIZE, PROT_READ | PROT_WRITE), -1);
        munmap(p, RO_SIZE);
        cr_expect_eq(fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, RO_SIZE), -1);
        close(rw);
        close(mfd);
        /* the owner's writable lookup gets the read-write fd, which cannot
         * map writable either; the library says why */
        mfd = raw_lookup(fd, 3, true, "");
        cr_assert_eq(fcntl(mfd, F_GETFL) & O_ACCMODE, O_RDWR);
        cr_expect_eq(mmap(NULL, RO_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0), MAP_FAILED);
        close(mfd);
        close(fd);
        c = connect_client();
        cr_expect_eq(gpuipc_view_lookup(c, "ro/buf", 0, GPUIPC_LOOKUP_WRITABLE, &v), -EPERM);
        cr_expect_null(v);
        cr_expect(strstr(gpuipc_errmsg(c), "without GPUIPC_REGISTER_SHARED_WRITE"),
                  "errmsg: %s", gpuipc_errmsg(c));
        gpuipc_client_free(c);
        expect_ro_pattern("writes through a reopened read-only fd");
        gpuipc_client_free(prod);
}

/* The seal leaves the producer's own mapping writable; register_fd seals
 * a caller's memfd unless GPUIPC_REGISTER_SHARED_WRITE. */
Test(handoff, producer_mapping_stays_writable_after_sealing)
{
        gpuipc_client *prod, *c;
        gpuipc_hostbuf *b = NULL;
        gpuipc_view *v = NULL;
        uint8_t *p, got[2];
        int m1, m2;

        if (!have_future_write_seal())
                cr_skip_test("the kernel has no F_SEAL_FUTURE_WRITE");
        prod = connect_client();
        cr_assert_eq(gpuipc_hostbuf_new(RO_SIZE, &b), 0);
        p = gpuipc_hostbuf_data(b);
        p[0] = 1;
        cr_assert_eq(gpuipc_hostbuf_register(prod, "ro/own", b, NULL, 0, NULL), 0);
        cr_expect(fcntl(gpuipc_hostbuf_fd(b), F_GET_SEALS) & F_SEAL_FUTURE_WRITE);
        p[0] = 2;       /* after sealing: the existing mapping still writes */
        c = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c, "ro/own", 0, 0, &v), 0);
        cr_expect_eq(((const uint8_t *)gpuipc_view_data(v))[0], 2);
        p[0] = 3;
        cr_expect_eq(((const uint8_t *)gpuipc_view_data(v))[0], 3);
        cr_assert_eq(gpuipc_view_release(v), 0);

        m1 = memfd_create("ro1", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        m2 = memfd_create("ro2", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        cr_assert(m1 >= 0 && m2 >= 0);
        cr_assert_eq(ftruncate(m1, RO_SIZE), 0);
        cr_assert_eq(ftruncate(m2, RO_SIZE), 0);
        cr_assert_eq(gpuipc_fd_register(prod, "ro/fd1", m1, 0, RO_SIZE, NULL, 0, NULL), 0);
        cr_assert_eq(gpuipc_fd_register(prod, "ro/fd2", m2, 0, RO_SIZE, NULL,
                                        GPUIPC_REGISTER_SHARED_WRITE, NULL), 0);
        cr_expect(fcntl(m1, F_GET_SEALS) & F_SEAL_FUTURE_WRITE);
        cr_expect_eq(fcntl(m2, F_GET_SEALS) & F_SEAL_FUTURE_WRITE, 0);
        cr_expect_eq(pwrite(m1, "x", 1, 0), -1);
        cr_expect_eq(pwrite(m2, "x", 1, 0), 1);
        cr_assert_eq(gpuipc_view_lookup(c, "ro/fd2", 0, GPUIPC_LOOKUP_WRITABLE, &v), 0);
        ((uint8_t *)gpuipc_view_data(v))[1] = 'y';
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_expect_eq(pread(m2, got, 2, 0), 2);
        cr_expect_eq(got[1], 'y');
        close(m1);
        close(m2);
        gpuipc_hostbuf_free(b);
        gpuipc_client_free(c);
        gpuipc_client_free(prod);
}

/* The owner's uid gets a read-write fd with writable: true, also through
 * the library's GPUIPC_LOOKUP_WRITABLE. */
Test(handoff, writable_lookup_same_uid)
{
        gpuipc_client *prod = ro_producer(GPUIPC_REGISTER_SHARED_WRITE), *c;
        gpuipc_view *v = NULL;
        int fd = hello_conn(), mfd;

        mfd = raw_lookup(fd, 2, true, "");
        cr_assert_eq(fcntl(mfd, F_GETFL) & O_ACCMODE, O_RDWR);
        close(mfd);
        close(fd);
        c = connect_client();
        cr_assert_eq(gpuipc_view_lookup(c, "ro/buf", 0, GPUIPC_LOOKUP_WRITABLE, &v), 0);
        ((uint8_t *)gpuipc_view_data(v))[1] = (uint8_t)~h_pattern(1, RO_SEED);
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(gpuipc_view_lookup(c, "ro/buf", 0, 0, &v), 0);
        cr_expect_eq(((const uint8_t *)gpuipc_view_data(v))[1], (uint8_t)~h_pattern(1, RO_SEED));
        cr_assert_eq(gpuipc_view_release(v), 0);
        gpuipc_client_free(c);
        gpuipc_client_free(prod);
}

/* Another uid gets permission for writable (needs root to switch). */
Test(handoff, writable_lookup_other_uid)
{
        gpuipc_client *prod;
        pid_t pid;
        int st = 0;

        if (geteuid() != 0)
                cr_skip_test("needs root to connect as another uid");
        prod = ro_producer(GPUIPC_REGISTER_SHARED_WRITE);
        cr_assert_eq(chmod(h_d.dir, 0755), 0);
        cr_assert_eq(chmod(h_d.sock, 0666), 0);
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
                int fd, mfd;
                alarm(5);       /* a failed assert here must not hang the parent */
                if (setgid(65534) < 0 || setuid(65534) < 0)
                        _exit(3);
                fd = hello_conn();
                mfd = raw_lookup(fd, 2, false, "");
                raw_lookup(fd, 3, true, "permission");
                _exit((fcntl(mfd, F_GETFL) & O_ACCMODE) == O_RDONLY ? 0 : 4);
        }
        cr_assert_eq(waitpid(pid, &st, 0), pid);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
        gpuipc_client_free(prod);
}
