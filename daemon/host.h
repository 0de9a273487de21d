/* host.h: checks on the memfd behind a host registration. */
#ifndef GPUIPCD_HOST_H
#define GPUIPCD_HOST_H

#include <stdbool.h>
#include <stdint.h>

/* The fd must be a memfd sealed against shrinking (so the consumer's mapping
 * cannot lose its pages under it) that holds offset + size bytes; size is at
 * least 1 (register checks).  Unless shared_write, it must also be sealed
 * against writes (F_SEAL_WRITE or F_SEAL_FUTURE_WRITE): a read-only fd is no
 * write barrier, since its holder can reopen /proc/self/fd/N read-write.
 * Restore passes shared_write true: what it restores was checked when it was
 * registered.  Returns 0 or -EBADF with a static reason. */
int host_check_fd(int fd, uint64_t offset, uint64_t size, bool shared_write,
                  const char **ret_why);

/* A read-only open of a host memfd, for lookups: an fd opened O_RDONLY
 * cannot write, fallocate, ftruncate or add seals.  Costs one more fd per
 * host registration.  The fd, or a negative errno. */
int host_open_read_only(int fd);
/* The same, read-write: a new file description of the same memfd. */
int host_open_read_write(int fd);

#endif
