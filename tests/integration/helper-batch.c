/* helper-batch: a batch producer for integ_batch_client.
 *
 *   helper-batch host NAME [--copy] [--slice CHILD_OFF RB_OFF]
 *     Registers batch_fixture.h's record batch as NAME: built in a
 *     gpuipc_hostbuf (shared in place), or with --copy in malloc'd memory
 *     (copied).  Prints "id N", then waits until the batch's last lease is
 *     released (printing "released") or stdin reaches EOF, and exits.
 *   helper-batch device NAME [--plain-event]
 *     Registers a device record batch on device 0 of the CUDA double:
 *     "v" (int32 3p - 7), "s" (utf8 "v<p*p>") and "w" (float p / 4) of
 *     DEV_ROWS rows, v and s in one VMM allocation (one export, three
 *     parts), w in cuMemAlloc memory (cuda-ipc), with an interprocess
 *     sync event (--plain-event: one without CU_EVENT_INTERPROCESS, which
 *     the library waits for instead).  Prints "id N", stays until stdin
 *     reaches EOF: the cuda-ipc memory is this process's.
 *   helper-batch pool NAME
 *     Registers DEV_ROWS rows of "p" (nullable int64 p, null when p % 5
 *     == 0), its validity bitmap and values in one allocation of an
 *     exportable stream-ordered pool (two cuda-pool parts of one export),
 *     and "q" (float p / 4) in the device's default pool, which cannot be
 *     shared: refused first (printing "refused"), then registered with
 *     GPUIPC_REGISTER_COPY.  Prints "id N", stays until stdin reaches EOF.
 * Exit status: 0, 2 usage, 3 no connection, 4 CUDA, 6 register failed. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpuipc.h"
#include "harness.h"
#include "batch_fixture.h"
#include "cuda/driver.h"

#define DEV_ROWS 1000

static int hold(gpuipc_client *c, uint64_t id)
{
        char line[16];

        printf("id %llu\n", (unsigned long long)id);
        fflush(stdout);
        if (id == 0) {
                while (fgets(line, sizeof(line), stdin))
                        ;
                return 0;
        }
        for (int i = 0; i < 300; i++)
                if (gpuipc_reg_wait_released(c, id, 100) == 0) {
                        printf("released\n");
                        fflush(stdout);
                        break;
                }
        return 0;
}

static int run_host(gpuipc_client *c, int argc, char **argv)
{
        gpuipc_batch *b = NULL;
        int64_t child_off = 0, rb_off = 0;
        bool copy = false;
        uint64_t id = 0;
        struct fx f;
        int r;

        for (int i = 3; i < argc; i++) {
                if (strcmp(argv[i], "--copy") == 0) {
                        copy = true;
                } else if (strcmp(argv[i], "--slice") == 0 && i + 2 < argc) {
                        child_off = atoll(argv[++i]);
                        rb_off = atoll(argv[++i]);
                } else {
                        return 2;
                }
        }
        if (fx_build(&f, !copy, child_off, rb_off) < 0 || gpuipc_batch_new(&b) < 0)
                return 4;
        r = gpuipc_batch_add_record_batch(b, &f.s, &f.a);
        if (r == 0)
                r = gpuipc_batch_register(c, argv[2], b, 0, &id);
        if (r < 0) {
                fprintf(stderr, "helper-batch: %s: %s\n", argv[2],
                        gpuipc_batch_errmsg(b)[0] ? gpuipc_batch_errmsg(b) : gpuipc_errmsg(c));
                return 6;
        }
        gpuipc_batch_free(b);
        /* The daemon holds the memory now (the memfd, or the copy). */
        fx_free(&f);
        return hold(c, id);
}

#ifdef GPUIPC_HAVE_CUDA_H

static struct cuda *cu;

static void dev_node(struct ArrowSchema *s, struct ArrowArray *a, const char *fmt,
                     const char *name, int nbuf, const void **bufs)
{
        memset(s, 0, sizeof(*s));
        memset(a, 0, sizeof(*a));
        s->format = fmt;
        s->name = name;
        s->release = fx_release_schema;
        a->length = DEV_ROWS;
        a->n_buffers = nbuf;
        a->buffers = bufs;
        a->release = fx_release_array;
}

