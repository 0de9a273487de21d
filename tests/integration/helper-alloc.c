/* helper-alloc: producers of the allocator paths (integ_alloc.c), through
 * the CUDA driver double ($GPUIPC_LIBCUDA), whose device pointers are host
 * addresses.  Each fills its memory with h_pattern(j, SEED) counted from
 * the start of the memory it made, prints lines the test reads, and keeps
 * its connection until stdin reaches EOF.
 *
 *   helper-alloc chunks NAME SEED
 *     Maps three 2 MiB VMM chunks (POSIX fd handle type, cuMemCreate each)
 *     back to back into one reservation, as PyTorch's expandable segments
 *     do, and registers NAME = [1 MiB, 5 MiB) (three chunks) and NAME-b =
 *     [3 MiB, 6 MiB) (the last two).  "ready".
 *   helper-alloc noexport NAME SEED
 *     One 2 MiB VMM chunk created without an export handle type: register
 *     is refused ("refused: MSG"), then registered with
 *     GPUIPC_REGISTER_COPY.  "ready".
 *   helper-alloc pool NAME SEED
 *     A pool created with the POSIX fd handle type, two allocations of it
 *     (1 MiB, and 3000 bytes registered at offset 100): NAME and NAME-b.
 *     "ready", then waits for both released events ("released"), frees
 *     both allocations and destroys the pool ("freed").
 *   helper-alloc defpool NAME SEED
 *     1 MiB from the device's default pool (cuMemAllocAsync): refused
 *     ("refused: MSG"), then registered with GPUIPC_REGISTER_COPY; the
 *     memory is then overwritten and freed, the copy must not change.
 *     "ready".
 *   helper-alloc explain
 *     Prints "PATH TEXT" of gpuipc_cuda_explain() for cuMemAlloc memory, VMM
 *     chunks, an exportable pool and the default pool (with and without
 *     GPUIPC_REGISTER_COPY), one line each.
 *   helper-alloc cacheipc NAME SEED
 *     cuMemAlloc's 8 MiB and registers NAME/a (4 MiB at 0) and NAME/b
 *     (4 MiB at 4 MiB) with GPUIPC_REGISTER_CACHEABLE.  "ready", then
 *     "released R" once NAME/a's lease went (R the result of
 *     gpuipc_reg_wait_released).  On the line "again" it unregisters both
 *     and registers the same 4 MiB at 0 again as NAME/c: "again R".  On the
 *     line "unregister" it unregisters what is registered and waits for
 *     unmapped: "unmapped R MSG" (R the result), then frees the memory.
 *     The line "adopt" instead adopts what is registered ("adopt R
 *     LEASES"), then waits for unmapped and frees as "unregister" does.
 *   helper-alloc cachebatch NAME SEED
 *     cuMemAlloc's 8 MiB (A, h_pattern(j, SEED)) and 4 MiB (B,
 *     h_pattern(j, SEED + 1)), and registers the batch NAME of three
 *     uint8 columns, x = A's first 4 MiB, y = A's last 4 MiB, z = B, with
 *     GPUIPC_REGISTER_CACHEABLE.  "ready", then "released R" once its
 *     lease went.  On the line "unregister MS" it unregisters the batch and
 *     waits up to MS ms for unmapped: "unmapped R MSG" (MSG the error's);
 *     after a timeout, each line "wait MS" waits again.  Then it frees A
 *     and B.
 *   helper-alloc lookup NAME
 *     A consumer: "ok KIND" when the lookup works and the first bytes are
 *     h_pattern(j, 0) at the view (the test checks the rest), else
 *     "err ERRNO MSG".  Used from another PID namespace.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpuipc.h"
#include "harness.h"
#include "cuda/driver.h"

#ifdef GPUIPC_HAVE_CUDA_H

#define CHUNK (2ull << 20)

/* The driver calls the helper makes itself. */
#define FNS(X) X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)      \
        X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemcpyHtoD_v2) X(cuMemCreate) X(cuMemMap)     \
        X(cuMemAddressReserve) X(cuMemSetAccess) X(cuMemPoolCreate) X(cuMemPoolDestroy)    \
        X(cuMemAllocFromPoolAsync) X(cuMemAllocAsync) X(cuMemsetD8_v2)
#define FIELD(n) __typeof__(n) *n;
static struct { FNS(FIELD) } drv;
#undef FIELD

