/* record.h: the registration record (record.c). */
#ifndef GPUIPCD_RECORD_H
#define GPUIPCD_RECORD_H

#include <stdbool.h>
#include <stdint.h>

#include "proto.h"
#include "registry.h"

#define HOLDERS_MAX 32u         /* holders a record lists at most */

/* What a record is for, which decides what it shows: handle bytes and
 * keys only in lookup replies; a batch's parts and arrow description in
 * stat and lookup replies, not in list replies (docs/protocol.md,
 * "Registration records", "Batches"). */
enum record_use {
        RECORD_LIST,
        RECORD_STAT,
        RECORD_LOOKUP,
};

/* What a batch's lookup record says of its parts: held, a bitmap of the
 * parts whose allocation the connection now holds (or NULL); fds, the
 * reply's fds (batch_fds()), which the parts name by index, or NULL to
 * have them worked out. */
struct record_lookup {
        const uint8_t *held;
        const int *fds;
        unsigned nfds;
};

/* Packs the registration record of r for use, with the lease holders, at
 * most holders_max of them (0: no holders field).  lk: for a batch's
 * lookup record, or NULL. */
void pack_record_as(msgpack_packer *pk, const struct reg *r, enum record_use use,
                    uint32_t holders_max, const struct record_lookup *lk);

#endif
