/*
 * CUDA driver test double: devices, CUDA_VISIBLE_DEVICES, peer access,
 * primary and created contexts (per-thread context stacks).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "double.h"

static __thread struct dbl_ctx *tls_stack[DBL_CTX_STACK];
static __thread int tls_depth;

/* ---- devices ---- */

/* 16 bytes: "gpuipc-double-<index>" and a NUL; stable across processes. */
void dbl_uuid_bytes(int phys, unsigned char out[16])
{
        char s[17];
        memset(s, 0, sizeof(s));
        snprintf(s, sizeof(s), "gpuipc-double-%d", phys);
        memcpy(out, s, 16);
}

static void uuid_string(int phys, char *buf, size_t len)
{
        unsigned char u[16];
        dbl_uuid_bytes(phys, u);
        snprintf(buf, len,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
                 u[11], u[12], u[13], u[14], u[15]);
}

/* An entry of CUDA_VISIBLE_DEVICES: an index or a (prefix of a) GPU-UUID. */
static int parse_visible_entry(const char *tok)
{
        if (tok[0] == '\0')
                return -1;
        bool digits = true;
        for (const char *p = tok; *p != '\0'; p++)
                if (!isdigit((unsigned char)*p))
                        digits = false;
        if (digits) {
                long i = strtol(tok, NULL, 10);
                return i < dbl.ndev_phys ? (int)i : -1;
        }
        if (strncasecmp(tok, "GPU-", 4) != 0)
                return -1;
        int found = -1;
        for (int i = 0; i < dbl.ndev_phys; i++) {
                char u[64];
                uuid_string(i, u, sizeof(u));
                if (strncasecmp(u, tok, strlen(tok)) == 0) {
                        if (found >= 0)
                                return -1;      /* ambiguous prefix */
                        found = i;
                }
        }
        return found;
}

/* Like the real driver: parsing stops at the first invalid entry. */
static void parse_visible(const char *v)
{
        char buf[1024];
        snprintf(buf, sizeof(buf), "%s", v);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok != NULL;
             tok = strtok_r(NULL, ",", &save)) {
                while (isspace((unsigned char)*tok))
                        tok++;
                size_t n = strlen(tok);
                while (n > 0 && isspace((unsigned char)tok[n - 1]))
                        tok[--n] = '\0';
                int phys = parse_visible_entry(tok);
                if (phys < 0 || dbl.ndev >= DBL_MAX_DEVICES)
                        return;
                for (int i = 0; i < dbl.ndev; i++)
                        if (dbl.visible[i] == phys)
                                return;
                dbl.visible[dbl.ndev++] = phys;
        }
}

static void parse_no_peer(const char *v)
{
        const char *p = v;
        while (*p != '\0') {
                char *end;
                long a = strtol(p, &end, 10);
                if (end == p || *end != '-')
                        return;
                p = end + 1;
                long b = strtol(p, &end, 10);
                if (end == p)
                        return;
                if (a >= 0 && a < DBL_MAX_DEVICES && b >= 0 && b < DBL_MAX_DEVICES) {
                        dbl.no_peer[a][b] = 1;
                        dbl.no_peer[b][a] = 1;
                }
                p = end;
                while (*p == ',' || isspace((unsigned char)*p))
                        p++;
        }
}

void dbl_devices_setup(void)
{
        dbl.ndev = 0;
        const char *v = getenv("CUDA_VISIBLE_DEVICES");   /* "" hides all */
        if (v == NULL) {
                for (int i = 0; i < dbl.ndev_phys; i++)
                        dbl.visible[dbl.ndev++] = i;
        } else {
                parse_visible(v);
        }
        memset(dbl.no_peer, 0, sizeof(dbl.no_peer));
        v = dbl_getenv("GPUIPC_CUDA_DOUBLE_NO_PEER");
        if (v != NULL)
                parse_no_peer(v);
}

bool dbl_ordinal_ok(CUdevice dev)
{
        return dev >= 0 && dev < dbl.ndev;
}

int dbl_phys_to_ordinal(int phys)
{
        for (int i = 0; i < dbl.ndev; i++)
                if (dbl.visible[i] == phys)
                        return i;
        return -1;
}

bool dbl_peer_ok(int a, int b)
{
        return a != b && !dbl.no_peer[a][b];
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (count == NULL)
                rc = CUDA_ERROR_INVALID_VALUE;
        else
                *count = dbl.ndev;
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (device == NULL)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (!dbl_ordinal_ok(ordinal))
                rc = CUDA_ERROR_INVALID_DEVICE;
        else
                *device = ordinal;
        dbl_unlock();
        return rc;
}

