/* daemon.c: the daemon's shared state: set up and torn down. */
#include "conn.h"
#include "cuda_ctx.h"
#include "daemon.h"
#include "dispatch.h"
#include "observers.h"
#include "quota.h"
#include "session.h"

int daemon_init(struct daemon *d)
{
        int r;

        hmap_init(&d->waits);
        hmap_init(&d->detached);
        hmap_init(&d->uids);
        alloc_table_init(&d->allocs);
        d->start_ms = uv_now(d->loop);
        d->dispatch = ops_dispatch;
        r = gpu_new(&d->gpu);
        if (r < 0)
                return r;
        r = registry_new(&daemon_observers, d, &d->reg);
        if (r < 0)
                d->gpu = gpu_free(d->gpu);
        return r;
}

void daemon_close_connections(struct daemon *d)
{
        ttl_stop(d);
        conns_shutdown(d);
}

void daemon_done(struct daemon *d)
{
        /* Registrations hold allocation references: free them first. */
        ttl_done(d);
        d->reg = registry_free(d->reg);
        session_done(d);
        alloc_table_done(&d->allocs);
        d->gpu = gpu_free(d->gpu);
        hmap_free(&d->waits);
        quota_done(d);
}
