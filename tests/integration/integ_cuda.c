/* integ_cuda.c: cuda-ipc and cuda-vmm buffers between real processes,
 * through a real gpuipcd and the CUDA driver double
 * ($GPUIPC_BUILDDIR/tests/cuda-double/libcuda.so.1), whose device memory is
 * shared memory and whose device pointers are host addresses, so the test
 * reads device views directly. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "gpuipc.h"
#include "harness.h"
#include "cuda/driver.h"

#define ALLOC_SIZE (64ull << 20)
#define REG_SIZE   32768u

/* helper-cuda-producer adopt */
#define ADOPT_VMM_SIZE 3145733u
#define ADOPT_A_SIZE   1048579u
#define ADOPT_B_SIZE   3145728u

static inline uint64_t reg_offset(unsigned i, unsigned nallocs)
{
        return (4ull << 20) + 12345 + (uint64_t)(i / nallocs) * 65536;
}

static const char *double_path(void)
{
        return h_path("tests/cuda-double/libcuda.so.1");
}

static void cuda_setup(void)
{
        /* These count opens and closes view by view: the mapping cache
         * (integ_alloc) is off, as GPUIPC_MAP_CACHE_ENTRIES=0 turns it. */
        setenv("GPUIPC_MAP_CACHE_ENTRIES", "0", 1);
        setenv("GPUIPC_LIBCUDA", double_path(), 1);
        unsetenv("CUDA_VISIBLE_DEVICES");
        h_setup();
}

static void cuda2_setup(void)
{
        setenv("GPUIPC_CUDA_DOUBLE_DEVICES", "2", 1);
        cuda_setup();
}

TestSuite(cuda, .init = cuda_setup, .fini = h_teardown, .timeout = 30);

/* Calls of a driver entry point in this process, counted by the double. */
static long dcount(const char *fn)
{
        void *dl = dlopen(double_path(), RTLD_NOW | RTLD_LOCAL);
        long (*count)(const char *);

        cr_assert_not_null(dl, "dlopen %s: %s", double_path(), dlerror());
        count = (long (*)(const char *))dlsym(dl, "gpuipc_cuda_double_count");
        cr_assert_not_null(count, "the double lacks gpuipc_cuda_double_count");
        long n = count(fn);
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

static void check_pattern(const void *data, size_t size, uint32_t seed)
{
        const uint8_t *p = data;
        for (size_t i = 0; i < size; i++)
                if (p[i] != h_pattern(i, seed))
                        cr_assert_fail("byte %zu is 0x%02x, want 0x%02x", i, p[i], h_pattern(i, seed));
}

/* Starts helper-cuda-producer ipc and waits for its "ready". */
static void produce_ipc(struct h_child *ch, const char *name, const char *ordinal,
                        const char *nallocs, const char *nregs, const char *seed, bool event)
{
        const char *args[] = { "ipc", name, ordinal, nallocs, nregs, seed,
                               event ? "--event" : NULL, NULL };
        char line[64];
        h_spawn(ch, "helper-cuda-producer", args, true);
        int n = h_read_line(ch, line, sizeof(line), 15000);
        if (n < 0)
                cr_assert_fail("helper-cuda-producer ipc %s: no ready line (exit %d)", name,
                               h_wait(ch, 5000));
        cr_assert_str_eq(line, "ready");
}

Test(cuda, ipc_offset_cross_process)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v = NULL;
        const gpuipc_info *info;
        int r;

        produce_ipc(&prod, "t/buf", "0", "1", "1", "7", true);
        c = connect_client();
        r = gpuipc_view_lookup(c, "t/buf", 0, 0, &v);
        cr_assert_eq(r, 0, "lookup: %s", gpuipc_errmsg(c));
        info = gpuipc_view_info(v);
        cr_assert_eq(info->kind, GPUIPC_KIND_CUDA_IPC);
        cr_assert_eq(info->offset, (4u << 20) + 12345);
        cr_assert_eq(info->size, REG_SIZE);
        cr_assert_eq(info->alloc_size, ALLOC_SIZE);
        cr_assert_neq(info->alloc_id, 0);
        cr_assert_neq(info->buffer_id, 0);
        cr_assert_eq(info->has_event, 1);
        cr_assert_eq(strncmp(info->device, "GPU-", 4), 0, "device %s", info->device);
        cr_assert_eq(gpuipc_view_device(v), 0);
        cr_assert_eq(gpuipc_view_size(v), REG_SIZE);
        check_pattern(gpuipc_view_data(v), REG_SIZE, 7);
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 1);
        cr_assert_eq(dcount("cuIpcOpenEventHandle"), 1);
        cr_assert_eq(gpuipc_view_wait_stream(v, NULL), 0, "%s", gpuipc_errmsg(c));

        /* The owner goes: the lease holder is told, and the view refuses
         * to hand out stream order. */
        cr_assert_eq(h_wait(&prod, 10000), 0);
        for (int i = 0; i < 100 && r == 0; i++) {
                r = gpuipc_view_wait_stream(v, NULL);
                if (r == 0)
                        h_sleep_ms(20);
        }
        cr_assert_eq(r, -ESTALE, "wait_stream after revoke: %d (%s)", r, gpuipc_errmsg(c));
        gpuipc_view_release(v);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 1);
        gpuipc_client_free(c);
}