/* Common prologue of the cuDevice* queries. */
static CUresult enter_dev(CUdevice dev, const void *out)
{
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (out == NULL)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (!dbl_ordinal_ok(dev))
                rc = CUDA_ERROR_INVALID_DEVICE;
        if (rc != CUDA_SUCCESS)
                dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, name);
        if (rc != CUDA_SUCCESS)
                return rc;
        if (len <= 0)
                rc = CUDA_ERROR_INVALID_VALUE;
        else
                snprintf(name, (size_t)len, "gpuipc CUDA double");
        dbl_unlock();
        return rc;
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev)
{
        CUresult rc = enter_dev(dev, uuid);
        if (rc != CUDA_SUCCESS)
                return rc;
        unsigned char u[16];
        dbl_uuid_bytes(dbl.visible[dev], u);
        memcpy(uuid->bytes, u, sizeof(u));
        dbl_unlock();
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
        DBL_ENTER();
        return get_uuid(uuid, dev);
}

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
        DBL_ENTER();
        return get_uuid(uuid, dev);
}

static int pci_bus(int phys)
{
        return 0x18 + 0x10 * phys;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, pciBusId);
        if (rc != CUDA_SUCCESS)
                return rc;
        if (len <= 0)
                rc = CUDA_ERROR_INVALID_VALUE;
        else
                snprintf(pciBusId, (size_t)len, "0000:%02X:00.0", pci_bus(dbl.visible[dev]));
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        unsigned int dom = 0, bus = 0, slot = 0, fn = 0;
        rc = CUDA_ERROR_INVALID_VALUE;
        if (dev != NULL && pciBusId != NULL &&
            sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &slot, &fn) == 4) {
                rc = CUDA_ERROR_INVALID_DEVICE;
                for (int i = 0; i < dbl.ndev; i++) {
                        if (dom == 0 && bus == (unsigned int)pci_bus(dbl.visible[i]) &&
                            slot == 0 && fn == 0) {
                                *dev = i;
                                rc = CUDA_SUCCESS;
                        }
                }
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, bytes);
        if (rc != CUDA_SUCCESS)
                return rc;
        *bytes = DBL_TOTAL_MEM;
        dbl_unlock();
        return CUDA_SUCCESS;
}

static int attribute(CUdevice_attribute a, int phys)
{
        switch (a) {
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
        case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
        case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: return 1;
        case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
        case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return pci_bus(phys);
        case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
        case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
        case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
        case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
        case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
        case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
        case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED: return 0;
        case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 0;
        case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: return 0;
        case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: return 0;
        case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 0;
        default: return 0;
        }
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, pi);
        if (rc != CUDA_SUCCESS)
                return rc;
        if ((int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
                rc = CUDA_ERROR_INVALID_VALUE;
        else
                *pi = attribute(attrib, dbl.visible[dev]);
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, canAccessPeer);
        if (rc != CUDA_SUCCESS)
                return rc;
        if (!dbl_ordinal_ok(peerDev))
                rc = CUDA_ERROR_INVALID_DEVICE;
        else
                *canAccessPeer = dbl_peer_ok(dbl.visible[dev], dbl.visible[peerDev]);
        dbl_unlock();
        return rc;
}

/* ---- contexts ---- */

struct dbl_ctx *dbl_current(void)
{
        return tls_depth > 0 ? tls_stack[tls_depth - 1] : NULL;
}

void dbl_ctx_forget_current(void)
{
        tls_depth = 0;
}

bool dbl_ctx_valid(struct dbl_ctx *c)
{
        for (struct dbl_ctx *p = dbl.contexts; p != NULL; p = p->next)
                if (p == c)
                        return p->alive;
        return false;
}

static struct dbl_ctx *ctx_new(CUdevice dev, bool primary)
{
        struct dbl_ctx *c = calloc(1, sizeof(*c));
        if (c == NULL)
                return NULL;
        c->ordinal = dev;
        c->phys = dbl.visible[dev];
        c->primary = primary;
        c->next = dbl.contexts;
        dbl.contexts = c;
        return c;
}

/* Remove every occurrence of c from this thread's stack. */
static void stack_remove(struct dbl_ctx *c)
{
        int j = 0;
        for (int i = 0; i < tls_depth; i++)
                if (tls_stack[i] != c)
                        tls_stack[j++] = tls_stack[i];
        tls_depth = j;
}

