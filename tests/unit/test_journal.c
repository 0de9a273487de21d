/* test_journal.c: the fd store's journal (length- and hash-framed records
 * in a memfd), written, read back and walked, intact and damaged. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "restart_journal.h"

#define MAX_SEEN 16

/* What the walk handed the callback. */
struct seen {
        unsigned n;
        size_t len[MAX_SEEN];
        uint8_t first[MAX_SEEN];
        int stop_at;                    /* return -ECANCELED at this record, or -1 */
};

static int on_record(const uint8_t *body, size_t len, void *data)
{
        struct seen *s = data;

        if ((int)s->n == s->stop_at)
                return -ECANCELED;
        cr_assert_lt(s->n, MAX_SEEN);
        s->len[s->n] = len;
        s->first[s->n] = body[0];
        s->n++;
        return 0;
}

static struct journal J = { .fd = -1 };

static void setup(void)
{
        cr_assert_eq(journal_create("test-journal", &J), 0);
        cr_assert_geq(J.fd, 0);
        cr_assert_eq(J.len, 0);
}

static void teardown(void)
{
        journal_close(&J);
}

TestSuite(journal, .init = setup, .fini = teardown);

/* Record i is i + 1 bytes of value 'a' + i, but record 3, which is 1000. */
#define NREC 5
static size_t rec_len(unsigned i)
{
        return i == 3 ? 1000 : i + 1;
}

/* The byte offset where record i starts. */
static size_t rec_off(unsigned i)
{
        size_t off = 0;

        for (unsigned k = 0; k < i; k++)
                off += JOURNAL_HDR_LEN + rec_len(k);
        return off;
}

static void append_all(void)
{
        uint8_t body[1000];

        for (unsigned i = 0; i < NREC; i++) {
                memset(body, 'a' + i, rec_len(i));
                cr_assert_eq(journal_append(&J, body, rec_len(i)), 0, "record %u", i);
        }
        cr_assert_eq(J.len, rec_off(NREC));
}

static void slurp(uint8_t **buf, size_t *len)
{
        cr_assert_eq(journal_slurp(J.fd, buf, len), 0);
}

static void assert_prefix(const struct seen *s, unsigned n)
{
        cr_assert_eq(s->n, n);
        for (unsigned i = 0; i < n; i++) {
                cr_assert_eq(s->len[i], rec_len(i), "record %u", i);
                cr_assert_eq(s->first[i], 'a' + i, "record %u", i);
        }
}

Test(journal, round_trip)
{
        struct seen s = { .stop_at = -1 };
        uint8_t *buf;
        size_t len, tail = 99;

        append_all();
        slurp(&buf, &len);
        cr_assert_eq(len, J.len);
        /* The header is big-endian length, then the FNV-1a hash of the body. */
        cr_assert_eq(buf[0], 0);
        cr_assert_eq(buf[3], 1);
        uint32_t h = journal_hash(buf + JOURNAL_HDR_LEN, 1);
        cr_assert_eq(buf[4], (uint8_t)(h >> 24));
        cr_assert_eq(buf[7], (uint8_t)h);
        cr_assert_eq(journal_parse(buf, len, on_record, &s, &tail), NREC);
        cr_assert_eq(tail, 0);
        assert_prefix(&s, NREC);
        free(buf);
}

Test(journal, hash_is_fnv1a)
{
        cr_assert_eq(journal_hash((const uint8_t *)"", 0), 2166136261u);
        cr_assert_eq(journal_hash((const uint8_t *)"a", 1), 0xe40c292cu);
        cr_assert_eq(journal_hash((const uint8_t *)"foobar", 6), 0xbf9cf968u);
}

Test(journal, empty_journal)
{
        struct seen s = { .stop_at = -1 };
        uint8_t *buf;
        size_t len, tail = 99;

        slurp(&buf, &len);
        cr_assert_eq(len, 0);
        cr_assert_eq(journal_parse(buf, len, on_record, &s, &tail), 0);
        cr_assert_eq(tail, 0);
        cr_assert_eq(s.n, 0);
        free(buf);
}

/* A daemon killed mid-append: the memfd ends inside record 3 (in its
 * header, then in its body); records 0-2 replay, the rest is tail. */
