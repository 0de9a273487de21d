/* dispatch.h: a request frame to its handler (dispatch.c). */
#ifndef GPUIPCD_DISPATCH_H
#define GPUIPCD_DISPATCH_H

#include <stdint.h>

struct conn;

/* Handles the frame body [body, body + len) that c sent at stream offset
 * off: the reply, or the error reply, is queued on c. */
void ops_dispatch(struct conn *c, const uint8_t *body, uint32_t len, uint64_t off);

#endif
