/* cudareg.c: registering device memory, and adopt.
 *
 * Two per-process tables live here:
 *  - own: the cuda-ipc allocations this process exported, keyed by (device
 *    UUID, handle bytes, buffer_id).  A lookup in this process of one of
 *    them must use the producer's pointer: the driver refuses to open a
 *    handle in the process that exported it (CUDA_ERROR_INVALID_CONTEXT).
 *  - exports: the POSIX fd exported for each VMM allocation and the random
 *    alloc_key drawn for it, so that every registration of one allocation
 *    sends the same fd and key (the daemon keys its allocation table by the
 *    key: the fd cannot name the allocation, since every export is an open
 *    of /dev/nvidiactl with one inode).  Kept until gpuipc_cudabuf_free()
 *    of that memory, or the end of the process.
 * Entries are small and one per distinct allocation; an entry whose base
 * address turns up again with another buffer_id (the address was freed and
 * reused) is replaced.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cudaint.h"

#ifdef GPUIPC_HAVE_CUDA_H

struct own {
        struct own *next;
        uint8_t uuid[CUDA_UUID_LEN];
        uint8_t handle[CUDA_IPC_HANDLE_LEN];
        uint64_t buffer_id;
        CUdeviceptr base;
        uint64_t size;
};

struct export {
        struct export *next;
        CUdeviceptr base;
        CUmemGenericAllocationHandle h;
        int fd;
        uint8_t key[GPUIPC__ALLOC_KEY_LEN];
};

static pthread_mutex_t tables_lock = PTHREAD_MUTEX_INITIALIZER;
static struct own *owns;
static struct export *exports;

static int own_add(const uint8_t uuid[CUDA_UUID_LEN], const uint8_t *handle, uint64_t buffer_id,
                   CUdeviceptr base, uint64_t size)
{
        struct own *o;

        pthread_mutex_lock(&tables_lock);
        for (o = owns; o; o = o->next)
                if (o->base == base && !memcmp(o->uuid, uuid, CUDA_UUID_LEN))
                        break;
        if (!o) {
                o = calloc(1, sizeof(*o));
                if (!o) {
                        pthread_mutex_unlock(&tables_lock);
                        return -ENOMEM;
                }
                o->next = owns;
                owns = o;
        }
        memcpy(o->uuid, uuid, CUDA_UUID_LEN);
        memcpy(o->handle, handle, CUDA_IPC_HANDLE_LEN);
        o->buffer_id = buffer_id;
        o->base = base;
        o->size = size;
        pthread_mutex_unlock(&tables_lock);
        return 0;
}

bool gpuipc__cuown_find(const uint8_t uuid[CUDA_UUID_LEN], const uint8_t *handle,
                        uint64_t buffer_id, CUdeviceptr *ret_base, uint64_t *ret_size)
{
        const struct own *o;

        pthread_mutex_lock(&tables_lock);
        for (o = owns; o; o = o->next)
                if (o->buffer_id == buffer_id && !memcmp(o->uuid, uuid, CUDA_UUID_LEN) &&
                    !memcmp(o->handle, handle, CUDA_IPC_HANDLE_LEN))
                        break;
        if (o) {
                *ret_base = o->base;
                *ret_size = o->size;
        }
        pthread_mutex_unlock(&tables_lock);
        return o != NULL;
}

void gpuipc__cuexport_forget(CUdeviceptr base)
{
        struct export **pp, *e;

        pthread_mutex_lock(&tables_lock);
        for (pp = &exports; *pp; pp = &(*pp)->next)
                if ((*pp)->base == base)
                        break;
        e = *pp;
        if (e)
                *pp = e->next;
        pthread_mutex_unlock(&tables_lock);
        if (e) {
                close(e->fd);
                free(e);
        }
}

/* 16 random bytes; blocks only before the kernel's pool is ready. */
static int draw_key(uint8_t key[GPUIPC__ALLOC_KEY_LEN])
{
        ssize_t n;

        do
                n = getrandom(key, GPUIPC__ALLOC_KEY_LEN, 0);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        return n == GPUIPC__ALLOC_KEY_LEN ? 0 : -EIO;
}

/* VMM memory exportable as a POSIX fd: returns 1, the fd (owned by the
 * export table) and the allocation's key, 0 when the memory is something
 * else.  Context current. */
