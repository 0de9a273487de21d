/* busypoll.h: an optional busy-poll window (busy-poll-us).
 *
 * After a connection had input the loop keeps polling without sleeping for
 * that long, so that the next request is read as soon as it is written,
 * without waking an idle CPU first.  It costs one CPU for as long as
 * requests keep coming within the window; 0 (the default) turns it off. */
#ifndef GPUIPCD_BUSYPOLL_H
#define GPUIPCD_BUSYPOLL_H

#include <stdint.h>
#include <uv.h>

/* Sets the window up on loop; us 0 leaves it off.  0 or a libuv error. */
int busypoll_init(uv_loop_t *loop, uint32_t us);
/* Input arrived: keep polling for the window from now. */
void busypoll_kick(void);
/* Stops polling for good (shutdown): the loop may end. */
void busypoll_stop(void);

#endif
