/* gpu_test.c: the real-GPU suite.  Needs an NVIDIA GPU and a running gpuipcd
 * ($GPUIPC_SOCKET); tests/gpu/run.sh starts one and runs `gpu_test all`.
 *
 * Each case runs a producer and a consumer as separate processes (this
 * program re-executed with a role), joined only through the daemon.  The
 * consumer checks the bytes with a kernel that reads through the view's
 * device pointer, so a pass means the consumer's GPU really reads the
 * producer's memory.  Prints "N passed, N failed, N skipped" last.
 *
 * Case "peer" (issue 9) needs two GPUs (else it is counted as skipped): the
 * producer works on GPU 0 with
 * CUDA_VISIBLE_DEVICES=0,1, the consumer sees CUDA_VISIBLE_DEVICES=1,0, so
 * its ordinal 0 (where gpu_setup() loads the kernels) is physical GPU 1 and
 * the buffers' home is its ordinal 1; it maps both kinds for its ordinal 0
 * with gpuipc_view_lookup_device() and counts the bytes there. */
#include <errno.h>
#include <stdbool.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu_util.h"

extern char **environ;

#define MiB (1ull << 20)

/* ---- producers ----------------------------------------------------------- */

static int produce_pool(gpuipc_client *c)
{
        /* One 64 MiB allocation carved like a memory pool: three registered
         * ranges, one at an odd offset. */
        static const uint64_t offs[] = { 0, 4 * MiB, 40 * MiB + 123 };
        static const char *names[] = { "gpu/pool/a", "gpu/pool/b", "gpu/pool/c" };
        CUdeviceptr base;
        uint64_t ids[3];

        CK(cuMemAlloc(&base, 64 * MiB));
        fill(base, 64 * MiB, 11, 0, NULL);
        CK(cuCtxSynchronize());
        for (int i = 0; i < 3; i++)
                GK(gpuipc_cuda_register(c, names[i], base + offs[i], MiB, NULL, NULL, 0, &ids[i]));
        for (int i = 0; i < 3; i++)
                GK(gpuipc_reg_wait_released(c, ids[i], 30000));
        CK(cuMemFree(base));
        return 0;
}

static int produce_share(gpuipc_client *c)
{
        /* 200 registrations carved from 10 allocations. */
        CUdeviceptr base[10];
        uint64_t ids[200];
        char name[64];

        for (int a = 0; a < 10; a++) {
                CK(cuMemAlloc(&base[a], 4 * MiB));
                fill(base[a], 4 * MiB, (unsigned)a, 0, NULL);
        }
        CK(cuCtxSynchronize());
        for (int i = 0; i < 200; i++) {
                snprintf(name, sizeof(name), "gpu/share/%d", i);
                GK(gpuipc_cuda_register(c, name, base[i / 20] + (uint64_t)(i % 20) * 200000,
                                        4096, NULL, NULL, 0, &ids[i]));
        }
        for (int i = 0; i < 200; i++)
                GK(gpuipc_reg_wait_released(c, ids[i], 60000));
        for (int a = 0; a < 10; a++)
                CK(cuMemFree(base[a]));
        return 0;
}

static int produce_vmm(gpuipc_client *c)
{
        gpuipc_cudabuf *b;

        /* Registered, then the producer exits at once: the daemon's fd keeps
         * the memory alive. */
        GK(gpuipc_cudabuf_new(0, 64 * MiB, &b));
        fill(gpuipc_cudabuf_ptr(b), 64 * MiB, 23, 0, NULL);
        CK(cuCtxSynchronize());
        GK(gpuipc_cuda_register(c, "gpu/vmm", gpuipc_cudabuf_ptr(b), 64 * MiB, NULL, NULL, 0,
                                NULL));
        gpuipc_cudabuf_free(b);
        return 0;
}

