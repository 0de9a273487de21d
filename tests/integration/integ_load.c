/* integ_load.c: correctness under concurrency.  32 client threads, one
 * connection each, run a mix of register / lookup / release / list /
 * unregister against one daemon for about 3 s.  Every answer is checked
 * (codes, sizes, ids, the bytes behind each view, list contents) and any
 * failure or timeout counts as an error; the test asserts none.  Latency
 * percentiles per op are printed for information only: this is not a
 * benchmark, and no figure is asserted. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"

#define THREADS     32
#define RUN_MS      3000
#define SHARED_N    8
#define SHARED_SIZE 16384u
#define OWN_MAX     4
#define OWN_SIZE    8192u
#define SAMPLES_MAX 65536

TestSuite(load, .init = h_setup, .fini = h_teardown, .timeout = 30);

enum op { OP_REGISTER, OP_LOOKUP, OP_RELEASE, OP_LIST, OP_UNREGISTER, N_OPS };
static const char *const op_name[N_OPS] = { "register", "lookup", "release", "list",
                                            "unregister" };

struct samples {
        uint32_t *us;
        size_t n;
};

struct worker {
        pthread_t th;
        unsigned idx;
        struct samples s[N_OPS];
        unsigned errors;
        char first_error[256];
        uint64_t ops;
};

static atomic_bool stop;

static void fail(struct worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct worker *w, const char *fmt, ...)
{
        va_list ap;

        if (w->errors++ == 0) {
                va_start(ap, fmt);
                vsnprintf(w->first_error, sizeof(w->first_error), fmt, ap);
                va_end(ap);
        }
}

static uint64_t now_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void record(struct worker *w, enum op op, uint64_t t0)
{
        struct samples *s = &w->s[op];
        uint64_t d = now_us() - t0;

        w->ops++;
        if (s->n < SAMPLES_MAX)
                s->us[s->n++] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

/* The first bytes, the last and a stride between: enough to catch a wrong
 * mapping without making the test about memory bandwidth. */
static bool pattern_ok(const void *data, size_t size, uint32_t seed)
{
        const uint8_t *p = data;

        for (size_t i = 0; i < size; i += (i < 64 || i + 64 >= size) ? 1 : 509)
                if (p[i] != h_pattern(i, seed))
                        return false;
        return true;
}

static void fill(void *data, size_t size, uint32_t seed)
{
        uint8_t *p = data;

        for (size_t i = 0; i < size; i++)
                p[i] = h_pattern(i, seed);
}

struct own {
        char name[64];
        uint64_t id;
        uint32_t seed;
        bool live;
};

