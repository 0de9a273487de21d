/* size.h: byte counts as people write and read them ("64M", "1.5 GiB").
 *
 * Shared by the daemon (its settings, its quota messages) and gpuipcctl
 * (its flags, its output).  Not wire code: the wire carries plain
 * integers. */
#ifndef GPUIPC_PROTO_SIZE_H
#define GPUIPC_PROTO_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* A byte count: digits (in base, as strtoull() takes it: 10, or 0 for
 * 0x hex and 0 octal as well) with an optional IEC suffix, the first
 * max_unit of K, M, G, T, P, E (K is 1024, M 1024^2, ...), also as KiB or
 * KB.  -EINVAL when s is not one, -ERANGE past 2^64. */
int proto_size_parse(const char *s, int base, unsigned max_unit, uint64_t *ret);
/* "512 B", "4.0 KiB", "1.5 GiB" into buf; returns buf. */
const char *proto_size_text(uint64_t n, char *buf, size_t len);

#endif