static int produce_adopt(gpuipc_client *c)
{
        CUdeviceptr p;
        uint32_t leases = 99;

        CK(cuMemAlloc(&p, 8 * MiB));
        fill(p, 8 * MiB, 31, 0, NULL);
        CK(cuCtxSynchronize());
        GK(gpuipc_cuda_register(c, "gpu/adopt", p + MiB, 6 * MiB, NULL, NULL, 0, NULL));
        GK(gpuipc_name_adopt(c, "gpu/adopt", &leases));
        if (leases != 0)
                return fail("adopt reported %u leases, expected 0", leases);
        /* Overwrite and free at once: the daemon's copy must not care. */
        CK(cuMemsetD8(p, 0, 8 * MiB));
        CK(cuCtxSynchronize());
        CK(cuMemFree(p));
        return 0;
}

/* A cacheable block the consumer looked up (and so keeps mapped), then
 * adopted: the producer frees it only after wait_unmapped, which asks the
 * consumer to let go; then it says "done" with a host buffer. */
static int produce_adopt_cached(gpuipc_client *c)
{
        gpuipc_hostbuf *hb;
        uint32_t leases = 99;
        uint64_t id, done;
        CUdeviceptr p;

        CK(cuMemAlloc(&p, 4 * MiB));
        fill(p, 4 * MiB, 37, 0, NULL);
        CK(cuCtxSynchronize());
        GK(gpuipc_cuda_register(c, "gpu/adopt-cached", p, 4 * MiB, NULL, NULL,
                                GPUIPC_REGISTER_CACHEABLE, &id));
        GK(gpuipc_reg_wait_released(c, id, 30000));
        GK(gpuipc_name_adopt(c, "gpu/adopt-cached", &leases));
        if (leases != 0)
                return fail("adopt reported %u leases, expected 0", leases);
        GK(gpuipc_reg_wait_unmapped(c, id, 30000));
        CK(cuMemsetD8(p, 0, 4 * MiB));
        CK(cuCtxSynchronize());
        CK(cuMemFree(p));
        GK(gpuipc_hostbuf_new(4096, &hb));
        GK(gpuipc_hostbuf_register(c, "gpu/adopt-cached-done", hb, NULL, 0, &done));
        gpuipc_hostbuf_free(hb);
        GK(gpuipc_reg_wait_released(c, done, 30000));
        return 0;
}

