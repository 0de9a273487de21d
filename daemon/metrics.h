/* metrics.h: request counters and latency histograms, and the Prometheus
 * text exposition (format 0.0.4) of them and of the daemon's state. */
#ifndef GPUIPCD_METRICS_H
#define GPUIPCD_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct daemon;

#define METRICS_OPS_MAX   32u   /* distinct op names counted; then "other" */
#define METRICS_CODES_MAX 24u   /* distinct error codes per op */

/* Counts one dispatched request of op (a static string; NULL for an
 * unknown op) that took ns nanoseconds and ended with err (0 or negative). */
void metrics_request(const char *op, int err, uint64_t ns);

/* Renders every metric into a malloc()ed NUL-terminated text (*ret_len
 * bytes without the NUL).  -ENOMEM. */
int metrics_render(struct daemon *d, char **ret_text, size_t *ret_len);

#endif