static void ctx_kill(struct dbl_ctx *c)
{
        c->alive = false;
        c->peer_mask = 0;
        dbl_free_ctx_resources(c);
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, pctx);
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *c = dbl.primary[dev];
        if (c == NULL)
                c = dbl.primary[dev] = ctx_new(dev, true);
        if (c == NULL) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
                c->refs++;
                c->alive = true;
                *pctx = (CUcontext)c;
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, "");
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *c = dbl.primary[dev];
        if (c == NULL || c->refs == 0) {
                rc = CUDA_ERROR_INVALID_CONTEXT;
        } else if (--c->refs == 0) {
                ctx_kill(c);
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, flags);
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *c = dbl.primary[dev];
        *flags = c != NULL ? c->flags : 0;
        if (active != NULL)
                *active = c != NULL && c->alive;
        dbl_unlock();
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, "");
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *c = dbl.primary[dev];
        if (c == NULL)
                c = dbl.primary[dev] = ctx_new(dev, true);
        if (c != NULL)
                c->flags = flags;
        dbl_unlock();
        return c != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
        DBL_ENTER();
        CUresult rc = enter_dev(dev, "");
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *c = dbl.primary[dev];
        if (c != NULL && c->alive) {
                ctx_kill(c);
                c->alive = c->refs > 0;
        }
        dbl_unlock();
        return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
        CUresult rc = enter_dev(dev, pctx);
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *c = NULL;
        if (tls_depth >= DBL_CTX_STACK)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if ((c = ctx_new(dev, false)) == NULL)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (rc == CUDA_SUCCESS) {
                c->alive = true;
                c->flags = flags;
                tls_stack[tls_depth++] = c;
                *pctx = (CUcontext)c;
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
        DBL_ENTER();
        return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
        DBL_ENTER();
        return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
                                unsigned int flags, CUdevice dev)
{
        DBL_ENTER();
        if (params != NULL && (params->execAffinityParams != NULL ||
                               params->numExecAffinityParams != 0 ||
                               params->cigParams != NULL))
                return CUDA_ERROR_NOT_SUPPORTED;
        return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *c = (struct dbl_ctx *)ctx;
        if (!dbl_ctx_valid(c) || c->primary) {
                rc = CUDA_ERROR_INVALID_CONTEXT;
        } else {
                stack_remove(c);
                ctx_kill(c);
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *c = (struct dbl_ctx *)ctx;
        if (c == NULL) {
                if (tls_depth > 0)
                        tls_depth--;
        } else if (!dbl_ctx_valid(c)) {
                rc = CUDA_ERROR_INVALID_CONTEXT;
        } else if (tls_depth == 0) {
                tls_stack[tls_depth++] = c;
        } else {
                tls_stack[tls_depth - 1] = c;
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (pctx == NULL)
                rc = CUDA_ERROR_INVALID_VALUE;
        else
                *pctx = (CUcontext)dbl_current();
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (device == NULL)
                rc = CUDA_ERROR_INVALID_VALUE;
        else
                *device = dbl_current()->ordinal;
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *c = (struct dbl_ctx *)ctx;
        if (!dbl_ctx_valid(c))
                rc = CUDA_ERROR_INVALID_CONTEXT;
        else if (tls_depth >= DBL_CTX_STACK)
                rc = CUDA_ERROR_INVALID_VALUE;
        else
                tls_stack[tls_depth++] = c;
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
        DBL_ENTER();
        CUresult rc = dbl_enter();
        if (rc != CUDA_SUCCESS)
                return rc;
        if (tls_depth == 0) {
                rc = CUDA_ERROR_INVALID_CONTEXT;
        } else {
                struct dbl_ctx *c = tls_stack[--tls_depth];
                if (pctx != NULL)
                        *pctx = (CUcontext)c;
        }
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        dbl_streams_drain_all();
        dbl_unlock();
        return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *cur = dbl_current();
        struct dbl_ctx *peer = (struct dbl_ctx *)peerContext;
        if (Flags != 0)
                rc = CUDA_ERROR_INVALID_VALUE;
        else if (!dbl_ctx_valid(peer))
                rc = CUDA_ERROR_INVALID_CONTEXT;
        else if (peer->phys == cur->phys)
                rc = CUDA_ERROR_INVALID_DEVICE;
        else if (!dbl_peer_ok(cur->phys, peer->phys))
                rc = CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
        else if (cur->peer_mask & (1u << peer->phys))
                rc = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
        else
                cur->peer_mask |= 1u << peer->phys;
        dbl_unlock();
        return rc;
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext)
{
        DBL_ENTER();
        CUresult rc = dbl_enter_ctx();
        if (rc != CUDA_SUCCESS)
                return rc;
        struct dbl_ctx *cur = dbl_current();
        struct dbl_ctx *peer = (struct dbl_ctx *)peerContext;
        if (!dbl_ctx_valid(peer))
                rc = CUDA_ERROR_INVALID_CONTEXT;
        else if (!(cur->peer_mask & (1u << peer->phys)))
                rc = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
        else
                cur->peer_mask &= ~(1u << peer->phys);
        dbl_unlock();
        return rc;
}
