/* ops_register_cuda.c: the fields of cuda-ipc and cuda-vmm registrations. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "cuda/driver.h"
#include "cuda_reg.h"
#include "ops.h"

/* A bin field of exactly want bytes: 0, -ENOENT when absent, or -EINVAL
 * with req_fail(). */
static int get_bin_exact(struct req *q, const msgpack_object *m, const char *key, size_t want,
                         const uint8_t **ret)
{
        size_t len = 0;
        int r = proto_get_bin(m, key, ret, &len);

        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "%s must be a bin of exactly %zu bytes (got another "
                                "type)", key, want);
        if (r == 0 && len != want)
                return req_fail(q, -EINVAL, "%s must be a bin of exactly %zu bytes (got %zu)",
                                key, want, len);
        return r;
}

static int get_handle(struct req *q, const msgpack_object *m, const char *key,
                      const uint8_t **ret)
{
        return get_bin_exact(q, m, key, PROTO_IPC_HANDLE_LEN, ret);
}

/* `chunks` of a cuda-vmm registration over several VMM allocations: the
 * entries of n chunks into rc, chunk i's fd being fds[i] (of nfds). */
static int register_chunks(struct req *q, const msgpack_object *a, int *fds, unsigned nfds,
                           const uint8_t uuid[], uint64_t alloc_size, struct reg_cuda *rc)
{
        struct alloc_table *T = &q->c->d->allocs;
        uint32_t n = a->via.array.size;
        uint64_t total = 0;
        int r;

        if (n < 2 || n > PROTO_CHUNKS_MAX)
                return req_fail(q, -EINVAL, "chunks must list 2 to %u chunks (got %u)",
                                PROTO_CHUNKS_MAX, n);
        if (nfds != n)
                return req_fail(q, -EBADF, "a cuda-vmm registration of %u chunks carries %u "
                                "fds, one per chunk in order (got %u)", n, n, nfds);
        r = reg_cuda_set_chunks(rc, n);
        if (r < 0)
                return req_fail(q, r, "out of memory");
        for (uint32_t i = 0; i < n; i++) {
                const msgpack_object *m = &a->via.array.ptr[i];
                const uint8_t *key;
                uint64_t size = 0;
                size_t len = 0;

                if (m->type != MSGPACK_OBJECT_MAP ||
                    proto_get_bin(m, "key", &key, &len) < 0 || len != PROTO_ALLOC_KEY_LEN ||
                    proto_get_u64(m, "size", &size) < 0 || size == 0)
                        return req_fail(q, -EINVAL, "chunks[%u] must be a map {key: bin of %u "
                                        "bytes, size: uint >= 1}", i, PROTO_ALLOC_KEY_LEN);
                if (size > alloc_size - total)
                        return req_fail(q, -EINVAL, "the chunks' sizes add up to more than "
                                        "alloc_size %" PRIu64, alloc_size);
                total += size;
                r = alloc_get_vmm_as(T, uuid, key, &fds[i], size, q->c->party.uid,
                                     &rc->chunks[i]);
                if (r < 0)
                        return r;       /* the caller words it */
                if (i == 0)             /* reg_cuda_free() lets go of chunk 0 as alloc */
                        rc->alloc = rc->chunks[0];
                for (uint32_t j = 0; j < i; j++)
                        if (rc->chunks[j] == rc->chunks[i])
                                return req_fail(q, -EINVAL, "chunks[%u] and chunks[%u] have "
                                                "the same key", j, i);
        }
        if (total != alloc_size)
                return req_fail(q, -EINVAL, "the chunks' sizes add up to %" PRIu64 ", not "
                                "alloc_size %" PRIu64, total, alloc_size);
        return 0;
}

/* The allocation entries of a cuda-vmm or cuda-pool registration into rc. */
static int register_fd_kind(struct req *q, const msgpack_object *m, int *fds, unsigned nfds,
                            struct reg_params *p, const uint8_t uuid[], uint64_t alloc_size,
                            struct reg_cuda *rc)
{
        struct alloc_table *T = &q->c->d->allocs;
        const msgpack_object *chunks = NULL;
        const uint8_t *key = NULL, *handle = NULL;
        const char *keyname = p->kind == PROTO_KIND_CUDA_POOL ? "pool_key" : "alloc_key";
        uint64_t buffer_id = 0;
        int r;

