/* test_closer.c: daemon/closer.c closes off the loop, and never waits on
 * this thread for a lingering socket. */
#include <fcntl.h>
#include <time.h>

#include <criterion/criterion.h>
#include <uv.h>

#include "../lingering.h"
#include "closer.h"

static double now_s(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Started on a loop: the close goes to the thread pool and returns at once;
 * the loop ends once it is done. */
Test(closer, hands_the_close_to_the_thread_pool)
{
        uv_loop_t loop;
        int peer, s;
        double t0;

        cr_assert_eq(uv_loop_init(&loop), 0);
        closer_start(&loop);
        s = lingering_socket(3, &peer);
        t0 = now_s();
        closer_close(s);
        cr_expect_lt(now_s() - t0, 1.0, "closer_close() waited for the lingering socket");
        cr_expect_eq(closer_pending(), 1);
        close(peer);    /* the unsent data goes: the close in the pool ends */
        uv_run(&loop, UV_RUN_DEFAULT);
        cr_expect_eq(closer_pending(), 0);
        closer_stop();
        cr_assert_eq(uv_loop_close(&loop), 0);
}

/* Not started (or stopped, or full): closed here, its lingering turned off
 * first, so that it does not wait 3 s for its peer. */
Test(closer, closes_at_once_without_waiting_for_a_lingering_socket)
{
        int peer, s = lingering_socket(3, &peer);
        double t0 = now_s();

        closer_close(s);
        cr_expect_lt(now_s() - t0, 1.0, "the close waited for the lingering socket");
        cr_expect_eq(closer_pending(), 0);
        cr_expect_eq(fcntl(s, F_GETFD), -1, "the fd is still open");
        close(peer);
        closer_close(-1);       /* ignored */
}
