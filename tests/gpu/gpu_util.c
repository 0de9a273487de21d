/* gpu_util.c: see gpu_util.h. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "gpu_util.h"

static CUfunction k_fill, k_count;

int cu_fail(const char *what, CUresult r, int line)
{
        const char *name = NULL;

        cuGetErrorName(r, &name);
        fprintf(stderr, "gpu_test[%d]: line %d: %s: %s\n", (int)getpid(), line, what,
                name ? name : "?");
        return 1;
}

gpuipc_client *gpu_client;

int gi_fail(const char *what, int r, int line)
{
        fprintf(stderr, "gpu_test[%d]: line %d: %s: %s (%s)\n", (int)getpid(), line, what,
                gpuipc_strerror(r), gpu_client ? gpuipc_errmsg(gpu_client) : "-");
        return 1;
}

int fail(const char *fmt, ...)
{
        va_list ap;

        fprintf(stderr, "gpu_test[%d]: ", (int)getpid());
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return 1;
}

static void die(const char *what, CUresult r)
{
        cu_fail(what, r, 0);
        exit(1);
}

void gpu_setup(void)
{
        const char *path = getenv("GPUIPC_GPU_PTX");
        static char ptx[1 << 16];
        CUcontext ctx;
        CUmodule mod;
        CUdevice dev;
        CUresult r;
        size_t n;
        FILE *f;

        if (!path || !(f = fopen(path, "r"))) {
                fprintf(stderr, "gpu_test: set GPUIPC_GPU_PTX to tests/gpu/kernels.ptx\n");
                exit(1);
        }
        n = fread(ptx, 1, sizeof(ptx) - 1, f);
        fclose(f);
        ptx[n] = '\0';
        if ((r = cuInit(0)) || (r = cuDeviceGet(&dev, 0)) ||
            (r = cuDevicePrimaryCtxRetain(&ctx, dev)) || (r = cuCtxSetCurrent(ctx)))
                die("CUDA setup", r);
        if ((r = cuModuleLoadData(&mod, ptx)) ||
            (r = cuModuleGetFunction(&k_fill, mod, "slow_fill")) ||
            (r = cuModuleGetFunction(&k_count, mod, "count_bad")))
                die("loading kernels.ptx", r);
}

void fill(CUdeviceptr p, uint64_t n, unsigned seed, uint64_t spin, CUstream s)
{
        unsigned long long nn = n, sp = spin;
        void *args[] = { &p, &nn, &seed, &sp };
        CUresult r = cuLaunchKernel(k_fill, 264, 1, 1, 256, 1, 1, 0, s, args, NULL);

        if (r)
                die("slow_fill", r);
}

unsigned long long count_bad(CUdeviceptr p, uint64_t n, unsigned seed, uint64_t pattern_off)
{
        static CUdeviceptr d_bad;       /* allocated once: no cuMemFree in timed spans */
        unsigned long long nn = n, off = pattern_off, bad = 0;
        void *args[] = { &p, &nn, &seed, &off, &d_bad };
        CUresult r = CUDA_SUCCESS;

        if (!d_bad)
                r = cuMemAlloc(&d_bad, sizeof(bad));
        if (r || (r = cuMemsetD8(d_bad, 0, sizeof(bad))) ||
            (r = cuLaunchKernel(k_count, 264, 1, 1, 256, 1, 1, 0, NULL, args, NULL)) ||
            (r = cuMemcpyDtoH(&bad, d_bad, sizeof(bad))))
                die("count_bad", r);
        return bad;
}

double now_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

long shim_count(const char *name)
{
        const char *path = getenv("GPUIPC_LIBCUDA");
        long (*fn)(const char *);
        void *h;

        if (!path || !(h = dlopen(path, RTLD_NOW | RTLD_NOLOAD)))
                return -1;
        fn = (long (*)(const char *))dlsym(h, "countcuda_get");
        dlclose(h);
        return fn ? fn(name) : -1;
}