static void *worker_main(void *arg)
{
        struct worker *w = arg;
        gpuipc_view *held[8] = { NULL };
        uint32_t held_seed[8] = { 0 };
        struct own own[OWN_MAX] = { 0 };
        unsigned rnd = 0x9e3779b9u * (w->idx + 1), gen = 0;
        gpuipc_client *c = NULL;
        uint64_t t0;
        int r;

        r = gpuipc_client_connect(h_d.sock, &c);
        if (r < 0) {
                fail(w, "connect: %s", gpuipc_strerror(r));
                return NULL;
        }
        while (!atomic_load(&stop)) {
                unsigned pick;
                rnd = rnd * 1103515245u + 12345u;
                pick = (rnd >> 16) % 100;

                if (pick < 20) {
                        /* register one of ours (durable), if a slot is free */
                        struct own *o = &own[(rnd >> 8) % OWN_MAX];
                        gpuipc_hostbuf *b = NULL;
                        if (o->live)
                                continue;
                        snprintf(o->name, sizeof(o->name), "load/t%u/%u", w->idx, gen++);
                        o->seed = w->idx * 100000u + gen;
                        if (gpuipc_hostbuf_new(OWN_SIZE, &b) < 0) {
                                fail(w, "hostbuf_new");
                                continue;
                        }
                        fill(gpuipc_hostbuf_data(b), OWN_SIZE, o->seed);
                        t0 = now_us();
                        r = gpuipc_hostbuf_register(c, o->name, b, NULL, 0, &o->id);
                        record(w, OP_REGISTER, t0);
                        gpuipc_hostbuf_free(b);
                        if (r < 0)
                                fail(w, "register %s: %s", o->name, gpuipc_errmsg(c));
                        else
                                o->live = true;
                } else if (pick < 55) {
                        /* lookup: a shared buffer, or one of ours */
                        unsigned slot = (rnd >> 4) % 8;
                        char name[64];
                        uint32_t seed, size;
                        gpuipc_view *v = NULL;
                        if (held[slot])
                                continue;
                        if ((rnd >> 12) % 3 == 0) {
                                struct own *o = &own[(rnd >> 8) % OWN_MAX];
                                if (!o->live)
                                        continue;
                                snprintf(name, sizeof(name), "%s", o->name);
                                seed = o->seed;
                                size = OWN_SIZE;
                        } else {
                                unsigned j = (rnd >> 8) % SHARED_N;
                                snprintf(name, sizeof(name), "load/shared/%u", j);
                                seed = 1000 + j;
                                size = SHARED_SIZE;
                        }
                        t0 = now_us();
                        r = gpuipc_view_lookup(c, name, 0, 0, &v);
                        record(w, OP_LOOKUP, t0);
                        if (r < 0) {
                                fail(w, "lookup %s: %s", name, gpuipc_errmsg(c));
                                continue;
                        }
                        if (gpuipc_view_size(v) != size ||
                            strcmp(gpuipc_view_info(v)->name, name) != 0 ||
                            !pattern_ok(gpuipc_view_data(v), size, seed))
                                fail(w, "lookup %s: wrong buffer (size %zu, name %s)", name,
                                     gpuipc_view_size(v), gpuipc_view_info(v)->name);
                        held[slot] = v;
                        held_seed[slot] = seed;
                } else if (pick < 80) {
                        /* release a held view, checking its bytes once more */
                        unsigned slot = (rnd >> 4) % 8;
                        gpuipc_view *v = held[slot];
                        if (!v)
                                continue;
                        if (!pattern_ok(gpuipc_view_data(v), gpuipc_view_size(v),
                                        held_seed[slot]))
                                fail(w, "view %s changed under its lease",
                                     gpuipc_view_info(v)->name);
                        held[slot] = NULL;
                        t0 = now_us();
                        r = gpuipc_view_release(v);
                        record(w, OP_RELEASE, t0);
                        if (r < 0)
                                fail(w, "release: %s", gpuipc_strerror(r));
                } else if (pick < 90) {
                        /* list ours: exactly the live ones, with their ids */
                        char prefix[32];
                        gpuipc_list *l = NULL;
                        unsigned want = 0, seen = 0;
                        snprintf(prefix, sizeof(prefix), "load/t%u", w->idx);
                        t0 = now_us();
                        r = gpuipc_list_fetch(c, prefix, 0, &l);
                        record(w, OP_LIST, t0);
                        if (r < 0) {
                                fail(w, "list %s: %s", prefix, gpuipc_errmsg(c));
                                continue;
                        }
                        for (unsigned k = 0; k < OWN_MAX; k++) {
                                if (!own[k].live)
                                        continue;
                                want++;
                                for (size_t i = 0; i < gpuipc_list_count(l); i++) {
                                        const gpuipc_info *in = gpuipc_list_get(l, i);
                                        if (in->id == own[k].id &&
                                            strcmp(in->name, own[k].name) == 0 &&
                                            in->size == OWN_SIZE)
                                                seen++;
                                }
                        }
                        /* Unregistered ones still leased stay listed. */
                        if (seen != want || gpuipc_list_count(l) < want)
                                fail(w, "list %s: %zu entries, %u of %u live ones", prefix,
                                     gpuipc_list_count(l), seen, want);
                        gpuipc_list_free(l);
                } else {
                        /* unregister one of ours */
                        struct own *o = &own[(rnd >> 8) % OWN_MAX];
                        if (!o->live)
                                continue;
                        t0 = now_us();
                        r = gpuipc_name_unregister(c, o->name);
                        record(w, OP_UNREGISTER, t0);
                        if (r < 0)
                                fail(w, "unregister %s: %s", o->name, gpuipc_errmsg(c));
                        o->live = false;
                }
        }
        for (unsigned k = 0; k < 8; k++)
                if (held[k] && gpuipc_view_release(held[k]) < 0)
                        fail(w, "final release");
        for (unsigned k = 0; k < OWN_MAX; k++)
                if (own[k].live && gpuipc_name_unregister(c, own[k].name) < 0)
                        fail(w, "final unregister %s: %s", own[k].name, gpuipc_errmsg(c));
        gpuipc_client_free(c);
        return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
        uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
        return x < y ? -1 : x > y;
}

