/* countcuda.c: a counting shim in front of the real CUDA driver.
 *
 * libgpuipc loads it through GPUIPC_LIBCUDA.  It defines only the entry
 * points whose calls the real-GPU suite counts and forwards them to the real
 * libcuda.so.1, which it depends on (linked against the toolkit's stub), so
 * dlsym() on this library finds every other entry point in the real one.  At
 * exit it writes "name count" lines to $GPUIPC_GPU_COUNT_FILE.
 *
 * With GPUIPC_GPU_DENY_PEER=1 it answers cuDeviceCanAccessPeer with 0, so
 * that a machine whose GPUs can reach each other also runs the library's
 * path for GPUs that cannot (-EXDEV, then the copy to the consumer's GPU). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

static atomic_long n_ipc_open, n_ipc_close, n_import;

static void *real(const char *name)
{
        void *p = dlsym(RTLD_NEXT, name);
        if (!p) {
                fprintf(stderr, "countcuda: %s not found in the real driver\n", name);
                abort();
        }
        return p;
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                       unsigned int flags)
{
        static __typeof__(cuIpcOpenMemHandle_v2) *fn;
        if (!fn)
                fn = real("cuIpcOpenMemHandle_v2");
        atomic_fetch_add(&n_ipc_open, 1);
        return fn(pdptr, handle, flags);
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
        static __typeof__(cuIpcCloseMemHandle) *fn;
        if (!fn)
                fn = real("cuIpcCloseMemHandle");
        atomic_fetch_add(&n_ipc_close, 1);
        return fn(dptr);
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
        static __typeof__(cuMemImportFromShareableHandle) *fn;
        if (!fn)
                fn = real("cuMemImportFromShareableHandle");
        atomic_fetch_add(&n_import, 1);
        return fn(handle, osHandle, shHandleType);
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
        static __typeof__(cuDeviceCanAccessPeer) *fn;
        const char *deny = getenv("GPUIPC_GPU_DENY_PEER");

        if (deny && !strcmp(deny, "1")) {
                *can = 0;
                return CUDA_SUCCESS;
        }
        if (!fn)
                fn = real("cuDeviceCanAccessPeer");
        return fn(can, dev, peer);
}

/* Read by the suite through dlsym on this library. */
__attribute__((visibility("default"))) long countcuda_get(const char *name)
{
        if (!strcmp(name, "cuIpcOpenMemHandle_v2"))
                return atomic_load(&n_ipc_open);
        if (!strcmp(name, "cuIpcCloseMemHandle"))
                return atomic_load(&n_ipc_close);
        if (!strcmp(name, "cuMemImportFromShareableHandle"))
                return atomic_load(&n_import);
        return -1;
}

__attribute__((destructor)) static void write_counts(void)
{
        const char *path = getenv("GPUIPC_GPU_COUNT_FILE");
        FILE *f;

        if (!path || !*path)
                return;
        f = fopen(path, "w");
        if (!f)
                return;
        fprintf(f, "cuIpcOpenMemHandle_v2 %ld\ncuIpcCloseMemHandle %ld\n"
                   "cuMemImportFromShareableHandle %ld\n",
                atomic_load(&n_ipc_open), atomic_load(&n_ipc_close), atomic_load(&n_import));
        fclose(f);
}