static int run_device(gpuipc_client *c, int argc, char **argv)
{
        bool plain = argc > 3 && strcmp(argv[3], "--plain-event") == 0;
        struct ArrowSchema s, cs[3], *csp[3] = { &cs[0], &cs[1], &cs[2] };
        struct ArrowArray ca[3], *cap[3] = { &ca[0], &ca[1], &ca[2] };
        struct ArrowDeviceArray da;
        const void *bv[2], *bs[3], *bw[2], *rb[1] = { NULL };
        gpuipc_cudabuf *vmm = NULL;
        gpuipc_batch *b = NULL;
        CUdeviceptr w = 0, base;
        CUcontext ctx;
        CUdevice dev;
        CUevent ev = NULL;
        uint64_t id = 0;
        char tmp[32], *str;
        int32_t *off;
        int r;

        if (cu->cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
            cu->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            cu->cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
            gpuipc_cudabuf_new(0, 1u << 20, &vmm) < 0 ||
            cu->cuMemAlloc_v2(&w, DEV_ROWS * 4) != CUDA_SUCCESS ||
            cu->cuEventCreate(&ev, plain ? 0 : CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) !=
                    CUDA_SUCCESS)
                return 4;
        /* The double's device memory is host memory: written directly. */
        base = gpuipc_cudabuf_ptr(vmm);
        off = (int32_t *)(uintptr_t)(base + 4096 * 4);
        str = (char *)(uintptr_t)(base + 4096 * 8);
        off[0] = 0;
        for (int p = 0; p < DEV_ROWS; p++) {
                ((int32_t *)(uintptr_t)base)[p] = 3 * p - 7;
                ((float *)(uintptr_t)w)[p] = (float)p / 4;
                fx_name(p, tmp, sizeof(tmp));
                memcpy(str + off[p], tmp, strlen(tmp));
                off[p + 1] = off[p] + (int32_t)strlen(tmp);
        }
        if (cu->cuEventRecord(ev, NULL) != CUDA_SUCCESS)
                return 4;
        bv[0] = NULL;
        bv[1] = (const void *)(uintptr_t)base;
        bs[0] = NULL;
        bs[1] = off;
        bs[2] = str;
        bw[0] = NULL;
        bw[1] = (const void *)(uintptr_t)w;
        dev_node(&cs[0], &ca[0], "i", "v", 2, bv);
        dev_node(&cs[1], &ca[1], "u", "s", 3, bs);
        dev_node(&cs[2], &ca[2], "f", "w", 2, bw);
        memset(&s, 0, sizeof(s));
        memset(&da, 0, sizeof(da));
        s.format = "+s";
        s.name = "";
        s.n_children = 3;
        s.children = csp;
        s.release = fx_release_schema;
        da.array.length = DEV_ROWS;
        da.array.n_buffers = 1;
        da.array.buffers = rb;
        da.array.n_children = 3;
        da.array.children = cap;
        da.array.release = fx_release_array;
        da.device_type = ARROW_DEVICE_CUDA;
        da.device_id = 0;
        da.sync_event = &ev;
        if (gpuipc_batch_new(&b) < 0)
                return 4;
        r = gpuipc_batch_add_device_record_batch(b, &s, &da);
        if (r == 0)
                r = gpuipc_batch_register(c, argv[2], b, 0, &id);
        if (r < 0) {
                fprintf(stderr, "helper-batch: %s: %s\n", argv[2],
                        gpuipc_batch_errmsg(b)[0] ? gpuipc_batch_errmsg(b) : gpuipc_errmsg(c));
                return 6;
        }
        gpuipc_batch_free(b);
        /* The daemon holds the VMM memory through its own fds; the
         * cuda-ipc memory must live while consumers map it. */
        gpuipc_cudabuf_free(vmm);
        r = hold(c, 0);
        (void)cu->cuEventDestroy_v2(ev);
        (void)cu->cuMemFree_v2(w);
        return r;
}

/* The pool calls, which struct cuda does not carry. */
static struct {
        __typeof__(cuMemPoolCreate) *create;
        __typeof__(cuMemAllocFromPoolAsync) *alloc_from;
        __typeof__(cuMemAllocAsync) *alloc_async;
} pools;