static int vmm_export(gpuipc_client *c, struct cuda *cu, CUdeviceptr base, int *ret_fd,
                      uint8_t ret_key[GPUIPC__ALLOC_KEY_LEN])
{
        CUmemGenericAllocationHandle h;
        unsigned long long types = 0;
        struct export *e;
        CUresult res;
        int fd = -1, r = 0;

        if (!cu->cuMemRetainAllocationHandle ||
            cu->cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
                                      base) != CUDA_SUCCESS ||
            !(types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
                return 0;
        /* Fails for memory that is not a VMM mapping. */
        if (cu->cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)base) != CUDA_SUCCESS)
                return 0;
        pthread_mutex_lock(&tables_lock);
        for (e = exports; e; e = e->next)
                if (e->base == base && e->h == h)
                        break;
        if (e) {
                fd = e->fd;
                memcpy(ret_key, e->key, GPUIPC__ALLOC_KEY_LEN);
                goto out;
        }
        e = calloc(1, sizeof(*e));
        if (!e) {
                r = -ENOMEM;
                goto out;
        }
        /* Drawn once per exported allocation, before the export, so no fd
         * is left to close when it fails. */
        r = draw_key(e->key);
        if (r < 0) {
                free(e);
                r = gpuipc__fail(c, r, "cannot draw an alloc_key: %s", strerror(-r));
                goto out;
        }
        res = cu->cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (res != CUDA_SUCCESS) {
                free(e);
                r = gpuipc__cu_fail(c, cu, res, "cuMemExportToShareableHandle");
                goto out;
        }
        memcpy(ret_key, e->key, GPUIPC__ALLOC_KEY_LEN);
        e->base = base;
        e->h = h;
        e->fd = fd;
        e->next = exports;
        exports = e;
out:
        pthread_mutex_unlock(&tables_lock);
        (void)cu->cuMemRelease(h);      /* drops the retain's reference only */
        if (r < 0)
                return r;
        *ret_fd = fd;
        return 1;
}

/* Everything register sends, found with the pointer's context current. */
struct devreg {
        int ordinal;
        uint8_t uuid[CUDA_UUID_LEN];
        CUdeviceptr base;
        size_t alloc_size;
        uint64_t offset;
        int fd;                         /* cuda-vmm, else -1 */
        uint8_t key[GPUIPC__ALLOC_KEY_LEN];     /* cuda-vmm */
        CUipcMemHandle handle;          /* cuda-ipc */
        unsigned long long buffer_id;
        bool has_event;
        CUipcEventHandle event;
};

static int describe(gpuipc_client *c, struct cuda *cu, uint64_t dptr, uint64_t size, void *event,
                    unsigned flags, struct devreg *d)
{
        CUcontext saved;
        CUresult res;
        int r;

        r = GPUIPC__CU_NEED(c, cu, cuPointerGetAttribute);
        if (r == 0)
                r = GPUIPC__CU_NEED(c, cu, cuMemGetAddressRange_v2);
        if (r == 0)
                r = GPUIPC__CU_NEED(c, cu, cuIpcGetMemHandle);
        if (r < 0)
                return r;
        res = cu->cuPointerGetAttribute(&d->ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr);
        if (res != CUDA_SUCCESS)
                return gpuipc__fail(c, -EINVAL, "0x%llx is not device memory of a CUDA device",
                                    (unsigned long long)dptr);
        r = gpuipc__cu_uuid(c, cu, d->ordinal, d->uuid);
        if (r < 0)
                return r;
        r = gpuipc__cu_enter(c, cu, d->ordinal, &saved);
        if (r < 0)
                return r;
        res = cu->cuMemGetAddressRange_v2(&d->base, &d->alloc_size, dptr);
        if (res != CUDA_SUCCESS) {
                r = gpuipc__cu_fail(c, cu, res, "cuMemGetAddressRange");
                goto out;
        }
        d->offset = dptr - d->base;
        if (size > d->alloc_size - d->offset) {
                r = gpuipc__fail(c, -EINVAL, "%llu bytes at offset %llu exceed the allocation (%zu bytes)",
                                 (unsigned long long)size, (unsigned long long)d->offset,
                                 d->alloc_size);
                goto out;
        }
        if (event) {
                r = GPUIPC__CU_NEED(c, cu, cuIpcGetEventHandle);
                if (r < 0)
                        goto out;
                res = cu->cuIpcGetEventHandle(&d->event, (CUevent)event);
                if (res != CUDA_SUCCESS) {
                        r = gpuipc__cu_fail(c, cu, res, "cuIpcGetEventHandle (was the event "
                                            "created with CU_EVENT_INTERPROCESS?)");
                        goto out;
                }
                d->has_event = true;
        }
        d->fd = -1;
        if (!(flags & GPUIPC_REGISTER_CUDA_IPC)) {
                r = vmm_export(c, cu, d->base, &d->fd, d->key);
                if (r != 0)
                        goto out;
        }
        res = cu->cuIpcGetMemHandle(&d->handle, d->base);
        if (res != CUDA_SUCCESS) {
                r = gpuipc__cu_fail(c, cu, res, "cuIpcGetMemHandle");
                goto out;
        }
        res = cu->cuPointerGetAttribute(&d->buffer_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, d->base);
        if (res != CUDA_SUCCESS)
                r = gpuipc__cu_fail(c, cu, res, "cuPointerGetAttribute(BUFFER_ID)");
out:
        gpuipc__cu_leave(cu, saved);
        return r < 0 ? r : 0;
}

