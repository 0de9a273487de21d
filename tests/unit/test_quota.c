/* test_quota.c: what each uid holds, for the per-uid limits
 * (daemon/quota.c), without sockets or a loop. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon.h"
#include "proto.h"
#include "quota.h"

static struct daemon D;

static void setup(void)
{
        memset(&D, 0, sizeof(D));
        hmap_init(&D.uids);
}

static void teardown(void)
{
        quota_done(&D);
}

TestSuite(quota, .init = setup, .fini = teardown);

/* A registration of kind owned by uid, as the registry would hand it. */
static struct reg *reg_of(unsigned kind, uint32_t uid, uint64_t size, int fd)
{
        struct reg *r = calloc(1, sizeof(*r) + 8);

        cr_assert_not_null(r);
        r->kind = (uint8_t)kind;
        r->uid = uid;
        r->size = size;
        r->fd = fd;
        r->ro_fd = -1;
        return r;
}

static bool holds_nothing(uint32_t uid)
{
        struct uid_use u = quota_of(&D, uid);

        return !u.regs && !u.leases && !u.bytes && !u.conns && !u.fds && !u.stored;
}

Test(quota, counts_are_per_uid_and_go_with_the_last)
{
        quota_conn(&D, 1000, 1);
        quota_conn(&D, 1000, 1);
        quota_lease(&D, 1000, 1);
        quota_reg(&D, 2000, 1);
        cr_expect_eq(quota_of(&D, 1000).conns, 2);
        cr_expect_eq(quota_of(&D, 1000).leases, 1);
        cr_expect_eq(quota_of(&D, 1000).regs, 0);
        cr_expect_eq(quota_of(&D, 2000).regs, 1);
        cr_expect(holds_nothing(3000), "a uid never seen holds nothing");
        cr_expect_eq(D.uids.n, 2);
        quota_conn(&D, 1000, -2);
        cr_expect_eq(D.uids.n, 2, "uid 1000 still holds a lease");
        quota_lease(&D, 1000, -1);
        cr_expect(holds_nothing(1000));
        cr_expect_eq(D.uids.n, 1, "an entry goes with its last count");
        quota_reg(&D, 2000, -1);
        cr_expect_eq(D.uids.n, 0);
}

Test(quota, decrements_stop_at_zero)
{
        /* An increment lost to ENOMEM must not make the count wrap. */
        quota_reg(&D, 1000, -1);
        cr_expect(holds_nothing(1000));
        cr_expect_eq(D.uids.n, 0, "a decrement of nothing creates no entry");
        quota_reg(&D, 1000, 1);
        quota_lease(&D, 1000, 1);
        quota_lease(&D, 1000, -5);
        cr_expect_eq(quota_of(&D, 1000).leases, 0);
        cr_expect_eq(quota_of(&D, 1000).regs, 1);
}

Test(quota, host_bytes_are_the_whole_memfd_charged_once)
{
        int fd = memfd_create("quota", MFD_CLOEXEC);
        struct reg *r;

        cr_assert_geq(fd, 0);
        cr_assert_eq(ftruncate(fd, 8192), 0);
        /* It names 4096 bytes of the memfd, and pins all 8192. */
        r = reg_of(PROTO_KIND_HOST, 1000, 4096, fd);
        cr_expect_eq(quota_bytes_of(r), 8192);
        quota_charge(&D, r);
        quota_charge(&D, r);
        cr_expect_eq(quota_of(&D, 1000).bytes, 8192, "charged twice");
        cr_expect_eq(r->charged, 8192);
        quota_uncharge(&D, r);
        cr_expect_eq(r->charged, 0);
        cr_expect(holds_nothing(1000));
        quota_uncharge(&D, r);
        cr_expect(holds_nothing(1000));
        close(fd);
        free(r);
}