        /* The fd cannot name the allocation: every export is an open of
         * /dev/nvidiactl, so the producer names it with a key. */
        if (p->kind == PROTO_KIND_CUDA_VMM) {
                r = proto_get_array(m, "chunks", &chunks);
                if (r == -EINVAL)
                        return req_fail(q, -EINVAL, "chunks must be an array");
                if (chunks)
                        return register_chunks(q, chunks, fds, nfds, uuid, alloc_size, rc);
        }
        r = get_bin_exact(q, m, keyname, PROTO_ALLOC_KEY_LEN, &key);
        if (r == -ENOENT)
                return req_fail(q, -EINVAL, "%s is required for %s (%u random bytes the "
                                "producer drew for the %s)", keyname, proto_kind_name(p->kind),
                                PROTO_ALLOC_KEY_LEN,
                                p->kind == PROTO_KIND_CUDA_POOL ? "pool" : "allocation");
        if (r < 0)
                return r;
        if (nfds != 1)
                return req_fail(q, -EBADF, "a %s registration carries exactly one fd, the "
                                "exported one (fds: 1)", proto_kind_name(p->kind));
        if (p->kind == PROTO_KIND_CUDA_VMM)
                return alloc_get_vmm_as(T, uuid, key, &fds[0], alloc_size,
                                        q->c->party.uid, &rc->alloc);
        r = get_handle(q, m, "handle", &handle);
        if (r == -ENOENT)
                return req_fail(q, -EINVAL, "handle is required for cuda-pool (the %u bytes "
                                "of cuMemPoolExportPointer)", PROTO_IPC_HANDLE_LEN);
        if (r < 0)
                return r;
        r = proto_get_u64(m, "buffer_id", &buffer_id);
        if (r < 0)
                return req_fail(q, -EINVAL, r == -ENOENT ? "buffer_id is required for "
                                "cuda-pool" : "buffer_id must be a uint");
        return alloc_get_pool(T, uuid, key, &fds[0], handle, buffer_id, alloc_size,
                              q->c->party.uid, &rc->alloc);
}

int register_cuda_params(struct req *q, const msgpack_object *m, int *fds, unsigned nfds,
                         struct reg_params *p, bool ephemeral_given)
{
        struct alloc_table *T = &q->c->d->allocs;
        bool ipc = p->kind == PROTO_KIND_CUDA_IPC;
        bool bound = ipc || p->kind == PROTO_KIND_CUDA_POOL;   /* the producer's memory */
        const uint8_t *handle = NULL, *event = NULL;
        uint8_t uuid[CUDA_UUID_LEN];
        uint64_t alloc_size = 0, buffer_id = 0;
        const char *s, *copied = NULL;
        size_t len, copied_len = 0;
        bool cacheable = false, linger = false;
        struct reg_cuda *rc;
        int r;

