/* record.h: the registration record (record.c). */
#ifndef GPUIPCD_RECORD_H
#define GPUIPCD_RECORD_H

#include <stdbool.h>
#include <stdint.h>

#include "proto.h"
#include "registry.h"

#define HOLDERS_MAX 32u         /* holders a record lists at most */

/* Packs the registration record of r; with_handle adds a cuda-ipc handle
 * or a cuda-vmm alloc.key (lookup replies only). */
void pack_record_ex(msgpack_packer *pk, const struct reg *r, bool with_handle);
void pack_record(msgpack_packer *pk, const struct reg *r);
/* pack_record_ex() with the lease holders, at most holders_max of them
 * (0: no holders field), as stat and list's holders send them. */
void pack_record_holders(msgpack_packer *pk, const struct reg *r, bool with_handle,
                         uint32_t holders_max);

#endif
