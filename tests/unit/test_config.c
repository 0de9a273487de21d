/* test_config.c: the configuration parser: keys, values, files, drop-ins. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "config.h"
#include "proto.h"

static char dir[64];
static char err[1024];

static void setup(void)
{
        unsetenv("GPUIPC_SOCKET");
        snprintf(dir, sizeof(dir), "/tmp/gpuipc-config-XXXXXX");
        cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
        char cmd[128];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        cr_assert_eq(system(cmd), 0);
}

TestSuite(config, .init = setup, .fini = teardown);

/* Writes text to DIR/rel and returns the path (static storage, 4 slots). */
static const char *put(const char *rel, const char *text)
{
        static char bufs[4][256];
        static unsigned next;
        char *p = bufs[next++ % 4];
        FILE *f;

        snprintf(p, sizeof(bufs[0]), "%s/%s", dir, rel);
        f = fopen(p, "w");
        cr_assert_not_null(f, "%s: %s", p, strerror(errno));
        fputs(text, f);
        cr_assert_eq(fclose(f), 0);
        return p;
}

static const char *path(const char *rel)
{
        static char b[256];
        snprintf(b, sizeof(b), "%s/%s", dir, rel);
        return b;
}

Test(config, defaults)
{
        struct config c;

        config_defaults(&c);
        cr_assert_str_eq(c.socket_path, "/run/gpuipcd/gpuipcd.sock");
        cr_assert_eq(c.socket_mode, 0660);
        cr_assert_eq(c.max_frame, PROTO_MAX_FRAME);
        cr_assert_eq(c.max_connections, 1024);
        cr_assert_eq(c.max_waits, 256);
        cr_assert_eq(c.max_output, 16u << 20);
        cr_assert_eq(c.log_level, 6);
        cr_assert_str_eq(c.admin_group, "");
        cr_assert_str_eq(c.metrics_listen, "");
        /* issue 15: one uid cannot take what the others need */
        cr_assert_eq(c.max_connections_per_uid, 256);
        cr_assert_eq(c.reserved_connections, 16);
        cr_assert_eq(c.hello_timeout_ms, 5000);
        cr_assert_eq(c.max_fds_per_uid, 16384);
        cr_assert_eq(c.max_fdstore_per_uid, 4096);
        cr_assert_eq(c.max_watches_per_uid, 8);
        cr_assert_eq(config_check(&c, err, sizeof(err)), 0);
}

Test(config, env_socket)
{
        struct config c;

        setenv("GPUIPC_SOCKET", "/tmp/x.sock", 1);
        config_defaults(&c);
        cr_assert_str_eq(c.socket_path, "/tmp/x.sock");
        unsetenv("GPUIPC_SOCKET");
}

Test(config, set_values)
{
        struct config c;

        config_defaults(&c);
        cr_assert_eq(config_set(&c, "max-frame", "0x2000", err, sizeof(err)), 0);
        cr_assert_eq(c.max_frame, 0x2000);
        cr_assert_eq(config_set(&c, "socket-mode", "0600", err, sizeof(err)), 0);
        cr_assert_eq(c.socket_mode, 0600);
        cr_assert_eq(config_set(&c, "max-output", "1048576", err, sizeof(err)), 0);
        cr_assert_eq(c.max_output, 1048576);
        cr_assert_eq(config_set(&c, "hello-timeout-ms", "250", err, sizeof(err)), 0);
        cr_assert_eq(c.hello_timeout_ms, 250);
        cr_assert_eq(config_set(&c, "reserved-connections", "0", err, sizeof(err)), 0);
        cr_assert_eq(c.reserved_connections, 0);
        cr_assert_eq(config_set(&c, "max-fds-per-uid", "100", err, sizeof(err)), 0);
        cr_assert_eq(c.max_fds_per_uid, 100);
        cr_assert_eq(config_set(&c, "max-fdstore-per-uid", "7", err, sizeof(err)), 0);
        cr_assert_eq(c.max_fdstore_per_uid, 7);
        cr_assert_eq(config_set(&c, "max-watches-per-uid", "64", err, sizeof(err)), 0);
        cr_assert_eq(c.max_watches_per_uid, 64);
        cr_assert_eq(config_set(&c, "log-level", "debug", err, sizeof(err)), 0);
        cr_assert_eq(c.log_level, 7);
        cr_assert_eq(config_set(&c, "log-level", "3", err, sizeof(err)), 0);
        cr_assert_eq(c.log_level, 3);
        cr_assert_eq(config_set(&c, "admin-group", "gpu-admins", err, sizeof(err)), 0);
        cr_assert_str_eq(c.admin_group, "gpu-admins");
        cr_assert_eq(config_set(&c, "admin-group", "", err, sizeof(err)), 0);
        cr_assert_str_eq(c.admin_group, "");
        cr_assert_eq(config_set(&c, "socket", "/run/x.sock", err, sizeof(err)), 0);
        cr_assert_str_eq(c.socket_path, "/run/x.sock");
        cr_assert_eq(config_set(&c, "max-waits", "0", err, sizeof(err)), 0);
        cr_assert_eq(c.max_waits, 0);
}

