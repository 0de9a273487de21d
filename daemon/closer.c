/* closer.c: closing fds off the event loop; see closer.h. */
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "closer.h"
#include "proto.h"

static uv_loop_t *loop;
static unsigned pending;

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

void closer_close(int fd)
{
        uv_fs_t *req;

        if (fd < 0)
                return;
        if (!loop || pending >= CLOSER_MAX_PENDING || !(req = malloc(sizeof(*req)))) {
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

unsigned closer_pending(void)
{
        return pending;
}

void closer_start(uv_loop_t *l)
{
        loop = l;
        proto_set_fd_closer(closer_close);
}

void closer_stop(void)
{
        loop = NULL;
        proto_set_fd_closer(NULL);
}
