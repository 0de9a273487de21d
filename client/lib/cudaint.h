/* cudaint.h: private CUDA helpers of libgpuipc (cuda.c, cudareg.c,
 * cudamap.c, cudabuf.c).
 *
 * The driver comes from proto/cuda_drv.h: dlopen()ed on the first CUDA call
 * (never by host-only paths) and kept for the process lifetime.  Every
 * driver call runs with the device's primary context current; the caller's
 * own current context is put back afterwards (gpuipc__cu_enter/leave).
 *
 * Everything below needs <cuda.h>; without it cudastub.c provides the
 * public CUDA functions, failing with -ENOTSUP. */
#ifndef GPUIPC_CUDAINT_H
#define GPUIPC_CUDAINT_H

#include "internal.h"
#include "cuda_drv.h"

#ifdef GPUIPC_HAVE_CUDA_H

#define GPUIPC__CU_MAX_DEVICES 64
/* A cuda-vmm allocation's identity on the wire (alloc_key, alloc.key). */
#define GPUIPC__ALLOC_KEY_LEN 16

/* The loaded, initialised driver.  -ENOTSUP when there is none; with c,
 * gpuipc_errmsg() then says why ("CUDA driver unavailable: ..."). */
int gpuipc__cu_get(gpuipc_client *c, struct cuda **ret_cu);
/* Why gpuipc__cu_get() failed, once it has; "" before. */
const char *gpuipc__cu_why(void);
/* Sets the error text for a failed driver call and returns its errno
 * (-EIO for an unmapped result).  c may be NULL. */
int gpuipc__cu_fail(gpuipc_client *c, const struct cuda *cu, CUresult res, const char *what);
/* -ENOTSUP for an entry point that the driver does not export. */
int gpuipc__cu_missing(gpuipc_client *c, const char *fn);
#define GPUIPC__CU_NEED(c, cu, fn) ((cu)->fn ? 0 : gpuipc__cu_missing(c, #fn))

/* Makes ordinal's primary context current (retaining it once per process)
 * and saves the caller's context in *ret_saved for gpuipc__cu_leave(). */
int gpuipc__cu_enter(gpuipc_client *c, struct cuda *cu, int ordinal, CUcontext *ret_saved);
/* The primary context of ordinal, retained once per process. */
int gpuipc__cu_primary(gpuipc_client *c, struct cuda *cu, int ordinal, CUcontext *ret);
void gpuipc__cu_leave(struct cuda *cu, CUcontext saved);

/* 1 when device ordinal dev can access memory on device ordinal peer
 * (cuDeviceCanAccessPeer; 1 for dev == peer), 0 when not; -ENOTSUP when
 * the driver lacks the call, -ENODEV/-EIO when it fails. */
int gpuipc__cu_can_peer(struct cuda *cu, int dev, int peer);

/* UUID of device ordinal, binary and as the wire string. */
int gpuipc__cu_uuid(gpuipc_client *c, struct cuda *cu, int ordinal, uint8_t ret[CUDA_UUID_LEN]);
/* This process's ordinal of the device named by the wire string; -ENODEV
 * with a message naming the UUID and CUDA_VISIBLE_DEVICES. */
int gpuipc__cu_ordinal(gpuipc_client *c, struct cuda *cu, const char *uuid,
                       uint8_t ret_uuid[CUDA_UUID_LEN], int *ret_ordinal);

/* ---- cudareg.c: what this process exported ---------------------------- */

/* The base pointer of an allocation this process registered as cuda-ipc
 * with that (device, handle, buffer_id); false when it is not ours. */
bool gpuipc__cuown_find(const uint8_t uuid[CUDA_UUID_LEN], const uint8_t *handle,
                        uint64_t buffer_id, CUdeviceptr *ret_base, uint64_t *ret_size);
/* Forgets the exported fd of the VMM allocation at base (closing it). */
void gpuipc__cuexport_forget(CUdeviceptr base);

/* ---- cudamap.c: allocations opened in this process -------------------- */

struct gpuipc__cumap;
/* The opened allocation's base and size. */
CUdeviceptr gpuipc__cumap_base(const struct gpuipc__cumap *m);
uint64_t gpuipc__cumap_size(const struct gpuipc__cumap *m);

#endif

#endif
