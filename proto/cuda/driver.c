/* cuda/driver.c: run-time loading of the CUDA driver, and device UUIDs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/driver.h"

#define DEFAULT_LIBCUDA "libcuda.so.1"

static const char hexdigits[] = "0123456789abcdef";

void cuda_uuid_format(const uint8_t uuid[CUDA_UUID_LEN], char out[CUDA_UUID_STR_LEN + 1])
{
        char *p = out;

        memcpy(p, "GPU-", 4);
        p += 4;
        for (unsigned i = 0; i < CUDA_UUID_LEN; i++) {
                if (i == 4 || i == 6 || i == 8 || i == 10)
                        *p++ = '-';
                *p++ = hexdigits[uuid[i] >> 4];
                *p++ = hexdigits[uuid[i] & 15];
        }
        *p = '\0';
}

static int hexval(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        return -1;
}

int cuda_uuid_parse(const char *s, size_t len, uint8_t ret[CUDA_UUID_LEN])
{
        uint8_t u[CUDA_UUID_LEN];
        size_t pos = 4;

        if (len != CUDA_UUID_STR_LEN || memcmp(s, "GPU-", 4) != 0)
                return -EINVAL;
        for (unsigned i = 0; i < CUDA_UUID_LEN; i++) {
                int hi, lo;
                if (i == 4 || i == 6 || i == 8 || i == 10) {
                        if (s[pos] != '-')
                                return -EINVAL;
                        pos++;
                }
                hi = hexval(s[pos]);
                lo = hexval(s[pos + 1]);
                if (hi < 0 || lo < 0)
                        return -EINVAL;
                u[i] = (uint8_t)(hi << 4 | lo);
                pos += 2;
        }
        memcpy(ret, u, sizeof(u));
        return 0;
}

#ifdef GPUIPC_HAVE_CUDA_H

#include <dlfcn.h>

int cuda_result_errno(CUresult res)
{
        switch (res) {
        case CUDA_SUCCESS:
                return 0;
        case CUDA_ERROR_OUT_OF_MEMORY:
                return -ENOMEM;
        case CUDA_ERROR_NO_DEVICE:
        case CUDA_ERROR_INVALID_DEVICE:
                return -ENODEV;
        case CUDA_ERROR_INVALID_VALUE:
        case CUDA_ERROR_INVALID_HANDLE:
        case CUDA_ERROR_INVALID_CONTEXT:
                return -EINVAL;
        case CUDA_ERROR_ALREADY_MAPPED:
                return -EEXIST;
        case CUDA_ERROR_NOT_SUPPORTED:
        case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
        case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
        case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
        case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:
                return -ENOTSUP;
        case CUDA_ERROR_NOT_PERMITTED:
                return -EPERM;
        case CUDA_ERROR_NOT_FOUND:
                return -ENOENT;
        default:
                return -EIO;
        }
}

const char *cuda_result_text(const struct cuda *cu, CUresult res, char *buf, size_t len)
{
        const char *name = NULL, *str = NULL;

        if (cu && cu->cuGetErrorName(res, &name) != CUDA_SUCCESS)
                name = NULL;
        if (cu && cu->cuGetErrorString(res, &str) != CUDA_SUCCESS)
                str = NULL;
        if (name && str)
                snprintf(buf, len, "%s (%s)", name, str);
        else
                snprintf(buf, len, "CUDA error %d", (int)res);
        return buf;
}

/* Older drivers export only the unversioned name of some entry points; the
 * prototype is the same. */
static void *sym_fallback(void *dl, const char *name)
{
        static const char *const renamed[][2] = {
                { "cuDeviceGetUuid_v2", "cuDeviceGetUuid" },
        };

        for (size_t i = 0; i < sizeof(renamed) / sizeof(renamed[0]); i++)
                if (strcmp(name, renamed[i][0]) == 0)
                        return dlsym(dl, renamed[i][1]);
        return NULL;
}

