/* host.h: checks on the memfd behind a host registration. */
#ifndef GPUIPCD_HOST_H
#define GPUIPCD_HOST_H

#include <stdint.h>

/* The fd must be a memfd sealed against shrinking (so the consumer's mapping
 * cannot lose its pages under it) that holds offset + size bytes; size is at
 * least 1 (register checks).  Returns 0 or -EBADF with a static reason. */
int host_check_fd(int fd, uint64_t offset, uint64_t size, const char **ret_why);

#endif
