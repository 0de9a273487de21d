/* cuda_ctx.h: the daemon's own use of the CUDA driver.
 *
 * At startup the driver library is only loaded (cheap; no cuInit), so that
 * stats can say whether CUDA is there.  Host and cuda-vmm buffers never need
 * it.  The first adopt runs cuInit (about half a second on an H200) and
 * each device gets its primary context on first use. */
#ifndef GPUIPCD_CUDA_CTX_H
#define GPUIPCD_CUDA_CTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

struct gpu;

/* Loads the driver and logs one line saying whether it was found.  Fails
 * only for lack of memory: a missing driver is a state, not an error. */
int gpu_new(struct gpu **ret);
/* Releases the contexts; NULL-safe; returns NULL. */
struct gpu *gpu_free(struct gpu *g);

/* Whether CUDA can be used as far as is known (a failed cuInit says no),
 * why not, and the driver version (0 when unknown). */
bool gpu_available(const struct gpu *g, const char **ret_reason, int *ret_driver_version);

/* Opens the legacy IPC handle (of an allocation's base) on the device with
 * that UUID, copies [offset, offset + size) device-to-device into a new VMM
 * allocation of size rounded up to its granularity, closes the handle, and
 * returns the exported POSIX fd, which alone keeps the new memory alive.
 * -ENOTSUP when CUDA is unusable or the device is not visible; otherwise
 * the errno of the failed driver call.  why says what failed. */
int gpu_copy_to_vmm(struct gpu *g, const uint8_t uuid[PROTO_UUID_LEN],
                    const uint8_t handle[PROTO_IPC_HANDLE_LEN], uint64_t offset,
                    uint64_t size, int *ret_fd, uint64_t *ret_alloc_size, char *why,
                    size_t why_len);

#endif