static void open_once(unsigned clients)
{
        enum { NREGS = 200, NALLOCS = 4 };
        gpuipc_view *views[2][NREGS];
        gpuipc_client *c[2];
        struct h_child prod;
        char name[64];
        int r;

        produce_ipc(&prod, "pool", "0", "4", "200", "100", false);
        for (unsigned k = 0; k < clients; k++) {
                c[k] = connect_client();
                for (unsigned i = 0; i < NREGS; i++) {
                        snprintf(name, sizeof(name), "pool/%u", i);
                        r = gpuipc_view_lookup(c[k], name, 0, 0, &views[k][i]);
                        cr_assert_eq(r, 0, "lookup %s: %s", name, gpuipc_errmsg(c[k]));
                        cr_assert_eq(gpuipc_view_info(views[k][i])->offset, reg_offset(i, NALLOCS));
                        check_pattern(gpuipc_view_data(views[k][i]), REG_SIZE, 100 + i);
                }
        }
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), NALLOCS, "opens: %ld",
                     dcount("cuIpcOpenMemHandle_v2"));
        for (unsigned k = 0; k < clients; k++)
                for (unsigned i = 0; i < NREGS; i++)
                        cr_assert_eq(gpuipc_view_release(views[k][i]), 0);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), NALLOCS);
        for (unsigned k = 0; k < clients; k++)
                gpuipc_client_free(c[k]);
        cr_assert_eq(h_wait(&prod, 10000), 0);
}

Test(cuda, open_once_per_process)
{
        open_once(2);
}

Test(cuda, open_once_already_mapped_driver)
{
        setenv("GPUIPC_CUDA_DOUBLE_ALREADY_MAPPED", "1", 1);
        open_once(2);
}

