/* metrics_http.h: a minimal HTTP/1.0 responder for GET /metrics on a TCP
 * port (loopback unless metrics-public) or an AF_UNIX socket
 * (metrics-listen).  One request per connection; requests are capped in
 * size, idle connections time out, and at most MHTTP_CONNS are open at
 * once. */
#ifndef GPUIPCD_METRICS_HTTP_H
#define GPUIPCD_METRICS_HTTP_H

#include <stddef.h>

struct daemon;

#define MHTTP_CONNS      16
#define MHTTP_REQ_MAX    2048u  /* bytes of a request head */
#define MHTTP_IDLE_MS    5000u

/* Listens on addr (a checked metrics-listen value).  -errno, with err set. */
int mhttp_start(struct daemon *d, const char *addr, char *err, size_t len);
/* Closes the listener and every connection (handles finish in the loop). */
void mhttp_stop(void);

#endif