Test(load, concurrent_clients_get_correct_answers)
{
        static struct worker w[THREADS];
        gpuipc_client *c = NULL;
        gpuipc_stats *st = NULL;
        unsigned errors = 0;
        uint64_t ops = 0, base_regs;
        int64_t t0;
        int r;

        r = gpuipc_client_connect(h_d.sock, &c);
        cr_assert_eq(r, 0);
        for (unsigned j = 0; j < SHARED_N; j++) {
                gpuipc_hostbuf *b = NULL;
                char name[64];
                snprintf(name, sizeof(name), "load/shared/%u", j);
                cr_assert_eq(gpuipc_hostbuf_new(SHARED_SIZE, &b), 0);
                fill(gpuipc_hostbuf_data(b), SHARED_SIZE, 1000 + j);
                r = gpuipc_hostbuf_register(c, name, b, NULL, 0, NULL);
                cr_assert_eq(r, 0, "register %s: %s", name, gpuipc_errmsg(c));
                gpuipc_hostbuf_free(b);
        }
        cr_assert_eq(gpuipc_stats_fetch(c, &st), 0);
        base_regs = st->registrations;
        gpuipc_stats_free(st);

        atomic_store(&stop, false);
        for (unsigned i = 0; i < THREADS; i++) {
                w[i].idx = i;
                for (unsigned k = 0; k < N_OPS; k++) {
                        w[i].s[k].us = calloc(SAMPLES_MAX, sizeof(uint32_t));
                        cr_assert_not_null(w[i].s[k].us);
                }
                cr_assert_eq(pthread_create(&w[i].th, NULL, worker_main, &w[i]), 0);
        }
        t0 = h_now_ms();
        h_sleep_ms(RUN_MS);
        atomic_store(&stop, true);
        for (unsigned i = 0; i < THREADS; i++) {
                pthread_join(w[i].th, NULL);
                errors += w[i].errors;
                ops += w[i].ops;
                if (w[i].errors)
                        cr_log_error("thread %u: %u errors, first: %s", i, w[i].errors,
                                     w[i].first_error);
        }
        printf("load: %u threads, %" PRIu64 " requests in %" PRId64 " ms, %u errors\n",
               THREADS, ops, h_now_ms() - t0, errors);
        for (unsigned k = 0; k < N_OPS; k++) {
                size_t n = 0, at = 0;
                uint32_t *all;
                for (unsigned i = 0; i < THREADS; i++)
                        n += w[i].s[k].n;
                all = malloc((n ? n : 1) * sizeof(*all));
                cr_assert_not_null(all);
                for (unsigned i = 0; i < THREADS; i++) {
                        memcpy(all + at, w[i].s[k].us, w[i].s[k].n * sizeof(*all));
                        at += w[i].s[k].n;
                        free(w[i].s[k].us);
                }
                qsort(all, n, sizeof(*all), cmp_u32);
                if (n)
                        printf("load: %-10s n=%-7zu p50=%6u us  p99=%6u us  max=%6u us\n",
                               op_name[k], n, all[n / 2], all[n * 99 / 100], all[n - 1]);
                cr_expect_gt(n, 0, "no %s ran", op_name[k]);
                free(all);
        }
        fflush(stdout);
        cr_expect_eq(errors, 0, "%u errors under load", errors);

        /* Every thread cleaned up after itself. */
        cr_assert_eq(gpuipc_stats_fetch(c, &st), 0);
        cr_expect_eq(st->registrations, base_regs, "registrations %" PRIu64 ", want %" PRIu64,
                     st->registrations, base_regs);
        cr_expect_eq(st->leases, 0);
        gpuipc_stats_free(st);
        gpuipc_client_free(c);
}
