/* restart_journal.h: an append-only log of records in a memfd: the daemon's
 * registry state, kept in systemd's file descriptor store so that a
 * restarted daemon can replay it (restart_persist.c writes it,
 * restart_replay.c reads it, restart_codec.c says what its records hold).
 *
 * A record is a 4-byte big-endian body length, a 4-byte big-endian FNV-1a
 * hash of the body, then the body (one msgpack map).  Appends are single
 * pwrite()s, so a daemon killed mid-append leaves at most one torn record
 * at the tail; readers stop at the first record whose length or hash does
 * not hold and replay what came before.  Pure: no logging, no daemon. */
#ifndef GPUIPCD_RESTART_JOURNAL_H
#define GPUIPCD_RESTART_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JOURNAL_HDR_LEN    8u
#define JOURNAL_RECORD_MAX (1u << 20)   /* bytes of one body */
#define JOURNAL_FILE_MAX   (UINT64_C(1) << 34)

struct journal {
        int fd;                 /* -1 when closed */
        uint64_t len;           /* bytes written */
};

/* A new, empty journal in a memfd named name. */
int journal_create(const char *name, struct journal *ret);
/* Appends one record; -EMSGSIZE for a body over JOURNAL_RECORD_MAX. */
int journal_append(struct journal *j, const void *body, size_t len);
void journal_close(struct journal *j);

typedef int (*journal_record_fn)(const uint8_t *body, size_t len, void *data);

/* Calls fn for each intact record of buf in order; a negative return from
 * fn stops the walk and is returned.  Otherwise returns the number of
 * records; *ret_tail (may be NULL) is the count of bytes after the last
 * intact record (a torn or corrupt tail). */
long journal_parse(const uint8_t *buf, size_t len, journal_record_fn fn, void *data,
                   size_t *ret_tail);
/* The body of fd's first record, read into buf (cap bytes, which bound
 * it), unchecked: 0 and where it is in buf, or -ENOENT when there is no
 * such record. */
int journal_first(int fd, uint8_t *buf, size_t cap, const uint8_t **ret_body,
                  uint32_t *ret_len);
/* Reads all of fd (from offset 0) into a malloc()ed buffer. */
int journal_slurp(int fd, uint8_t **ret_buf, size_t *ret_len);

uint32_t journal_hash(const uint8_t *p, size_t n);

#endif
