/* config.c: the settings table, the key=value file parser and drop-ins. */
#include <arpa/inet.h>
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "proto.h"
#include "size.h"

enum type { T_STR, T_NUM, T_SIZE, T_OCTAL, T_LEVEL, T_GROUP, T_LISTEN, T_BOOL };

static const struct key {
        struct config_key_info info;
        enum type type;
        size_t off;                     /* of the field in struct config */
        size_t size;                    /* of that field */
        uint64_t min, max;              /* numbers */
} keys[] = {
#define F(f) offsetof(struct config, f), sizeof(((struct config *)0)->f)
        { { "socket", "PATH", "socket to listen on (default: $GPUIPC_SOCKET, else "
            PROTO_DEFAULT_SOCKET ")" }, T_STR, F(socket_path), 0, 0 },
        { { "socket-mode", "OCTAL", "permissions of the socket (default 0660)" },
          T_OCTAL, F(socket_mode), 0, 07777 },
        { { "max-frame", "SIZE", "largest frame body, 1K to 16M (default 64K)" },
          T_SIZE, F(max_frame), CONFIG_MIN_FRAME, PROTO_MAX_FRAME_LIMIT },
        { { "max-connections", "N", "open connections (default 1024)" },
          T_NUM, F(max_connections), 1, 1u << 20 },
        { { "max-registrations", "N", "live registrations per connection (default 16384)" },
          T_NUM, F(max_registrations), 1, UINT32_MAX },
        { { "max-leases", "N", "leases per connection (default 16384)" },
          T_NUM, F(max_leases), 1, UINT32_MAX },
        { { "max-waits", "N", "waiting lookups per connection (default 256)" },
          T_NUM, F(max_waits), 0, UINT32_MAX },
        { { "max-connections-per-uid", "N", "open connections of one uid (default 256)" },
          T_NUM, F(max_connections_per_uid), 1, 1u << 20 },
        { { "reserved-connections", "N", "connections of max-connections that only root and "
            "admin-group members may use, at most half of it (default 16)" },
          T_NUM, F(reserved_connections), 0, 1u << 20 },
        { { "hello-timeout-ms", "MS", "a connection that has not sent hello this long after "
            "it was accepted is closed (default 5000)" },
          T_NUM, F(hello_timeout_ms), 1, 3600000 },
        { { "max-fds-per-uid", "N", "file descriptors the daemon holds for one uid's "
            "registrations: 2 per host, 1 per cuda-vmm registration (default 16384)" },
          T_NUM, F(max_fds_per_uid), 1, UINT32_MAX },
        { { "max-fdstore-per-uid", "N", "entries of systemd's fd store that one uid's "
            "registrations may take (default 4096)" },
          T_NUM, F(max_fdstore_per_uid), 1, UINT32_MAX },
        { { "max-watches-per-uid", "N", "watch subscriptions of one uid, of the daemon's 64 "
            "(default 8)" }, T_NUM, F(max_watches_per_uid), 1, 64 },
        { { "max-registrations-per-uid", "N", "live registrations of one uid, counting durable "
            "ones whose connection ended (default 65536)" },
          T_NUM, F(max_registrations_per_uid), 1, UINT32_MAX },
        { { "max-leases-per-uid", "N", "leases held by one uid (default 65536)" },
          T_NUM, F(max_leases_per_uid), 1, UINT32_MAX },
        { { "max-bytes-per-uid", "SIZE", "bytes of host and cuda-vmm buffers one uid "
            "registered and the daemon still holds, e.g. 64G; 0 for no limit (default 0)" },
          T_SIZE, F(max_bytes_per_uid), 0, UINT64_MAX >> 1 },
        { { "max-output", "SIZE", "unsent reply bytes per connection before it is closed "
            "(default 16M)" }, T_SIZE, F(max_output), 1, UINT64_MAX >> 1 },
        { { "log-level", "LEVEL", "most verbose level logged: 0-7 or err, warning, notice, "
            "info, debug (default info)" }, T_LEVEL, F(log_level), 0, 7 },
        { { "admin-group", "GROUP", "members may run admin ops such as revoke (root always "
            "may; default: none)" }, T_GROUP, F(admin_group), 0, 0 },
        { { "metrics-listen", "ADDR", "serve GET /metrics on 127.0.0.1:PORT, [::1]:PORT or "
            "unix:PATH, or with metrics-public on any IPv4 or [IPv6] address (default: off)" },
          T_LISTEN, F(metrics_listen), 0, 0 },
        { { "metrics-public", "yes|no", "let metrics-listen take an address that is not "
            "loopback, such as 0.0.0.0:PORT or [::]:PORT: whoever reaches it reads the "
            "metrics, unauthenticated (default no)" },
          T_BOOL, F(metrics_public), 0, 1 },
        { { "fdstore", "yes|no", "under systemd, keep registrations, leases and buffer fds in "
            "the service's fd store so that they survive a restart (default yes)" },
          T_BOOL, F(fdstore), 0, 1 },
        { { "resume-grace-ms", "MS", "after a restart, how long a client whose pid cannot be "
            "watched has to resume its session (default 30000)" },
          T_NUM, F(resume_grace_ms), 0, 86400000 },
        { { "busy-poll-us", "US", "after input, keep polling without sleeping this long, "
            "up to 1 s, so that the next request is read without waking an idle CPU; "
            "costs one CPU while requests keep coming (default 0: off)" },
          T_NUM, F(busy_poll_us), 0, 1000000 },
#undef F
};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))