        r = proto_get_str(m, "device", &s, &len);
        if (r < 0)
                return req_fail(q, -EINVAL, r == -ENOENT ? "device is required for %s"
                                : "device must be a str", proto_kind_name(p->kind));
        if (cuda_uuid_parse(s, len, uuid) < 0) {
                char quoted[REQ_QUOTE_SIZE(64)];
                return req_fail(q, -EINVAL, "device '%s' is not a device UUID of the form "
                                "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (lowercase hex)",
                                req_quote(quoted, s, len, 64));
        }
        r = proto_get_u64(m, "alloc_size", &alloc_size);
        if (r < 0 || alloc_size == 0)
                return req_fail(q, -EINVAL, "alloc_size must be a uint >= 1 (the size of the "
                                "whole allocation)");
        /* register_params() checked that offset + size does not overflow. */
        if (p->offset + p->size > alloc_size)
                return req_fail(q, -EINVAL, "offset + size (%" PRIu64 " + %" PRIu64 ") exceeds "
                                "alloc_size %" PRIu64, p->offset, p->size, alloc_size);
        r = get_handle(q, m, "event", &event);
        if (r == -EINVAL)
                return r;
        r = proto_get_bool(m, "cacheable", &cacheable);
        if (r == -EINVAL)
                return req_fail(q, -EINVAL, "cacheable must be a bool");
        r = proto_get_bool(m, "linger", &linger);
        if (r == -EINVAL || (linger && !cacheable))
                return req_fail(q, -EINVAL, "linger must be a bool, and applies with cacheable "
                                "only");
        r = proto_get_str(m, "copied", &copied, &copied_len);
        if (r == -EINVAL || (r == 0 && (copied_len == 0 || copied_len > REG_CUDA_COPIED_MAX ||
                                        !proto_text_valid(copied, copied_len))))
                return req_fail(q, -EINVAL, "copied must be a str of 1 to %u bytes of UTF-8 "
                                "without control characters (why the buffer was copied)",
                                REG_CUDA_COPIED_MAX);
        if (copied && p->kind != PROTO_KIND_CUDA_VMM)
                return req_fail(q, -EINVAL, "copied applies to cuda-vmm registrations only");
        if (bound && ephemeral_given && !p->ephemeral)
                return req_fail(q, -EINVAL, "%s registrations are ephemeral: the memory is the "
                                "producer's (adopt makes it durable)", proto_kind_name(p->kind));
        if (ipc) {
                r = get_handle(q, m, "handle", &handle);
                if (r == -ENOENT)
                        return req_fail(q, -EINVAL, "handle is required for cuda-ipc");
                if (r < 0)
                        return r;
                r = proto_get_u64(m, "buffer_id", &buffer_id);
                if (r < 0)
                        return req_fail(q, -EINVAL, r == -ENOENT ? "buffer_id is required for "
                                        "cuda-ipc" : "buffer_id must be a uint");
                if (nfds != 0)
                        return req_fail(q, -EINVAL, "a cuda-ipc registration carries no fds "
                                        "(fds: 0)");
        }

        rc = reg_cuda_new();
        if (!rc)
                return req_fail(q, -ENOMEM, "out of memory");
        memcpy(rc->device, uuid, sizeof(uuid));
        if (event) {
                memcpy(rc->event, event, PROTO_IPC_HANDLE_LEN);
                rc->has_event = true;
        }
        if (copied && reg_cuda_set_copied(rc, copied, copied_len) < 0) {
                reg_cuda_free(T, rc);
                return req_fail(q, -ENOMEM, "out of memory");
        }
        /* The daemon cannot tell a VMM fd from another without CUDA (its type
         * was checked, see ops_register.c); the key names the allocation. */
        r = ipc ? alloc_get_ipc(T, uuid, handle, buffer_id, alloc_size, &rc->alloc)
                : register_fd_kind(q, m, fds, nfds, p, uuid, alloc_size, rc);
        if (r < 0) {
                reg_cuda_free(T, rc);
                if (q->msg[0])
                        return r;       /* worded already */
                if (r == -EPERM)
                        return req_fail(q, r, "this %s is registered by another uid; only that "
                                        "uid may register more of it", p->kind ==
                                        PROTO_KIND_CUDA_POOL ? "pool_key" : "alloc_key");
                if (r == -EINVAL)
                        return req_fail(q, r, "this allocation (%s) is already registered "
                                        "with another alloc_size", ipc ? "handle and buffer_id"
                                        : p->kind == PROTO_KIND_CUDA_POOL ? "pool pointer"
                                        : "alloc_key");
                return req_fail(q, r, "cannot record the allocation: %s", strerror(-r));
        }
        /* A promise about the allocation, which every registration shares. */
        if (cacheable)
                rc->alloc->cacheable = true;
        if (linger)
                rc->alloc->linger = true;
        p->cuda = rc;
        p->fd = p->kind == PROTO_KIND_CUDA_VMM ? rc->alloc->fd : -1;
        p->ephemeral = bound ? true : p->ephemeral;
        p->revocable = bound;
        return 0;
}