static int produce_event(gpuipc_client *c, bool control)
{
        CUdeviceptr p;
        CUstream s;
        CUevent e;
        uint64_t id;

        /* The kernel spins ~0.2 s before writing; registering does not wait
         * for it.  Only the event orders the consumer after it. */
        CK(cuMemAlloc(&p, 256 * MiB));
        CK(cuMemsetD8(p, 0, 256 * MiB));
        CK(cuCtxSynchronize());
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CK(cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
        fill(p, 256 * MiB, 47, 400000000ull, s);
        CK(cuEventRecord(e, s));
        GK(gpuipc_cuda_register(c, control ? "gpu/event-control" : "gpu/event", p, 256 * MiB,
                                NULL, e, 0, &id));
        GK(gpuipc_reg_wait_released(c, id, 60000));
        CK(cuStreamSynchronize(s));
        CK(cuMemFree(p));
        return 0;
}

/* Two VMM chunks Z, A in one reserved range.  W is A alone, Y spans Z's
 * second half and A's first, both cacheable.  After the consumer has read
 * both, they are unregistered, W first: A loses its last registration as
 * Y's second chunk, and the consumer that maps A through W must still be
 * told to let go, or W's wait_unmapped times out (6607cd8). */
static int produce_vmm_chunks(gpuipc_client *c)
{
        const CUmemAllocationProp prop = {
                .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
        };
        const CUmemAccessDesc acc = { .location = prop.location,
                                      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUmemGenericAllocationHandle h[2];
        gpuipc_hostbuf *done;
        CUdeviceptr base;
        uint64_t idw, idy, idd;
        size_t g;

        CK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        CK(cuMemAddressReserve(&base, 2 * g, 0, 0, 0));
        for (int i = 0; i < 2; i++) {
                CK(cuMemCreate(&h[i], g, &prop, 0));
                CK(cuMemMap(base + i * g, g, 0, h[i], 0));
        }
        CK(cuMemSetAccess(base, 2 * g, &acc, 1));
        fill(base, g, 61, 0, NULL);     /* Z and A differ: a swap would show */
        fill(base + g, g, 67, 0, NULL);
        CK(cuCtxSynchronize());
        GK(gpuipc_cuda_register(c, "gpu/vmm-chunks/w", base + g, g, NULL, NULL,
                                GPUIPC_REGISTER_CACHEABLE, &idw));
        GK(gpuipc_cuda_register(c, "gpu/vmm-chunks/y", base + g / 2, g, NULL, NULL,
                                GPUIPC_REGISTER_CACHEABLE, &idy));
        GK(gpuipc_reg_wait_released(c, idw, 30000));
        GK(gpuipc_reg_wait_released(c, idy, 30000));
        GK(gpuipc_name_unregister(c, "gpu/vmm-chunks/w"));
        GK(gpuipc_name_unregister(c, "gpu/vmm-chunks/y"));
        GK(gpuipc_reg_wait_unmapped(c, idw, 30000));
        GK(gpuipc_reg_wait_unmapped(c, idy, 30000));
        /* No consumer maps them now: free, then say so. */
        CK(cuMemUnmap(base, 2 * g));
        for (int i = 0; i < 2; i++)
                CK(cuMemRelease(h[i]));
        CK(cuMemAddressFree(base, 2 * g));
        GK(gpuipc_hostbuf_new(4096, &done));
        GK(gpuipc_hostbuf_register(c, "gpu/vmm-chunks/done", done, NULL,
                                   GPUIPC_REGISTER_EPHEMERAL, &idd));
        GK(gpuipc_reg_wait_released(c, idd, 30000));
        gpuipc_hostbuf_free(done);
        return 0;
}

static int produce_peer(gpuipc_client *c)
{
        gpuipc_cudabuf *b;
        CUdeviceptr p;
        uint64_t id;

        CK(cuMemAlloc(&p, 8 * MiB));
        fill(p, 8 * MiB, 53, 0, NULL);
        GK(gpuipc_cudabuf_new(0, 8 * MiB, &b));
        fill(gpuipc_cudabuf_ptr(b), 8 * MiB, 59, 0, NULL);
        CK(cuCtxSynchronize());
        GK(gpuipc_cuda_register(c, "gpu/peer/vmm", gpuipc_cudabuf_ptr(b), 8 * MiB, NULL, NULL, 0,
                                NULL));
        gpuipc_cudabuf_free(b);
        GK(gpuipc_cuda_register(c, "gpu/peer/ipc", p + MiB, 4 * MiB, NULL, NULL, 0, &id));
        /* A consumer without peer access looks it up twice (the -EXDEV
         * probe, then the copy); it unregisters before its last release, so
         * the memory may go once a release finds the name gone. */
        for (;;) {
                gpuipc_list *l = NULL;
                GK(gpuipc_reg_wait_released(c, id, 60000));
                if (gpuipc_name_stat(c, "gpu/peer/ipc", &l) == -ENOENT)
                        break;
                gpuipc_list_free(l);
        }
        CK(cuMemFree(p));
        return 0;
}

/* ---- consumers ------------------------------------------------------------ */

static int consume_pool(gpuipc_client *c)
{
        static const uint64_t offs[] = { 0, 4 * MiB, 40 * MiB + 123 };
        static const char *names[] = { "gpu/pool/a", "gpu/pool/b", "gpu/pool/c" };
        gpuipc_view *v[3];
        uint64_t alloc = 0;
        double t0, t_cold = 0, t_warm = 0;

        /* The producer registers a, b, c in that order: waiting for c first
         * means all three share the allocation entry by then. */
        for (int k = 0; k < 3; k++) {
                int i = (k + 2) % 3;
                t0 = now_us();
                GK(gpuipc_view_lookup(c, names[i], 30000, 0, &v[i]));
                if (k == 0)
                        t_cold = now_us() - t0;
                else if (k == 1)
                        t_warm = now_us() - t0;
                const gpuipc_info *inf = gpuipc_view_info(v[i]);
                CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)gpuipc_view_data(v[i]), rbase;
                size_t rsize;
                if (inf->kind != GPUIPC_KIND_CUDA_IPC || inf->offset != offs[i] ||
                    inf->alloc_size != 64 * MiB || inf->alloc_regs != 3)
                        return fail("%s: kind %d offset %llu alloc %llu regs %u", names[i],
                                    inf->kind, (unsigned long long)inf->offset,
                                    (unsigned long long)inf->alloc_size, inf->alloc_regs);
                if (k > 0 && inf->alloc_id != alloc)
                        return fail("pool views use different allocation entries");
                alloc = inf->alloc_id;
                /* Zero copy: the view lies inside a mapping of the producer's
                 * whole 64 MiB allocation, at the registered offset. */
                CK(cuMemGetAddressRange(&rbase, &rsize, ptr));
                if (rsize != 64 * MiB || ptr - rbase != offs[i])
                        return fail("%s: view is %llu bytes into a %zu-byte mapping", names[i],
                                    (unsigned long long)(ptr - rbase), rsize);
                if (count_bad(ptr, MiB, 11, offs[i]) != 0)
                        return fail("%s: wrong bytes", names[i]);
        }
        for (int i = 0; i < 3; i++)
                GK(gpuipc_view_release(v[i]));
        printf("timing pool lookup_cold_us=%.0f lookup_warm_us=%.0f\n", t_cold, t_warm);
        return 0;
}

static int consume_share(gpuipc_client *c)
{
        gpuipc_view *v[200];
        char name[64];
        double t0 = now_us();

        for (int i = 0; i < 200; i++) {
                snprintf(name, sizeof(name), "gpu/share/%d", i);
                GK(gpuipc_view_lookup(c, name, 30000, 0, &v[i]));
                if (count_bad((CUdeviceptr)(uintptr_t)gpuipc_view_data(v[i]), 4096,
                              (unsigned)(i / 20), (uint64_t)(i % 20) * 200000) != 0)
                        return fail("%s: wrong bytes", name);
        }
        printf("timing share lookups_200_ms=%.1f\n", (now_us() - t0) / 1000);
        /* Open once: ten allocations, ten opens, whatever the driver would
         * do with a second open of the same handle. */
        long opens = shim_count("cuIpcOpenMemHandle_v2");
        if (opens != 10)
                return fail("200 lookups of 10 allocations opened %ld handles (-1: the "
                            "countcuda shim is not GPUIPC_LIBCUDA)", opens);
        for (int i = 0; i < 200; i++)
                GK(gpuipc_view_release(v[i]));
        long closes = shim_count("cuIpcCloseMemHandle");
        if (closes != 10)
                return fail("releasing 200 views closed %ld handles, expected 10", closes);
        printf("counts share cuIpcOpenMemHandle=%ld cuIpcCloseMemHandle=%ld\n", opens, closes);
        return 0;
}

static int consume_simple(gpuipc_client *c, const char *name, gpuipc_kind kind, uint64_t size,
                          unsigned seed, uint64_t pattern_off)
{
        gpuipc_view *v;
        double t0 = now_us(), t;

        GK(gpuipc_view_lookup(c, name, 30000, 0, &v));
        t = now_us() - t0;
        if (gpuipc_view_info(v)->kind != kind || gpuipc_view_size(v) != size)
                return fail("%s: kind %d size %zu", name, gpuipc_view_info(v)->kind,
                            gpuipc_view_size(v));
        if (count_bad((CUdeviceptr)(uintptr_t)gpuipc_view_data(v), size, seed, pattern_off))
                return fail("%s: wrong bytes", name);
        printf("timing %s lookup_us=%.0f\n", name, t);
        return gpuipc_view_release(v) < 0 ? fail("release failed") : 0;
}

/* Its consumer: the block, then (inside a waiting lookup, which answers
 * the daemon's uncache) the producer's "done", then the daemon's copy. */
static int consume_adopt_cached(gpuipc_client *c)
{
        gpuipc_view *v;

        if (consume_simple(c, "gpu/adopt-cached", GPUIPC_KIND_CUDA_IPC, 4 * MiB, 37, 0) != 0)
                return 1;
        GK(gpuipc_view_lookup(c, "gpu/adopt-cached-done", 30000, 0, &v));
        GK(gpuipc_view_release(v));
        return consume_simple(c, "gpu/adopt-cached", GPUIPC_KIND_CUDA_VMM, 4 * MiB, 37, 0);
}

static int consume_event(gpuipc_client *c, bool control)
{
        gpuipc_view *v;
        unsigned long long bad;

        if (!control)
                return consume_simple(c, "gpu/event", GPUIPC_KIND_CUDA_IPC, 256 * MiB, 47, 0);
        /* Control: skip the wait.  Reading at once should see stale bytes;
         * if it does not, the ordering case above proved nothing. */
        GK(gpuipc_view_lookup(c, "gpu/event-control", 30000, GPUIPC_LOOKUP_NO_SYNC, &v));
        bad = count_bad((CUdeviceptr)(uintptr_t)gpuipc_view_data(v), 256 * MiB, 47, 0);
        printf("control: reading without waiting on the event saw %llu stale bytes of %llu\n",
               bad, 256 * MiB);
        GK(gpuipc_view_release(v));
        return bad > 0 ? 0 : fail("the control read no stale bytes: the spin is too short");
}

static int consume_vmm_chunks(gpuipc_client *c)
{
        static const char *names[] = { "gpu/vmm-chunks/w", "gpu/vmm-chunks/y" };
        CUdeviceptr ptr[2], b;
        unsigned long long bad;
        gpuipc_view *v;
        size_t n;
        int r = -ETIMEDOUT;

        GK(gpuipc_cache_set_limits(1ull << 30, 64));    /* whatever the environment says */
        for (int i = 0; i < 2; i++) {
                GK(gpuipc_view_lookup(c, names[i], 30000, 0, &v));
                const gpuipc_info *in = gpuipc_view_info(v);
                uint64_t g = in->size;  /* W and Y are one chunk long, Y at g / 2 */

                ptr[i] = (CUdeviceptr)(uintptr_t)gpuipc_view_data(v);
                if (in->kind != GPUIPC_KIND_CUDA_VMM || in->n_chunks != (i ? 2u : 1u))
                        return fail("%s: kind %d, %u chunks", names[i], in->kind, in->n_chunks);
                /* W is A (seed 67); Y is Z's second half (61), then A's first. */
                bad = i == 0 ? count_bad(ptr[0], g, 67, 0) :
                      count_bad(ptr[1], g / 2, 61, g / 2) + count_bad(ptr[1] + g / 2, g / 2, 67, 0);
                if (bad != 0)
                        return fail("%s: %llu wrong bytes", names[i], bad);
                GK(gpuipc_view_release(v));
                if (cuMemGetAddressRange(&b, &n, ptr[i]) != CUDA_SUCCESS)
                        return fail("%s: not kept mapped after its view", names[i]);
        }
        /* The mappings stay cached until the daemon says unmap; each call
         * reads that and sends the unhold.  No trim here: it would let go
         * on its own and hide a missing unmap. */
        for (int i = 0; i < 600 && r == -ETIMEDOUT; i++)
                r = gpuipc_view_lookup(c, "gpu/vmm-chunks/done", 50, 0, &v);
        GK(r);
        GK(gpuipc_view_release(v));
        for (int i = 0; i < 2; i++)
                if (cuMemGetAddressRange(&b, &n, ptr[i]) == CUDA_SUCCESS)
                        return fail("%s: still mapped after unmapped", names[i]);
        return 0;
}

/* One buffer of the peer case, looked up for this process's ordinal 0. */
static int consume_peer_one(gpuipc_client *c, const char *name, uint64_t size, unsigned seed,
                            uint64_t pattern_off, int can_peer, const char *here)
{
        unsigned flags = can_peer ? 0 : GPUIPC_LOOKUP_COPY_TO_DEVICE;
        gpuipc_view *v;
        double t0;
        int r;

        if (!can_peer) {
                r = gpuipc_view_lookup_device(c, name, 30000, 0, 0, &v);
                if (r != -EXDEV)
                        return fail("%s without peer access: %d, expected -EXDEV", name, r);
                printf("no peer access: %s\n", gpuipc_errmsg(c));
        }
        t0 = now_us();
        GK(gpuipc_view_lookup_device(c, name, 30000, flags, 0, &v));
        if (!strcmp(gpuipc_view_info(v)->device, here))
                return fail("%s lives on %s, this process's device 0: not a cross-device case",
                            name, here);
        if (gpuipc_view_device(v) != 0 || gpuipc_view_copied(v) != !can_peer)
                return fail("%s: device %d copied %d", name, gpuipc_view_device(v),
                            gpuipc_view_copied(v));
        if (count_bad((CUdeviceptr)(uintptr_t)gpuipc_view_data(v), size, seed, pattern_off))
                return fail("%s: wrong bytes on the consumer's GPU", name);
        printf("timing %s %s lookup_us=%.0f\n", name, can_peer ? "peer" : "copy", now_us() - t0);
        if (!strcmp(name, "gpu/peer/ipc"))
                GK(gpuipc_name_unregister(c, name));         /* the producer's cue */
        GK(gpuipc_view_release(v));
        return 0;
}

static int consume_peer(gpuipc_client *c)
{
        gpuipc_cuda_status *s;
        char here[64];
        int can, r;

        GK(gpuipc_cuda_status_get(&s));
        if (s->n_devices < 2) {
                gpuipc_cuda_status_free(s);
                return fail("the consumer sees fewer than 2 GPUs");
        }
        snprintf(here, sizeof(here), "%s", gpuipc_cuda_status_device(s, 0)->uuid);
        can = gpuipc_cuda_status_peer(s, 0, 1) == 1;
        printf("peer: consumer GPU %s, peer access to GPU %s: %s\n", here,
               gpuipc_cuda_status_device(s, 1)->uuid,
               can ? "yes" : "no");
        gpuipc_cuda_status_free(s);
        r = consume_peer_one(c, "gpu/peer/ipc", 4 * MiB, 53, MiB, can, here);
        if (r == 0)
                r = consume_peer_one(c, "gpu/peer/vmm", 8 * MiB, 59, 0, can, here);
        if (r == 0 && can && shim_count("cuIpcOpenMemHandle_v2") > 1)
                r = fail("one cuda-ipc lookup opened %ld handles",
                         shim_count("cuIpcOpenMemHandle_v2"));
        return r;
}

/* ---- same process --------------------------------------------------------- */

static int self_lookup(gpuipc_client *c)
{
        CUdeviceptr p;
        gpuipc_view *v;
        int r = 0;

        CK(cuMemAlloc(&p, 2 * MiB));
        GK(gpuipc_cuda_register(c, "gpu/self", p + 4096, 8192, NULL, NULL, 0, NULL));
        GK(gpuipc_view_lookup(c, "gpu/self", 0, 0, &v));
        if ((CUdeviceptr)(uintptr_t)gpuipc_view_data(v) != p + 4096)
                r = fail("same-process lookup returned %p, not the producer's pointer",
                         gpuipc_view_data(v));
        GK(gpuipc_view_release(v));
        CK(cuMemFree(p));
        return r;
}

/* ---- orchestration --------------------------------------------------------- */

static int role(const char *who, const char *name)
{
        gpuipc_client *c;
        int r;

        gpu_setup();
        GK(gpuipc_client_connect(NULL, &c));
        gpu_client = c;
        if (!strcmp(who, "producer"))
                r = !strcmp(name, "pool") ? produce_pool(c) :
                    !strcmp(name, "share") ? produce_share(c) :
                    !strcmp(name, "vmm") ? produce_vmm(c) :
                    !strcmp(name, "adopt") ? produce_adopt(c) :
                    !strcmp(name, "adopt-cached") ? produce_adopt_cached(c) :
                    !strcmp(name, "event") ? produce_event(c, false) :
                    !strcmp(name, "event-control") ? produce_event(c, true) :
                    !strcmp(name, "vmm-chunks") ? produce_vmm_chunks(c) :
                    !strcmp(name, "peer") ? produce_peer(c) : self_lookup(c);
        else
                r = !strcmp(name, "pool") ? consume_pool(c) :
                    !strcmp(name, "share") ? consume_share(c) :
                    !strcmp(name, "vmm") ? consume_simple(c, "gpu/vmm", GPUIPC_KIND_CUDA_VMM,
                                                          64 * MiB, 23, 0) :
                    !strcmp(name, "adopt") ? consume_simple(c, "gpu/adopt",
                                                            GPUIPC_KIND_CUDA_VMM, 6 * MiB, 31,
                                                            MiB) :
                    !strcmp(name, "adopt-cached") ? consume_adopt_cached(c) :
                    !strcmp(name, "event") ? consume_event(c, false) :
                    !strcmp(name, "vmm-chunks") ? consume_vmm_chunks(c) :
                    !strcmp(name, "peer") ? consume_peer(c) :
                    consume_event(c, true);
        gpuipc_client_free(c);
        return r == 0 ? 0 : 1;
}

static pid_t spawn_role(const char *self, const char *who, const char *name, char **env)
{
        char *argv[] = { (char *)self, (char *)who, (char *)name, NULL };
        pid_t pid;

        if (posix_spawn(&pid, self, NULL, NULL, argv, env) != 0)
                return -1;
        return pid;
}

/* environ with CUDA_VISIBLE_DEVICES=cvd; static storage, one at a time. */
static char **env_with_cvd(const char *cvd)
{
        static char *env[512];
        static char var[64];
        size_t n = 0;

        snprintf(var, sizeof(var), "CUDA_VISIBLE_DEVICES=%s", cvd);
        for (char **e = environ; *e && n < sizeof(env) / sizeof(env[0]) - 2; e++)
                if (strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0)
                        env[n++] = *e;
        env[n++] = var;
        env[n] = NULL;
        return env;
}

/* GPUs visible to this process (cuInit here is harmless: roles are
 * spawned, not forked). */
static int gpu_count(void)
{
        int n = 0;

        if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS)
                return 0;
        return n;
}