void config_defaults(struct config *cfg)
{
        const char *env = getenv("GPUIPC_SOCKET");

        *cfg = (struct config) {
                .socket_mode = 0660,
                .max_frame = PROTO_MAX_FRAME,
                .max_connections = 1024,
                .max_registrations = 16384,
                .max_leases = 16384,
                .max_waits = 256,
                .max_connections_per_uid = 256,
                .reserved_connections = 16,
                .hello_timeout_ms = 5000,
                .max_fds_per_uid = 16384,
                .max_fdstore_per_uid = 4096,
                .max_watches_per_uid = 8,
                .max_registrations_per_uid = 65536,
                .max_leases_per_uid = 65536,
                .max_output = 16u << 20,
                .log_level = 6,
                .fdstore = true,
                .resume_grace_ms = 30000,
        };
        snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s",
                 env && *env && strlen(env) < sizeof(cfg->socket_path) ? env
                                                                     : PROTO_DEFAULT_SOCKET);
}

const struct config_key_info *config_keys(size_t *ret_n)
{
        static struct config_key_info infos[NKEYS];

        for (size_t i = 0; i < NKEYS; i++)
                infos[i] = keys[i].info;
        *ret_n = NKEYS;
        return infos;
}

static int parse_u64(const char *s, int base, uint64_t *ret)
{
        unsigned long long v;
        char *end;

        errno = 0;
        if (!*s || *s == '-' || *s == '+' || *s == ' ')
                return -EINVAL;
        v = strtoull(s, &end, base);
        if (errno || *end)
                return -EINVAL;
        *ret = v;
        return 0;
}

static void store_num(void *field, size_t size, uint64_t v)
{
        switch (size) {
        case sizeof(uint8_t):  *(uint8_t *)field = (uint8_t)v; break;
        case sizeof(uint16_t): *(uint16_t *)field = (uint16_t)v; break;
        case sizeof(uint32_t): *(uint32_t *)field = (uint32_t)v; break;
        default:               *(uint64_t *)field = v; break;
        }
}

static int parse_level(const char *s, int *ret)
{
        static const char *const names[] = {
                "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
        };
        uint64_t v;

        for (int i = 0; i < 8; i++)
                if (strcasecmp(s, names[i]) == 0) {
                        *ret = i;
                        return 0;
                }
        if (strcasecmp(s, "error") == 0 || strcasecmp(s, "warn") == 0) {
                *ret = s[0] == 'e' || s[0] == 'E' ? 3 : 4;
                return 0;
        }
        if (parse_u64(s, 10, &v) < 0 || v > 7)
                return -EINVAL;
        *ret = (int)v;
        return 0;
}

/* POSIX portable group names, as useradd takes them. */
static bool group_name_ok(const char *s)
{
        size_t n = strlen(s);

        if (n > CONFIG_GROUP_MAX || s[0] == '-')
                return false;
        for (size_t i = 0; i < n; i++) {
                char ch = s[i];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.' ||
                      (ch == '$' && i == n - 1)))
                        return false;
        }
        return true;
}