Test(config, bad_values)
{
        static const char *const bad[][2] = {
                { "max-frame", "1023" }, { "max-frame", "16777217" }, { "max-frame", "-1" },
                { "max-frame", "" }, { "max-frame", "12k" }, { "max-frame", "+5000" },
                { "max-connections", "0" }, { "max-connections", "1048577" },
                { "max-registrations", "4294967296" }, { "socket-mode", "0800" },
                { "socket-mode", "10000" }, { "log-level", "8" }, { "log-level", "loud" },
                { "admin-group", "a b" }, { "admin-group", "-x" },
                { "admin-group", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" },
                { "socket", "" }, { "metrics-listen", "127.0.0.1:0" },
                { "metrics-listen", "127.0.0.1:70000" }, { "metrics-listen", "127.0.0.1" },
                { "metrics-listen", "unix:relative" }, { "metrics-listen", "example.com:80" },
                { "metrics-listen", "0.0.0.0:0" }, { "metrics-listen", "[::]:65536" },
                { "metrics-listen", "[::]:" }, { "metrics-listen", "[::]:-1" },
                { "metrics-listen", "::1:80" }, { "metrics-listen", "[::1:80" },
                { "metrics-listen", "::1]:80" }, { "metrics-listen", "[]:80" },
                { "metrics-listen", "[10.0.0.1]:80" }, { "metrics-listen", "[fe80::1%eth0]:80" },
                { "metrics-listen", "10.1.2:80" }, { "metrics-listen", ":80" },
                { "metrics-public", "maybe" }, { "metrics-public", "" },
                { "hello-timeout-ms", "0" }, { "hello-timeout-ms", "3600001" },
                { "max-fds-per-uid", "0" }, { "max-fdstore-per-uid", "0" },
                { "max-watches-per-uid", "0" }, { "max-watches-per-uid", "65" },
                { "reserved-connections", "-1" },
        };
        struct config c, before;

        config_defaults(&c);
        before = c;
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                err[0] = '\0';
                cr_assert_eq(config_set(&c, bad[i][0], bad[i][1], err, sizeof(err)), -EINVAL,
                             "%s=%s accepted", bad[i][0], bad[i][1]);
                cr_assert_neq(err[0], '\0');
                cr_assert_not_null(strstr(err, bad[i][0]), "message '%s' names no key", err);
        }
        cr_assert_eq(memcmp(&c, &before, sizeof(c)), 0, "a refused value changed the config");
        cr_assert_eq(config_set(&c, "no-such-key", "1", err, sizeof(err)), -ENOENT);
        cr_assert_not_null(strstr(err, "no-such-key"));
}

