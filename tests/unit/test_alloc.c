/* test_alloc.c: the CUDA allocation table, CUDA registration data and the
 * registry's lease marks and revocation, without sockets or a driver. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "cuda_alloc.h"
#include "cuda/driver.h"
#include "cuda_reg.h"
#include "proto.h"
#include "registry.h"

static struct alloc_table T;
static uint8_t dev0[16], dev1[16], h1[64], h2[64];

static void setup(void)
{
        alloc_table_init(&T);
        memset(dev0, 0xa0, sizeof(dev0));
        memset(dev1, 0xa1, sizeof(dev1));
        memset(h1, 1, sizeof(h1));
        memset(h2, 2, sizeof(h2));
}

static void teardown(void)
{
        alloc_table_done(&T);
}

static bool fd_open(int fd)
{
        return fcntl(fd, F_GETFD) >= 0;
}

TestSuite(alloc, .init = setup, .fini = teardown);

Test(alloc, ipc_registrations_of_one_allocation_share_an_entry)
{
        struct alloc *a, *b, *c;

        cr_assert_eq(alloc_get_ipc(&T, dev0, h1, 7, 4 << 20, &a), 0);
        cr_assert_eq(alloc_get_ipc(&T, dev0, h1, 7, 4 << 20, &b), 0);
        cr_assert_eq(alloc_get_ipc(&T, dev0, h1, 7, 4 << 20, &c), 0);
        cr_assert_eq(a, b);
        cr_assert_eq(a, c);
        cr_assert_eq(a->regs, 3);
        cr_assert_eq(a->size, 4u << 20);
        cr_assert_eq(a->fd, -1);
        cr_assert_eq(T.n, 1);
        alloc_put(&T, b);
        alloc_put(&T, c);
        cr_assert_eq(a->regs, 1);
        cr_assert_eq(T.n, 1);
        alloc_put(&T, a);
        cr_assert_eq(T.n, 0);
}

Test(alloc, ipc_key_has_device_handle_and_buffer_id)
{
        struct alloc *a, *b, *c, *d;

        cr_assert_eq(alloc_get_ipc(&T, dev0, h1, 7, 100, &a), 0);
        /* A recycled address: same handle bytes, new buffer id. */
        cr_assert_eq(alloc_get_ipc(&T, dev0, h1, 8, 100, &b), 0);
        cr_assert_eq(alloc_get_ipc(&T, dev0, h2, 7, 100, &c), 0);
        cr_assert_eq(alloc_get_ipc(&T, dev1, h1, 7, 100, &d), 0);
        cr_assert_neq(a, b);
        cr_assert_neq(a, c);
        cr_assert_neq(a, d);
        cr_assert_eq(T.n, 4);
        cr_assert(a->id != b->id && b->id != c->id && c->id != d->id && a->id != d->id);
        cr_assert_eq(a->regs + b->regs + c->regs + d->regs, 4);
}

Test(alloc, same_key_other_size_is_refused)
{
        struct alloc *a, *b = NULL;

        cr_assert_eq(alloc_get_ipc(&T, dev0, h1, 7, 100, &a), 0);
        cr_assert_eq(alloc_get_ipc(&T, dev0, h1, 7, 200, &b), -EINVAL);
        cr_assert_null(b);
        cr_assert_eq(a->regs, 1);
}

Test(alloc, ids_are_never_reused)
{
        struct alloc *a, *b;
        uint64_t first;

        cr_assert_eq(alloc_get_ipc(&T, dev0, h1, 7, 100, &a), 0);
        first = a->id;
        alloc_put(&T, a);
        cr_assert_eq(alloc_get_ipc(&T, dev0, h1, 7, 100, &b), 0);
        cr_assert_gt(b->id, first);
}

/* A new open of fd's file: one more fd of the same inode, as every fd the
 * real driver exports is an open of /dev/nvidiactl. */
static int reopen(int fd)
{
        char path[64];

        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        return open(path, O_RDWR | O_CLOEXEC);
}

