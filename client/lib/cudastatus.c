/* cudastatus.c: what the CUDA driver looks like from this process, for
 * gpuipcctl doctor and for callers that want to explain a failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudaint.h"

#ifdef GPUIPC_HAVE_CUDA_H
#define GPUIPC__CU_MAX_DEVICES_OR_1 GPUIPC__CU_MAX_DEVICES
#else
#define GPUIPC__CU_MAX_DEVICES_OR_1 1
#endif

struct status {
        gpuipc_cuda_status s;
        char reason[CUDA_WHY_MAX];
        gpuipc_cuda_device devs[GPUIPC__CU_MAX_DEVICES_OR_1];
        char uuids[GPUIPC__CU_MAX_DEVICES_OR_1][CUDA_UUID_STR_LEN + 1];
        int peer[GPUIPC__CU_MAX_DEVICES_OR_1 * GPUIPC__CU_MAX_DEVICES_OR_1];
};

void gpuipc_cuda_status_free(gpuipc_cuda_status *s)
{
        free(s);
}

/* s is always the first member of a struct status. */
static const struct status *status_of(const gpuipc_cuda_status *s)
{
        return (const struct status *)(const void *)s;
}

const gpuipc_cuda_device *gpuipc_cuda_status_device(const gpuipc_cuda_status *s, size_t i)
{
        if (!s || i >= s->n_devices)
                return NULL;
        return &status_of(s)->devs[i];
}

int gpuipc_cuda_status_peer(const gpuipc_cuda_status *s, size_t i, size_t j)
{
        if (!s || i >= s->n_devices || j >= s->n_devices)
                return -1;
        return status_of(s)->peer[i * s->n_devices + j];
}

#ifdef GPUIPC_HAVE_CUDA_H

/* 1 or 0 for a device attribute, -1 when the driver cannot say. */
static int attr(struct cuda *cu, CUdevice dev, CUdevice_attribute a)
{
        int v = 0;

        if (!cu->cuDeviceGetAttribute || cu->cuDeviceGetAttribute(&v, a, dev) != CUDA_SUCCESS)
                return -1;
        return v != 0;
}

/* The driver's view: each device and which can reach which. */
static void status_fill(struct status *st)
{
        struct cuda *cu;
        int n = 0;

        if (gpuipc__cu_get(NULL, &cu) < 0) {
                snprintf(st->reason, sizeof(st->reason), "%s", gpuipc__cu_why());
                return;
        }
        st->s.available = 1;
        st->s.driver_version = (uint32_t)cuda_driver_version(cu);
        if (cu->cuDeviceGetCount(&n) != CUDA_SUCCESS)
                n = 0;
        for (int i = 0; i < n && i < GPUIPC__CU_MAX_DEVICES; i++) {
                gpuipc_cuda_device *d = &st->devs[st->s.n_devices];
                uint8_t uuid[CUDA_UUID_LEN];
                CUdevice dev;
                int ua;

                if (cu->cuDeviceGet(&dev, i) != CUDA_SUCCESS ||
                    gpuipc__cu_uuid(NULL, cu, i, uuid) < 0)
                        continue;
                cuda_uuid_format(uuid, st->uuids[st->s.n_devices]);
                d->ordinal = i;
                d->uuid = st->uuids[st->s.n_devices];
                d->vmm_posix_fd =
                        attr(cu, dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
                if (attr(cu, dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == 0)
                        d->vmm_posix_fd = 0;
                /* Legacy IPC needs unified addressing (Linux, 64-bit). */
                ua = attr(cu, dev, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
                d->legacy_ipc = ua;
                st->s.n_devices++;
        }
        for (uint32_t i = 0; i < st->s.n_devices; i++)
                for (uint32_t j = 0; j < st->s.n_devices; j++) {
                        int can = gpuipc__cu_can_peer(cu, st->devs[i].ordinal,
                                                      st->devs[j].ordinal);
                        st->peer[i * st->s.n_devices + j] = can < 0 ? -1 : can;
                }
}

#else

static void status_fill(struct status *st)
{
        snprintf(st->reason, sizeof(st->reason), "libgpuipc was built without <cuda.h>");
}

#endif

int gpuipc_cuda_status_get(gpuipc_cuda_status **ret_status)
{
        struct status *st;

        if (!ret_status)
                return -EINVAL;
        st = calloc(1, sizeof(*st));
        if (!st)
                return -ENOMEM;
        st->s.reason = st->reason;
        status_fill(st);
        *ret_status = &st->s;
        return 0;
}
