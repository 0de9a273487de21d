/* walk.h: an independent walk of a frame body's structure, for the tests. */
#ifndef GPUIPC_TESTS_WALK_H
#define GPUIPC_TESTS_WALK_H

#include <stddef.h>
#include <stdint.h>

/* Walks the msgpack encoding in buf without allocating.  Succeeds only if buf
 * holds exactly one map, nested at most PROTO_MAX_DEPTH deep, with no ext
 * types and no reserved byte, where every declared length fits in the bytes
 * that remain and no array (map) declares more elements (pairs x2) than there
 * are bytes left: the rules proto_unpack() applies.  On failure returns
 * -EBADMSG and, if ret_why is not NULL, a static reason. */
int walk_check(const uint8_t *buf, size_t len, const char **ret_why);

#endif