int config_parse_listen(const char *value, bool *ret_unix, char *ret_host, size_t host_len,
                        int *ret_port, char *err, size_t len)
{
        const char *colon;
        char host[64];
        uint64_t port;
        size_t hl;

        if (strncmp(value, "unix:", 5) == 0) {
                const char *path = value + 5;
                if (path[0] != '/' || strlen(path) >= 108) {
                        snprintf(err, len, "'%s': a unix: address needs an absolute path "
                                 "shorter than 108 bytes", value);
                        return -EINVAL;
                }
                snprintf(ret_host, host_len, "%s", path);
                *ret_unix = true;
                *ret_port = 0;
                return 0;
        }
        colon = strrchr(value, ':');
        if (!colon || colon == value) {
                snprintf(err, len, "'%s' is neither HOST:PORT nor unix:PATH", value);
                return -EINVAL;
        }
        if (parse_u64(colon + 1, 10, &port) < 0 || port < 1 || port > 65535) {
                snprintf(err, len, "'%s': the port must be a number from 1 to 65535", value);
                return -EINVAL;
        }
        hl = (size_t)(colon - value);
        if (hl >= sizeof(host)) {
                snprintf(err, len, "'%s': the host is too long", value);
                return -EINVAL;
        }
        memcpy(host, value, hl);
        host[hl] = '\0';
        if (strcmp(host, "localhost") == 0) {
                snprintf(host, sizeof(host), "127.0.0.1");
        } else if (host[0] == '[') {
                struct in6_addr a6;
                /* "[ADDR]", numeric, without a zone: nothing resolved. */
                if (host[hl - 1] != ']') {
                        snprintf(err, len, "'%s': an IPv6 address needs its closing bracket, "
                                 "as in [::1]:PORT", value);
                        return -EINVAL;
                }
                memmove(host, host + 1, hl - 2);
                host[hl - 2] = '\0';
                if (inet_pton(AF_INET6, host, &a6) != 1) {
                        snprintf(err, len, "'%s': '%s' is not a numeric IPv6 address", value,
                                 host);
                        return -EINVAL;
                }
        } else {
                struct in_addr a;
                if (inet_pton(AF_INET, host, &a) != 1) {
                        snprintf(err, len, "'%s': the host must be a numeric IPv4 address, "
                                 "localhost or a bracketed IPv6 address%s", value,
                                 strchr(host, ':') ? " (such as [::1]:PORT)" : "");
                        return -EINVAL;
                }
        }
        snprintf(ret_host, host_len, "%s", host);
        *ret_unix = false;
        *ret_port = (int)port;
        return 0;
}

