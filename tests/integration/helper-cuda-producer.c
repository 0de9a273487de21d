/* helper-cuda-producer: registers device memory filled with h_pattern().
 *
 *   helper-cuda-producer ipc NAME ORDINAL NALLOCS NREGS SEED [--event]
 *     cuMemAlloc's NALLOCS allocations of 64 MiB on device ORDINAL and
 *     registers NREGS regions of REG_SIZE bytes carved from them (region i
 *     in allocation i % NALLOCS at reg_offset(i)), named NAME when NREGS is
 *     1, else NAME/i; region i holds h_pattern(j, SEED + i).  Prints
 *     "ready" and stays connected until stdin reaches EOF.
 *   helper-cuda-producer vmm NAME ORDINAL SIZE SEED
 *     gpuipc_cudabuf_new(ORDINAL, SIZE), fills it with h_pattern(j, SEED),
 *     registers it (durable), frees its own mapping, prints "ready", exits.
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
#include "cuda_drv.h"

#define ALLOC_SIZE (64ull << 20)
#define REG_SIZE   32768u

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
                r = gpuipc_register_cuda(c, name, p, REG_SIZE, NULL, ev, 0, NULL);
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

static int run_vmm(gpuipc_client *c, char **argv)
{
        int ordinal = atoi(argv[3]);
        size_t size = strtoull(argv[4], NULL, 0);
        uint32_t seed = (uint32_t)strtoul(argv[5], NULL, 0);
        gpuipc_cudabuf *b = NULL;
        CUcontext ctx;
        CUdevice dev;
        int r;

        r = gpuipc_cudabuf_new(ordinal, size, &b);
        if (r < 0) {
                fprintf(stderr, "helper-cuda-producer: cudabuf_new: %s\n", gpuipc_strerror(r));
                return 4;
        }
        if (cu->cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS ||
            cu->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            cu->cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
            fill(gpuipc_cudabuf_ptr(b), size, seed) < 0)
                return 4;
        r = gpuipc_register_cuda(c, argv[2], gpuipc_cudabuf_ptr(b), size, NULL, NULL, 0, NULL);
        if (r < 0) {
                fprintf(stderr, "helper-cuda-producer: register: %s\n", gpuipc_errmsg(c));
                return 6;
        }
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

        if (argc < 6 || (strcmp(argv[1], "ipc") == 0 && argc < 7))
                return 2;
        if (cuda_load(&cu, why, sizeof(why)) < 0 || cuda_init(cu) < 0) {
                fprintf(stderr, "helper-cuda-producer: no driver: %s\n", why);
                return 4;
        }
        r = gpuipc_connect(NULL, &c);
        if (r < 0) {
                fprintf(stderr, "helper-cuda-producer: connect: %s\n", gpuipc_strerror(r));
                return 3;
        }
        if (strcmp(argv[1], "ipc") == 0)
                r = run_ipc(c, argv, argc);
        else if (strcmp(argv[1], "vmm") == 0)
                r = run_vmm(c, argv);
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