Test(journal, torn_tail_replays_prefix)
{
        static const size_t cuts[] = { 0, 1, JOURNAL_HDR_LEN - 1, JOURNAL_HDR_LEN,
                                       JOURNAL_HDR_LEN + 1, JOURNAL_HDR_LEN + 999 };

        append_all();
        for (unsigned c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
                struct seen s = { .stop_at = -1 };
                size_t keep = rec_off(3) + cuts[c], len, tail = 99;
                uint8_t *buf;

                cr_assert_eq(ftruncate(J.fd, (off_t)keep), 0);
                slurp(&buf, &len);
                cr_assert_eq(len, keep);
                cr_assert_eq(journal_parse(buf, len, on_record, &s, &tail), 3, "cut %zu",
                             cuts[c]);
                cr_assert_eq(tail, cuts[c]);
                assert_prefix(&s, 3);
                free(buf);
        }
}

/* Without ret_tail the walk still stops at the torn record. */
Test(journal, tail_pointer_is_optional)
{
        struct seen s = { .stop_at = -1 };
        uint8_t *buf;
        size_t len;

        append_all();
        cr_assert_eq(ftruncate(J.fd, (off_t)(rec_off(2) + 5)), 0);
        slurp(&buf, &len);
        cr_assert_eq(journal_parse(buf, len, on_record, &s, NULL), 2);
        assert_prefix(&s, 2);
        free(buf);
}

/* One flipped bit in record 2's body (or its hash): the walk stops there,
 * and everything from record 2 on is tail, intact records after it too. */
Test(journal, flipped_byte_stops_walk)
{
        static const size_t where[] = {
                JOURNAL_HDR_LEN,                /* body, first byte */
                JOURNAL_HDR_LEN + 2,            /* body, last byte */
                4,                              /* hash */
                7,
        };
        uint8_t *buf;
        size_t len;

        append_all();
        slurp(&buf, &len);
        for (unsigned w = 0; w < sizeof(where) / sizeof(where[0]); w++) {
                struct seen s = { .stop_at = -1 };
                size_t at = rec_off(2) + where[w], tail = 0;

                buf[at] ^= 0x01;
                cr_assert_eq(journal_parse(buf, len, on_record, &s, &tail), 2, "at %zu", at);
                cr_assert_eq(tail, len - rec_off(2));
                assert_prefix(&s, 2);
                buf[at] ^= 0x01;
        }
        free(buf);
}

static void set_be32(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
}

/* A length of 0, one over JOURNAL_RECORD_MAX, one beyond the buffer or a
 * longer one whose hash does not match: the walk stops at that record. */
Test(journal, bad_length_stops_walk)
{
        const uint32_t lens[] = { 0, JOURNAL_RECORD_MAX + 1, UINT32_MAX, 4, 2 };
        uint8_t *buf;
        size_t len;

        append_all();
        slurp(&buf, &len);
        for (unsigned k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
                struct seen s = { .stop_at = -1 };
                size_t tail = 0;
                uint8_t save[4];

                memcpy(save, buf + rec_off(2), 4);
                set_be32(buf + rec_off(2), lens[k]);
                cr_assert_eq(journal_parse(buf, len, on_record, &s, &tail), 2, "length %u",
                             lens[k]);
                cr_assert_eq(tail, len - rec_off(2));
                assert_prefix(&s, 2);
                memcpy(buf + rec_off(2), save, 4);
        }
        free(buf);
}

/* An oversize record with a matching hash (written by hand, since
 * journal_append refuses it) is refused by the walk all the same. */
Test(journal, oversize_record_with_good_hash_stops_walk)
{
        size_t blen = JOURNAL_RECORD_MAX + 1, tail = 0;
        uint8_t *buf = calloc(1, JOURNAL_HDR_LEN + blen);
        struct seen s = { .stop_at = -1 };

        cr_assert_not_null(buf);
        set_be32(buf, (uint32_t)blen);
        set_be32(buf + 4, journal_hash(buf + JOURNAL_HDR_LEN, blen));
        cr_assert_eq(journal_parse(buf, JOURNAL_HDR_LEN + blen, on_record, &s, &tail), 0);
        cr_assert_eq(tail, JOURNAL_HDR_LEN + blen);
        cr_assert_eq(s.n, 0);
        free(buf);
}

/* A record of exactly JOURNAL_RECORD_MAX bytes goes in and comes back. */
Test(journal, largest_record)
{
        uint8_t *body = malloc(JOURNAL_RECORD_MAX), *buf;
        struct seen s = { .stop_at = -1 };
        size_t len, tail = 99;

        cr_assert_not_null(body);
        memset(body, 'z', JOURNAL_RECORD_MAX);
        cr_assert_eq(journal_append(&J, body, JOURNAL_RECORD_MAX), 0);
        slurp(&buf, &len);
        cr_assert_eq(len, JOURNAL_HDR_LEN + JOURNAL_RECORD_MAX);
        cr_assert_eq(journal_parse(buf, len, on_record, &s, &tail), 1);
        cr_assert_eq(tail, 0);
        cr_assert_eq(s.len[0], JOURNAL_RECORD_MAX);
        free(buf);
        free(body);
}