bool config_host_is_loopback(const char *host)
{
        struct in6_addr a6;
        struct in_addr a;

        if (inet_pton(AF_INET, host, &a) == 1)
                return (ntohl(a.s_addr) >> 24) == 127;
        if (inet_pton(AF_INET6, host, &a6) == 1)
                return IN6_IS_ADDR_LOOPBACK(&a6) ||
                       (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
        return false;
}

int config_set(struct config *cfg, const char *key, const char *value, char *err, size_t len)
{
        const struct key *k = NULL;
        void *field;
        uint64_t v;
        int level;

        for (size_t i = 0; i < NKEYS; i++)
                if (strcmp(keys[i].info.name, key) == 0)
                        k = &keys[i];
        if (!k) {
                snprintf(err, len, "unknown key '%s'", key);
                return -ENOENT;
        }
        field = (char *)cfg + k->off;
        switch (k->type) {
        case T_STR:
                if (!*value || strlen(value) >= k->size) {
                        snprintf(err, len, "%s: must be 1 to %zu bytes", key, k->size - 1);
                        return -EINVAL;
                }
                snprintf(field, k->size, "%s", value);
                return 0;
        case T_NUM:
        case T_SIZE:
        case T_OCTAL:
                /* A size: decimal or 0x hex, with K, M, G or T (KiB, KB too). */
                if ((k->type == T_SIZE ? proto_size_parse(value, 0, 4, &v)
                                       : parse_u64(value, k->type == T_OCTAL ? 8 : 0, &v)) < 0 ||
                    v < k->min || v > k->max) {
                        if (k->type == T_SIZE)
                                snprintf(err, len, "%s: '%s' is not a number from %" PRIu64
                                         " to %" PRIu64 " (a size: 4096, 64K, 16M, 1G)", key,
                                         value, k->min, k->max);
                        else if (k->type == T_OCTAL)
                                snprintf(err, len, "%s: '%s' is not an octal mode from 0 to 07777",
                                         key, value);
                        else
                                snprintf(err, len, "%s: '%s' is not a number from %" PRIu64
                                         " to %" PRIu64, key, value, k->min, k->max);
                        return -EINVAL;
                }
                if (k->type == T_OCTAL)
                        *(mode_t *)field = (mode_t)v;
                else
                        store_num(field, k->size, v);
                return 0;
        case T_LEVEL:
                if (parse_level(value, &level) < 0) {
                        snprintf(err, len, "%s: '%s' is not 0-7 or a level name (err, warning, "
                                 "notice, info, debug)", key, value);
                        return -EINVAL;
                }
                *(int *)field = level;
                return 0;
        case T_GROUP:
                if (!group_name_ok(value)) {
                        snprintf(err, len, "%s: '%s' is not a valid group name", key, value);
                        return -EINVAL;
                }
                snprintf(field, k->size, "%s", value);
                return 0;
        case T_LISTEN: {
                char host[CONFIG_PATH_MAX], why[200];
                bool is_unix;
                int port;
                if (*value && (strlen(value) >= k->size ||
                               config_parse_listen(value, &is_unix, host, sizeof(host), &port,
                                                   why, sizeof(why)) < 0)) {
                        snprintf(err, len, "%s: %s", key,
                                 strlen(value) >= k->size ? "value is too long" : why);
                        return -EINVAL;
                }
                snprintf(field, k->size, "%s", value);
                return 0;
        }
        case T_BOOL:
                if (strcmp(value, "yes") == 0 || strcmp(value, "true") == 0 ||
                    strcmp(value, "1") == 0 || strcmp(value, "auto") == 0) {
                        *(bool *)field = true;
                } else if (strcmp(value, "no") == 0 || strcmp(value, "false") == 0 ||
                           strcmp(value, "0") == 0) {
                        *(bool *)field = false;
                } else {
                        snprintf(err, len, "%s: '%s' is not yes or no", key, value);
                        return -EINVAL;
                }
                return 0;
        }
        assert(!"config key of unknown type");
        return -EINVAL;
}

static char *trim(char *s)
{
        char *e;

        while (*s == ' ' || *s == '\t' || *s == '\r')
                s++;
        e = s + strlen(s);
        while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
                *--e = '\0';
        return s;
}

/* A symlink to /dev/null masks a file, as in systemd's drop-in directories. */
static bool masked(const char *path)
{
        char target[16];
        ssize_t n = readlink(path, target, sizeof(target) - 1);

        if (n < 0)
                return false;
        target[n] = '\0';
        return strcmp(target, "/dev/null") == 0;
}

/* The next line of f into line (its newline dropped, NUL-terminated): its
 * length; -1 at the end of the file; -E2BIG past CONFIG_LINE_MAX bytes, the
 * rest of that line read.  A NUL byte is kept: the caller refuses it. */
static ssize_t read_line(FILE *f, char line[static CONFIG_LINE_MAX + 1])
{
        size_t n = 0;
        bool over = false;
        int ch;

        while ((ch = getc(f)) != EOF && ch != '\n') {
                if (n < CONFIG_LINE_MAX)
                        line[n++] = (char)ch;
                else
                        over = true;
        }
        line[n] = '\0';
        if (over)
                return -E2BIG;
        return ch == EOF && n == 0 ? -1 : (ssize_t)n;
}

/* Why line (n bytes) is refused, or NULL: a NUL byte anywhere (it would
 * cut what the line says short), and in a setting any other control byte
 * but tab (CRs before the newline are trimmed), so that what the errors
 * echo stays on its line.  Comments may hold anything else. */
static const char *line_refused(const char *line, size_t n, char *why, size_t why_len)
{
        const char *nul = memchr(line, '\0', n);
        size_t i = 0, end = n;

        if (nul) {
                snprintf(why, why_len, "a NUL byte at byte %zu", (size_t)(nul - line) + 1);
                return why;
        }
        while (i < n && (line[i] == ' ' || line[i] == '\t'))
                i++;
        if (i < n && line[i] == '#')
                return NULL;
        while (end > 0 && line[end - 1] == '\r')
                end--;
        for (; i < end; i++) {
                unsigned char ch = (unsigned char)line[i];
                if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
                        snprintf(why, why_len, "a control character (byte 0x%02x) at byte %zu",
                                 ch, i + 1);
                        return why;
                }
        }
        return NULL;
}

static int load_stream(struct config *cfg, FILE *f, const char *path, char *err, size_t len)
{
        char line[CONFIG_LINE_MAX + 1], why[512];
        unsigned lineno = 0;
        ssize_t n;

        while ((n = read_line(f, line)) != -1) {
                char *s, *eq, *key, *value;

                lineno++;
                if (n == -E2BIG) {
                        snprintf(err, len, "%s:%u: line longer than %u bytes", path, lineno,
                                 CONFIG_LINE_MAX);
                        return -EINVAL;
                }
                if (line_refused(line, (size_t)n, why, sizeof(why))) {
                        snprintf(err, len, "%s:%u: %s", path, lineno, why);
                        return -EINVAL;
                }
                s = trim(line);
                if (!*s || *s == '#')
                        continue;
                eq = strchr(s, '=');
                if (!eq) {
                        snprintf(err, len, "%s:%u: expected key=value, got '%.64s'", path, lineno,
                                 s);
                        return -EINVAL;
                }
                *eq = '\0';
                key = trim(s);
                value = trim(eq + 1);
                if (config_set(cfg, key, value, why, sizeof(why)) < 0) {
                        snprintf(err, len, "%s:%u: %s", path, lineno, why);
                        return -EINVAL;
                }
        }
        if (ferror(f)) {
                snprintf(err, len, "%s: read error: %s", path, strerror(errno));
                return -EIO;
        }
        return 0;
}

