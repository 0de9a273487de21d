/* host.h: checks on the memfd behind a host registration. */
#ifndef GPUIPCD_HOST_H
#define GPUIPCD_HOST_H

#include <stdbool.h>
#include <stdint.h>

/* The fd must be a memfd sealed against shrinking (so the consumer's mapping
 * cannot lose its pages under it) and growing (a consumer that reopens its
 * fd read-write through /proc must not make the daemon hold more memory
 * than the record says, nor be charged less), that refuses further seals
 * (F_SEAL_SEAL: else a consumer could add F_SEAL_WRITE and lock the producer
 * of a shared_write buffer out) and holds offset + size bytes; size is at
 * least 1 (register checks).  Unless shared_write, it must also be sealed
 * against writes (F_SEAL_WRITE or F_SEAL_FUTURE_WRITE): a read-only fd is no
 * write barrier, since its holder can reopen /proc/self/fd/N read-write.
 * HOST_SHARED_WRITE: the producer shares it writable, no write seal needed.
 * HOST_RESTORED: restore checks only shrink seal and size: what it restores
 * was checked when it was registered (perhaps by an older daemon that did
 * not ask for F_SEAL_GROW and F_SEAL_SEAL).  Returns 0 or -EBADF with a
 * static reason. */
#define HOST_SHARED_WRITE 1u
#define HOST_RESTORED     2u
int host_check_fd(int fd, uint64_t offset, uint64_t size, unsigned flags,
                  const char **ret_why);

/* What the daemon can check of a cuda-vmm fd without CUDA: the real
 * driver's exported fds are opens of /dev/nvidiactl (character devices),
 * the CI driver double's are memfds (regular files); pipes, sockets,
 * directories, O_PATH fds and anonymous inodes (eventfd, ...) are none of
 * those.  Returns 0 or -EBADF with a static reason. */
int host_check_vmm_fd(int fd, const char **ret_why);

/* What a host memfd pins: its size (fixed by its seals), or fallback when
 * it cannot be read or is smaller. */
uint64_t host_fd_bytes(int fd, uint64_t fallback);

/* A read-only open of a host memfd, for lookups: an fd opened O_RDONLY
 * cannot write, fallocate, ftruncate or add seals.  Costs one more fd per
 * host registration.  The fd, or a negative errno. */
int host_open_read_only(int fd);
/* The same, read-write: a new file description of the same memfd. */
int host_open_read_write(int fd);

#endif
