/* size.c: byte counts as people write and read them. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "size.h"

int proto_size_parse(const char *s, int base, unsigned max_unit, uint64_t *ret)
{
        static const char units[] = "KMGTPE";
        unsigned long long v;
        unsigned shift = 0;
        const char *u;
        char *end;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, base);
        if (errno)
                return -ERANGE;
        if (*end && (u = strchr(units, *end)) && (unsigned)(u - units) < max_unit) {
                shift = 10 * (unsigned)(u - units + 1);
                end++;
                if (*end == 'i')
                        end++;
                if (*end == 'B')
                        end++;
        }
        if (*end)
                return -EINVAL;
        if (shift && v > (UINT64_MAX >> shift))
                return -ERANGE;
        *ret = (uint64_t)v << shift;
        return 0;
}

const char *proto_size_text(uint64_t n, char *buf, size_t len)
{
        static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
        double v = (double)n;
        size_t u = 0;

        if (n < 1024) {
                snprintf(buf, len, "%" PRIu64 " B", n);
                return buf;
        }
        v /= 1024;
        while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
                v /= 1024;
                u++;
        }
        snprintf(buf, len, "%.1f %s", v, units[u]);
        return buf;
}
