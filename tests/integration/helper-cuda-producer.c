/* helper-cuda-producer: registers device memory filled with h_pattern().
 *
 *   helper-cuda-producer ipc NAME ORDINAL NALLOCS NREGS SEED [--event]
 *     cuMemAlloc's NALLOCS allocations of 64 MiB on device ORDINAL and
 *     registers NREGS regions of REG_SIZE bytes carved from them (region i
 *     in allocation i % NALLOCS at reg_offset(i)), named NAME when NREGS is
 *     1, else NAME/i; region i holds h_pattern(j, SEED + i).  Prints
 *     "ready" and stays connected until stdin reaches EOF.
 *   helper-cuda-producer vmm NAME ORDINAL SIZE SEED [SIZE SEED]...
 *     For each SIZE SEED pair: gpuipc_cudabuf_new(ORDINAL, SIZE), filled
 *     with h_pattern(j, SEED) and registered (durable), named NAME for one
 *     pair, else NAME/i; all are registered while all exist.  Then frees
 *     its own mappings, prints "ready", exits.
 *   helper-cuda-producer adopt NAME ORDINAL SEED
 *     Registers a cudabuf of ADOPT_VMM_SIZE bytes (h_pattern(j, SEED)) as
 *     NAME/vmm, then two cuda-ipc regions of one cuMemAlloc, NAME/a
 *     (ADOPT_A_SIZE bytes, SEED + 1) and NAME/b (ADOPT_B_SIZE, SEED + 2),
 *     adopts both, overwrites and frees all of its memory, prints "ready",
 *     exits.
 *
 * The test reads the data back directly: the CUDA double's device pointers
 * are host addresses. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpuipc.h"
#include "harness.h"
#include "cuda/driver.h"

#define ALLOC_SIZE (64ull << 20)
#define REG_SIZE   32768u
#define VMM_MAX    8u

#define ADOPT_VMM_SIZE 3145733u         /* a 4 MiB allocation */
#define ADOPT_A_SIZE   1048579u         /* adopted into 2 MiB */
#define ADOPT_B_SIZE   3145728u         /* adopted into 4 MiB */
#define ADOPT_A_OFF    4096u
#define ADOPT_B_OFF    (8u << 20)

static inline uint64_t reg_offset(unsigned i, unsigned nallocs)
{
        return (4ull << 20) + 12345 + (uint64_t)(i / nallocs) * 65536;
}

#ifdef GPUIPC_HAVE_CUDA_H

static struct cuda *cu;

static int fill(CUdeviceptr p, size_t n, uint32_t seed)
{
        uint8_t *buf = malloc(n);
        CUresult res;

        if (!buf)
                return -ENOMEM;
        for (size_t j = 0; j < n; j++)
                buf[j] = h_pattern(j, seed);
        res = cu->cuMemcpyHtoD_v2(p, buf, n);
        free(buf);
        return res == CUDA_SUCCESS ? 0 : -EIO;
}

