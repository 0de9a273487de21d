/* busypoll.c: see busypoll.h.  An active uv_idle_t makes libuv poll with a
 * zero timeout, so the loop turns without blocking while it runs. */
#include <stdbool.h>

#include "busypoll.h"

static uv_idle_t idle;
static uint64_t window_ns, last_ns;     /* uv_hrtime(): monotonic ns */
static bool ready, running;

static void on_idle(uv_idle_t *h)
{
        if (uv_hrtime() - last_ns > window_ns) {
                uv_idle_stop(h);
                running = false;
        }
}

int busypoll_init(uv_loop_t *loop, uint32_t us)
{
        int r;

        if (us == 0)
                return 0;
        r = uv_idle_init(loop, &idle);
        if (r < 0)
                return r;
        window_ns = (uint64_t)us * 1000u;
        ready = true;
        return 0;
}

void busypoll_kick(void)
{
        if (!ready)
                return;
        last_ns = uv_hrtime();
        if (!running && uv_idle_start(&idle, on_idle) == 0)
                running = true;
}

void busypoll_stop(void)
{
        if (!ready)
                return;
        ready = running = false;
        uv_close((uv_handle_t *)&idle, NULL);
}