int cuda_load(struct cuda **ret, char *why, size_t why_len)
{
        const char *path = getenv("GPUIPC_LIBCUDA");
        struct cuda *cu;
        void *p;

        if (!path || !*path)
                path = DEFAULT_LIBCUDA;
        cu = calloc(1, sizeof(*cu));
        if (!cu) {
                snprintf(why, why_len, "out of memory");
                return -ENOMEM;
        }
        snprintf(cu->path, sizeof(cu->path), "%s", path);
        cu->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!cu->dl) {
                const char *e = dlerror();
                snprintf(why, why_len, "%s not found: %s", path, e ? e : "dlopen failed");
                free(cu);
                return -ENOENT;
        }
#define CUDA_FN_LOAD_REQ(name)                                                      \
        p = dlsym(cu->dl, #name);                                                   \
        if (!p)                                                                     \
                p = sym_fallback(cu->dl, #name);                                    \
        if (!p) {                                                                   \
                snprintf(why, why_len, "%s lacks %s (driver too old?)", path, #name); \
                goto fail;                                                          \
        }                                                                           \
        cu->name = (__typeof__(cu->name))p;
#define CUDA_FN_LOAD_OPT(name) cu->name = (__typeof__(cu->name))dlsym(cu->dl, #name);
        CUDA_FNS_REQUIRED(CUDA_FN_LOAD_REQ)
        CUDA_FNS_OPTIONAL(CUDA_FN_LOAD_OPT)
#undef CUDA_FN_LOAD_REQ
#undef CUDA_FN_LOAD_OPT
        /* Allowed before cuInit; costs nothing. */
        if (cu->cuDriverGetVersion(&cu->driver_version) != CUDA_SUCCESS)
                cu->driver_version = 0;
        *ret = cu;
        return 0;
fail:
        dlclose(cu->dl);
        free(cu);
        return -ENOTSUP;
}

struct cuda *cuda_unload(struct cuda *cu)
{
        if (!cu)
                return NULL;
        /* The driver keeps threads and contexts of its own; unloading it
         * under them is not safe, so the library stays mapped. */
        free(cu);
        return NULL;
}

int cuda_init(struct cuda *cu)
{
        char text[160];

        if (!cu->init_done) {
                cu->init_res = cu->cuInit(0);
                cu->init_done = true;
                if (cu->init_res != CUDA_SUCCESS)
                        snprintf(cu->why, sizeof(cu->why), "cuInit failed: %s",
                                 cuda_result_text(cu, cu->init_res, text, sizeof(text)));
        }
        return cuda_result_errno(cu->init_res);
}

const char *cuda_reason(const struct cuda *cu)
{
        return cu ? cu->why : "";
}

int cuda_driver_version(const struct cuda *cu)
{
        return cu ? cu->driver_version : 0;
}

const char *cuda_path(const struct cuda *cu)
{
        return cu ? cu->path : "";
}

int cuda_device_by_uuid(const struct cuda *cu, const uint8_t uuid[CUDA_UUID_LEN],
                        CUdevice *ret)
{
        int n = 0;

        if (cu->cuDeviceGetCount(&n) != CUDA_SUCCESS)
                return -ENODEV;
        for (int i = 0; i < n; i++) {
                CUdevice dev;
                CUuuid u;
                if (cu->cuDeviceGet(&dev, i) != CUDA_SUCCESS ||
                    cu->cuDeviceGetUuid_v2(&u, dev) != CUDA_SUCCESS)
                        continue;
                if (memcmp(u.bytes, uuid, CUDA_UUID_LEN) == 0) {
                        *ret = dev;
                        return 0;
                }
        }
        return -ENODEV;
}

#else /* !GPUIPC_HAVE_CUDA_H */

struct cuda {
        int unused;
};

int cuda_load(struct cuda **ret, char *why, size_t why_len)
{
        snprintf(why, why_len, "built without <cuda.h> (add -I$(CUDA_HOME)/include)");
        return -ENOTSUP;
}

struct cuda *cuda_unload(struct cuda *cu)
{
        free(cu);
        return NULL;
}

int cuda_init(struct cuda *cu)
{
        return -ENOTSUP;
}

const char *cuda_reason(const struct cuda *cu)
{
        return "built without <cuda.h>";
}

int cuda_driver_version(const struct cuda *cu)
{
        return 0;
}

const char *cuda_path(const struct cuda *cu)
{
        return "";
}

#endif