Test(alloc, vmm_identity_is_the_key_not_the_inode)
{
        static const uint8_t k1[PROTO_ALLOC_KEY_LEN] = { 1 }, k2[PROTO_ALLOC_KEY_LEN] = { 2 };
        int fd = memfd_create("nvidiactl", MFD_CLOEXEC);
        int same_file = reopen(fd), dup1 = reopen(fd), on_dev1 = reopen(fd);
        int keep = fd, keep2 = same_file;
        struct alloc *a, *b, *c, *d;
        struct stat st1, st2;

        cr_assert(fd >= 0 && same_file >= 0 && dup1 >= 0 && on_dev1 >= 0);
        cr_assert(fstat(fd, &st1) == 0 && fstat(same_file, &st2) == 0);
        cr_assert(st1.st_dev == st2.st_dev && st1.st_ino == st2.st_ino);
        cr_assert_eq(alloc_get_vmm(&T, dev0, k1, &fd, 2 << 20, &a), 0);
        cr_assert_eq(fd, -1);
        cr_assert_eq(a->fd, keep, "the first registration's fd is kept");
        cr_assert_eq(memcmp(a->key, k1, PROTO_ALLOC_KEY_LEN), 0);
        /* The same inode with another key: another allocation, even with
         * another size. */
        cr_assert_eq(alloc_get_vmm(&T, dev0, k2, &same_file, 4 << 20, &c), 0);
        cr_assert_neq(c, a);
        cr_assert_neq(c->id, a->id);
        cr_assert_eq(c->fd, keep2);
        cr_assert_eq(c->size, 4u << 20);
        cr_assert_eq(T.n, 2);
        /* The same key: the same entry, and the duplicate fd is closed. */
        cr_assert_eq(alloc_get_vmm(&T, dev0, k1, &dup1, 2 << 20, &b), 0);
        cr_assert_eq(b, a);
        cr_assert_eq(dup1, -1);
        cr_assert_eq(a->regs, 2);
        cr_assert_eq(a->fd, keep);
        cr_assert(fd_open(keep));
        /* The key is per device. */
        cr_assert_eq(alloc_get_vmm(&T, dev1, k1, &on_dev1, 2 << 20, &d), 0);
        cr_assert_neq(d, a);
        cr_assert_eq(T.n, 3);
        alloc_put(&T, b);
        cr_assert(fd_open(keep), "still referenced");
        alloc_put(&T, a);
        cr_assert_not(fd_open(keep), "the last reference closes the fd");
        cr_assert(fd_open(keep2), "another allocation's fd stays");
        cr_assert_eq(T.n, 2);
}

Test(alloc, vmm_failure_leaves_the_fd_alone)
{
        static const uint8_t k1[PROTO_ALLOC_KEY_LEN] = { 1 };
        int fd = memfd_create("vmm", 0), dup1 = reopen(fd);
        struct alloc *a, *b = NULL;

        cr_assert_eq(alloc_get_vmm(&T, dev0, k1, &fd, 4096, &a), 0);
        cr_assert_eq(alloc_get_vmm(&T, dev0, k1, &dup1, 8192, &b), -EINVAL);
        cr_assert_null(b);
        cr_assert_geq(dup1, 0);
        cr_assert(fd_open(dup1));
        close(dup1);
        cr_assert_eq(a->regs, 1);
}

Test(alloc, many_entries)
{
        enum { N = 5000 };
        static struct alloc *as[N];
        uint8_t h[64] = { 0 };

        for (unsigned i = 0; i < N; i++) {
                memcpy(h, &i, sizeof(i));
                cr_assert_eq(alloc_get_ipc(&T, dev0, h, i, 4096, &as[i]), 0);
        }
        cr_assert_eq(T.n, N);
        for (unsigned i = 0; i < N; i++) {
                struct alloc *a;
                memcpy(h, &i, sizeof(i));
                cr_assert_eq(alloc_get_ipc(&T, dev0, h, i, 4096, &a), 0);
                cr_assert_eq(a, as[i]);
                alloc_put(&T, a);
        }
        for (unsigned i = 0; i < N; i += 2)
                alloc_put(&T, as[i]);
        cr_assert_eq(T.n, N / 2);
}

/* ---- device UUIDs --------------------------------------------------------- */