int gpuipc_register_cuda(gpuipc_client *c, const char *name, uint64_t dptr, uint64_t size,
                         const gpuipc_meta *meta, void *event, unsigned flags, uint64_t *ret_id)
{
        struct gpuipc__reply rp;
        struct proto_out o;
        struct devreg d = { .fd = -1 };
        char uuid[CUDA_UUID_STR_LEN + 1];
        struct cuda *cu;
        const char *why;
        uint64_t seq, id;
        uint32_t nmeta;
        bool vmm, ephemeral;
        int r;

        if (!c)
                return -EINVAL;
        r = gpuipc__begin_named(c, name);
        if (r < 0)
                return r;
        if (dptr == 0 || size == 0 ||
            (flags & ~(GPUIPC_REGISTER_EPHEMERAL | GPUIPC_REGISTER_CUDA_IPC)))
                return gpuipc__fail(c, -EINVAL, "invalid pointer, size or flags");
        if (gpuipc__meta_check(meta, &why) < 0)
                return gpuipc__fail(c, -EINVAL, "invalid metadata: %s", why);
        r = gpuipc__cu_get(c, &cu);
        if (r < 0)
                return gpuipc__end(c, r);
        r = describe(c, cu, dptr, size, event, flags, &d);
        if (r < 0)
                return gpuipc__end(c, r);
        vmm = d.fd >= 0;
        /* Legacy IPC memory stays ours: it ends with this connection. */
        ephemeral = !vmm || (flags & GPUIPC_REGISTER_EPHEMERAL);
        if (!vmm) {
                r = own_add(d.uuid, (const uint8_t *)d.handle.reserved, d.buffer_id, d.base,
                            d.alloc_size);
                if (r < 0)
                        return gpuipc__end(c, r);
        }
        cuda_uuid_format(d.uuid, uuid);
        nmeta = gpuipc__meta_keys(meta);
        seq = gpuipc__request(c, &o, "register", 7 + ephemeral + (nmeta > 0) + d.has_event +
                              (vmm ? 1 : 2) + gpuipc__access_keys(c));
        proto_pack_kstr(&o.pk, "name", name);
        proto_pack_kstr(&o.pk, "kind", vmm ? "cuda-vmm" : "cuda-ipc");
        proto_pack_ku64(&o.pk, "size", size);
        proto_pack_ku64(&o.pk, "offset", d.offset);
        proto_pack_kstr(&o.pk, "device", uuid);
        proto_pack_ku64(&o.pk, "alloc_size", d.alloc_size);
        proto_pack_ku64(&o.pk, "fds", vmm ? 1 : 0);
        if (vmm) {
                proto_pack_str(&o.pk, "alloc_key");
                msgpack_pack_bin_with_body(&o.pk, d.key, GPUIPC__ALLOC_KEY_LEN);
        } else {
                proto_pack_str(&o.pk, "handle");
                msgpack_pack_bin_with_body(&o.pk, d.handle.reserved, CUDA_IPC_HANDLE_LEN);
                proto_pack_ku64(&o.pk, "buffer_id", d.buffer_id);
        }
        if (d.has_event) {
                proto_pack_str(&o.pk, "event");
                msgpack_pack_bin_with_body(&o.pk, d.event.reserved, CUDA_IPC_HANDLE_LEN);
        }
        if (ephemeral)
                proto_pack_kbool(&o.pk, "ephemeral", true);
        if (nmeta > 0) {
                proto_pack_str(&o.pk, "meta");
                gpuipc__meta_pack(&o.pk, meta);
        }
        gpuipc__access_pack(&o.pk, c);  /* issue 7: access rule, see access.c */
        r = gpuipc__call(c, &o, seq, vmm ? &d.fd : NULL, vmm ? 1 : 0, &rp);
        if (r < 0)
                return gpuipc__end(c, r);
        r = proto_get_u64(rp.msg.root, "id", &id);
        gpuipc__reply_free(&rp);
        if (r < 0)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's register reply has no id");
        if (ret_id)
                *ret_id = id;
        return 0;
}

#endif

/* adopt needs no driver in this process: the daemon does the copy. */
int gpuipc_adopt(gpuipc_client *c, const char *name, uint32_t *ret_leases)
{
        uint64_t n = 0;
        int r = gpuipc__name_op(c, "adopt", name, &n);

        if (r < 0)
                return r;
        if (n > UINT32_MAX)
                return gpuipc__fail(c, -EBADMSG, "gpuipcd's adopt reply has no usable leases");
        if (ret_leases)
                *ret_leases = (uint32_t)n;
        return 0;
}
