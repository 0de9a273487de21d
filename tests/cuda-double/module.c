/*
 * CUDA driver test double: modules and kernel launches.
 *
 * Knows the two kernels of tests/gpu/kernels.cu, which the GPU programs
 * (tests/gpu/gpu_util.c: gpu_test, gpu_bench) load from kernels.ptx, and
 * runs them on the host over the double's memory, so those programs run
 * here without a GPU.  A module is any image that names both entries; a
 * launch runs at once in the calling thread, after every stream of the
 * process has drained (as the legacy stream orders it), whatever stream
 * it names.  Grid and block sizes are not used.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "double.h"

enum { K_FILL = 1, K_COUNT = 2 };

struct dbl_module {
        unsigned int magic;
};

#define MODULE_MAGIC 0x6b6d6f64u        /* a handle the double made */

/* The function handles: addresses of these two, so that no other value is one. */
static const char fn_fill, fn_count;

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        dbl_unlock();
        if (module == NULL || image == NULL)
                return CUDA_ERROR_INVALID_VALUE;
        if (!strstr(image, "slow_fill") || !strstr(image, "count_bad"))
                return CUDA_ERROR_INVALID_IMAGE;
        struct dbl_module *m = malloc(sizeof(*m));
        if (m == NULL)
                return CUDA_ERROR_OUT_OF_MEMORY;
        m->magic = MODULE_MAGIC;
        *module = (CUmodule)m;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
        DBL_ENTER();
        struct dbl_module *m = (struct dbl_module *)hmod;
        if (m == NULL || m->magic != MODULE_MAGIC)
                return CUDA_ERROR_INVALID_HANDLE;
        m->magic = 0;
        free(m);
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
        DBL_ENTER();
        struct dbl_module *m = (struct dbl_module *)hmod;
        if (hfunc == NULL || name == NULL)
                return CUDA_ERROR_INVALID_VALUE;
        if (m == NULL || m->magic != MODULE_MAGIC)
                return CUDA_ERROR_INVALID_HANDLE;
        if (strcmp(name, "slow_fill") == 0)
                *hfunc = (CUfunction)(uintptr_t)&fn_fill;
        else if (strcmp(name, "count_bad") == 0)
                *hfunc = (CUfunction)(uintptr_t)&fn_count;
        else
                return CUDA_ERROR_NOT_FOUND;
        return CUDA_SUCCESS;
}

static unsigned char pattern(unsigned int seed, unsigned long long i)
{
        return (unsigned char)(seed + 7u * (unsigned int)i);
}

/* slow_fill(p, n, seed, spin): p[i] = pattern; the spin is not modelled. */
static CUresult run_fill(void **args)
{
        unsigned char *p = (unsigned char *)(uintptr_t)*(CUdeviceptr *)args[0];
        unsigned long long n = *(unsigned long long *)args[1];
        unsigned int seed = *(unsigned int *)args[2];

        if (!dbl_range_ok((uintptr_t)p, n, PROT_READ | PROT_WRITE))
                return CUDA_ERROR_ILLEGAL_ADDRESS;
        for (unsigned long long i = 0; i < n; i++)
                p[i] = pattern(seed, i);
        return CUDA_SUCCESS;
}

/* count_bad(p, n, seed, base, bad): *bad += bytes off the pattern at base. */
static CUresult run_count(void **args)
{
        const unsigned char *p = (const unsigned char *)(uintptr_t)*(CUdeviceptr *)args[0];
        unsigned long long n = *(unsigned long long *)args[1];
        unsigned int seed = *(unsigned int *)args[2];
        unsigned long long base = *(unsigned long long *)args[3];
        unsigned long long *bad = (unsigned long long *)(uintptr_t)*(CUdeviceptr *)args[4];
        unsigned long long k = 0;

        if (!dbl_range_ok((uintptr_t)p, n, PROT_READ) ||
            !dbl_range_ok((uintptr_t)bad, sizeof(*bad), PROT_READ | PROT_WRITE))
                return CUDA_ERROR_ILLEGAL_ADDRESS;
        for (unsigned long long i = 0; i < n; i++)
                k += p[i] != pattern(seed, base + i);
        *bad += k;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int shared, CUstream hstream, void **params, void **extra)
{
        DBL_ENTER();
        struct dbl_stream *s;
        (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared;

        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (!dbl_stream_lookup(hstream, &s))
                rc = CUDA_ERROR_INVALID_HANDLE;
        else if (params == NULL || extra != NULL)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (f != (CUfunction)(uintptr_t)&fn_fill && f != (CUfunction)(uintptr_t)&fn_count)
                rc = CUDA_ERROR_INVALID_HANDLE;
        if (rc == CUDA_SUCCESS) {
                dbl_streams_drain_all();
                rc = f == (CUfunction)(uintptr_t)&fn_fill ? run_fill(params) : run_count(params);
        }
        dbl_unlock();
        return rc;
}