Test(uuid, round_trip_and_strict_syntax)
{
        static const char s[] = "GPU-2f1c7a9e-0b3d-4e5f-8a6b-1c2d3e4f5a6b";
        char out[CUDA_UUID_STR_LEN + 1];
        uint8_t u[16];

        cr_assert_eq(cuda_uuid_parse(s, strlen(s), u), 0);
        cr_assert_eq(u[0], 0x2f);
        cr_assert_eq(u[15], 0x6b);
        cuda_uuid_format(u, out);
        cr_assert_str_eq(out, s);
        cr_assert_eq(cuda_uuid_parse("GPU-2F1C7A9E-0B3D-4E5F-8A6B-1C2D3E4F5A6B", 40, u), -EINVAL);
        cr_assert_eq(cuda_uuid_parse("GPU-2f1c7a9e0b3d-4e5f-8a6b-1c2d3e4f5a6b-", 40, u), -EINVAL);
        cr_assert_eq(cuda_uuid_parse("MIG-2f1c7a9e-0b3d-4e5f-8a6b-1c2d3e4f5a6b", 40, u), -EINVAL);
        cr_assert_eq(cuda_uuid_parse(s, strlen(s) - 1, u), -EINVAL);
        cr_assert_eq(cuda_uuid_parse("GPU-2f1c7a9e-0b3d-4e5f-8a6b-1c2d3e4f5a6g", 40, u), -EINVAL);
}

/* ---- release events -------------------------------------------------------- */