Test(cuda, same_process_uses_own_pointer)
{
        struct cuda *cu;
        char why[256];
        CUdeviceptr p;
        CUcontext ctx;
        gpuipc_client *a = connect_client(), *b = connect_client();
        gpuipc_view *v = NULL;
        uint64_t id;
        int r;

        cr_assert_eq(cuda_load(&cu, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(cuda_init(cu), 0);
        cr_assert_eq(cu->cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
        cr_assert_eq(cu->cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        cr_assert_eq(cu->cuMemAlloc_v2(&p, ALLOC_SIZE), CUDA_SUCCESS);
        r = gpuipc_cuda_register(a, "own/x", p + 4096, 1000, NULL, NULL, 0, &id);
        cr_assert_eq(r, 0, "register: %s", gpuipc_errmsg(a));
        r = gpuipc_view_lookup(b, "own/x", 0, 0, &v);
        cr_assert_eq(r, 0, "lookup: %s", gpuipc_errmsg(b));
        cr_assert_eq((uint64_t)(uintptr_t)gpuipc_view_data(v), p + 4096);
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 0);
        /* The caller's context is left as it was. */
        CUcontext cur = NULL;
        cr_assert_eq(cu->cuCtxGetCurrent(&cur), CUDA_SUCCESS);
        cr_assert_eq(cur, ctx);
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(gpuipc_reg_wait_released(a, id, 5000), 0, "%s", gpuipc_errmsg(a));
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 0);
        gpuipc_client_free(b);
        gpuipc_client_free(a);
        cuda_unload(cu);
}

/* gpuipc_view_dlpack()'s struct: dlpack.h's DLManagedTensor before 1.0. */
struct dl_managed {
        void *data;
        int32_t device_type, device_id, ndim;
        uint8_t code, bits;
        uint16_t lanes;
        int64_t *shape, *strides;
        uint64_t byte_offset;
        void *manager_ctx;
        void (*deleter)(struct dl_managed *self);
};

static void on_dl_delete(void *ctx)
{
        (*(int *)ctx)++;
}

Test(cuda, view_as_dlpack)
{
        const int64_t shape[] = { 3, 4 }, strides[] = { 4, 12 };
        gpuipc_meta meta = GPUIPC_META_INIT;
        gpuipc_client *a = connect_client(), *b = connect_client();
        gpuipc_view *v = NULL, *hv = NULL;
        gpuipc_hostbuf *hb = NULL;
        struct dl_managed *m = NULL;
        struct cuda *cu;
        CUcontext ctx;
        CUdeviceptr p;
        char why[256];
        int deleted = 0, r;
        void *out = NULL;

        cr_assert_eq(cuda_load(&cu, why, sizeof(why)), 0, "%s", why);
        cr_assert_eq(cuda_init(cu), 0);
        cr_assert_eq(cu->cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
        cr_assert_eq(cu->cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        cr_assert_eq(cu->cuMemAlloc_v2(&p, 1 << 20), CUDA_SUCCESS);
        meta.dtype = "float32";
        meta.ndim = 2;
        meta.shape = shape;
        meta.strides = strides;
        r = gpuipc_cuda_register(a, "dl/x", p + 256, 48, &meta, NULL, 0, NULL);
        cr_assert_eq(r, 0, "register: %s", gpuipc_errmsg(a));
        cr_assert_eq(gpuipc_view_lookup(b, "dl/x", 0, 0, &v), 0, "%s", gpuipc_errmsg(b));

        r = gpuipc_view_dlpack(v, on_dl_delete, &deleted, &out);
        cr_assert_eq(r, 0, "%s", gpuipc_strerror(r));
        m = out;
        cr_expect_eq(m->data, gpuipc_view_data(v));
        cr_expect_eq((uint64_t)(uintptr_t)m->data, p + 256);
        cr_expect_eq(m->device_type, 2);        /* kDLCUDA */
        cr_expect_eq(m->device_id, gpuipc_view_device(v));
        cr_expect_eq(m->ndim, 2);
        cr_expect(m->code == 2 && m->bits == 32 && m->lanes == 1);      /* float32 */
        cr_expect(m->shape[0] == 3 && m->shape[1] == 4);
        cr_assert_not_null(m->strides);
        cr_expect(m->strides[0] == 1 && m->strides[1] == 3);            /* elements */
        cr_expect_eq(m->byte_offset, 0);
        /* The view is released only after the consumer let go, which
         * calls on_delete once. */
        cr_expect_eq(deleted, 0);
        m->deleter(m);
        cr_expect_eq(deleted, 1);
        cr_assert_eq(gpuipc_view_release(v), 0);

        /* What it cannot describe, and what it does not take. */
        meta.dtype = ">f4";
        meta.strides = NULL;
        cr_assert_eq(gpuipc_cuda_register(a, "dl/be", p, 48, &meta, NULL, 0, NULL), 0);
        cr_assert_eq(gpuipc_view_lookup(b, "dl/be", 0, 0, &v), 0, "%s", gpuipc_errmsg(b));
        cr_expect_eq(gpuipc_view_dlpack(v, NULL, NULL, &out), -EINVAL);
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(gpuipc_hostbuf_new(4096, &hb), 0);
        cr_assert_eq(gpuipc_hostbuf_register(a, "dl/host", hb, NULL, 0, NULL), 0);
        cr_assert_eq(gpuipc_view_lookup(b, "dl/host", 0, 0, &hv), 0, "%s", gpuipc_errmsg(b));
        cr_expect_eq(gpuipc_view_dlpack(hv, NULL, NULL, &out), -EINVAL);
        cr_expect_eq(gpuipc_view_dlpack(NULL, NULL, NULL, &out), -EINVAL);
        cr_assert_eq(gpuipc_view_release(hv), 0);
        gpuipc_hostbuf_free(hb);
        gpuipc_client_free(b);
        gpuipc_client_free(a);
        cuda_unload(cu);
}

Test(cuda, vmm_outlives_producer)
{
        const char *args[] = { "vmm", "v/buf", "0", "3145733", "9", NULL };
        gpuipc_view *v1 = NULL, *v2 = NULL;
        struct h_child prod;
        gpuipc_client *c;
        const gpuipc_info *info;
        int r;

        h_spawn(&prod, "helper-cuda-producer", args, false);
        cr_assert_eq(h_wait(&prod, 15000), 0);
        c = connect_client();
        r = gpuipc_view_lookup(c, "v/buf", 0, 0, &v1);
        cr_assert_eq(r, 0, "lookup: %s", gpuipc_errmsg(c));
        r = gpuipc_view_lookup(c, "v/buf", 0, 0, &v2);
        cr_assert_eq(r, 0, "lookup: %s", gpuipc_errmsg(c));
        info = gpuipc_view_info(v1);
        cr_assert_eq(info->kind, GPUIPC_KIND_CUDA_VMM);
        cr_assert_eq(info->size, 3145733);
        cr_assert_eq(info->alloc_size, 4u << 20);
        cr_assert_eq(gpuipc_view_data(v1), gpuipc_view_data(v2));
        check_pattern(gpuipc_view_data(v1), 3145733, 9);
        cr_assert_eq(dcount("cuMemImportFromShareableHandle"), 1);
        gpuipc_view_release(v1);
        gpuipc_view_release(v2);
        cr_assert_eq(dcount("cuMemRelease"), 1);
        gpuipc_client_free(c);
}

/* Runs helper-cuda-producer with args to its "ready" and exit. */
static void produce_and_exit(const char *const *args)
{
        struct h_child prod;
        char line[64];

        h_spawn(&prod, "helper-cuda-producer", args, true);
        int n = h_read_line(&prod, line, sizeof(line), 15000);
        int rc = h_wait(&prod, 15000);
        cr_assert(n >= 0 && rc == 0, "helper-cuda-producer %s: exit %d, see its stderr",
                  args[0], rc);
        cr_assert_str_eq(line, "ready");
}

/* Looks name up and checks it is a cuda-vmm view of size bytes of
 * h_pattern(seed) in an allocation of alloc_size bytes. */
static gpuipc_view *lookup_vmm(gpuipc_client *c, const char *name, uint64_t size,
                               uint64_t alloc_size, uint32_t seed)
{
        gpuipc_view *v = NULL;
        const gpuipc_info *info;
        int r = gpuipc_view_lookup(c, name, 0, 0, &v);

        cr_assert_eq(r, 0, "lookup %s: %s", name, gpuipc_errmsg(c));
        info = gpuipc_view_info(v);
        cr_assert_eq(info->kind, GPUIPC_KIND_CUDA_VMM, "%s: kind %d", name, info->kind);
        cr_assert_eq(info->size, size, "%s: size %llu", name, (unsigned long long)info->size);
        cr_assert_eq(info->alloc_size, alloc_size, "%s: alloc_size %llu", name,
                     (unsigned long long)info->alloc_size);
        check_pattern(gpuipc_view_data(v), size, seed);
        return v;
}

/* On the real driver every exported VMM fd is an open of /dev/nvidiactl, so
 * two allocations of one producer come as fds of one inode (the double does
 * the same): each must still map its own memory. */
static void vmm_two_allocations(const char *size0, uint64_t alloc0, const char *size1,
                                uint64_t alloc1)
{
        const char *args[] = { "vmm", "two", "0", size0, "11", size1, "12", NULL };
        uint64_t s0 = strtoull(size0, NULL, 0), s1 = strtoull(size1, NULL, 0);
        gpuipc_view *v0, *v1, *again;
        gpuipc_client *c;

        produce_and_exit(args);
        c = connect_client();
        v0 = lookup_vmm(c, "two/0", s0, alloc0, 11);
        v1 = lookup_vmm(c, "two/1", s1, alloc1, 12);
        again = lookup_vmm(c, "two/0", s0, alloc0, 11);
        cr_assert_neq(gpuipc_view_info(v0)->alloc_id, gpuipc_view_info(v1)->alloc_id);
        cr_assert_neq(gpuipc_view_data(v0), gpuipc_view_data(v1));
        cr_assert_eq(gpuipc_view_data(v0), gpuipc_view_data(again));
        cr_assert_eq(dcount("cuMemImportFromShareableHandle"), 2, "imports: %ld",
                     dcount("cuMemImportFromShareableHandle"));
        cr_assert_eq(gpuipc_view_release(again), 0);
        cr_assert_eq(gpuipc_view_release(v1), 0);
        cr_assert_eq(gpuipc_view_release(v0), 0);
        cr_assert_eq(dcount("cuMemRelease"), 2);
        gpuipc_client_free(c);
}

Test(cuda, vmm_two_allocations_one_producer)
{
        vmm_two_allocations("3145733", 4u << 20, "5242880", 6u << 20);
}

/* Equal sizes: nothing but the allocation's identity tells them apart. */
Test(cuda, vmm_two_allocations_same_size)
{
        vmm_two_allocations("1000000", 2u << 20, "2000000", 2u << 20);
}

Test(cuda, adopt_after_vmm_registration)
{
        const char *args[] = { "adopt", "ad", "0", "40", NULL };
        gpuipc_view *vv, *va, *vb;
        gpuipc_client *c;

        produce_and_exit(args);
        c = connect_client();
        vv = lookup_vmm(c, "ad/vmm", ADOPT_VMM_SIZE, 4u << 20, 40);
        va = lookup_vmm(c, "ad/a", ADOPT_A_SIZE, 2u << 20, 41);
        vb = lookup_vmm(c, "ad/b", ADOPT_B_SIZE, 4u << 20, 42);
        cr_assert_eq(gpuipc_view_info(va)->offset, 0);
        cr_assert_eq(gpuipc_view_info(vb)->offset, 0);
        cr_assert_eq(dcount("cuMemImportFromShareableHandle"), 3);
        cr_assert_eq(gpuipc_view_release(vv), 0);
        cr_assert_eq(gpuipc_view_release(va), 0);
        cr_assert_eq(gpuipc_view_release(vb), 0);
        gpuipc_client_free(c);
}

TestSuite(cuda2, .init = cuda2_setup, .fini = h_teardown, .timeout = 30);

Test(cuda2, visible_devices_map_by_uuid)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v = NULL;
        int r;

        produce_ipc(&prod, "d/buf", "1", "1", "1", "3", false);
        setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
        c = connect_client();
        r = gpuipc_view_lookup(c, "d/buf", 0, 0, &v);
        cr_assert_eq(r, 0, "lookup: %s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_view_device(v), 0);
        check_pattern(gpuipc_view_data(v), REG_SIZE, 3);
        gpuipc_view_release(v);
        gpuipc_client_free(c);
        cr_assert_eq(h_wait(&prod, 10000), 0);
}

Test(cuda2, invisible_device_is_enodev)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_list *l = NULL;
        gpuipc_view *v = NULL;
        int r;

        produce_ipc(&prod, "d/buf", "1", "1", "1", "3", false);
        setenv("CUDA_VISIBLE_DEVICES", "0", 1);
        c = connect_client();
        cr_assert_eq(gpuipc_name_stat(c, "d/buf", &l), 0);
        r = gpuipc_view_lookup(c, "d/buf", 0, 0, &v);
        cr_assert_eq(r, -ENODEV, "lookup: %d", r);
        cr_assert_not_null(strstr(gpuipc_errmsg(c), gpuipc_list_get(l, 0)->device),
                           "errmsg: %s", gpuipc_errmsg(c));
        cr_assert_not_null(strstr(gpuipc_errmsg(c), "CUDA_VISIBLE_DEVICES"));
        gpuipc_list_free(l);
        gpuipc_client_free(c);
        cr_assert_eq(h_wait(&prod, 10000), 0);
}

Test(cuda, no_driver_is_enotsup)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_hostbuf *hb = NULL;
        gpuipc_cudabuf *cb = NULL;
        gpuipc_view *v = NULL;
        int r;

        produce_ipc(&prod, "n/buf", "0", "1", "1", "3", false);
        setenv("GPUIPC_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
        c = connect_client();
        r = gpuipc_cuda_register(c, "n/x", 0x10000, 10, NULL, NULL, 0, NULL);
        cr_assert_eq(r, -ENOTSUP);
        cr_assert_not_null(strstr(gpuipc_errmsg(c), "CUDA driver unavailable"), "%s",
                           gpuipc_errmsg(c));
        r = gpuipc_view_lookup(c, "n/buf", 0, 0, &v);
        cr_assert_eq(r, -ENOTSUP);
        cr_assert_not_null(strstr(gpuipc_errmsg(c), "/nonexistent/libcuda.so.1"), "%s",
                           gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_cudabuf_new(0, 4096, &cb), -ENOTSUP);
        /* Host buffers never need the driver. */
        cr_assert_eq(gpuipc_hostbuf_new(4096, &hb), 0);
        cr_assert_eq(gpuipc_hostbuf_register(c, "n/host", hb, NULL, 0, NULL), 0);
        cr_assert_eq(gpuipc_view_lookup(c, "n/host", 0, 0, &v), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_view_device(v), -1);
        gpuipc_view_release(v);
        gpuipc_hostbuf_free(hb);
        gpuipc_client_free(c);
        cr_assert_eq(h_wait(&prod, 10000), 0);
}

Test(cuda, stats_report_cuda)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_stats *s = NULL;

        produce_ipc(&prod, "s/buf", "0", "1", "1", "3", false);
        c = connect_client();
        cr_assert_eq(gpuipc_stats_fetch(c, &s), 0);
        cr_assert_eq(s->bytes_cuda_ipc, REG_SIZE, "bytes_cuda_ipc %llu",
                     (unsigned long long)s->bytes_cuda_ipc);
        cr_assert_not_null(s->cuda_reason);
        if (s->cuda_available)
                cr_assert_eq(s->cuda_driver_version, 13000);
        gpuipc_stats_free(s);
        gpuipc_client_free(c);
        cr_assert_eq(h_wait(&prod, 10000), 0);
}

/* ---- consumers on another GPU (issue 9) ---------------------------------
 *
 * Two double devices; the producer works on physical 0 and the consumer
 * sees CUDA_VISIBLE_DEVICES=1,0: physical 0 is its ordinal 1 (the buffer's
 * home) and physical 1 its ordinal 0, the consumer device. */

#define UUID_PHYS0 "GPU-67707569-7063-2d64-6f75-626c652d3000"
#define UUID_PHYS1 "GPU-67707569-7063-2d64-6f75-626c652d3100"

static void produce_vmm_on0(const char *name, const char *seed)
{
        const char *args[] = { "vmm", name, "0", "3145733", seed, NULL };
        struct h_child prod;

        h_spawn(&prod, "helper-cuda-producer", args, false);
        cr_assert_eq(h_wait(&prod, 15000), 0);
}

static gpuipc_view *lookup_dev(gpuipc_client *c, const char *name, unsigned flags, int device)
{
        gpuipc_view *v = NULL;
        int r = gpuipc_view_lookup_device(c, name, 0, flags, device, &v);

        cr_assert_eq(r, 0, "lookup %s for device %d: %s", name, device, gpuipc_errmsg(c));
        return v;
}

Test(cuda2, peer_ipc_other_device)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v0, *v0b, *vh;

        produce_ipc(&prod, "p/buf", "0", "1", "1", "5", true);
        setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
        c = connect_client();
        v0 = lookup_dev(c, "p/buf", 0, 0);
        cr_assert_eq(gpuipc_view_device(v0), 0);
        cr_assert_eq(gpuipc_view_copied(v0), 0);
        cr_assert_str_eq(gpuipc_view_info(v0)->device, UUID_PHYS0);
        check_pattern(gpuipc_view_data(v0), REG_SIZE, 5);
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 1);
        /* Once per (allocation, consumer device). */
        v0b = lookup_dev(c, "p/buf", 0, 0);
        cr_assert_eq(gpuipc_view_data(v0b), gpuipc_view_data(v0));
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 1);
        vh = lookup_dev(c, "p/buf", 0, -1);
        cr_assert_eq(gpuipc_view_device(vh), 1);
        check_pattern(gpuipc_view_data(vh), REG_SIZE, 5);
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 2);
        cr_assert_eq(gpuipc_view_wait_stream(v0, NULL), 0, "%s", gpuipc_errmsg(c));
        cr_assert_eq(gpuipc_view_release(v0), 0);
        cr_assert_eq(gpuipc_view_release(vh), 0);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 1);
        cr_assert_eq(gpuipc_view_release(v0b), 0);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 2);
        gpuipc_client_free(c);
        cr_assert_eq(h_wait(&prod, 10000), 0);
}