static int wait_ok(pid_t pid)
{
        int st;

        return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv)
{
        static const struct {
                const char *name;
                bool producer_first;    /* the producer exits before the consumer starts */
        } cases[] = {
                { "pool", false }, { "share", false }, { "vmm", true }, { "adopt", true },
                { "adopt-cached", false }, { "event", false }, { "event-control", false }, { "self", false },
                { "vmm-chunks", false }, { "peer", false },
        };
        int passed = 0, failed = 0, skipped = 0;

        if (argc == 3)
                return role(argv[1], argv[2]);
        if (argc != 2) {
                fprintf(stderr, "usage: %s all | CASE | producer|consumer CASE\n", argv[0]);
                return 2;
        }
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const char *n = cases[i].name;
                bool ok;
                pid_t prod, cons = -1;

                if (strcmp(argv[1], "all") != 0 && strcmp(argv[1], n) != 0)
                        continue;

                if (!strcmp(n, "peer")) {
                        if (gpu_count() < 2) {
                                printf("SKIP: peer (needs 2 GPUs)\n");
                                fflush(stdout);
                                skipped++;
                                continue;
                        }
                        prod = spawn_role(argv[0], "producer", n, env_with_cvd("0,1"));
                        cons = spawn_role(argv[0], "consumer", n, env_with_cvd("1,0"));
                        ok = wait_ok(cons);
                        ok = wait_ok(prod) && ok;
                        printf("%s: %s\n", ok ? "PASS" : "FAIL", n);
                        fflush(stdout);
                        ok ? passed++ : failed++;
                        continue;
                }
                prod = spawn_role(argv[0], "producer", n, environ);
                if (!strcmp(n, "self")) {
                        ok = wait_ok(prod);
                } else if (cases[i].producer_first) {
                        ok = wait_ok(prod);
                        cons = spawn_role(argv[0], "consumer", n, environ);
                        ok = wait_ok(cons) && ok;
                } else {
                        cons = spawn_role(argv[0], "consumer", n, environ);
                        ok = wait_ok(cons);
                        ok = wait_ok(prod) && ok;
                }
                printf("%s: %s\n", ok ? "PASS" : "FAIL", n);
                fflush(stdout);
                ok ? passed++ : failed++;
        }
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
        return failed ? 1 : 0;
}
