/* restart_journal.c: length- and hash-framed records in a memfd. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "restart_journal.h"

uint32_t journal_hash(const uint8_t *p, size_t n)
{
        uint32_t h = 2166136261u;

        for (size_t i = 0; i < n; i++) {
                h ^= p[i];
                h *= 16777619u;
        }
        return h;
}

static void put_be32(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int journal_create(const char *name, struct journal *ret)
{
        int fd = memfd_create(name, MFD_CLOEXEC);

        if (fd < 0)
                return -errno;
        ret->fd = fd;
        ret->len = 0;
        return 0;
}

int journal_append(struct journal *j, const void *body, size_t len)
{
        uint8_t hdr[JOURNAL_HDR_LEN];
        struct iovec iov[2] = {
                { .iov_base = hdr, .iov_len = sizeof(hdr) },
                { .iov_base = (void *)body, .iov_len = len },
        };
        size_t want = sizeof(hdr) + len;
        ssize_t n;

        if (j->fd < 0)
                return -EBADF;
        if (len == 0 || len > JOURNAL_RECORD_MAX)
                return -EMSGSIZE;
        if (j->len + want > JOURNAL_FILE_MAX)
                return -EFBIG;
        put_be32(hdr, (uint32_t)len);
        put_be32(hdr + 4, journal_hash(body, len));
        do
                n = pwritev(j->fd, iov, 2, (off_t)j->len);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        if ((size_t)n != want) {
                /* A memfd write is short only when memory ran out; the torn
                 * record is cut off again so that later appends follow an
                 * intact one.  Should that fail too, the torn bytes stay:
                 * the journal is closed, so nothing is appended after them. */
                if (ftruncate(j->fd, (off_t)j->len) < 0)
                        journal_close(j);
                return -ENOSPC;
        }
        j->len += want;
        return 0;
}

void journal_close(struct journal *j)
{
        if (j->fd >= 0)
                close(j->fd);
        j->fd = -1;
        j->len = 0;
}

long journal_parse(const uint8_t *buf, size_t len, journal_record_fn fn, void *data,
                   size_t *ret_tail)
{
        size_t off = 0;
        long n = 0;

        while (len - off >= JOURNAL_HDR_LEN) {
                uint32_t blen = get_be32(buf + off), hash = get_be32(buf + off + 4);
                const uint8_t *body = buf + off + JOURNAL_HDR_LEN;
                int r;

                if (blen == 0 || blen > JOURNAL_RECORD_MAX ||
                    blen > len - off - JOURNAL_HDR_LEN || journal_hash(body, blen) != hash)
                        break;
                r = fn(body, blen, data);
                if (r < 0)
                        return r;
                off += JOURNAL_HDR_LEN + blen;
                n++;
        }
        if (ret_tail)
                *ret_tail = len - off;
        return n;
}

int journal_slurp(int fd, uint8_t **ret_buf, size_t *ret_len)
{
        struct stat st;
        uint8_t *buf;
        size_t size, got = 0;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (st.st_size < 0 || (uint64_t)st.st_size > JOURNAL_FILE_MAX)
                return -EFBIG;
        size = (size_t)st.st_size;
        buf = malloc(size ? size : 1);
        if (!buf)
                return -ENOMEM;
        while (got < size) {
                ssize_t n = pread(fd, buf + got, size - got, (off_t)got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        int r = -errno;
                        free(buf);
                        return r;
                }
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        *ret_buf = buf;
        *ret_len = got;
        return 0;
}

int journal_first(int fd, uint8_t *buf, size_t cap, const uint8_t **ret_body,
                  uint32_t *ret_len)
{
        ssize_t n = pread(fd, buf, cap, 0);
        uint32_t blen;

        if (n < (ssize_t)JOURNAL_HDR_LEN)
                return -ENOENT;
        blen = (uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 | (uint32_t)buf[2] << 8 | buf[3];
        if (blen == 0 || blen > (size_t)n - JOURNAL_HDR_LEN)
                return -ENOENT;
        *ret_body = buf + JOURNAL_HDR_LEN;
        *ret_len = blen;
        return 0;
}