Test(quota, only_memory_the_daemon_holds_is_charged)
{
        struct reg *ipc = reg_of(PROTO_KIND_CUDA_IPC, 1000, 1 << 20, -1);
        struct reg *pool = reg_of(PROTO_KIND_CUDA_POOL, 1000, 1 << 20, -1);
        struct reg *vmm = reg_of(PROTO_KIND_CUDA_VMM, 1000, 2 << 20, -1);

        quota_charge(&D, ipc);
        quota_charge(&D, pool);
        cr_expect(holds_nothing(1000), "cuda-ipc and cuda-pool memory stays the producer's");
        quota_charge(&D, vmm);
        cr_expect_eq(quota_of(&D, 1000).bytes, 2 << 20, "cuda-vmm: its size");
        quota_uncharge(&D, vmm);
        cr_expect(holds_nothing(1000));
        free(ipc), free(pool), free(vmm);
}

Test(quota, bytes_saturate_and_are_given_back_exactly)
{
        struct reg *a = reg_of(PROTO_KIND_CUDA_VMM, 1000, UINT64_MAX - 10, -1);
        struct reg *b = reg_of(PROTO_KIND_CUDA_VMM, 1000, 100, -1);

        quota_charge(&D, a);
        quota_charge(&D, b);
        cr_expect_eq(quota_of(&D, 1000).bytes, UINT64_MAX);
        cr_expect_eq(b->charged, 10, "b adds only what fits");
        quota_uncharge(&D, b);
        cr_expect_eq(quota_of(&D, 1000).bytes, UINT64_MAX - 10);
        quota_uncharge(&D, a);
        cr_expect(holds_nothing(1000));
        free(a), free(b);
}

Test(quota, fds_by_kind)
{
        cr_expect_eq(quota_fds_of_kind(PROTO_KIND_HOST, 1), 2, "the memfd and its read-only open");
        cr_expect_eq(quota_store_of_kind(PROTO_KIND_HOST, 1), 1);
        cr_expect_eq(quota_fds_of_kind(PROTO_KIND_CUDA_IPC, 1), 0);
        cr_expect_eq(quota_store_of_kind(PROTO_KIND_CUDA_IPC, 1), 0);
        cr_expect_eq(quota_fds_of_kind(PROTO_KIND_CUDA_VMM, 3), 3, "one per chunk");
        cr_expect_eq(quota_store_of_kind(PROTO_KIND_CUDA_VMM, 3), 3);
        cr_expect_eq(quota_fds_of_kind(PROTO_KIND_CUDA_VMM, 0), 1);
}

Test(quota, fds_and_store_entries_charged_once)
{
        struct reg *h = reg_of(PROTO_KIND_HOST, 1000, 4096, -1);
        struct reg *h2 = reg_of(PROTO_KIND_HOST, 2000, 4096, -1);

        quota_fds_charge(&D, h, false);
        cr_expect_eq(quota_of(&D, 1000).fds, 2);
        cr_expect_eq(quota_of(&D, 1000).stored, 0);
        cr_expect_eq(D.reg_fds, 2);
        /* Charged again once the store is in use: only the store entry. */
        quota_fds_charge(&D, h, true);
        quota_fds_charge(&D, h, true);
        cr_expect_eq(quota_of(&D, 1000).fds, 2);
        cr_expect_eq(quota_of(&D, 1000).stored, 1);
        quota_fds_charge(&D, h2, true);
        cr_expect_eq(D.reg_fds, 4, "the daemon's total counts every uid");
        quota_fds_uncharge(&D, h);
        cr_expect(holds_nothing(1000));
        cr_expect_eq(h->fds_charged, 0);
        cr_expect_eq(h->store_charged, 0);
        cr_expect_eq(D.reg_fds, 2);
        quota_fds_uncharge(&D, h);
        cr_expect_eq(D.reg_fds, 2, "given back once");
        quota_fds_uncharge(&D, h2);
        cr_expect_eq(D.reg_fds, 0);
        cr_expect_eq(D.uids.n, 0);
        free(h), free(h2);
}