int config_load_file(struct config *cfg, const char *path, bool must_exist, char *err,
                     size_t len)
{
        struct stat st;
        FILE *f;
        int r;

        if (masked(path))
                return 0;
        f = fopen(path, "re");
        if (!f) {
                r = -errno;
                if (r == -ENOENT && !must_exist)
                        return 0;
                snprintf(err, len, "%s: %s", path, strerror(-r));
                return r;
        }
        if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode)) {
                snprintf(err, len, "%s: not a regular file", path);
                fclose(f);
                return -EINVAL;
        }
        r = load_stream(cfg, f, path, err, len);
        fclose(f);
        return r;
}

static int dropin_filter(const struct dirent *e)
{
        size_t n = strlen(e->d_name);

        return e->d_name[0] != '.' && n > 5 && strcmp(e->d_name + n - 5, ".conf") == 0;
}

/* Byte order, not the locale's collation: the same order on every host. */
static int dropin_cmp(const struct dirent **a, const struct dirent **b)
{
        return strcmp((*a)->d_name, (*b)->d_name);
}

int config_load(struct config *cfg, const char *main_path, bool must_exist, char *err,
                size_t len)
{
        char dir[PATH_MAX], path[PATH_MAX];
        struct dirent **names = NULL;
        int n, r;

        r = config_load_file(cfg, main_path, must_exist, err, len);
        if (r < 0)
                return r;
        if ((size_t)snprintf(dir, sizeof(dir), "%s.d", main_path) >= sizeof(dir)) {
                snprintf(err, len, "%s: path too long", main_path);
                return -ENAMETOOLONG;
        }
        n = scandir(dir, &names, dropin_filter, dropin_cmp);
        if (n < 0) {
                r = -errno;
                if (r == -ENOENT || r == -ENOTDIR)
                        return 0;
                snprintf(err, len, "%s: %s", dir, strerror(-r));
                return r;
        }
        if ((unsigned)n > CONFIG_DROPINS_MAX) {
                snprintf(err, len, "%s: more than %u drop-in files", dir, CONFIG_DROPINS_MAX);
                r = -E2BIG;
        }
        for (int i = 0; i < n; i++) {
                if (r == 0) {
                        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir,
                                             names[i]->d_name) >= sizeof(path)) {
                                snprintf(err, len, "%s: a drop-in's path is too long", dir);
                                r = -ENAMETOOLONG;
                        } else {
                                r = config_load_file(cfg, path, false, err, len);
                        }
                }
                free(names[i]);
        }
        free(names);
        return r;
}

int config_check(const struct config *cfg, char *err, size_t len)
{
        /* A connection must be able to queue at least one largest reply. */
        if (cfg->max_output < (uint64_t)cfg->max_frame + PROTO_HDR_LEN) {
                snprintf(err, len, "max-output (%" PRIu64 ") must be at least max-frame + %u "
                         "(%" PRIu64 ")", cfg->max_output, PROTO_HDR_LEN,
                         (uint64_t)cfg->max_frame + PROTO_HDR_LEN);
                return -EINVAL;
        }
        /* Checked here, not as metrics-listen is set: metrics-public may
         * come after it, in a later file or flag. */
        if (cfg->metrics_listen[0] && !cfg->metrics_public) {
                char host[CONFIG_PATH_MAX], why[200];
                bool is_unix;
                int port;

                if (config_parse_listen(cfg->metrics_listen, &is_unix, host, sizeof(host),
                                        &port, why, sizeof(why)) < 0) {
                        snprintf(err, len, "metrics-listen: %s", why);
                        return -EINVAL;
                }
                if (!is_unix && !config_host_is_loopback(host)) {
                        snprintf(err, len, "metrics-listen: '%s': not a loopback address; set "
                                 "metrics-public=yes to serve metrics beyond this host",
                                 cfg->metrics_listen);
                        return -EINVAL;
                }
        }
        return 0;
}
