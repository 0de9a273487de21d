/* test_flush.c: answers to other connections (daemon/outq.c, conn.c), on a
 * daemon in this process.  A register that answers a waiting lookup writes
 * that answer within the callback that read the register, not at a later
 * writable wakeup: a handoff waits for it. */
#include "daemon_fixture.h"

TestSuite(flush, .init = fx_setup, .fini = fx_teardown, .timeout = 10);

static void send_frame(int peer, struct proto_out *o)
{
        cr_assert_eq(proto_out_finish(o, UINT32_MAX), 0);
        cr_assert_eq(write(peer, o->sb.data, o->sb.size), (ssize_t)o->sb.size);
        proto_out_free(o);
}

static bool readable(int fd)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };

        return poll(&p, 1, 0) == 1;
}

Test(flush, a_woken_lookup_is_answered_in_the_registers_callback)
{
        uint8_t handle[PROTO_IPC_HANDLE_LEN];
        struct proto_out o;
        struct fx_frame f;
        char code[32];
        int pc, pp;

        (void)fx_conn(&pc);
        (void)fx_conn(&pp);
        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 4);
        proto_pack_kstr(&o.pk, "op", "lookup");
        proto_pack_ku64(&o.pk, "seq", 1);
        proto_pack_kstr(&o.pk, "name", "fl/x");
        proto_pack_ku64(&o.pk, "wait_ms", 10000);
        send_frame(pc, &o);
        for (int i = 0; i < 20; i++)
                uv_run(&fx_loop, UV_RUN_NOWAIT);
        cr_assert(!readable(pc), "the lookup waits for the name");

        memset(handle, 0x5a, sizeof(handle));
        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 9);
        proto_pack_kstr(&o.pk, "op", "register");
        proto_pack_ku64(&o.pk, "seq", 2);
        proto_pack_kstr(&o.pk, "name", "fl/x");
        proto_pack_kstr(&o.pk, "kind", "cuda-ipc");
        proto_pack_ku64(&o.pk, "size", 4096);
        proto_pack_kstr(&o.pk, "device", "GPU-00000000-0000-0000-0000-000000000001");
        proto_pack_str(&o.pk, "handle");
        msgpack_pack_bin_with_body(&o.pk, handle, sizeof(handle));
        proto_pack_ku64(&o.pk, "buffer_id", 7);
        proto_pack_ku64(&o.pk, "alloc_size", 4096);
        send_frame(pp, &o);
        /* One turn of the loop reads the register: both answers are out
         * when it ends. */
        uv_run(&fx_loop, UV_RUN_NOWAIT);
        cr_assert(readable(pc), "the woken lookup was answered in the register's callback");
        cr_assert(readable(pp), "the register was answered");
        cr_assert_eq(fx_recv(pc, &f, 1000), 1);
        cr_expect_eq(fx_u64(&f, "seq"), 1);
        cr_expect_str_eq(fx_code(&f, code, sizeof(code)), "");
        cr_expect_neq(fx_u64(&f, "lease"), UINT64_MAX, "the answer carries a lease");
        fx_frame_free(&f);
        cr_assert_eq(fx_recv(pp, &f, 1000), 1);
        cr_expect_eq(fx_u64(&f, "seq"), 2);
        cr_expect_str_eq(fx_code(&f, code, sizeof(code)), "");
        fx_frame_free(&f);
        close(pc);
        close(pp);
}