Test(cuda2, peer_vmm_other_device)
{
        gpuipc_client *c;
        gpuipc_view *v0, *v0b, *vh;

        produce_vmm_on0("pv/buf", "6");
        setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
        c = connect_client();
        v0 = lookup_dev(c, "pv/buf", 0, 0);
        cr_assert_eq(gpuipc_view_device(v0), 0);
        cr_assert_eq(gpuipc_view_copied(v0), 0);
        check_pattern(gpuipc_view_data(v0), 3145733, 6);
        v0b = lookup_dev(c, "pv/buf", 0, 0);
        cr_assert_eq(gpuipc_view_data(v0b), gpuipc_view_data(v0));
        cr_assert_eq(dcount("cuMemImportFromShareableHandle"), 1);
        vh = lookup_dev(c, "pv/buf", 0, 1);
        cr_assert_eq(gpuipc_view_device(vh), 1);
        cr_assert_neq(gpuipc_view_data(vh), gpuipc_view_data(v0));
        check_pattern(gpuipc_view_data(vh), 3145733, 6);
        /* One import per process, mapped once for each device. */
        cr_assert_eq(dcount("cuMemImportFromShareableHandle"), 1);
        cr_assert_eq(dcount("cuMemMap"), 2);
        cr_assert_eq(dcount("cuMemSetAccess"), 2);
        cr_assert_eq(gpuipc_view_release(v0), 0);
        cr_assert_eq(gpuipc_view_release(v0b), 0);
        cr_assert_eq(dcount("cuMemUnmap"), 1);
        cr_assert_eq(dcount("cuMemRelease"), 0);
        cr_assert_eq(gpuipc_view_release(vh), 0);
        cr_assert_eq(dcount("cuMemRelease"), 1);
        gpuipc_client_free(c);
}

