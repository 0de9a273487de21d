/* closer.c: closing fds off the event loop; see closer.h. */
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "closer.h"
#include "proto.h"

static uv_loop_t *loop;
static unsigned pending;
static int later[CLOSER_MAX_DEFERRED];  /* closer_defer()'s, in order */
static unsigned n_later;
static bool deferring;

/* A close on this thread.  A socket a client sent may linger (SO_LINGER):
 * its close would wait for the unsent data, so lingering is turned off
 * first, which ends it at once. */
static void close_now(int fd)
{
        struct linger off = { 0, 0 };
        struct stat st;

        if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
                (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof(off));
        close(fd);
}

static void on_closed(uv_fs_t *req)
{
        pending--;
        uv_fs_req_cleanup(req);
        free(req);
}

static void hand_off(int fd)
{
        uv_fs_t *req;

        if (!loop || pending + n_later >= CLOSER_MAX_PENDING || !(req = malloc(sizeof(*req)))) {
                close_now(fd);
                return;
        }
        if (uv_fs_close(loop, req, fd, on_closed) < 0) {
                free(req);
                close_now(fd);
                return;
        }
        pending++;
}

void closer_close(int fd)
{
        if (fd < 0)
                return;
        /* Past either bound, hand_off() hands it over or closes it now. */
        if (deferring && n_later < CLOSER_MAX_DEFERRED && pending + n_later < CLOSER_MAX_PENDING)
                later[n_later++] = fd;
        else
                hand_off(fd);
}

void closer_defer(void)
{
        deferring = loop != NULL;
}

void closer_flush(void)
{
        unsigned n = n_later;

        deferring = false;
        for (unsigned i = 0; i < n; i++) {
                n_later--;      /* later[i] moves from noted to in flight */
                hand_off(later[i]);
        }
}

unsigned closer_pending(void)
{
        return pending + n_later;
}

void closer_start(uv_loop_t *l)
{
        loop = l;
        proto_set_fd_closer(closer_close);
}

void closer_stop(void)
{
        loop = NULL;
        closer_flush();         /* what is still deferred closes now */
        proto_set_fd_closer(NULL);
}