Test(config, metrics_listen)
{
        struct config c;
        char host[256];
        bool is_unix;
        int port;

        config_defaults(&c);
        cr_assert_eq(config_set(&c, "metrics-listen", "127.0.0.1:9464", err, sizeof(err)), 0);
        cr_assert_eq(config_parse_listen(c.metrics_listen, &is_unix, host, sizeof(host), &port,
                                         err, sizeof(err)), 0);
        cr_assert(!is_unix);
        cr_assert_str_eq(host, "127.0.0.1");
        cr_assert_eq(port, 9464);
        cr_assert_eq(config_parse_listen("[::1]:80", &is_unix, host, sizeof(host), &port, err,
                                         sizeof(err)), 0);
        cr_assert_str_eq(host, "::1");
        cr_assert_eq(config_parse_listen("localhost:1", &is_unix, host, sizeof(host), &port, err,
                                         sizeof(err)), 0);
        cr_assert_str_eq(host, "127.0.0.1");
        cr_assert_eq(config_parse_listen("unix:/run/m.sock", &is_unix, host, sizeof(host), &port,
                                         err, sizeof(err)), 0);
        cr_assert(is_unix);
        cr_assert_str_eq(host, "/run/m.sock");
        cr_assert_eq(config_parse_listen("[::ffff:127.0.0.1]:80", &is_unix, host, sizeof(host),
                                         &port, err, sizeof(err)), 0);
        cr_assert_str_eq(host, "::ffff:127.0.0.1");
        cr_assert(config_host_is_loopback(host));
        /* Any numeric address parses; whether it may be served is
         * config_check's question (metrics-public). */
        cr_assert_eq(config_parse_listen("[::]:80", &is_unix, host, sizeof(host), &port, err,
                                         sizeof(err)), 0);
        cr_assert_str_eq(host, "::");
        cr_assert_eq(port, 80);
        cr_assert(!config_host_is_loopback(host));
        cr_assert_eq(config_parse_listen("0.0.0.0:65535", &is_unix, host, sizeof(host), &port,
                                         err, sizeof(err)), 0);
        cr_assert_str_eq(host, "0.0.0.0");
        cr_assert_eq(port, 65535);
        cr_assert(!config_host_is_loopback(host));
        cr_assert(config_host_is_loopback("127.1.2.3"));
        cr_assert(config_host_is_loopback("::1"));
        cr_assert(!config_host_is_loopback("128.0.0.1"));
        cr_assert(!config_host_is_loopback("::2"));
        cr_assert(!config_host_is_loopback("::ffff:10.0.0.1"));
        cr_assert_eq(config_parse_listen("[::]", &is_unix, host, sizeof(host), &port, err,
                                         sizeof(err)), -EINVAL);
        cr_assert_not_null(strstr(err, "port"), "%s", err);
}

/* Without metrics-public, config_check refuses an address beyond loopback,
 * naming both keys. */
Test(config, metrics_public_needed)
{
        static const char *const public[] = {
                "0.0.0.0:9464", "10.1.2.3:9464", "[::]:9464", "[2001:db8::1]:1",
                "[::ffff:10.0.0.1]:80", "128.0.0.1:80",
        };
        static const char *const local[] = {
                "127.0.0.1:9464", "127.255.255.254:1", "localhost:80", "[::1]:9464",
                "[::ffff:127.0.0.1]:80", "unix:/run/gpuipcd/metrics.sock",
        };
        struct config c;

        for (size_t i = 0; i < sizeof(public) / sizeof(public[0]); i++) {
                config_defaults(&c);
                cr_assert_eq(config_set(&c, "metrics-listen", public[i], err, sizeof(err)), 0,
                             "%s: %s", public[i], err);
                err[0] = '\0';
                cr_assert_eq(config_check(&c, err, sizeof(err)), -EINVAL, "%s passed",
                             public[i]);
                cr_assert_not_null(strstr(err, "metrics-listen"), "%s", err);
                cr_assert_not_null(strstr(err, public[i]), "%s", err);
                cr_assert_not_null(strstr(err, "not a loopback address"), "%s", err);
                cr_assert_not_null(strstr(err, "metrics-public=yes"), "%s", err);
                /* "no" says the same as leaving it out */
                cr_assert_eq(config_set(&c, "metrics-public", "no", err, sizeof(err)), 0);
                cr_assert_eq(config_check(&c, err, sizeof(err)), -EINVAL);
                cr_assert_eq(config_set(&c, "metrics-public", "yes", err, sizeof(err)), 0);
                cr_assert_eq(config_check(&c, err, sizeof(err)), 0, "%s: %s", public[i], err);
                cr_assert(c.metrics_public);
        }
        for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++) {
                config_defaults(&c);
                cr_assert_eq(config_set(&c, "metrics-listen", local[i], err, sizeof(err)), 0,
                             "%s: %s", local[i], err);
                cr_assert_eq(config_check(&c, err, sizeof(err)), 0, "%s: %s", local[i], err);
        }
        config_defaults(&c);
        cr_assert(!c.metrics_public);
        /* Alone it changes nothing. */
        cr_assert_eq(config_set(&c, "metrics-public", "yes", err, sizeof(err)), 0);
        cr_assert_eq(config_check(&c, err, sizeof(err)), 0, "%s", err);
}

