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

int host_check_fd(int fd, uint64_t offset, uint64_t size, unsigned flags,
                  const char **ret_why)
{
        bool shared_write = flags & (HOST_SHARED_WRITE | HOST_RESTORED);
        bool restored = flags & HOST_RESTORED;
        const char *why = NULL;
        struct stat st;
        int seals;

        seals = fcntl(fd, F_GET_SEALS);
        if (seals < 0)
                why = "not a memfd (F_GET_SEALS failed)";
        else if (!(seals & F_SEAL_SHRINK))
                why = "memfd is not sealed against shrinking (F_SEAL_SHRINK)";
        else if (!restored && !(seals & F_SEAL_GROW))
                why = "memfd is not sealed against growing (F_SEAL_GROW): any consumer could "
                      "reopen it read-write and grow it into memory the daemon then holds";
        else if (!shared_write && !(seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)))
                why = "memfd is not sealed against writes: any consumer could reopen its "
                      "read-only fd read-write; seal it (F_SEAL_FUTURE_WRITE or F_SEAL_WRITE), "
                      "or register with shared_write: true to share it writable";
        else if (!restored && !(seals & F_SEAL_SEAL))
                why = "memfd does not refuse further seals (F_SEAL_SEAL): any consumer could "
                      "reopen it read-write and seal it against the producer's writes";
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

uint64_t host_fd_bytes(int fd, uint64_t fallback)
{
        struct stat st;

        if (fstat(fd, &st) < 0 || st.st_size < 0 || (uint64_t)st.st_size < fallback)
                return fallback;
        return (uint64_t)st.st_size;
}

int host_check_vmm_fd(int fd, const char **ret_why)
{
        const char *why = NULL;
        struct stat st;
        int fl;

        fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fstat(fd, &st) < 0)
                why = "the cuda-vmm fd cannot be inspected (fcntl, fstat)";
        else if (fl & O_PATH)
                why = "the cuda-vmm fd is an O_PATH fd, not an open file";
        else if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISDIR(st.st_mode) ||
                 !(S_ISCHR(st.st_mode) || S_ISREG(st.st_mode)))
                why = "the cuda-vmm fd is not an exported allocation (a character device "
                      "open, as the driver's are): pipes, sockets, directories and other "
                      "kinds are refused";
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
