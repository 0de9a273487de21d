/* host.c: memfd validation for host buffers. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

#include "host.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010      /* Linux 5.1 */
#endif

int host_check_fd(int fd, uint64_t offset, uint64_t size, bool shared_write,
                  const char **ret_why)
{
        const char *why = NULL;
        struct stat st;
        int seals;

        seals = fcntl(fd, F_GET_SEALS);
        if (seals < 0)
                why = "not a memfd (F_GET_SEALS failed)";
        else if (!(seals & F_SEAL_SHRINK))
                why = "memfd is not sealed against shrinking (F_SEAL_SHRINK)";
        else if (!shared_write && !(seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)))
                why = "memfd is not sealed against writes: any consumer could reopen its "
                      "read-only fd read-write; seal it (F_SEAL_FUTURE_WRITE or F_SEAL_WRITE), "
                      "or register with shared_write: true to share it writable";
        else if (fstat(fd, &st) < 0)
                why = "cannot stat the memfd";
        else if (offset > UINT64_MAX - size || (uint64_t)st.st_size < offset + size)
                why = "memfd is smaller than offset + size";
        if (why) {
                if (ret_why)
                        *ret_why = why;
                return -EBADF;
        }
        return 0;
}

static int reopen(int fd, int flags)
{
        char path[64];
        int r;

        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        r = open(path, flags | O_CLOEXEC);
        return r < 0 ? -errno : r;
}

int host_open_read_only(int fd)
{
        return reopen(fd, O_RDONLY);
}

int host_open_read_write(int fd)
{
        return reopen(fd, O_RDWR);
}