/* metrics-public may come before or after metrics-listen, in any file. */
Test(config, metrics_public_in_any_order)
{
        char d[256];
        struct config c;

        put("main.conf", "metrics-listen = [::]:9464\n");
        snprintf(d, sizeof(d), "%s/main.conf.d", dir);
        cr_assert_eq(mkdir(d, 0755), 0);
        config_defaults(&c);
        cr_assert_eq(config_load(&c, path("main.conf"), true, err, sizeof(err)), 0, "%s", err);
        cr_assert_eq(config_check(&c, err, sizeof(err)), -EINVAL);
        cr_assert_not_null(strstr(err, "metrics-public"), "%s", err);

        put("main.conf.d/50-public.conf", "metrics-public = yes\n");
        config_defaults(&c);
        cr_assert_eq(config_load(&c, path("main.conf"), true, err, sizeof(err)), 0, "%s", err);
        cr_assert_eq(config_check(&c, err, sizeof(err)), 0, "%s", err);
        cr_assert_str_eq(c.metrics_listen, "[::]:9464");
        cr_assert(c.metrics_public);

        put("main.conf", "metrics-public = true\nmetrics-listen = 0.0.0.0:9464\n");
        put("main.conf.d/50-public.conf", "\n");
        config_defaults(&c);
        cr_assert_eq(config_load(&c, path("main.conf"), true, err, sizeof(err)), 0, "%s", err);
        cr_assert_eq(config_check(&c, err, sizeof(err)), 0, "%s", err);
}

Test(config, file_syntax)
{
        struct config c;
        const char *p = put("a.conf",
                            "# a comment\n"
                            "\n"
                            "   \t\n"
                            "  max-frame =  4096  \n"
                            "max-connections=7\r\n"
                            "\tlog-level\t=\tdebug\n"
                            "socket = /run/with space.sock\n"
                            "max-frame=8192\n"      /* later lines win */
                            "# caf\xe9 in Latin-1, and a form feed: \f\n"
                            "log-level = info\r\r\n"
                            "admin-group=");        /* no final newline */

        config_defaults(&c);
        cr_assert_eq(config_load_file(&c, p, true, err, sizeof(err)), 0, "%s", err);
        cr_assert_eq(c.max_frame, 8192);
        cr_assert_eq(c.max_connections, 7);
        cr_assert_eq(c.log_level, 6);
        cr_assert_str_eq(c.socket_path, "/run/with space.sock");
        cr_assert_str_eq(c.admin_group, "");
}

Test(config, file_errors_name_the_line)
{
        static const char *const bad[][2] = {
                { "max-frame=4096\nbogus=1\n", ":2: unknown key 'bogus'" },
                { "\n\nmax-frame=1\n", ":3: max-frame: '1' is not a number" },
                { "# x\nmax-frame\n", ":2: expected key=value" },
                { "socket-mode=999\n", ":1: socket-mode" },
                { "max-frame=4096\nsocket=/run/a\x1b[31m\n", ":2: a control character (byte 0x1b) at byte 14" },
                { "socket=/run/a\rb\n", ":1: a control character (byte 0x0d) at byte 14" },
        };
        struct config c;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                const char *p = put("bad.conf", bad[i][0]);
                config_defaults(&c);
                err[0] = '\0';
                cr_assert_eq(config_load_file(&c, p, true, err, sizeof(err)), -EINVAL);
                cr_assert_not_null(strstr(err, p), "'%s' lacks the path", err);
                cr_assert_not_null(strstr(err, bad[i][1]), "'%s' lacks '%s'", err, bad[i][1]);
        }
}

Test(config, long_line)
{
        struct config c;
        char *text = malloc(CONFIG_LINE_MAX + 64);
        const char *p;

        memset(text, ' ', CONFIG_LINE_MAX + 10);
        strcpy(text + CONFIG_LINE_MAX + 10, "max-frame=4096\n");
        p = put("long.conf", text);
        free(text);
        config_defaults(&c);
        cr_assert_eq(config_load_file(&c, p, true, err, sizeof(err)), -EINVAL);
        cr_assert_not_null(strstr(err, ":1: line longer"), "%s", err);
}

/* A NUL byte is refused where it is, and does not end the line: the text
 * after it cannot pass for a line of its own. */
