/* test_sizes.c: byte counts with IEC suffixes in the daemon's settings. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "config.h"

static char err[1024];

Test(sizes, suffixes)
{
        static const struct { const char *key, *value; uint64_t want; } ok[] = {
                { "max-frame", "64K", 65536 },
                { "max-frame", "1K", 1024 },
                { "max-frame", "16M", 16u << 20 },
                { "max-frame", "16MiB", 16u << 20 },
                { "max-frame", "32KB", 32768 },
                { "max-frame", "4096", 4096 },
                { "max-frame", "0x2000", 0x2000 },
                { "max-bytes-per-uid", "1G", 1ull << 30 },
                { "max-bytes-per-uid", "3T", 3ull << 40 },
                { "max-bytes-per-uid", "0", 0 },
                { "max-output", "512M", 512ull << 20 },
        };
        struct config c;

        for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
                uint64_t got;
                config_defaults(&c);
                cr_assert_eq(config_set(&c, ok[i].key, ok[i].value, err, sizeof(err)), 0,
                             "%s=%s: %s", ok[i].key, ok[i].value, err);
                got = strcmp(ok[i].key, "max-frame") == 0 ? c.max_frame
                      : strcmp(ok[i].key, "max-output") == 0 ? c.max_output
                                                             : c.max_bytes_per_uid;
                cr_expect_eq(got, ok[i].want, "%s=%s gave %llu", ok[i].key, ok[i].value,
                             (unsigned long long)got);
        }
}

Test(sizes, bad)
{
        static const char *const bad[][2] = {
                { "max-frame", "12k" },         /* IEC: upper case */
                { "max-frame", "17M" },         /* over the range */
                { "max-frame", "1023" },
                { "max-frame", "64Q" },
                { "max-frame", "64KiBs" },
                { "max-frame", "K" },
                { "max-frame", " 64K" },
                { "max-bytes-per-uid", "-1G" },
                { "max-bytes-per-uid", "99999999999T" },   /* overflows */
                { "max-output", "1.5G" },
        };
        struct config c;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                config_defaults(&c);
                cr_expect_lt(config_set(&c, bad[i][0], bad[i][1], err, sizeof(err)), 0,
                             "%s=%s accepted", bad[i][0], bad[i][1]);
        }
        config_defaults(&c);
        cr_assert_lt(config_set(&c, "max-frame", "17M", err, sizeof(err)), 0);
        cr_expect_not_null(strstr(err, "a size: 4096, 64K"), "%s", err);
}
