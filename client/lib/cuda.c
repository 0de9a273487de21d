/* cuda.c: the CUDA driver in the library: loading, errors, contexts and
 * devices by UUID. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudaint.h"

#ifdef GPUIPC_HAVE_CUDA_H

static pthread_mutex_t cu_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cuda *cu_drv;
static int cu_err;                      /* 0, or -ENOTSUP once loading failed */
static char cu_why[CUDA_WHY_MAX];
/* Primary contexts retained by this process, by ordinal; kept until exit,
 * like the CUDA runtime does. */
static CUcontext cu_primary[GPUIPC__CU_MAX_DEVICES];

int gpuipc__cu_get(gpuipc_client *c, struct cuda **ret_cu)
{
        int r;

        pthread_mutex_lock(&cu_lock);
        if (!cu_drv && !cu_err) {
                r = cuda_load(&cu_drv, cu_why, sizeof(cu_why));
                if (r == 0) {
                        r = cuda_init(cu_drv);
                        if (r < 0) {
                                snprintf(cu_why, sizeof(cu_why), "%s", cuda_reason(cu_drv));
                                cu_drv = cuda_unload(cu_drv);
                        }
                }
                if (r < 0)
                        cu_err = -ENOTSUP;
        }
        pthread_mutex_unlock(&cu_lock);
        if (cu_err < 0) {
                if (c)
                        return gpuipc__fail(c, -ENOTSUP, "CUDA driver unavailable: %s", cu_why);
                return -ENOTSUP;
        }
        *ret_cu = cu_drv;
        return 0;
}

struct cuda *gpuipc__cu_loaded(void)
{
        struct cuda *cu;

        pthread_mutex_lock(&cu_lock);
        cu = cu_drv;
        pthread_mutex_unlock(&cu_lock);
        return cu;
}

const char *gpuipc__cu_why(void)
{
        return cu_why;
}

int gpuipc__cu_fail(gpuipc_client *c, const struct cuda *cu, CUresult res, const char *what)
{
        char text[160];
        int r = cuda_result_errno(res);

        if (r == 0)
                r = -EIO;
        if (!c)
                return r;
        return gpuipc__fail(c, r, "%s failed: %s", what, cuda_result_text(cu, res, text, sizeof(text)));
}

int gpuipc__cu_missing(gpuipc_client *c, const char *fn)
{
        if (!c)
                return -ENOTSUP;
        return gpuipc__fail(c, -ENOTSUP, "the CUDA driver lacks %s (driver too old?)", fn);
}

int gpuipc__cu_primary(gpuipc_client *c, struct cuda *cu, int ordinal, CUcontext *ret)
{
        CUdevice dev;
        CUcontext ctx = NULL;
        CUresult res;
        int n = 0, r = 0;

        /* Retained already: the device exists, no need to count them. */
        if (ordinal >= 0 && ordinal < GPUIPC__CU_MAX_DEVICES) {
                pthread_mutex_lock(&cu_lock);
                ctx = cu_primary[ordinal];
                pthread_mutex_unlock(&cu_lock);
                if (ctx) {
                        *ret = ctx;
                        return 0;
                }
        }
        if (cu->cuDeviceGetCount(&n) != CUDA_SUCCESS || ordinal < 0 || ordinal >= n ||
            ordinal >= GPUIPC__CU_MAX_DEVICES) {
                if (c)
                        return gpuipc__fail(c, -ENODEV, "no CUDA device %d in this process", ordinal);
                return -ENODEV;
        }
        pthread_mutex_lock(&cu_lock);
        ctx = cu_primary[ordinal];
        if (!ctx) {
                res = cu->cuDeviceGet(&dev, ordinal);
                if (res == CUDA_SUCCESS)
                        res = cu->cuDevicePrimaryCtxRetain(&ctx, dev);
                if (res != CUDA_SUCCESS)
                        r = gpuipc__cu_fail(c, cu, res, "cuDevicePrimaryCtxRetain");
                else
                        cu_primary[ordinal] = ctx;
        }
        pthread_mutex_unlock(&cu_lock);
        if (r < 0)
                return r;
        *ret = ctx;
        return 0;
}

int gpuipc__cu_enter(gpuipc_client *c, struct cuda *cu, int ordinal, CUcontext *ret_saved)
{
        CUcontext ctx = NULL, saved = NULL;
        CUresult res;
        int r;

        r = gpuipc__cu_primary(c, cu, ordinal, &ctx);
        if (r < 0)
                return r;
        if (cu->cuCtxGetCurrent(&saved) != CUDA_SUCCESS)
                saved = NULL;
        if (saved != ctx) {
                res = cu->cuCtxSetCurrent(ctx);
                if (res != CUDA_SUCCESS)
                        return gpuipc__cu_fail(c, cu, res, "cuCtxSetCurrent");
        }
        *ret_saved = saved;
        return 0;
}