Test(reg_cuda, release_events_keep_the_newest_64)
{
        struct reg_cuda *rc = reg_cuda_new();
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_unpacked up;
        uint8_t ev[64];

        cr_assert_not_null(rc);
        for (unsigned i = 0; i < REG_CUDA_EVENTS_MAX + 6; i++) {
                memset(ev, (int)i, sizeof(ev));
                cr_assert_eq(rel_events_push(&rc->rel, ev), 0);
        }
        cr_assert_eq(rc->rel.n, REG_CUDA_EVENTS_MAX);
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 1);
        proto_pack_str(&pk, "events");
        cr_assert_eq(rel_events_pack(&pk, &rc->rel), 6);
        cr_assert_eq(rc->rel.n, 0);
        msgpack_unpacked_init(&up);
        cr_assert_eq(msgpack_unpack_next(&up, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
        const msgpack_object *a = &up.data.via.map.ptr[0].val;
        cr_assert_eq(a->via.array.size, REG_CUDA_EVENTS_MAX);
        cr_assert_eq((uint8_t)a->via.array.ptr[0].via.bin.ptr[0], 6, "oldest kept is #6");
        cr_assert_eq((uint8_t)a->via.array.ptr[REG_CUDA_EVENTS_MAX - 1].via.bin.ptr[0],
                     REG_CUDA_EVENTS_MAX + 5);
        msgpack_unpacked_destroy(&up);
        msgpack_sbuffer_destroy(&sb);
        reg_cuda_free(&T, rc);
}

/* ---- registry: revocation and lease marks ----------------------------------- */

static unsigned n_released, n_revoked;
static uint64_t revoked_lease[8];

static void on_released(struct reg *r, void *userdata)
{
        n_released++;
}

static void on_revoked(struct reg *r, struct lease *l, void *userdata)
{
        if (n_revoked < 8)
                revoked_lease[n_revoked] = l->id;
        n_revoked++;
}

static const struct registry_callbacks cbs = { .released = on_released, .revoked = on_revoked };

static struct reg *add(struct registry *R, struct reg_party *o, const char *name, bool rev)
{
        struct reg_params p = {
                .name = name, .name_len = strlen(name), .kind = PROTO_KIND_CUDA_IPC,
                .size = 10, .ephemeral = true, .revocable = rev, .fd = -1,
        };
        struct reg *r;

        cr_assert_eq(registry_add(R, o, &p, &r), 0);
        return r;
}

Test(registry_cuda, owner_end_revokes_every_lease_of_revocable_regs)
{
        struct registry *R;
        struct reg_party owner, h1p, h2p;
        struct lease *l1, *l2, *l3, *l4;
        struct reg *r, *plain, *gone;

        n_revoked = n_released = 0;
        cr_assert_eq(registry_new(&cbs, NULL, &R), 0);
        reg_party_init(&owner, 1, 1, 1);
        reg_party_init(&h1p, 2, 1, 1);
        reg_party_init(&h2p, 3, 1, 1);
        r = add(R, &owner, "a/ipc", true);
        plain = add(R, &owner, "a/host", false);
        cr_assert_eq(registry_lease(R, r, &h1p, &l1), 0);
        cr_assert_eq(registry_lease(R, r, &h2p, &l2), 0);
        cr_assert_eq(registry_lease(R, plain, &h2p, &l3), 0);
        cr_assert_eq(registry_release(R, &h1p, l1->id), 0);
        /* Unregistered but leased: its leases still map the memory. */
        gone = add(R, &owner, "a/gone", true);
        cr_assert_eq(registry_lease(R, gone, &h1p, &l4), 0);
        cr_assert_eq(registry_unregister(R, gone), 0);
        registry_party_gone(R, &owner);
        cr_assert_eq(n_revoked, 2, "the leases still held on the revocable ones");
        cr_assert(revoked_lease[0] == l2->id || revoked_lease[1] == l2->id);
        cr_assert(revoked_lease[0] == l4->id || revoked_lease[1] == l4->id);
        registry_party_gone(R, &h1p);
        cr_assert_null(registry_find_name(R, "a/ipc", 5));
        cr_assert_not(r->live);
        registry_party_gone(R, &h2p);
        cr_assert_eq(registry_counters(R)->registrations, 0);
        registry_free(R);
}

Test(registry_cuda, mark_fires_released_when_the_marked_leases_end)
{
        struct registry *R;
        struct reg_party owner, h;
        struct lease *old1, *old2, *newer;
        struct reg *r;

        n_revoked = n_released = 0;
        cr_assert_eq(registry_new(&cbs, NULL, &R), 0);
        reg_party_init(&owner, 1, 1, 1);
        reg_party_init(&h, 2, 1, 1);
        r = add(R, &owner, "a/x", true);
        cr_assert_eq(registry_lease(R, r, &h, &old1), 0);
        cr_assert_eq(registry_lease(R, r, &h, &old2), 0);
        cr_assert_eq(registry_mark_leases(R, r), 2);
        registry_set_kind(R, r, PROTO_KIND_CUDA_VMM);
        cr_assert_eq(registry_counters(R)->bytes[PROTO_KIND_CUDA_VMM], 10);
        cr_assert_eq(registry_counters(R)->bytes[PROTO_KIND_CUDA_IPC], 0);
        cr_assert_eq(registry_lease(R, r, &h, &newer), 0);
        cr_assert_eq(registry_release(R, &h, old1->id), 0);
        cr_assert_eq(n_released, 0);
        cr_assert_eq(registry_release(R, &h, newer->id), 0);
        cr_assert_eq(n_released, 0);
        cr_assert_eq(registry_release(R, &h, old2->id), 0);
        cr_assert_eq(n_released, 1, "the last lease: one released event, not two");
        registry_party_gone(R, &owner);
        registry_free(R);
}

Test(registry_cuda, mark_fires_early_while_newer_leases_remain)
{
        struct registry *R;
        struct reg_party owner, h;
        struct lease *old, *newer;
        struct reg *r;

        n_revoked = n_released = 0;
        cr_assert_eq(registry_new(&cbs, NULL, &R), 0);
        reg_party_init(&owner, 1, 1, 1);
        reg_party_init(&h, 2, 1, 1);
        r = add(R, &owner, "a/x", true);
        cr_assert_eq(registry_lease(R, r, &h, &old), 0);
        cr_assert_eq(registry_mark_leases(R, r), 1);
        cr_assert_eq(registry_lease(R, r, &h, &newer), 0);
        cr_assert_eq(registry_release(R, &h, old->id), 0);
        cr_assert_eq(n_released, 1, "the producer's memory is free now");
        cr_assert_eq(registry_release(R, &h, newer->id), 0);
        cr_assert_eq(n_released, 2);
        registry_party_gone(R, &owner);
        registry_free(R);
}

/* A known alloc_key is joined only by its creator's uid (no squatting). */
Test(alloc, vmm_key_joined_only_by_its_creator_uid)
{
        static const uint8_t k1[PROTO_ALLOC_KEY_LEN] = { 9 };
        int fd = memfd_create("vmm", 0), other = reopen(fd), same = reopen(fd);
        struct alloc *a, *b = NULL, *c = NULL;

        cr_assert_eq(alloc_get_vmm_as(&T, dev0, k1, &fd, 4096, 1000, &a), 0);
        cr_assert_eq(alloc_get_vmm_as(&T, dev0, k1, &other, 4096, 1001, &b), -EPERM);
        cr_assert_null(b);
        cr_assert(fd_open(other));
        close(other);
        cr_assert_eq(alloc_get_vmm_as(&T, dev0, k1, &same, 4096, 1000, &c), 0);
        cr_assert_eq(c, a);
        cr_assert_eq(a->regs, 2);
        alloc_put(&T, c);
        alloc_put(&T, a);
}
