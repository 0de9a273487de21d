/* outq.h: the parts of a connection's output queue that conn.c drives
 * (outq.c); conn.h declares what everyone sends with. */
#ifndef GPUIPCD_OUTQ_H
#define GPUIPCD_OUTQ_H

struct conn;
struct daemon;

/* Writes as much of c's queue as the socket takes.  Returns 0 when it is
 * empty, -EAGAIN when bytes are left, or another negative errno. */
int outq_write(struct conn *c);
/* Frees c's queue (closing). */
void outq_free(struct conn *c);
/* Gives piled-up output memory back once most of it is sent. */
void outq_trim(struct daemon *d);

#endif
