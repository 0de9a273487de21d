/* gpu_util.h: helpers of the real-GPU suite (driver API, linked against the
 * toolkit's libcuda stub, so the real driver is found at run time). */
#ifndef GPUIPC_GPU_UTIL_H
#define GPUIPC_GPU_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "gpuipc.h"

/* Print where a call failed and leave the role with 1. */
#define CK(call) do { CUresult r_ = (call); \
        if (r_ != CUDA_SUCCESS) return cu_fail(#call, r_, __LINE__); } while (0)
#define GK(call) do { int r_ = (call); \
        if (r_ < 0) return gi_fail(#call, r_, __LINE__); } while (0)

/* The client of this role, for gpuipc_errmsg() in failure messages. */
extern gpuipc_client *gpu_client;

int cu_fail(const char *what, CUresult r, int line);
int gi_fail(const char *what, int r, int line);
int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* cuInit, device 0's primary context made current, kernels loaded from
 * $GPUIPC_GPU_PTX.  Exits on failure. */
void gpu_setup(void);
/* p[i] = seed + 7 * (pattern_off + i) after spinning `spin` clock cycles, on
 * stream s (NULL: the default stream). */
void fill(CUdeviceptr p, uint64_t n, unsigned seed, uint64_t spin, CUstream s);
/* Bytes of p[0..n) that differ from the pattern starting at pattern_off,
 * counted by a kernel; synchronises. */
unsigned long long count_bad(CUdeviceptr p, uint64_t n, unsigned seed, uint64_t pattern_off);
double now_us(void);
/* Calls of a driver entry point counted by the countcuda shim in this
 * process, or -1 when the shim is not loaded. */
long shim_count(const char *name);

#endif