/* The callback's negative return ends the walk and is the result. */
Test(journal, callback_error_stops_and_returns_it)
{
        struct seen s = { .stop_at = 2 };
        uint8_t *buf;
        size_t len, tail = 99;

        append_all();
        slurp(&buf, &len);
        cr_assert_eq(journal_parse(buf, len, on_record, &s, &tail), -ECANCELED);
        assert_prefix(&s, 2);
        s = (struct seen){ .stop_at = 0 };
        cr_assert_eq(journal_parse(buf, len, on_record, &s, &tail), -ECANCELED);
        cr_assert_eq(s.n, 0);
        free(buf);
}

Test(journal, append_refuses_bad_sizes)
{
        uint8_t *big = calloc(1, JOURNAL_RECORD_MAX + 1);

        cr_assert_not_null(big);
        cr_assert_eq(journal_append(&J, big, 0), -EMSGSIZE);
        cr_assert_eq(journal_append(&J, big, JOURNAL_RECORD_MAX + 1), -EMSGSIZE);
        cr_assert_eq(journal_append(&J, big, SIZE_MAX), -EMSGSIZE);
        cr_assert_eq(J.len, 0, "nothing written");
        free(big);

        /* The journal is still usable, and nothing was written to it. */
        uint8_t *buf;
        size_t len;
        cr_assert_eq(journal_append(&J, "x", 1), 0);
        slurp(&buf, &len);
        cr_assert_eq(len, JOURNAL_HDR_LEN + 1);
        free(buf);
}

Test(journal, closed_journal)
{
        journal_close(&J);
        cr_assert_eq(J.fd, -1);
        cr_assert_eq(journal_append(&J, "x", 1), -EBADF);
        journal_close(&J);      /* twice is harmless */
}

/* Appends go where the last intact record ends, even when the memfd is
 * longer (slurp reads the whole file, parse reports the rest as tail). */
Test(journal, append_after_reopen_offset)
{
        struct seen s = { .stop_at = -1 };
        uint8_t *buf;
        size_t len, tail = 0;

        append_all();
        J.len = rec_off(2);             /* as if records 2.. were never written */
        cr_assert_eq(journal_append(&J, "c", 1), 0);
        slurp(&buf, &len);
        cr_assert_eq(len, rec_off(NREC), "the file keeps its old length");
        cr_assert_eq(journal_parse(buf, len, on_record, &s, &tail), 3);
        cr_assert_eq(s.first[2], 'c');
        cr_assert_gt(tail, 0);
        free(buf);
}

Test(journal, slurp_bad_fd)
{
        uint8_t *buf = NULL;
        size_t len = 0;

        cr_assert_eq(journal_slurp(-1, &buf, &len), -EBADF);
        cr_assert_null(buf);
}

/* A short write: a memfd that may not grow past one page takes the part of
 * a record that fits and refuses the rest (the page-by-page write stops at
 * the seal), as a memfd does when memory runs out. */
static void seal_at_page(unsigned seals)
{
        int fd = memfd_create("test-journal-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);

        cr_assert_geq(fd, 0);
        cr_assert_eq(ftruncate(fd, 4096), 0);
        cr_assert_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
        journal_close(&J);
        J.fd = fd;
        J.len = 4000;
}

Test(journal, short_write_cuts_the_torn_record)
{
        uint8_t body[200];
        struct stat st;

        memset(body, 'z', sizeof(body));
        seal_at_page(F_SEAL_GROW);
        cr_assert_eq(journal_append(&J, body, sizeof(body)), -ENOSPC);
        cr_assert_eq(J.len, 4000, "a failed append does not count");
        cr_assert_geq(J.fd, 0, "the journal stays open: its tail is intact");
        cr_assert_eq(fstat(J.fd, &st), 0);
        cr_assert_eq(st.st_size, 4000, "the torn record was cut off");
}

/* When the torn record cannot be cut off (here: F_SEAL_SHRINK), the journal
 * is closed, so that no later record follows the torn bytes. */
Test(journal, short_write_uncut_closes_the_journal)
{
        uint8_t body[200];

        memset(body, 'z', sizeof(body));
        seal_at_page(F_SEAL_GROW | F_SEAL_SHRINK);
        cr_assert_eq(journal_append(&J, body, sizeof(body)), -ENOSPC);
        cr_assert_eq(J.fd, -1, "closed: its tail is torn");
        cr_assert_eq(J.len, 0);
        cr_assert_eq(journal_append(&J, "x", 1), -EBADF);
}
