/* ops_register_cuda.c: the fields of cuda-ipc and cuda-vmm registrations. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "cuda_drv.h"
#include "cuda_reg.h"
#include "ops.h"

/* A bin field of exactly want bytes: 0, -ENOENT when absent, or -EINVAL
 * with req_fail(). */
static int get_bin_exact(struct req *q, const char *key, size_t want, const uint8_t **ret)
{
        size_t len = 0;
        int r = proto_get_bin(q->m, key, ret, &len);

        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "%s must be a bin of exactly %zu bytes (got another "
                                "type)", key, want);
        if (r == 0 && len != want)
                return req_fail(q, -EINVAL, "%s must be a bin of exactly %zu bytes (got %zu)",
                                key, want, len);
        return r;
}

static int get_handle(struct req *q, const char *key, const uint8_t **ret)
{
        return get_bin_exact(q, key, ALLOC_HANDLE_LEN, ret);
}

int register_cuda_params(struct req *q, struct reg_params *p, bool ephemeral_given)
{
        struct alloc_table *T = &q->c->d->allocs;
        bool ipc = p->kind == PROTO_KIND_CUDA_IPC;
        const uint8_t *handle = NULL, *event = NULL, *key = NULL;
        uint8_t uuid[CUDA_UUID_LEN];
        uint64_t alloc_size = 0, buffer_id = 0;
        struct reg_cuda *rc;
        const char *s;
        size_t len;
        int r;

        r = proto_get_str(q->m, "device", &s, &len);
        if (r < 0)
                return req_fail(q, -EINVAL, r == -ENOENT ? "device is required for %s"
                                : "device must be a str", proto_kind_name(p->kind));
        if (cuda_uuid_parse(s, len, uuid) < 0)
                return req_fail(q, -EINVAL, "device '%.*s' is not a device UUID of the form "
                                "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (lowercase hex)",
                                (int)(len > 64 ? 64 : len), s);
        r = proto_get_u64(q->m, "alloc_size", &alloc_size);
        if (r < 0 || alloc_size == 0)
                return req_fail(q, -EINVAL, "alloc_size must be a uint >= 1 (the size of the "
                                "whole allocation)");
        /* register_params() checked that offset + size does not overflow. */
        if (p->offset + p->size > alloc_size)
                return req_fail(q, -EINVAL, "offset + size (%" PRIu64 " + %" PRIu64 ") exceeds "
                                "alloc_size %" PRIu64, p->offset, p->size, alloc_size);
        r = get_handle(q, "event", &event);
        if (r == -EINVAL)
                return r;
        if (ipc) {
                if (ephemeral_given && !p->ephemeral)
                        return req_fail(q, -EINVAL, "cuda-ipc registrations are ephemeral: the "
                                        "memory is the producer's (adopt makes it durable)");
                r = get_handle(q, "handle", &handle);
                if (r == -ENOENT)
                        return req_fail(q, -EINVAL, "handle is required for cuda-ipc");
                if (r < 0)
                        return r;
                r = proto_get_u64(q->m, "buffer_id", &buffer_id);
                if (r < 0)
                        return req_fail(q, -EINVAL, r == -ENOENT ? "buffer_id is required for "
                                        "cuda-ipc" : "buffer_id must be a uint");
                if (q->nfds != 0)
                        return req_fail(q, -EINVAL, "a cuda-ipc registration carries no fds "
                                        "(fds: 0)");
        } else {
                /* The fd cannot name the allocation: every export is an open
                 * of /dev/nvidiactl, so the producer names it with a key. */
                r = get_bin_exact(q, "alloc_key", ALLOC_KEY_LEN, &key);
                if (r == -ENOENT)
                        return req_fail(q, -EINVAL, "alloc_key is required for cuda-vmm (%u "
                                        "random bytes the producer drew for the allocation)",
                                        ALLOC_KEY_LEN);
                if (r < 0)
                        return r;
                if (q->nfds != 1)
                        return req_fail(q, -EBADF, "a cuda-vmm registration carries exactly one "
                                        "fd, the exported one (fds: 1)");
        }

        rc = reg_cuda_new();
        if (!rc)
                return req_fail(q, -ENOMEM, "out of memory");
        memcpy(rc->device, uuid, sizeof(uuid));
        if (event) {
                memcpy(rc->event, event, ALLOC_HANDLE_LEN);
                rc->has_event = true;
        }
        /* The daemon cannot check a VMM fd without CUDA: any fd is taken, and
         * alloc_key names the allocation. */
        r = ipc ? alloc_get_ipc(T, uuid, handle, buffer_id, alloc_size, &rc->alloc)
                : alloc_get_vmm_as(T, uuid, key, &q->fds[0], alloc_size, q->c->party.uid,
                                   &rc->alloc);
        if (r < 0) {
                reg_cuda_free(T, rc);
                if (r == -EPERM)
                        return req_fail(q, r, "this alloc_key is registered by another uid; "
                                        "only that uid may register more of it");
                if (r == -EINVAL)
                        return req_fail(q, r, "this allocation (%s) is already registered "
                                        "with another alloc_size", ipc ? "handle and buffer_id"
                                        : "alloc_key");
                return req_fail(q, r, "cannot record the allocation: %s", strerror(-r));
        }
        p->cuda = rc;
        p->fd = ipc ? -1 : rc->alloc->fd;
        p->ephemeral = ipc ? true : p->ephemeral;
        p->revocable = ipc;
        return 0;
}
