/*
 * CUDA driver test double: modules and kernel launches.
 *
 * Knows the two kernels of tests/gpu/kernels.cu, which the GPU programs
 * (tests/gpu/gpu_util.c: gpu_test, gpu_bench) load from kernels.ptx, and
 * runs them on the host over the double's memory, so those programs run
 * here without a GPU.  A module is any PTX text (NUL-terminated, as
 * cuModuleLoadData takes PTX) that names both entries.  A launch is a
 * stream operation like a copy (stream.c): at once on the legacy stream or
 * without GPUIPC_CUDA_DOUBLE_EVENT_DELAY_MS, queued on a created stream
 * with it, so a reader that does not wait for the kernel sees stale bytes.
 * Grid, block and the fill's spin are not modelled.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "double.h"

/* A module holds nothing of its own, so every load returns the one
 * module, counted: nothing is allocated that a program which never
 * unloads (as gpu_util.c) would leak. */
static struct dbl_module {
        unsigned int loads;
} the_module;

/* The function handles: addresses of these two, so that no other value is one. */
static const char fn_fill, fn_count;
#define FN_FILL ((CUfunction)(uintptr_t)&fn_fill)
#define FN_COUNT ((CUfunction)(uintptr_t)&fn_count)

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (module == NULL || image == NULL)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (!strstr(image, "slow_fill") || !strstr(image, "count_bad"))
                rc = CUDA_ERROR_INVALID_IMAGE;
        else {
                the_module.loads++;
                *module = (CUmodule)&the_module;
        }
        dbl_unlock();
        return rc;
}

static bool module_valid(CUmodule hmod)
{
        return hmod == (CUmodule)&the_module && the_module.loads > 0;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (module_valid(hmod))
                the_module.loads--;
        else
                rc = CUDA_ERROR_INVALID_HANDLE;
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (hfunc == NULL || name == NULL)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (!module_valid(hmod))
                rc = CUDA_ERROR_INVALID_HANDLE;
        else if (strcmp(name, "slow_fill") == 0)
                *hfunc = FN_FILL;
        else if (strcmp(name, "count_bad") == 0)
                *hfunc = FN_COUNT;
        else
                rc = CUDA_ERROR_NOT_FOUND;
        dbl_unlock();
        return rc;
}

static unsigned char pattern(unsigned int seed, unsigned long long i)
{
        return (unsigned char)(seed + 7u * (unsigned int)i);
}

/* Runs in stream order (stream.c): the ranges were checked at launch. */
void dbl_kernel_run(const struct dbl_op *op)
{
        unsigned char *p = op->dst;
        unsigned long long k = 0;

        if (op->kind == DBL_OP_FILL) {
                for (size_t i = 0; i < op->n; i++)
                        p[i] = pattern(op->value, i);
                return;
        }
        for (size_t i = 0; i < op->n; i++)
                k += p[i] != pattern(op->value, op->base + i);
        __atomic_fetch_add(op->bad, k, __ATOMIC_RELAXED);      /* atomicAdd's */
}

/* slow_fill(p, n, seed, spin) and count_bad(p, n, seed, base, bad) as an
 * op; the spin is not modelled. */
static CUresult kernel_op(CUfunction f, void **args, struct dbl_op *op)
{
        uintptr_t p = (uintptr_t)*(CUdeviceptr *)args[0];

        op->dst = (void *)p;
        op->n = *(unsigned long long *)args[1];
        op->value = *(unsigned int *)args[2];
        if (!dbl_range_ok(p, op->n, PROT_READ | (f == FN_FILL ? PROT_WRITE : 0)))
                return CUDA_ERROR_ILLEGAL_ADDRESS;
        if (f == FN_FILL) {
                op->kind = DBL_OP_FILL;
                return CUDA_SUCCESS;
        }
        op->kind = DBL_OP_COUNT;
        op->base = *(unsigned long long *)args[3];
        op->bad = (unsigned long long *)(uintptr_t)*(CUdeviceptr *)args[4];
        if (!dbl_range_ok((uintptr_t)op->bad, sizeof(*op->bad), PROT_READ | PROT_WRITE))
                return CUDA_ERROR_ILLEGAL_ADDRESS;
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int shared, CUstream hstream, void **params, void **extra)
{
        DBL_ENTER();
        struct dbl_stream *s;
        struct dbl_op *op;
        (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared;

        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (!dbl_stream_lookup(hstream, &s))
                rc = CUDA_ERROR_INVALID_HANDLE;
        else if (params == NULL || extra != NULL)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (f != FN_FILL && f != FN_COUNT)
                rc = CUDA_ERROR_INVALID_HANDLE;
        else if (!(op = calloc(1, sizeof(*op))))
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        else if ((rc = kernel_op(f, params, op)) != CUDA_SUCCESS)
                free(op);
        else
                dbl_stream_submit(s, op);       /* takes op */
        dbl_unlock();
        return rc;
}
