/* stream.c: byte stream to frames, and the fds that travel with them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto.h"

#define READER_MIN_CAP 4096u

int proto_reader_init(struct proto_reader *r, uint32_t max_frame)
{
        memset(r, 0, sizeof(*r));
        if (max_frame == 0 || max_frame > PROTO_MAX_FRAME_LIMIT)
                return -EINVAL;
        r->max_frame = max_frame;
        return 0;
}

void proto_reader_free(struct proto_reader *r)
{
        if (!r)
                return;
        free(r->buf);
        r->buf = NULL;
        r->cap = r->start = r->end = 0;
}

/* Bytes the buffer must be able to hold at once: a whole frame. */
static size_t reader_limit(const struct proto_reader *r)
{
        return (size_t)r->max_frame + PROTO_HDR_LEN;
}

int proto_reader_space(struct proto_reader *r, uint8_t **ret_ptr, size_t *ret_len)
{
        if (r->start > 0 && (r->start == r->end || r->end == r->cap)) {
                memmove(r->buf, r->buf + r->start, r->end - r->start);
                r->end -= r->start;
                r->start = 0;
        }
        if (r->end == r->cap) {
                size_t cap = r->cap ? r->cap * 2 : READER_MIN_CAP;
                uint8_t *p;
                if (cap > reader_limit(r))
                        cap = reader_limit(r);
                if (cap <= r->cap)
                        return -ENOBUFS;        /* a full frame is buffered: consume it first */
                p = realloc(r->buf, cap);
                if (!p)
                        return -ENOMEM;
                r->buf = p;
                r->cap = cap;
        }
        *ret_ptr = r->buf + r->end;
        *ret_len = r->cap - r->end;
        return 0;
}

void proto_reader_commit(struct proto_reader *r, size_t n)
{
        r->end += n;
}

uint64_t proto_reader_received(const struct proto_reader *r)
{
        return r->pos + (r->end - r->start);
}

int proto_reader_next(struct proto_reader *r, const uint8_t **ret_body, uint32_t *ret_len,
                      uint64_t *ret_off)
{
        size_t avail = r->end - r->start;
        const uint8_t *p;
        uint32_t len;

        /* Before the first read buf is NULL, and NULL + 0 is undefined. */
        if (avail < PROTO_HDR_LEN)
                return 0;
        p = r->buf + r->start;
        len = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (len == 0 || len > r->max_frame)
                return -EMSGSIZE;
        if (avail - PROTO_HDR_LEN < len)
                return 0;
        *ret_body = p + PROTO_HDR_LEN;
        *ret_len = len;
        *ret_off = r->pos;
        r->start += PROTO_HDR_LEN + len;
        r->pos += PROTO_HDR_LEN + len;
        return 1;
}

void proto_fdq_init(struct proto_fdq *q)
{
        q->n = 0;
}

int proto_fdq_push(struct proto_fdq *q, int fd, uint64_t stamp)
{
        if (q->n == PROTO_MAX_PENDING_FDS) {
                proto_close_fd(fd);
                return -EMFILE;
        }
        q->fd[q->n] = fd;
        q->stamp[q->n] = stamp;
        q->n++;
        return 0;
}

static void fdq_remove_front(struct proto_fdq *q, unsigned k)
{
        memmove(q->fd, q->fd + k, (q->n - k) * sizeof(q->fd[0]));
        memmove(q->stamp, q->stamp + k, (q->n - k) * sizeof(q->stamp[0]));
        q->n -= k;
}

unsigned proto_fdq_drop_stale(struct proto_fdq *q, uint64_t frame_off)
{
        unsigned k = 0;

        /* Stamps only grow along the queue. */
        while (k < q->n && q->stamp[k] <= frame_off)
                proto_close_fd(q->fd[k++]);
        fdq_remove_front(q, k);
        return k;
}

/* How many queued fds (after the stale ones are gone) arrived with bytes
 * of a frame ending at frame_end. */
static unsigned fdq_count_upto(const struct proto_fdq *q, uint64_t frame_end)
{
        unsigned k = 0;

        while (k < q->n && q->stamp[k] <= frame_end)
                k++;
        return k;
}

int proto_fdq_take(struct proto_fdq *q, uint64_t frame_off, uint64_t frame_end, unsigned n,
                   int *fds)
{
        unsigned k;

        proto_fdq_drop_stale(q, frame_off);
        k = fdq_count_upto(q, frame_end);
        if (n > k) {
                /* The frame is refused; what did arrive with it goes too,
                 * but not the fds of the frames after it. */
                proto_fdq_drop_stale(q, frame_end);
                return -EBADF;
        }
        memcpy(fds, q->fd, n * sizeof(fds[0]));
        fdq_remove_front(q, n);
        /* More than it declared: closed unused. */
        proto_fdq_drop_stale(q, frame_end);
        return 0;
}

void proto_fdq_drop_frame(struct proto_fdq *q, uint64_t frame_off, uint64_t frame_end)
{
        proto_fdq_drop_stale(q, frame_off);
        proto_fdq_drop_stale(q, frame_end);
}

void proto_fdq_clear(struct proto_fdq *q)
{
        for (unsigned i = 0; i < q->n; i++)
                proto_close_fd(q->fd[i]);
        q->n = 0;
}
