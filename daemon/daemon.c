/* daemon.c: the daemon's shared state and the registry's callbacks. */
#include <errno.h>
#include <inttypes.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "daemon.h"
#include "log.h"

uint64_t now_unix_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The last lease went: tell the owner it may reuse the memory.  Runs inside
 * registry calls, so it only queues. */
static void on_released(struct reg *r, void *userdata)
{
        struct conn *c = conn_from_party(r->owner);
        struct proto_out o;

        if (c->closed)
                return;
        proto_out_init(&o);
        msgpack_pack_map(&o.pk, 3);
        proto_pack_kstr(&o.pk, "event", "released");
        proto_pack_ku64(&o.pk, "id", r->id);
        proto_pack_str(&o.pk, "name");
        proto_pack_strn(&o.pk, r->name, r->name_len);
        (void)conn_send(c, &o, NULL);
        proto_out_free(&o);
}

static void on_freed(struct reg *r, void *userdata)
{
        log_debug("freeing registration %" PRIu64 " (%s)", r->id, r->name);
        if (r->fd >= 0)
                close(r->fd);
        r->fd = -1;
}

int daemon_init(struct daemon *d)
{
        static const struct registry_callbacks cb = {
                .released = on_released,
                .freed = on_freed,
        };

        hmap_init(&d->waits);
        d->start_ms = uv_now(d->loop);
        return registry_new(&cb, d, &d->reg);
}

void daemon_close_connections(struct daemon *d)
{
        while (d->conns)
                conn_close(d->conns);
}

void daemon_done(struct daemon *d)
{
        d->reg = registry_free(d->reg);
        hmap_free(&d->waits);
}