void gpuipc__cu_leave(struct cuda *cu, CUcontext saved)
{
        CUcontext cur = NULL;

        if (cu->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == saved)
                return;
        (void)cu->cuCtxSetCurrent(saved);
}

/* cuDeviceCanAccessPeer is not in proto/cuda/driver.h's tables: resolved here,
 * once, from the loaded library (NULL when it lacks it). */
typedef CUresult (*can_peer_fn)(int *, CUdevice, CUdevice);
static pthread_once_t can_peer_once = PTHREAD_ONCE_INIT;
static can_peer_fn can_peer;
static struct cuda *can_peer_cu;

static void can_peer_resolve(void)
{
        can_peer = (can_peer_fn)dlsym(can_peer_cu->dl, "cuDeviceCanAccessPeer");
}

int gpuipc__cu_can_peer(struct cuda *cu, int dev, int peer)
{
        CUdevice d, p;
        int can = 0;

        if (dev == peer)
                return 1;
        can_peer_cu = cu;
        pthread_once(&can_peer_once, can_peer_resolve);
        if (!can_peer)
                return -ENOTSUP;
        if (cu->cuDeviceGet(&d, dev) != CUDA_SUCCESS || cu->cuDeviceGet(&p, peer) != CUDA_SUCCESS)
                return -ENODEV;
        if (can_peer(&can, d, p) != CUDA_SUCCESS)
                return -EIO;
        return can != 0;
}

int gpuipc__cu_uuid(gpuipc_client *c, struct cuda *cu, int ordinal, uint8_t ret[CUDA_UUID_LEN])
{
        CUdevice dev;
        CUuuid u;
        CUresult res;

        res = cu->cuDeviceGet(&dev, ordinal);
        if (res == CUDA_SUCCESS)
                res = cu->cuDeviceGetUuid_v2(&u, dev);
        if (res != CUDA_SUCCESS)
                return gpuipc__cu_fail(c, cu, res, "cuDeviceGetUuid");
        memcpy(ret, u.bytes, CUDA_UUID_LEN);
        return 0;
}

/* The visible devices' UUIDs, read once: a process's devices do not
 * change after cuInit().  A batch lookup asks for a part's device once per
 * part. */
static pthread_mutex_t uuids_lock = PTHREAD_MUTEX_INITIALIZER;
static int n_uuids = -1;
static uint8_t uuids[GPUIPC__CU_MAX_DEVICES][CUDA_UUID_LEN];

static int visible_uuids(struct cuda *cu, uint8_t (**ret)[CUDA_UUID_LEN])
{
        int n = 0;

        pthread_mutex_lock(&uuids_lock);
        if (n_uuids < 0) {
                if (cu->cuDeviceGetCount(&n) != CUDA_SUCCESS || n < 0)
                        n = 0;
                if (n > (int)GPUIPC__CU_MAX_DEVICES)
                        n = GPUIPC__CU_MAX_DEVICES;
                for (int i = 0; i < n; i++)
                        if (gpuipc__cu_uuid(NULL, cu, i, uuids[i]) < 0)
                                memset(uuids[i], 0, CUDA_UUID_LEN);
                /* a failed count is asked again next time */
                if (n > 0)
                        n_uuids = n;
        }
        n = n_uuids > 0 ? n_uuids : 0;
        pthread_mutex_unlock(&uuids_lock);
        *ret = uuids;
        return n;
}

int gpuipc__cu_ordinal(gpuipc_client *c, struct cuda *cu, const char *uuid,
                       uint8_t ret_uuid[CUDA_UUID_LEN], int *ret_ordinal)
{
        uint8_t want[CUDA_UUID_LEN], (*have)[CUDA_UUID_LEN];
        const char *cvd;
        int n;

        if (!uuid || cuda_uuid_parse(uuid, strlen(uuid), want) < 0)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's record names no valid device UUID (\"%s\")",
                                    uuid ? uuid : "");
        n = visible_uuids(cu, &have);
        for (int i = 0; i < n; i++) {
                if (memcmp(have[i], want, CUDA_UUID_LEN))
                        continue;
                memcpy(ret_uuid, want, CUDA_UUID_LEN);
                *ret_ordinal = i;
                return 0;
        }
        cvd = getenv("CUDA_VISIBLE_DEVICES");
        return gpuipc__fail(c, -ENODEV, "device %s is not visible in this process (%d devices; "
                            "CUDA_VISIBLE_DEVICES=%s)", uuid, n, cvd ? cvd : "<unset>");
}

#endif
