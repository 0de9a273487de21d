/*
 * CUDA driver test double: cuGetErrorName / cuGetErrorString.
 */
#include <stddef.h>

#include "double.h"

struct dbl_error {
        CUresult code;
        const char *name;
        const char *text;
};

#define E(code, text) { code, #code, text }

static const struct dbl_error errors[] = {
        E(CUDA_SUCCESS, "no error"),
        E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
        E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
        E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
        E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
        E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
        E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
        E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
        E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
        E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
        E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
        E(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
        E(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
        E(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
        E(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "context already in use"),
        E(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
          "peer access is not supported between these two devices"),
        E(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
        E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
        E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
        E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
        E(CUDA_ERROR_NOT_READY, "device not ready"),
        E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
        E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
        E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
        E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
        E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
        E(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted"),
        E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
        E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
        E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
        E(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
        E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
          "system has unsupported display driver / cuda driver combination"),
        E(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
        E(CUDA_ERROR_UNKNOWN, "unknown error"),
};

static const struct dbl_error *lookup(CUresult code)
{
        for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
                if (errors[i].code == code)
                        return &errors[i];
        return NULL;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
        DBL_ENTER();
        if (pStr == NULL)
                return CUDA_ERROR_INVALID_VALUE;
        const struct dbl_error *e = lookup(error);
        *pStr = e != NULL ? e->name : NULL;
        return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
        DBL_ENTER();
        if (pStr == NULL)
                return CUDA_ERROR_INVALID_VALUE;
        const struct dbl_error *e = lookup(error);
        *pStr = e != NULL ? e->text : NULL;
        return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