/* The consumer device cannot reach the buffer: -EXDEV naming both. */
static void check_no_peer(gpuipc_client *c, const char *name)
{
        gpuipc_view *v = NULL;
        const char *m;
        int r = gpuipc_view_lookup_device(c, name, 0, 0, 0, &v);

        cr_assert_eq(r, -EXDEV, "lookup: %d (%s)", r, gpuipc_errmsg(c));
        m = gpuipc_errmsg(c);
        cr_assert_not_null(strstr(m, UUID_PHYS0), "errmsg: %s", m);
        cr_assert_not_null(strstr(m, UUID_PHYS1), "errmsg: %s", m);
        cr_assert_not_null(strstr(m, "ordinal 0"), "errmsg: %s", m);
        cr_assert_not_null(strstr(m, "ordinal 1"), "errmsg: %s", m);
        cr_assert_not_null(strstr(m, "peer"), "errmsg: %s", m);
        cr_assert_not_null(strstr(gpuipc_strerror(r), "peer"));
}

Test(cuda2, no_peer_ipc_error_and_copy)
{
        struct h_child prod;
        gpuipc_client *c;
        gpuipc_view *v, *v2;

        setenv("GPUIPC_CUDA_DOUBLE_NO_PEER", "0-1", 1);
        produce_ipc(&prod, "np/buf", "0", "1", "1", "8", true);
        setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
        c = connect_client();
        check_no_peer(c, "np/buf");
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 0);
        v = lookup_dev(c, "np/buf", GPUIPC_LOOKUP_COPY_TO_DEVICE | GPUIPC_LOOKUP_NO_SYNC, 0);
        cr_assert_eq(gpuipc_view_copied(v), 1);
        cr_assert_eq(gpuipc_view_device(v), 0);
        cr_assert_eq(gpuipc_view_size(v), REG_SIZE);
        check_pattern(gpuipc_view_data(v), REG_SIZE, 8);
        /* Opened on its home device, copied, and the mapping dropped. */
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 1);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 1);
        cr_assert_eq(dcount("cuEventSynchronize"), 1);
        cr_assert_eq(gpuipc_view_wait_stream(v, NULL), 0, "%s", gpuipc_errmsg(c));
        /* A view on the home device is shared as before; a second copy is
         * its own snapshot. */
        v2 = lookup_dev(c, "np/buf", GPUIPC_LOOKUP_COPY_TO_DEVICE, 0);
        cr_assert_eq(gpuipc_view_copied(v2), 1);
        cr_assert_neq(gpuipc_view_data(v2), gpuipc_view_data(v));
        check_pattern(gpuipc_view_data(v2), REG_SIZE, 8);
        cr_assert_eq(gpuipc_view_release(v2), 0);
        cr_assert_eq(dcount("cuMemFree_v2"), 1);
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(dcount("cuMemFree_v2"), 2);
        cr_assert_eq(dcount("cuIpcOpenMemHandle_v2"), 2);
        cr_assert_eq(dcount("cuIpcCloseMemHandle"), 2);
        gpuipc_client_free(c);
        cr_assert_eq(h_wait(&prod, 10000), 0);
}

