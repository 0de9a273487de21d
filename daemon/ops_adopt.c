/* ops_adopt.c: adopt, turning a producer-bound cuda-ipc registration into a
 * durable cuda-vmm one that the daemon holds. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "access.h"
#include "closer.h"
#include "cuda_ctx.h"
#include "cuda_reg.h"
#include "holds.h"
#include "log.h"
#include "restart_persist.h"
#include "ops.h"
#include "quota.h"

int op_adopt(struct req *q)
{
        struct conn *c = q->c;
        struct daemon *d = c->d;
        struct registry *R = d->reg;
        struct reg_cuda *rc;
        struct alloc *a, *old;
        struct proto_out o;
        uint64_t alloc_size = 0;
        uint8_t key[PROTO_ALLOC_KEY_LEN];
        uint32_t leases;
        struct reg *r;
        char why[REQ_MSG_MAX - 64];
        int fd = -1, k;

        k = req_target_find(q, true, "live registration", &r);
        if (k < 0)
                return k;
        if (r->owner != &c->party)
                return req_fail(q, -EPERM, "%s is not registered by this connection", r->name);
        if (r->batch)
                return req_fail(q, -ENOTSUP, "%s is a batch; batches are not adopted (register "
                                "its device parts as cuda-vmm memory, or with "
                                "GPUIPC_REGISTER_COPY)", r->name);
        if (r->kind != PROTO_KIND_CUDA_IPC)
                return req_fail(q, -EINVAL, "%s is %s; only cuda-ipc registrations are adopted",
                                r->name, proto_kind_name(r->kind));
        rc = r->cuda;

        k = gpu_copy_to_vmm(d->gpu, rc->device, rc->alloc->handle, r->offset, r->size, &fd,
                            &alloc_size, why, sizeof(why));
        if (k < 0)
                return req_fail(q, k, "cannot adopt %s: %s", r->name, why);
        /* The copy is a new allocation: it gets a key of its own.  The fd
         * cannot serve (every export is an open of /dev/nvidiactl), and
         * GRND_NONBLOCK keeps the loop from blocking before the entropy
         * pool is ready, which is long past by the time a client adopts. */
        if (getrandom(key, sizeof(key), GRND_NONBLOCK) != (ssize_t)sizeof(key)) {
                k = errno;
                closer_close(fd);
                return req_fail(q, -EIO, "cannot draw a key for the new allocation: %s",
                                strerror(k));
        }
        k = alloc_get_vmm(&d->allocs, rc->device, key, &fd, alloc_size, &a);
        if (k < 0) {
                closer_close(fd);
                return req_fail(q, k, "cannot record the new allocation: %s", strerror(-k));
        }

        /* The handle is closed and the copy is ours: from here on the
         * registration is a durable cuda-vmm one.  Its current leases still
         * map the producer's memory; the released event that follows their
         * end tells the producer it may free.  Where consumers keep the old
         * allocation mapped (cacheable), r's moving is its last registration
         * going, told as an unregister would be: the producer then frees
         * after `unmapped`. */
        holds_reg_freeing(d, r);
        old = rc->alloc;
        rc->alloc = a;
        alloc_put(&d->allocs, old);
        registry_set_kind(R, r, PROTO_KIND_CUDA_VMM);
        quota_charge(d, r);     /* the daemon holds the copy now */
        quota_fds_charge(d, r, persist_enabled());      /* and its fd */
        r->offset = 0;
        r->fd = a->fd;
        r->ephemeral = false;
        r->revocable = false;
        /* The copy is complete: consumers of the copy have nothing of the
         * producer's to wait for, and its event may be gone with it. */
        rc->has_event = false;
        persist_cuda_changed(d, r);
        leases = registry_mark_leases(R, r);
        log_info("adopted %s (id %" PRIu64 ", %" PRIu64 " bytes) for pid %u into a %" PRIu64
                 "-byte VMM allocation; %u leases still map the producer's memory", r->name,
                 r->id, r->size, c->party.pid, alloc_size, leases);

        reply_start(&o, q->seq, 3);
        proto_pack_ku64(&o.pk, "id", r->id);
        proto_pack_kstr(&o.pk, "kind", proto_kind_name(PROTO_KIND_CUDA_VMM));
        proto_pack_ku64(&o.pk, "leases", leases);
        (void)reply_send(c, q->seq, &o, NULL);
        proto_out_free(&o);
        return 0;
}