Test(config, nul_bytes)
{
        static const char one[] = "max-connections=5\0garbage\n";
        char *two = malloc(CONFIG_LINE_MAX + 64);
        struct config c;
        size_t n;
        FILE *f;

        f = fopen(path("nul.conf"), "w");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(one, 1, sizeof(one) - 1, f), sizeof(one) - 1);
        cr_assert_eq(fclose(f), 0);
        config_defaults(&c);
        cr_assert_eq(config_load_file(&c, path("nul.conf"), true, err, sizeof(err)), -EINVAL);
        cr_assert_not_null(strstr(err, ":1: a NUL byte at byte 18"), "%s", err);

        /* A comment, a NUL, and a setting past the length limit. */
        cr_assert_not_null(two);
        n = 0;
        two[n++] = '#';
        two[n++] = '\0';
        memset(two + n, 'a', CONFIG_LINE_MAX - 1);
        n += CONFIG_LINE_MAX - 1;
        n += (size_t)sprintf(two + n, "max-connections=7\n");
        f = fopen(path("nul.conf"), "w");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(two, 1, n, f), n);
        cr_assert_eq(fclose(f), 0);
        free(two);
        config_defaults(&c);
        cr_assert_eq(config_load_file(&c, path("nul.conf"), true, err, sizeof(err)), -EINVAL);
        cr_assert_not_null(strstr(err, ":1: line longer"), "%s", err);
}

Test(config, missing_files)
{
        struct config c, before;

        config_defaults(&c);
        before = c;
        /* The default location may simply not exist. */
        cr_assert_eq(config_load(&c, path("none.conf"), false, err, sizeof(err)), 0);
        cr_assert_eq(memcmp(&c, &before, sizeof(c)), 0);
        /* A file named with --config must. */
        cr_assert_eq(config_load(&c, path("none.conf"), true, err, sizeof(err)), -ENOENT);
        cr_assert_not_null(strstr(err, "none.conf"));
}

Test(config, dropins_in_order_and_masking)
{
        struct config c;
        char d[256];

        put("main.conf", "max-frame=4096\nmax-connections=5\nmax-waits=9\n");
        snprintf(d, sizeof(d), "%s/main.conf.d", dir);
        cr_assert_eq(mkdir(d, 0755), 0);
        put("main.conf.d/20-b.conf", "max-connections=20\n");
        put("main.conf.d/10-a.conf", "max-connections=10\nmax-frame=2048\n");
        put("main.conf.d/B-upper.conf", "max-waits=1\n");   /* 'B' < 'a' bytewise */
        put("main.conf.d/30-ignored.txt", "bogus=1\n");
        put("main.conf.d/.hidden.conf", "bogus=1\n");
        cr_assert_eq(symlink("/dev/null", path("main.conf.d/40-masked.conf")), 0);

        config_defaults(&c);
        cr_assert_eq(config_load(&c, path("main.conf"), true, err, sizeof(err)), 0, "%s", err);
        cr_assert_eq(c.max_frame, 2048);
        cr_assert_eq(c.max_connections, 20);
        cr_assert_eq(c.max_waits, 1);

        /* A bad drop-in is reported with its own name and line. */
        put("main.conf.d/50-bad.conf", "\nmax-leases=0\n");
        config_defaults(&c);
        cr_assert_eq(config_load(&c, path("main.conf"), true, err, sizeof(err)), -EINVAL);
        cr_assert_not_null(strstr(err, "50-bad.conf:2: max-leases"), "%s", err);
}

Test(config, masked_main_file)
{
        struct config c, before;

        cr_assert_eq(symlink("/dev/null", path("main.conf")), 0);
        config_defaults(&c);
        before = c;
        cr_assert_eq(config_load(&c, path("main.conf"), true, err, sizeof(err)), 0, "%s", err);
        cr_assert_eq(memcmp(&c, &before, sizeof(c)), 0);
}

Test(config, check_output_holds_a_frame)
{
        struct config c;

        config_defaults(&c);
        cr_assert_eq(config_set(&c, "max-frame", "65536", err, sizeof(err)), 0);
        cr_assert_eq(config_set(&c, "max-output", "65539", err, sizeof(err)), 0);
        cr_assert_eq(config_check(&c, err, sizeof(err)), -EINVAL);
        cr_assert_not_null(strstr(err, "max-output"));
        cr_assert_eq(config_set(&c, "max-output", "65540", err, sizeof(err)), 0);
        cr_assert_eq(config_check(&c, err, sizeof(err)), 0);
}

Test(config, every_key_is_settable)
{
        size_t n;
        const struct config_key_info *k = config_keys(&n);
        struct config c;

        cr_assert_geq(n, 11);
        config_defaults(&c);
        for (size_t i = 0; i < n; i++) {
                int r = config_set(&c, k[i].name, "", err, sizeof(err));
                /* Empty is a bad number, yet the key must be known. */
                cr_assert_neq(r, -ENOENT, "%s unknown", k[i].name);
        }
}