Test(cuda2, no_peer_vmm_error_and_copy)
{
        gpuipc_client *c;
        gpuipc_view *v;

        setenv("GPUIPC_CUDA_DOUBLE_NO_PEER", "0-1", 1);
        produce_vmm_on0("npv/buf", "9");
        setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
        c = connect_client();
        check_no_peer(c, "npv/buf");
        cr_assert_eq(dcount("cuMemImportFromShareableHandle"), 0);
        v = lookup_dev(c, "npv/buf", GPUIPC_LOOKUP_COPY_TO_DEVICE, 0);
        cr_assert_eq(gpuipc_view_copied(v), 1);
        cr_assert_eq(gpuipc_view_device(v), 0);
        check_pattern(gpuipc_view_data(v), 3145733, 9);
        cr_assert_eq(dcount("cuMemImportFromShareableHandle"), 1);
        cr_assert_eq(dcount("cuMemRelease"), 1);
        cr_assert_eq(gpuipc_view_release(v), 0);
        cr_assert_eq(dcount("cuMemFree_v2"), 1);
        gpuipc_client_free(c);
}

/* Copying needs the buffer's own device in this process. */
Test(cuda2, copy_needs_home_device_visible)
{
        gpuipc_client *c;
        gpuipc_view *v = NULL;
        int r;

        produce_vmm_on0("nh/buf", "4");
        setenv("CUDA_VISIBLE_DEVICES", "1", 1);
        c = connect_client();
        r = gpuipc_view_lookup_device(c, "nh/buf", 0, GPUIPC_LOOKUP_COPY_TO_DEVICE, 0, &v);
        cr_assert_eq(r, -ENODEV, "lookup: %d (%s)", r, gpuipc_errmsg(c));
        cr_assert_not_null(strstr(gpuipc_errmsg(c), UUID_PHYS0), "%s", gpuipc_errmsg(c));
        r = gpuipc_view_lookup_device(c, "nh/buf", 0, 0, 5, &v);
        cr_assert_eq(r, -ENODEV, "lookup: %d", r);
        gpuipc_client_free(c);
}

Test(cuda, lookup_device_bad_argument)
{
        gpuipc_client *c = connect_client();
        gpuipc_view *v = NULL;

        cr_assert_eq(gpuipc_view_lookup_device(c, "x/y", 0, 0, -2, &v), -EINVAL);
        cr_assert_eq(gpuipc_view_copied(NULL), 0);
        gpuipc_client_free(c);
}
