/* timecuda.c: a timing shim in front of the real CUDA driver, for profiles.
 *
 * libgpuipc loads it through GPUIPC_LIBCUDA.  It defines the driver entry
 * points libgpuipc calls on its register and lookup paths, times each call
 * (CLOCK_MONOTONIC) and forwards it to the real libcuda.so.1, which it
 * depends on, so dlsym() on this library finds every other entry point in
 * the real one.  Only calls made through libgpuipc are timed: torch, CuPy and
 * the benchmark's own calls go to the driver directly.
 *
 * timecuda_get(i, &name, &calls, &ns) reads the totals of entry i (0, 1, ...;
 * -1 past the end), for tests/bench/gpu_handoff.py through ctypes. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda.h>

#define TIMED(X)                                                                        \
        X(cuPointerGetAttribute, (void *a, CUpointer_attribute b, CUdeviceptr c), (a, b, c)) \
        X(cuPointerGetAttributes, (unsigned a, CUpointer_attribute *b, void **c, CUdeviceptr d), \
          (a, b, c, d))                                                                 \
        X(cuMemGetAddressRange_v2, (CUdeviceptr *a, size_t *b, CUdeviceptr c), (a, b, c)) \
        X(cuIpcGetMemHandle, (CUipcMemHandle *a, CUdeviceptr b), (a, b))               \
        X(cuIpcOpenMemHandle_v2, (CUdeviceptr *a, CUipcMemHandle b, unsigned c), (a, b, c)) \
        X(cuIpcCloseMemHandle, (CUdeviceptr a), (a))                                   \
        X(cuCtxGetCurrent, (CUcontext *a), (a))                                        \
        X(cuCtxSetCurrent, (CUcontext a), (a))                                         \
        X(cuDevicePrimaryCtxRetain, (CUcontext *a, CUdevice b), (a, b))                \
        X(cuDeviceGet, (CUdevice *a, int b), (a, b))                                   \
        X(cuDeviceGetCount, (int *a), (a))                                             \
        X(cuDeviceGetAttribute, (int *a, CUdevice_attribute b, CUdevice c), (a, b, c)) \
        X(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle *a, void *b), (a, b)) \
        X(cuMemRelease, (CUmemGenericAllocationHandle a), (a))                         \
        X(cuMemExportToShareableHandle, (void *a, CUmemGenericAllocationHandle b,      \
                                         CUmemAllocationHandleType c,                  \
                                         unsigned long long d), (a, b, c, d))          \
        X(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *a, void *b,   \
                                           CUmemAllocationHandleType c), (a, b, c))    \
        X(cuMemAddressReserve, (CUdeviceptr *a, size_t b, size_t c, CUdeviceptr d,     \
                                unsigned long long e), (a, b, c, d, e))                \
        X(cuMemAddressFree, (CUdeviceptr a, size_t b), (a, b))                         \
        X(cuMemMap, (CUdeviceptr a, size_t b, size_t c, CUmemGenericAllocationHandle d, \
                     unsigned long long e), (a, b, c, d, e))                           \
        X(cuMemUnmap, (CUdeviceptr a, size_t b), (a, b))                               \
        X(cuMemSetAccess, (CUdeviceptr a, size_t b, const CUmemAccessDesc *c, size_t d), \
          (a, b, c, d))                                                                \
        X(cuEventSynchronize, (CUevent a), (a))                                        \
        X(cuStreamWaitEvent, (CUstream a, CUevent b, unsigned c), (a, b, c))

enum {
#define IDX(name, params, args) I_##name,
        TIMED(IDX)
#undef IDX
        N_TIMED
};

static const char *const names[] = {
#define NAME(name, params, args) #name,
        TIMED(NAME)
#undef NAME
};

static atomic_ullong calls[N_TIMED], total_ns[N_TIMED];

static uint64_t ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *real(const char *name)
{
        void *p = dlsym(RTLD_NEXT, name);

        if (!p) {
                fprintf(stderr, "timecuda: %s not found in the real driver\n", name);
                abort();
        }
        return p;
}

#define WRAP(name, params, args)                                                \
        CUresult CUDAAPI name params                                            \
        {                                                                       \
                static __typeof__(name) *fn;                                    \
                uint64_t t;                                                     \
                CUresult r;                                                     \
                if (!fn)                                                        \
                        fn = (__typeof__(name) *)real(#name);                   \
                t = ns();                                                       \
                r = fn args;                                                    \
                atomic_fetch_add(&total_ns[I_##name], ns() - t);                \
                atomic_fetch_add(&calls[I_##name], 1);                          \
                return r;                                                       \
        }
TIMED(WRAP)
#undef WRAP

__attribute__((visibility("default"))) int timecuda_get(int i, const char **ret_name,
                                                        unsigned long long *ret_calls,
                                                        unsigned long long *ret_ns)
{
        if (i < 0 || i >= N_TIMED)
                return -1;
        *ret_name = names[i];
        *ret_calls = atomic_load(&calls[i]);
        *ret_ns = atomic_load(&total_ns[i]);
        return 0;
}
