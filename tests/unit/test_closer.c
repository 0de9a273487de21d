/* test_closer.c: daemon/closer.c closes off the loop, and never waits on
 * this thread for a lingering socket. */
#include <fcntl.h>
#include <stdbool.h>
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

static int open_null(void)
{
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

        cr_assert_geq(fd, 0);
        return fd;
}

static bool is_open(int fd)
{
        return fcntl(fd, F_GETFD) != -1;
}

/* Deferred: the fds stay open until closer_flush(), which hands them to the
 * pool; past CLOSER_MAX_DEFERRED one goes to the pool at once. */
Test(closer, defers_until_the_flush)
{
        int fds[CLOSER_MAX_DEFERRED + 1];
        unsigned n = CLOSER_MAX_DEFERRED + 1;
        uv_loop_t loop;

        cr_assert_eq(uv_loop_init(&loop), 0);
        closer_start(&loop);
        for (unsigned i = 0; i < n; i++)
                fds[i] = open_null();
        closer_defer();
        for (unsigned i = 0; i < n; i++)
                closer_close(fds[i]);
        cr_expect_eq(closer_pending(), n);
        for (unsigned i = 0; i < CLOSER_MAX_DEFERRED; i++)
                cr_expect(is_open(fds[i]), "fd %u closed before the flush", i);
        closer_flush();
        cr_expect_eq(closer_pending(), n, "the flush did not hand them to the pool");
        uv_run(&loop, UV_RUN_DEFAULT);
        cr_expect_eq(closer_pending(), 0);
        for (unsigned i = 0; i < n; i++)
                cr_expect(!is_open(fds[i]), "fd %u still open", i);
        closer_close(-1);       /* not deferring any more: ignored as ever */
        closer_stop();
        cr_assert_eq(uv_loop_close(&loop), 0);
}

/* Noted and in flight together stay within CLOSER_MAX_PENDING: with four
 * short of it in flight, the fifth deferred fd closes at once. */
Test(closer, deferred_and_in_flight_share_the_bound)
{
        int fds[CLOSER_MAX_PENDING + 1];
        uv_loop_t loop;

        cr_assert_eq(uv_loop_init(&loop), 0);
        closer_start(&loop);
        for (unsigned i = 0; i <= CLOSER_MAX_PENDING; i++)
                fds[i] = open_null();
        for (unsigned i = 0; i < CLOSER_MAX_PENDING - 4; i++)
                closer_close(fds[i]);
        cr_expect_eq(closer_pending(), CLOSER_MAX_PENDING - 4);
        closer_defer();
        for (unsigned i = CLOSER_MAX_PENDING - 4; i <= CLOSER_MAX_PENDING; i++)
                closer_close(fds[i]);
        cr_expect(!is_open(fds[CLOSER_MAX_PENDING]), "the fd past the bound is open");
        for (unsigned i = CLOSER_MAX_PENDING - 4; i < CLOSER_MAX_PENDING; i++)
                cr_expect(is_open(fds[i]), "deferred fd %u closed before the flush", i);
        cr_expect_eq(closer_pending(), CLOSER_MAX_PENDING);
        closer_flush();
        cr_expect_eq(closer_pending(), CLOSER_MAX_PENDING);
        uv_run(&loop, UV_RUN_DEFAULT);
        cr_expect_eq(closer_pending(), 0);
        for (unsigned i = 0; i < CLOSER_MAX_PENDING; i++)
                cr_expect(!is_open(fds[i]), "fd %u still open", i);
        closer_stop();
        cr_assert_eq(uv_loop_close(&loop), 0);
}

/* closer_stop() closes what is still deferred, there and then. */
Test(closer, stop_closes_what_is_deferred)
{
        uv_loop_t loop;
        int fd = open_null();

        cr_assert_eq(uv_loop_init(&loop), 0);
        closer_start(&loop);
        closer_defer();
        closer_close(fd);
        closer_stop();
        cr_expect(!is_open(fd), "still open after closer_stop()");
        cr_expect_eq(closer_pending(), 0);
        uv_run(&loop, UV_RUN_DEFAULT);
        cr_assert_eq(uv_loop_close(&loop), 0);
}