static int run_pool(gpuipc_client *c, char **argv)
{
        CUmemPoolProps props = {
                .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
        };
        struct ArrowSchema s, cs[2], *csp[2] = { &cs[0], &cs[1] };
        struct ArrowArray ca[2], *cap[2] = { &ca[0], &ca[1] };
        const void *bp[2], *bq[2];
        void *dl = dlopen(getenv("GPUIPC_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
        gpuipc_batch *b = NULL;
        CUmemoryPool pool;
        CUdeviceptr a = 0, q = 0;
        CUcontext ctx;
        CUdevice dev;
        uint64_t id = 0;
        int64_t nulls = 0;
        int r;

        if (!dl)
                return 4;
        pools.create = (__typeof__(pools.create))dlsym(dl, "cuMemPoolCreate");
        pools.alloc_from = (__typeof__(pools.alloc_from))dlsym(dl, "cuMemAllocFromPoolAsync");
        pools.alloc_async = (__typeof__(pools.alloc_async))dlsym(dl, "cuMemAllocAsync");
        if (!pools.create || !pools.alloc_from || !pools.alloc_async ||
            cu->cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
            cu->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            cu->cuCtxSetCurrent(ctx) != CUDA_SUCCESS || pools.create(&pool, &props) ||
            pools.alloc_from(&a, 64u << 10, pool, NULL) ||
            pools.alloc_async(&q, DEV_ROWS * 4, NULL))
                return 4;
        memset((void *)(uintptr_t)a, 0, 4096);
        for (int p = 0; p < DEV_ROWS; p++) {
                fx_setbit((uint8_t *)(uintptr_t)a, p, fx_valid(p));
                nulls += !fx_valid(p);
                ((int64_t *)(uintptr_t)(a + 4096))[p] = p;
                ((float *)(uintptr_t)q)[p] = (float)p / 4;
        }
        bp[0] = (const void *)(uintptr_t)a;
        bp[1] = (const void *)(uintptr_t)(a + 4096);
        bq[0] = NULL;
        bq[1] = (const void *)(uintptr_t)q;
        dev_node(&cs[0], &ca[0], "l", "p", 2, bp);
        cs[0].flags = ARROW_FLAG_NULLABLE;
        ca[0].null_count = nulls;
        dev_node(&cs[1], &ca[1], "f", "q", 2, bq);
        memset(&s, 0, sizeof(s));
        s.format = "+s";
        s.name = "";
        s.n_children = 2;
        s.children = csp;
        s.release = fx_release_schema;
        if (gpuipc_batch_new(&b) < 0)
                return 4;
        for (int i = 0; i < 2; i++)
                if (gpuipc_batch_add_column(b, csp[i], cap[i], 0) < 0) {
                        fprintf(stderr, "helper-batch: %s\n", gpuipc_batch_errmsg(b));
                        return 6;
                }
        r = gpuipc_batch_register(c, argv[2], b, 0, &id);
        if (r == -ENOTSUP) {
                printf("refused %s\n", gpuipc_errmsg(c));
                r = gpuipc_batch_register(c, argv[2], b, GPUIPC_REGISTER_COPY, &id);
        }
        gpuipc_batch_free(b);
        if (r < 0) {
                fprintf(stderr, "helper-batch: %s: %s\n", argv[2], gpuipc_errmsg(c));
                return 6;
        }
        /* the copy is the daemon's: the default pool's memory may go */
        (void)cu->cuMemFree_v2(q);
        r = hold(c, 0);
        (void)cu->cuMemFree_v2(a);
        dlclose(dl);
        return r;
}

#endif

int main(int argc, char **argv)
{
        gpuipc_client *c = NULL;
        int r;

        if (argc < 3)
                return 2;
        r = gpuipc_client_connect(NULL, &c);
        if (r < 0) {
                fprintf(stderr, "helper-batch: connect: %s\n", gpuipc_errmsg(NULL));
                return 3;
        }
        if (strcmp(argv[1], "host") == 0) {
                r = run_host(c, argc, argv);
#ifdef GPUIPC_HAVE_CUDA_H
        } else if (strcmp(argv[1], "device") == 0) {
                char why[256];
                if (cuda_load(&cu, why, sizeof(why)) < 0 || cuda_init(cu) < 0) {
                        fprintf(stderr, "helper-batch: no CUDA: %s\n", why);
                        r = 4;
                } else {
                        r = run_device(c, argc, argv);
                }
        } else if (strcmp(argv[1], "pool") == 0) {
                char why[256];
                if (cuda_load(&cu, why, sizeof(why)) < 0 || cuda_init(cu) < 0) {
                        fprintf(stderr, "helper-batch: no CUDA: %s\n", why);
                        r = 4;
                } else {
                        r = run_pool(c, argv);
                }
#endif
        } else {
                r = 2;
        }
        gpuipc_client_free(c);
        return r;
}
