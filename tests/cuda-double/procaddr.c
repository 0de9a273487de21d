/*
 * CUDA driver test double: the table of entry points, which serves
 * cuGetProcAddress and the per-process call counters
 * (gpuipc_cuda_double_count, GPUIPC_CUDA_DOUBLE_STATS).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "double.h"

struct entry {
        const char *base;       /* the name cuGetProcAddress is asked for */
        const char *name;       /* the exported (versioned) symbol */
        int version;            /* first CUDA version with this variant */
        void *fn;
};

#define E(base, name, version) { #base, #name, version, (void *)name }

static const struct entry entries[] = {
        E(cuInit, cuInit, 2000),
        E(cuDriverGetVersion, cuDriverGetVersion, 2020),
        E(cuGetErrorName, cuGetErrorName, 6000),
        E(cuGetErrorString, cuGetErrorString, 6000),
        E(cuGetProcAddress, cuGetProcAddress, 11030),
        E(cuGetProcAddress, cuGetProcAddress_v2, 12000),
        E(cuDeviceGet, cuDeviceGet, 2000),
        E(cuDeviceGetCount, cuDeviceGetCount, 2000),
        E(cuDeviceGetName, cuDeviceGetName, 2000),
        E(cuDeviceGetUuid, cuDeviceGetUuid, 9020),
        E(cuDeviceGetUuid, cuDeviceGetUuid_v2, 11040),
        E(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000),
        E(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010),
        E(cuDeviceGetByPCIBusId, cuDeviceGetByPCIBusId, 4010),
        E(cuDeviceTotalMem, cuDeviceTotalMem_v2, 3020),
        E(cuDeviceCanAccessPeer, cuDeviceCanAccessPeer, 4000),
        E(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000),
        E(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, 11000),
        E(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000),
        E(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags_v2, 11000),
        E(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, 11000),
        E(cuCtxCreate, cuCtxCreate, 2000),
        E(cuCtxCreate, cuCtxCreate_v2, 3020),
        E(cuCtxCreate, cuCtxCreate_v4, 12050),
        E(cuCtxDestroy, cuCtxDestroy_v2, 4000),
        E(cuCtxSetCurrent, cuCtxSetCurrent, 4000),
        E(cuCtxGetCurrent, cuCtxGetCurrent, 4000),
        E(cuCtxGetDevice, cuCtxGetDevice, 2000),
        E(cuCtxPushCurrent, cuCtxPushCurrent_v2, 4000),
        E(cuCtxPopCurrent, cuCtxPopCurrent_v2, 4000),
        E(cuCtxSynchronize, cuCtxSynchronize, 2000),
        E(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess, 4000),
        E(cuCtxDisablePeerAccess, cuCtxDisablePeerAccess, 4000),
        E(cuMemAlloc, cuMemAlloc_v2, 3020),
        E(cuMemFree, cuMemFree_v2, 3020),
        E(cuMemGetAddressRange, cuMemGetAddressRange_v2, 3020),
        E(cuMemGetInfo, cuMemGetInfo_v2, 3020),
        E(cuMemAllocHost, cuMemAllocHost_v2, 3020),
        E(cuMemFreeHost, cuMemFreeHost, 2000),
        E(cuPointerGetAttribute, cuPointerGetAttribute, 4000),
        E(cuPointerGetAttributes, cuPointerGetAttributes, 7000),
        E(cuMemcpy, cuMemcpy, 4000),
        E(cuMemcpyHtoD, cuMemcpyHtoD_v2, 3020),
        E(cuMemcpyDtoH, cuMemcpyDtoH_v2, 3020),
        E(cuMemcpyDtoD, cuMemcpyDtoD_v2, 3020),
        E(cuMemcpyPeer, cuMemcpyPeer, 4000),
        E(cuMemcpyAsync, cuMemcpyAsync, 4000),
        E(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, 3020),
        E(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, 3020),
        E(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, 3020),
        E(cuMemsetD8, cuMemsetD8_v2, 3020),
        E(cuMemsetD32, cuMemsetD32_v2, 3020),
        E(cuMemsetD8Async, cuMemsetD8Async, 3020),
        E(cuMemsetD32Async, cuMemsetD32Async, 3020),
        E(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010),
        E(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2, 11000),
        E(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010),
        E(cuIpcGetEventHandle, cuIpcGetEventHandle, 4010),
        E(cuIpcOpenEventHandle, cuIpcOpenEventHandle, 4010),
        E(cuEventCreate, cuEventCreate, 2000),
        E(cuEventRecord, cuEventRecord, 2000),
        E(cuEventRecordWithFlags, cuEventRecordWithFlags, 11010),
        E(cuEventQuery, cuEventQuery, 2000),
        E(cuEventSynchronize, cuEventSynchronize, 2000),
        E(cuEventDestroy, cuEventDestroy_v2, 4000),
        E(cuStreamCreate, cuStreamCreate, 2000),
        E(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 5050),
        E(cuStreamDestroy, cuStreamDestroy_v2, 4000),
        E(cuStreamSynchronize, cuStreamSynchronize, 2000),
        E(cuStreamQuery, cuStreamQuery, 2000),
        E(cuStreamWaitEvent, cuStreamWaitEvent, 3020),
        E(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020),
        E(cuMemCreate, cuMemCreate, 10020),
        E(cuMemRelease, cuMemRelease, 10020),
        E(cuMemExportToShareableHandle, cuMemExportToShareableHandle, 10020),
        E(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020),
        E(cuMemGetAllocationPropertiesFromHandle, cuMemGetAllocationPropertiesFromHandle, 10020),
        E(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000),
        E(cuMemAddressReserve, cuMemAddressReserve, 10020),
        E(cuMemAddressFree, cuMemAddressFree, 10020),
        E(cuMemMap, cuMemMap, 10020),
        E(cuMemUnmap, cuMemUnmap, 10020),
        E(cuMemSetAccess, cuMemSetAccess, 10020),
        E(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020),
        E(cuDeviceGetMemPool, cuDeviceGetMemPool, 11020),
        E(cuDeviceSetMemPool, cuDeviceSetMemPool, 11020),
        E(cuMemPoolCreate, cuMemPoolCreate, 11020),
        E(cuMemPoolDestroy, cuMemPoolDestroy, 11020),
        E(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020),
        E(cuMemPoolSetAttribute, cuMemPoolSetAttribute, 11020),
        E(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020),
        E(cuMemPoolSetAccess, cuMemPoolSetAccess, 11020),
        E(cuMemPoolGetAccess, cuMemPoolGetAccess, 11020),
        E(cuMemAllocAsync, cuMemAllocAsync, 11020),
        E(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020),
        E(cuMemFreeAsync, cuMemFreeAsync, 11020),
        E(cuMemPoolExportToShareableHandle, cuMemPoolExportToShareableHandle, 11020),
        E(cuMemPoolImportFromShareableHandle, cuMemPoolImportFromShareableHandle, 11020),
        E(cuMemPoolExportPointer, cuMemPoolExportPointer, 11020),
        E(cuMemPoolImportPointer, cuMemPoolImportPointer, 11020),
        E(cuModuleLoadData, cuModuleLoadData, 2000),
        E(cuModuleUnload, cuModuleUnload, 2000),
        E(cuModuleGetFunction, cuModuleGetFunction, 2000),
        E(cuLaunchKernel, cuLaunchKernel, 4000),
};

