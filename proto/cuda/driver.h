/* cuda/driver.h: the CUDA driver, loaded at run time, and device names on the wire.
 *
 * Neither the daemon nor the library links libcuda: a host without a GPU
 * must run both.  cuda_load() dlopen()s $GPUIPC_LIBCUDA if set, else
 * "libcuda.so.1", and resolves every entry point under the versioned name
 * the real library exports (cuMemAlloc_v2, not cuMemAlloc, which is a macro
 * in <cuda.h>; never the _ptds/_ptsz variants).  Each pointer has the type of
 * the prototype in <cuda.h>, so calls are checked by the compiler.  Loading
 * is cheap; cuda_init() runs cuInit (about half a second on an H200) and is
 * left to the first caller that must touch device memory.
 *
 * Devices are named on the wire by UUID ("GPU-" + 8-4-4-4-12 lowercase hex
 * of cuDeviceGetUuid), never by ordinal, which differs between processes.
 *
 * Nothing here logs.  Functions return 0 or a negative errno.
 *
 * Not wire code: it sits in proto/cuda/ because the daemon and the library
 * both use it and proto/ is what both link, while the files of proto/
 * itself stay the wire.  Included as "cuda/driver.h" (-Iproto); a plain
 * cuda.h there would shadow the driver's <cuda.h> for every file. */
#ifndef GPUIPC_CUDA_DRIVER_H
#define GPUIPC_CUDA_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The build adds -I$(CUDA_HOME)/include.  Until every build does, a tree
 * without <cuda.h> still compiles: cuda_load() then reports that the driver
 * cannot be used, and only the UUID helpers work. */
#if defined(__has_include)
#if __has_include(<cuda.h>)
#include <cuda.h>
#define GPUIPC_HAVE_CUDA_H 1
#endif
#endif

#define CUDA_UUID_LEN     16u
#define CUDA_UUID_STR_LEN 40u   /* "GPU-" + 32 hex + 4 dashes, without NUL */
#define CUDA_IPC_HANDLE_LEN 64u /* CUipcMemHandle and CUipcEventHandle */
#define CUDA_WHY_MAX      256u

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" into out (CUDA_UUID_STR_LEN + 1
 * bytes, NUL-terminated). */
void cuda_uuid_format(const uint8_t uuid[CUDA_UUID_LEN], char out[CUDA_UUID_STR_LEN + 1]);
/* The wire form, exactly (lowercase hex; uppercase is refused so that one
 * device has one name).  -EINVAL otherwise. */
int cuda_uuid_parse(const char *s, size_t len, uint8_t ret[CUDA_UUID_LEN]);

struct cuda;

/* Loads the driver library and resolves its entry points; no cuInit.  On
 * failure returns -ENOENT (no library) or -ENOTSUP (unusable) and a reason
 * in why, e.g. "libcuda.so.1 not found: <dlerror>". */
int cuda_load(struct cuda **ret, char *why, size_t why_len);
struct cuda *cuda_unload(struct cuda *cu);     /* NULL-safe; returns NULL */
/* cuInit(0), once: later calls return the first result.  On failure
 * cuda_reason() says why ("cuInit failed: CUDA_ERROR_NO_DEVICE (...)"). */
int cuda_init(struct cuda *cu);
/* Why the last failed cuda_init() failed, or "" */
const char *cuda_reason(const struct cuda *cu);
/* cuDriverGetVersion (works before cuInit), e.g. 13000; 0 if unknown. */
int cuda_driver_version(const struct cuda *cu);
/* The dlopen()ed path, for logs. */
const char *cuda_path(const struct cuda *cu);

#ifdef GPUIPC_HAVE_CUDA_H

/* Entry points every user needs: the daemon's adopt path and device lookup. */
#define CUDA_FNS_REQUIRED(X)                                                      \
        X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)     \
        X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetUuid_v2)                  \
        X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2)               \
        X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxSynchronize)                 \
        X(cuIpcOpenMemHandle_v2) X(cuIpcCloseMemHandle)                           \
        X(cuMemGetAllocationGranularity) X(cuMemCreate) X(cuMemRelease)           \
        X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap)      \
        X(cuMemSetAccess) X(cuMemExportToShareableHandle) X(cuMemcpyDtoD_v2)

/* Entry points the client library uses; NULL when the driver lacks one. */
#define CUDA_FNS_OPTIONAL(X)                                                      \
        X(cuCtxGetDevice) X(cuCtxDestroy_v2) X(cuDeviceTotalMem_v2)               \
        X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemGetAddressRange_v2)               \
        X(cuMemcpyDtoH_v2) X(cuMemcpyHtoD_v2) X(cuPointerGetAttribute)            \
        X(cuPointerGetAttributes)                                                 \
        X(cuIpcGetMemHandle) X(cuIpcGetEventHandle) X(cuIpcOpenEventHandle)       \
        X(cuEventCreate) X(cuEventRecord) X(cuEventDestroy_v2)                    \
        X(cuEventSynchronize) X(cuStreamWaitEvent)                                \
        X(cuMemImportFromShareableHandle) X(cuMemRetainAllocationHandle)           \
        X(cuDeviceGetAttribute) X(cuMemcpyPeer)                                   \
        X(cuMemPoolExportToShareableHandle) X(cuMemPoolExportPointer)              \
        X(cuMemPoolImportFromShareableHandle) X(cuMemPoolImportPointer)            \
        X(cuMemPoolSetAccess)

struct cuda {
        void *dl;
        char path[128];
        bool init_done;
        CUresult init_res;
        int driver_version;
        char why[CUDA_WHY_MAX];
#define CUDA_FN_FIELD(name) __typeof__(name) *name;
        CUDA_FNS_REQUIRED(CUDA_FN_FIELD)
        CUDA_FNS_OPTIONAL(CUDA_FN_FIELD)
#undef CUDA_FN_FIELD
};

/* Negative errno for a CUresult (0 for CUDA_SUCCESS). */
int cuda_result_errno(CUresult res);
/* "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)" into buf. */
const char *cuda_result_text(const struct cuda *cu, CUresult res, char *buf, size_t len);
/* The device of this process with that UUID (needs cuda_init()); -ENODEV. */
int cuda_device_by_uuid(const struct cuda *cu, const uint8_t uuid[CUDA_UUID_LEN],
                        CUdevice *ret);

#endif

#endif
