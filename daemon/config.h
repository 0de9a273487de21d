/* config.h: gpuipcd's settings: compiled-in defaults, then the main file
 * and its drop-ins, then command-line flags.
 *
 * Every setting is a key of the table in config.c and has the same name as
 * a file key (`max-frame=65536`) and as a flag (`--max-frame 65536`), so the
 * two cannot drift apart.  Values are checked as they are set; cross-field
 * rules run once everything is in (config_check). */
#ifndef GPUIPCD_CONFIG_H
#define GPUIPCD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CONFIG_DEFAULT_PATH "/etc/gpuipcd/gpuipcd.conf"
#define CONFIG_MIN_FRAME    1024u
#define CONFIG_LINE_MAX     4096u       /* longer lines are an error */
#define CONFIG_DROPINS_MAX  256u        /* drop-in files read, at most */
#define CONFIG_GROUP_MAX    32u         /* bytes of a group name */
#define CONFIG_LISTEN_MAX   128u        /* bytes of a metrics-listen value */
#define CONFIG_PATH_MAX     256u

struct config {
        char socket_path[CONFIG_PATH_MAX];
        mode_t socket_mode;
        uint32_t max_frame;
        uint32_t max_connections;
        uint32_t max_registrations;     /* live ones, per connection */
        uint32_t max_leases;            /* per connection */
        uint32_t max_waits;             /* per connection */
        uint32_t max_connections_per_uid;
        uint32_t reserved_connections;  /* of max_connections, for root and admin-group */
        uint32_t hello_timeout_ms;      /* a connection without hello is closed then */
        uint32_t max_fds_per_uid;       /* fds the daemon holds for one uid's registrations */
        uint32_t max_fdstore_per_uid;   /* fd store entries of one uid's registrations */
        uint32_t max_watches_per_uid;   /* watch subscriptions of one uid */
        uint32_t max_registrations_per_uid; /* live ones, orphaned durable ones too */
        uint32_t max_leases_per_uid;    /* by the holder's uid */
        uint64_t max_bytes_per_uid;     /* host + cuda-vmm held; 0: no limit */
        uint64_t max_output;            /* unsent reply bytes per connection */
        int log_level;                  /* 0-7, syslog priorities */
        char admin_group[CONFIG_GROUP_MAX + 1];   /* "" for none: root only */
        char metrics_listen[CONFIG_LISTEN_MAX + 1]; /* "" for off */
        bool metrics_public;            /* metrics_listen may be other than loopback */
        bool fdstore;                   /* keep state in systemd's fd store */
        uint32_t resume_grace_ms;       /* for sessions whose pid cannot be watched */
        uint32_t busy_poll_us;          /* keep polling this long after input; 0: off */
};

/* A setting's name and a one-line description, for --help and the man page. */
struct config_key_info {
        const char *name;
        const char *arg;                /* e.g. "N", "PATH" */
        const char *help;
};

/* The defaults; the socket is $GPUIPC_SOCKET when set and not empty. */
void config_defaults(struct config *cfg);

/* The keys, in table order; *ret_n is their number. */
const struct config_key_info *config_keys(size_t *ret_n);

/* Sets key to value.  -ENOENT for an unknown key, -EINVAL for a bad value;
 * either way err (len bytes) says why in a phrase without the key's
 * location, e.g. "'x' is not a number from 1 to 1048576". */
int config_set(struct config *cfg, const char *key, const char *value, char *err, size_t len);

/* Applies one file.  A missing file is 0 unless must_exist; a file that is a
 * symlink to /dev/null is masked (skipped).  On a bad line returns -EINVAL
 * with err "PATH:LINE: why"; I/O errors give "PATH: why". */
int config_load_file(struct config *cfg, const char *path, bool must_exist, char *err,
                     size_t len);

/* Applies main_path (must exist only when must_exist) and then the *.conf
 * files of main_path + ".d/" in byte-wise lexicographic order. */
int config_load(struct config *cfg, const char *main_path, bool must_exist, char *err,
                size_t len);

/* Rules between keys: max-output must hold a largest frame, and
 * metrics-listen must be loopback or unix:PATH unless metrics-public. */
int config_check(const struct config *cfg, char *err, size_t len);

/* Parses a metrics-listen value: "unix:/path" (ret_unix true, ret_host the
 * path) or "HOST:PORT" with HOST a numeric IPv4 address, "localhost" (as
 * 127.0.0.1) or a numeric IPv6 address in brackets (ret_host without them),
 * and PORT 1 to 65535.  -EINVAL with err otherwise.  Whether HOST may be
 * other than loopback is config_check's business (metrics-public). */
int config_parse_listen(const char *value, bool *ret_unix, char *ret_host, size_t host_len,
                        int *ret_port, char *err, size_t len);

/* Whether host (as config_parse_listen returns it) is a loopback address:
 * 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104. */
bool config_host_is_loopback(const char *host);

#endif