#define NENTRIES (sizeof(entries) / sizeof(entries[0]))

static atomic_ulong counts[NENTRIES + 1];       /* last slot: not in the table */

static int find_name(const char *name)
{
        for (size_t i = 0; i < NENTRIES; i++)
                if (strcmp(entries[i].name, name) == 0)
                        return (int)i;
        return -1;
}

void dbl_count(atomic_int *idx, const char *func)
{
        int i = atomic_load(idx);
        if (i < 0) {
                i = find_name(func);
                if (i < 0) {
                        fprintf(stderr, "gpuipc CUDA double: %s is missing from the table\n",
                                func);
                        i = (int)NENTRIES;
                }
                atomic_store(idx, i);
        }
        atomic_fetch_add(&counts[i], 1);
}

void dbl_counts_reset(void)
{
        for (size_t i = 0; i <= NENTRIES; i++)
                atomic_store(&counts[i], 0);
}

long gpuipc_cuda_double_count(const char *name)
{
        long all = 0;
        int i;

        if (name != NULL && strcmp(name, "*") == 0) {
                for (size_t k = 0; k <= NENTRIES; k++)
                        all += (long)atomic_load(&counts[k]);
                return all;
        }
        i = name != NULL ? find_name(name) : -1;
        return i < 0 ? -1 : (long)atomic_load(&counts[i]);
}

/* GPUIPC_CUDA_DOUBLE_STATS=path ("%p" in it becomes the pid): "name count" lines. */
void dbl_stats_write(void)
{
        const char *tmpl = dbl_getenv("GPUIPC_CUDA_DOUBLE_STATS");
        if (tmpl == NULL)
                return;
        char path[512], tmp[600];
        size_t o = 0;
        for (const char *p = tmpl; *p != '\0' && o + 16 < sizeof(path); p++) {
                if (p[0] == '%' && p[1] == 'p') {
                        o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
                        p++;
                } else {
                        path[o++] = *p;
                }
        }
        path[o] = '\0';
        snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
        FILE *f = fopen(tmp, "w");
        if (f == NULL)
                return;
        for (size_t i = 0; i < NENTRIES; i++)
                fprintf(f, "%s %lu\n", entries[i].name, atomic_load(&counts[i]));
        if (fclose(f) == 0)
                rename(tmp, path);
        else
                unlink(tmp);
}

static CUresult proc_address(const char *symbol, void **pfn, int cudaVersion,
                             CUdriverProcAddressQueryResult *status)
{
        if (symbol == NULL || pfn == NULL)
                return CUDA_ERROR_INVALID_VALUE;
        const struct entry *best = NULL;
        bool known = false;
        for (size_t i = 0; i < NENTRIES; i++) {
                const struct entry *e = &entries[i];
                if (strcmp(e->base, symbol) == 0) {
                        known = true;
                        if (e->version <= cudaVersion &&
                            (best == NULL || e->version > best->version))
                                best = e;
                }
        }
        if (!known) {                   /* also accept an exported name as such */
                int i = find_name(symbol);
                if (i >= 0)
                        best = &entries[i];
        }
        *pfn = best != NULL ? best->fn : NULL;
        if (status != NULL)
                *status = best != NULL ? CU_GET_PROC_ADDRESS_SUCCESS :
                          known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT :
                          CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return best != NULL ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
        DBL_ENTER();
        (void)flags;    /* per-thread-stream variants are the same functions here */
        return proc_address(symbol, pfn, cudaVersion, symbolStatus);
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags)
{
        DBL_ENTER();
        (void)flags;
        return proc_address(symbol, pfn, cudaVersion, NULL);
}