static int run_ipc(gpuipc_client *c, char **argv, int argc)
{
        int ordinal = atoi(argv[3]);
        unsigned nallocs = (unsigned)atoi(argv[4]), nregs = (unsigned)atoi(argv[5]);
        uint32_t seed = (uint32_t)strtoul(argv[6], NULL, 0);
        bool with_event = argc > 7 && strcmp(argv[7], "--event") == 0;
        CUdeviceptr allocs[64];
        CUcontext ctx;
        CUdevice dev;
        CUevent ev = NULL;
        char name[300], line[16];
        int r;

        if (nallocs == 0 || nallocs > 64)
                return 2;
        if (cu->cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS ||
            cu->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            cu->cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
                return 4;
        for (unsigned a = 0; a < nallocs; a++)
                if (cu->cuMemAlloc_v2(&allocs[a], ALLOC_SIZE) != CUDA_SUCCESS)
                        return 4;
        for (unsigned i = 0; i < nregs; i++) {
                CUdeviceptr p = allocs[i % nallocs] + reg_offset(i, nallocs);
                if (fill(p, REG_SIZE, seed + i) < 0)
                        return 4;
        }
        if (with_event &&
            (cu->cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
             cu->cuEventRecord(ev, NULL) != CUDA_SUCCESS))
                return 4;
        for (unsigned i = 0; i < nregs; i++) {
                CUdeviceptr p = allocs[i % nallocs] + reg_offset(i, nallocs);
                if (nregs == 1)
                        snprintf(name, sizeof(name), "%s", argv[2]);
                else
                        snprintf(name, sizeof(name), "%s/%u", argv[2], i);
                r = gpuipc_cuda_register(c, name, p, REG_SIZE, NULL, ev, 0, NULL);
                if (r < 0) {
                        fprintf(stderr, "helper-cuda-producer: register %s: %s\n", name,
                                gpuipc_errmsg(c));
                        return 6;
                }
        }
        printf("ready\n");
        fflush(stdout);
        while (fgets(line, sizeof(line), stdin))
                ;
        return 0;
}

static int run_vmm(gpuipc_client *c, char **argv, int argc)
{
        int ordinal = atoi(argv[3]);
        unsigned n = (unsigned)(argc - 4) / 2;
        gpuipc_cudabuf *b[VMM_MAX] = { NULL };
        char name[300];
        CUcontext ctx;
        CUdevice dev;
        int r = 0;

        if ((argc - 4) % 2 != 0 || n == 0 || n > VMM_MAX)
                return 2;
        if (cu->cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS ||
            cu->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            cu->cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
                return 4;
        for (unsigned i = 0; i < n && r == 0; i++) {
                size_t size = strtoull(argv[4 + 2 * i], NULL, 0);
                uint32_t seed = (uint32_t)strtoul(argv[5 + 2 * i], NULL, 0);

                r = gpuipc_cudabuf_new(ordinal, size, &b[i]);
                if (r < 0) {
                        fprintf(stderr, "helper-cuda-producer: cudabuf_new: %s\n",
                                gpuipc_strerror(r));
                        r = 4;
                        break;
                }
                if (fill(gpuipc_cudabuf_ptr(b[i]), size, seed) < 0) {
                        r = 4;
                        break;
                }
                if (n == 1)
                        snprintf(name, sizeof(name), "%s", argv[2]);
                else
                        snprintf(name, sizeof(name), "%s/%u", argv[2], i);
                if (gpuipc_cuda_register(c, name, gpuipc_cudabuf_ptr(b[i]), size, NULL, NULL, 0,
                                         NULL) < 0) {
                        fprintf(stderr, "helper-cuda-producer: register %s: %s\n", name,
                                gpuipc_errmsg(c));
                        r = 6;
                }
        }
        for (unsigned i = 0; i < n; i++)
                gpuipc_cudabuf_free(b[i]);
        if (r != 0)
                return r;
        printf("ready\n");
        fflush(stdout);
        return 0;
}

static int adopt_one(gpuipc_client *c, const char *base, const char *leaf)
{
        char name[300];
        uint32_t leases = 1;

        snprintf(name, sizeof(name), "%s/%s", base, leaf);
        if (gpuipc_name_adopt(c, name, &leases) < 0) {
                fprintf(stderr, "helper-cuda-producer: adopt %s: %s\n", name, gpuipc_errmsg(c));
                return -1;
        }
        if (leases != 0) {
                fprintf(stderr, "helper-cuda-producer: adopt %s: %u leases\n", name, leases);
                return -1;
        }
        return 0;
}

/* An unrelated cuda-vmm registration first, then two adopts of different
 * sizes: every allocation must keep its own identity. */
static int run_adopt(gpuipc_client *c, char **argv)
{
        int ordinal = atoi(argv[3]);
        uint32_t seed = (uint32_t)strtoul(argv[4], NULL, 0);
        gpuipc_cudabuf *b = NULL;
        CUdeviceptr p = 0;
        char name[300];
        CUcontext ctx;
        CUdevice dev;
        int r;

        r = gpuipc_cudabuf_new(ordinal, ADOPT_VMM_SIZE, &b);
        if (r < 0) {
                fprintf(stderr, "helper-cuda-producer: cudabuf_new: %s\n", gpuipc_strerror(r));
                return 4;
        }
        if (cu->cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS ||
            cu->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            cu->cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
            fill(gpuipc_cudabuf_ptr(b), ADOPT_VMM_SIZE, seed) < 0 ||
            cu->cuMemAlloc_v2(&p, ADOPT_B_OFF + ADOPT_B_SIZE) != CUDA_SUCCESS ||
            fill(p + ADOPT_A_OFF, ADOPT_A_SIZE, seed + 1) < 0 ||
            fill(p + ADOPT_B_OFF, ADOPT_B_SIZE, seed + 2) < 0)
                return 4;
        snprintf(name, sizeof(name), "%s/vmm", argv[2]);
        r = gpuipc_cuda_register(c, name, gpuipc_cudabuf_ptr(b), ADOPT_VMM_SIZE, NULL, NULL, 0,
                                 NULL);
        if (r == 0) {
                snprintf(name, sizeof(name), "%s/a", argv[2]);
                r = gpuipc_cuda_register(c, name, p + ADOPT_A_OFF, ADOPT_A_SIZE, NULL, NULL, 0,
                                         NULL);
        }
        if (r == 0) {
                snprintf(name, sizeof(name), "%s/b", argv[2]);
                r = gpuipc_cuda_register(c, name, p + ADOPT_B_OFF, ADOPT_B_SIZE, NULL, NULL, 0,
                                         NULL);
        }
        if (r < 0) {
                fprintf(stderr, "helper-cuda-producer: register %s: %s\n", name,
                        gpuipc_errmsg(c));
                return 6;
        }
        if (adopt_one(c, argv[2], "a") < 0 || adopt_one(c, argv[2], "b") < 0)
                return 7;
        /* The copies are the daemon's now: ours may go. */
        if (fill(p, ADOPT_B_OFF + ADOPT_B_SIZE, ~seed) < 0 || cu->cuMemFree_v2(p) != CUDA_SUCCESS)
                return 4;
        gpuipc_cudabuf_free(b);
        printf("ready\n");
        fflush(stdout);
        return 0;
}

int main(int argc, char **argv)
{
        gpuipc_client *c = NULL;
        char why[256];
        int r;

        if (argc < 5 || (strcmp(argv[1], "ipc") == 0 && argc < 7) ||
            (strcmp(argv[1], "vmm") == 0 && argc < 6))
                return 2;
        if (cuda_load(&cu, why, sizeof(why)) < 0 || cuda_init(cu) < 0) {
                fprintf(stderr, "helper-cuda-producer: no driver: %s\n", why);
                return 4;
        }
        r = gpuipc_client_connect(NULL, &c);
        if (r < 0) {
                fprintf(stderr, "helper-cuda-producer: connect: %s\n", gpuipc_strerror(r));
                return 3;
        }
        if (strcmp(argv[1], "ipc") == 0)
                r = run_ipc(c, argv, argc);
        else if (strcmp(argv[1], "vmm") == 0)
                r = run_vmm(c, argv, argc);
        else if (strcmp(argv[1], "adopt") == 0)
                r = run_adopt(c, argv);
        else
                r = 2;
        gpuipc_client_free(c);
        return r;
}

#else

int main(void)
{
        fprintf(stderr, "helper-cuda-producer: built without <cuda.h>\n");
        return 77;
}

#endif