static int load(void)
{
        void *dl = dlopen(getenv("GPUIPC_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
        CUcontext ctx;
        CUdevice dev;

        if (!dl)
                return -1;
#define LOAD(n) if (!(drv.n = (__typeof__(n) *)dlsym(dl, #n))) return -1;
        FNS(LOAD)
#undef LOAD
        if (drv.cuInit(0) || drv.cuDeviceGet(&dev, 0) ||
            drv.cuDevicePrimaryCtxRetain(&ctx, dev) || drv.cuCtxSetCurrent(ctx))
                return -1;
        return 0;
}

static int fill(CUdeviceptr p, size_t n, uint32_t seed)
{
        uint8_t *buf = malloc(n);
        CUresult res;

        if (!buf)
                return -1;
        for (size_t j = 0; j < n; j++)
                buf[j] = h_pattern(j, seed);
        res = drv.cuMemcpyHtoD_v2(p, buf, n);
        free(buf);
        return res == CUDA_SUCCESS ? 0 : -1;
}

static int reg(gpuipc_client *c, const char *name, CUdeviceptr p, size_t n, unsigned flags)
{
        int r = gpuipc_cuda_register(c, name, p, n, NULL, NULL, flags, NULL);

        if (r < 0)
                fprintf(stderr, "helper-alloc: register %s: %s\n", name, gpuipc_errmsg(c));
        return r;
}

/* Reserves n chunks of CHUNK bytes and maps them back to back. */
static CUdeviceptr vmm_range(unsigned n, CUmemAllocationHandleType type)
{
        CUmemAllocationProp prop = {
                .type = CU_MEM_ALLOCATION_TYPE_PINNED, .requestedHandleTypes = type,
                .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
        };
        CUmemAccessDesc acc = { .location = prop.location,
                                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        CUmemGenericAllocationHandle h;
        CUdeviceptr base = 0;

        if (drv.cuMemAddressReserve(&base, n * CHUNK, 0, 0, 0))
                return 0;
        for (unsigned i = 0; i < n; i++)
                if (drv.cuMemCreate(&h, CHUNK, &prop, 0) ||
                    drv.cuMemMap(base + i * CHUNK, CHUNK, 0, h, 0))
                        return 0;
        return drv.cuMemSetAccess(base, n * CHUNK, &acc, 1) ? 0 : base;
}

static void ready(const char *what)
{
        printf("%s\n", what);
        fflush(stdout);
}

static void refused(gpuipc_client *c, const char *name, CUdeviceptr p, size_t n)
{
        int r = gpuipc_cuda_register(c, name, p, n, NULL, NULL, 0, NULL);

        if (r == 0)
                printf("registered?\n");
        else
                printf("refused: %d %s\n", r, gpuipc_errmsg(c));
        fflush(stdout);
}

static int run_chunks(gpuipc_client *c, const char *name, uint32_t seed)
{
        CUdeviceptr base = vmm_range(3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        char b[300];

        if (!base || fill(base, 3 * CHUNK, seed) < 0)
                return 4;
        snprintf(b, sizeof(b), "%s-b", name);
        if (reg(c, name, base + CHUNK / 2, 2 * CHUNK, 0) < 0 ||
            reg(c, b, base + 3 * CHUNK / 2, 3 * CHUNK / 2, 0) < 0)
                return 6;
        ready("ready");
        return 0;
}

static int run_noexport(gpuipc_client *c, const char *name, uint32_t seed)
{
        CUdeviceptr base = vmm_range(1, CU_MEM_HANDLE_TYPE_NONE);

        if (!base || fill(base, CHUNK, seed) < 0)
                return 4;
        refused(c, name, base, CHUNK);
        if (reg(c, name, base, CHUNK, GPUIPC_REGISTER_COPY) < 0)
                return 6;
        ready("ready");
        return 0;
}

static int run_pool(gpuipc_client *c, const char *name, uint32_t seed)
{
        CUmemPoolProps props = {
                .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
        };
        CUmemoryPool pool;
        CUdeviceptr a = 0, b = 0;
        uint64_t ida, idb;
        char nb[300];

        if (drv.cuMemPoolCreate(&pool, &props) ||
            drv.cuMemAllocFromPoolAsync(&a, 1u << 20, pool, NULL) ||
            drv.cuMemAllocFromPoolAsync(&b, 3000, pool, NULL) ||
            fill(a, 1u << 20, seed) < 0 || fill(b, 3000, seed + 1) < 0)
                return 4;
        snprintf(nb, sizeof(nb), "%s-b", name);
        if (gpuipc_cuda_register(c, name, a, 1u << 20, NULL, NULL, 0, &ida) < 0 ||
            gpuipc_cuda_register(c, nb, b + 100, 2900, NULL, NULL, 0, &idb) < 0) {
                fprintf(stderr, "helper-alloc: register: %s\n", gpuipc_errmsg(c));
                return 6;
        }
        ready("ready");
        /* CUDA wants importers to free first: wait for both releases. */
        if (gpuipc_reg_wait_released(c, ida, 20000) < 0 || gpuipc_reg_wait_released(c, idb, 20000) < 0)
                return 7;
        ready("released");
        if (drv.cuMemFree_v2(a) || drv.cuMemFree_v2(b) || drv.cuMemPoolDestroy(pool))
                return 8;
        ready("freed");
        return 0;
}

static int run_defpool(gpuipc_client *c, const char *name, uint32_t seed)
{
        CUdeviceptr a = 0;

        if (drv.cuMemAllocAsync(&a, 1u << 20, NULL) || fill(a, 1u << 20, seed) < 0)
                return 4;
        refused(c, name, a, 1u << 20);
        if (reg(c, name, a, 1u << 20, GPUIPC_REGISTER_COPY) < 0)
                return 6;
        /* The copy is the daemon's: the original may change and go. */
        if (drv.cuMemsetD8_v2(a, 0xee, 1u << 20) || drv.cuMemFree_v2(a))
                return 8;
        ready("ready");
        return 0;
}

/* "unmapped R MSG" for gpuipc_reg_wait_unmapped(c, id, MS), MS from the
 * line's second word (10000 without one); returns R. */
static int unmapped_line(gpuipc_client *c, uint64_t id, const char *line)
{
        const char *sp = strchr(line, ' ');
        int r = gpuipc_reg_wait_unmapped(c, id, sp ? atoi(sp + 1) : 10000);

        printf("unmapped %d %s\n", r, r < 0 ? gpuipc_errmsg(c) : "");
        fflush(stdout);
        return r;
}

static int run_cacheipc(gpuipc_client *c, const char *name, uint32_t seed)
{
        CUdeviceptr a = 0;
        char na[300], nb[300], line[64];
        uint64_t ida;

        if (drv.cuMemAlloc_v2(&a, 8u << 20) || fill(a, 8u << 20, seed) < 0)
                return 4;
        snprintf(na, sizeof(na), "%s/a", name);
        snprintf(nb, sizeof(nb), "%s/b", name);
        if (gpuipc_cuda_register(c, na, a, 4u << 20, NULL, NULL, GPUIPC_REGISTER_CACHEABLE,
                                 &ida) < 0 ||
            reg(c, nb, a + (4u << 20), 4u << 20, GPUIPC_REGISTER_CACHEABLE) < 0)
                return 6;
        ready("ready");
        /* A lookup and release of NAME/a by the test comes first. */
        printf("released %d\n", gpuipc_reg_wait_released(c, ida, 5000));
        fflush(stdout);
        if (!fgets(line, sizeof(line), stdin))
                return 7;
        if (strncmp(line, "again", 5) == 0) {
                if (gpuipc_name_unregister(c, na) < 0 || gpuipc_name_unregister(c, nb) < 0)
                        return 8;
                snprintf(na, sizeof(na), "%s/c", name);
                nb[0] = '\0';
                printf("again %d\n", reg(c, na, a, 4u << 20, GPUIPC_REGISTER_CACHEABLE));
                fflush(stdout);
                if (!fgets(line, sizeof(line), stdin))
                        return 7;
        }
        if (strncmp(line, "adopt", 5) == 0) {
                uint32_t leases = 0, more = 0;
                int r = gpuipc_name_adopt(c, na, &leases);

                if (r == 0 && nb[0])
                        r = gpuipc_name_adopt(c, nb, &more);
                printf("adopt %d %u\n", r, leases + more);
                fflush(stdout);
                if (r < 0)
                        return 8;
        } else if (strncmp(line, "unregister", 10) != 0) {
                return 7;
        } else if (gpuipc_name_unregister(c, na) < 0 ||
                   (nb[0] && gpuipc_name_unregister(c, nb) < 0)) {
                return 8;
        }
        unmapped_line(c, ida, line);
        return drv.cuMemFree_v2(a) ? 9 : 0;
}

static int run_cachebatch(gpuipc_client *c, const char *name, uint32_t seed)
{
        static const char *const names[] = { "x", "y", "z" };
        static const char *const formats[] = { "C", "C", "C" };
        const int64_t lengths[] = { 4 << 20, 4 << 20, 4 << 20 };
        CUdeviceptr a = 0, b = 0;
        gpuipc_batch *bt = NULL;
        const void *data[3];
        char line[64];
        uint64_t id;
        int r;

        if (drv.cuMemAlloc_v2(&a, 8u << 20) || fill(a, 8u << 20, seed) < 0 ||
            drv.cuMemAlloc_v2(&b, 4u << 20) || fill(b, 4u << 20, seed + 1) < 0)
                return 4;
        data[0] = (const void *)(uintptr_t)a;
        data[1] = (const void *)(uintptr_t)(a + (4u << 20));
        data[2] = (const void *)(uintptr_t)b;
        if (gpuipc_batch_new(&bt) < 0 ||
            gpuipc_batch_add_buffers(bt, 3, names, formats, lengths, data, 0) < 0)
                return 6;
        r = gpuipc_batch_register(c, name, bt, GPUIPC_REGISTER_CACHEABLE, &id);
        gpuipc_batch_free(bt);
        if (r < 0) {
                fprintf(stderr, "helper-alloc: register %s: %s\n", name, gpuipc_errmsg(c));
                return 6;
        }
        ready("ready");
        printf("released %d\n", gpuipc_reg_wait_released(c, id, 5000));
        fflush(stdout);
        if (!fgets(line, sizeof(line), stdin) || strncmp(line, "unregister", 10) != 0)
                return 7;
        if (gpuipc_name_unregister(c, name) < 0)
                return 8;
        while (unmapped_line(c, id, line) == -ETIMEDOUT)
                if (!fgets(line, sizeof(line), stdin) || strncmp(line, "wait", 4) != 0)
                        return 7;
        return drv.cuMemFree_v2(a) || drv.cuMemFree_v2(b) ? 9 : 0;
}

static void explain_line(CUdeviceptr p, size_t n, unsigned flags)
{
        char text[1024];
        int r = gpuipc_cuda_explain(p, n, flags, text, sizeof(text));

        printf("%s %s\n", r < 0 ? "error" : gpuipc_cuda_path_name(r), text);
}

static int run_explain(void)
{
        CUmemPoolProps props = {
                .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
        };
        CUdeviceptr m = 0, v = vmm_range(3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), p = 0,
                    d = 0;
        CUmemoryPool pool;

        if (drv.cuMemAlloc_v2(&m, 1u << 20) || !v || drv.cuMemPoolCreate(&pool, &props) ||
            drv.cuMemAllocFromPoolAsync(&p, 4096, pool, NULL) ||
            drv.cuMemAllocAsync(&d, 4096, NULL))
                return 4;
        explain_line(m + 100, 1000, 0);
        explain_line(v + CHUNK / 2, 2 * CHUNK, 0);
        explain_line(p, 4096, 0);
        explain_line(d, 4096, 0);
        explain_line(d, 4096, GPUIPC_REGISTER_COPY);
        fflush(stdout);
        return 0;
}

static int run_lookup(gpuipc_client *c, const char *name)
{
        gpuipc_view *v = NULL;
        const uint8_t *p;
        int r = gpuipc_view_lookup(c, name, 5000, 0, &v);

        if (r < 0) {
                printf("err %d %s\n", r, gpuipc_errmsg(c));
                return 0;
        }
        p = gpuipc_view_data(v);
        for (size_t j = 0; j < 4096 && j < gpuipc_view_size(v); j++)
                if (p[j] != h_pattern(j, 0)) {
                        printf("err bytes differ at %zu\n", j);
                        gpuipc_view_release(v);
                        return 0;
                }
        printf("ok %s\n", gpuipc_view_info(v)->kind == GPUIPC_KIND_CUDA_VMM ? "cuda-vmm"
                          : gpuipc_view_info(v)->kind == GPUIPC_KIND_HOST ? "host" : "other");
        gpuipc_view_release(v);
        return 0;
}

int main(int argc, char **argv)
{
        gpuipc_client *c = NULL;
        uint32_t seed;
        char line[16];
        int r;

        if (argc < 2 || load() < 0) {
                fprintf(stderr, "helper-alloc: usage, or no driver double\n");
                return 2;
        }
        if (strcmp(argv[1], "explain") == 0)
                return run_explain();
        if (argc < 3 || gpuipc_client_connect(NULL, &c) < 0)
                return 3;
        if (strcmp(argv[1], "lookup") == 0) {
                r = run_lookup(c, argv[2]);
                gpuipc_client_free(c);
                return r;
        }
        seed = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 0) : 0;
        if (strcmp(argv[1], "chunks") == 0)
                r = run_chunks(c, argv[2], seed);
        else if (strcmp(argv[1], "noexport") == 0)
                r = run_noexport(c, argv[2], seed);
        else if (strcmp(argv[1], "pool") == 0)
                r = run_pool(c, argv[2], seed);
        else if (strcmp(argv[1], "defpool") == 0)
                r = run_defpool(c, argv[2], seed);
        else if (strcmp(argv[1], "cacheipc") == 0)
                r = run_cacheipc(c, argv[2], seed);
        else if (strcmp(argv[1], "cachebatch") == 0)
                r = run_cachebatch(c, argv[2], seed);
        else
                r = 2;
        if (r == 0)
                while (fgets(line, sizeof(line), stdin))
                        ;
        gpuipc_client_free(c);
        return r;
}

#else

int main(void)
{
        return 77;
}

#endif
