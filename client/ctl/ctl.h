/* ctl.h: gpuipcctl's subcommands and the helpers they share.
 *
 * Each subcommand is `int X_main(int argc, char **argv)` with argv[0] the
 * subcommand's name, returning the process exit code below.  gpuipcctl uses
 * only the public API of libgpuipc, and of proto/ what needs no connection:
 * byte counts (size.h), UTF-8 checks.
 */
#ifndef GPUIPCCTL_H
#define GPUIPCCTL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gpuipc.h"
#include "size.h"

enum {
        EXIT_OK = 0,
        EXIT_ERROR = 1,         /* the daemon said no, or I/O failed */
        EXIT_USAGE = 2,
        EXIT_UNREACHABLE = 3,   /* connecting to the daemon failed */
};

int ping_main(int argc, char **argv);
int list_main(int argc, char **argv);
int show_main(int argc, char **argv);
int stats_main(int argc, char **argv);
int put_main(int argc, char **argv);
int get_main(int argc, char **argv);
int rm_main(int argc, char **argv);
int watch_main(int argc, char **argv);
int revoke_main(int argc, char **argv);
int metrics_main(int argc, char **argv);
int doctor_main(int argc, char **argv);
int completion_main(int argc, char **argv);

/* The socket chosen by --socket, or NULL for the library's default
 * ($GPUIPC_SOCKET, else the compiled-in path). */
extern const char *ctl_socket;

/* Connects; on failure reports it and returns EXIT_UNREACHABLE. */
int ctl_connect(const char *cmd, gpuipc_client **ret_client);
/* Reports a failed call on c (err is its result) and returns EXIT_ERROR. */
int ctl_fail(const char *cmd, const gpuipc_client *c, int err);
/* ctl_fail(), then gpuipc_client_free(c): for a call that ends the command. */
int ctl_fail_free(const char *cmd, gpuipc_client *c, int err);
/* Reports an error message and returns EXIT_ERROR. */
int ctl_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Flushes stdout; reports a failed write (a full disk, a closed pipe) and
 * returns EXIT_ERROR, else EXIT_OK. */
int ctl_flush(const char *cmd);
/* Reports a usage mistake and returns EXIT_USAGE. */
int ctl_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Options every subcommand accepts: --socket PATH and -h/--help.  Parses
 * argv with the extra getopt options given; for each of those it calls
 * opt(ch, optarg, data), which returns 0 or an exit code.  Returns -1 when
 * parsing went through (positional arguments start at *ret_index), or the
 * exit code to end with (0 after --help). */
struct option;
int ctl_parse(int argc, char **argv, const char *usage, const char *shortopts,
              const struct option *longopts,
              int (*opt)(int ch, const char *arg, void *data), void *data, int *ret_index);
/* The start of a subcommand whose one option is --json (json: its bool,
 * NULL for none) and that takes nargs positional arguments (none, one
 * NAME, or -1: any, for the caller to check): ctl_parse(), the count
 * checked, then ctl_connect() unless ret_client is NULL.  Returns -1 to go
 * on, or the exit code to end with. */
int ctl_start(int argc, char **argv, const char *usage, bool *json, int nargs, int *ret_index,
              gpuipc_client **ret_client);
/* ctl_start() without arguments, then the daemon's counters: -1 with
 * *ret_client and *ret_stats (the caller frees both), or an exit status. */
int ctl_start_stats(int argc, char **argv, const char *usage, bool *json,
                    gpuipc_client **ret_client, gpuipc_stats **ret_stats);

/* Durations: 500ms, 30s, 5m, 2h, 1d (a bare number is seconds). */
int ctl_parse_duration(const char *arg, uint64_t *ret_ms);
/* Byte counts as flags take them (4096, 64K, 512M, 1G, 2T, up to E) and
 * as the output shows them ("4.0 KiB"): proto_size_parse(arg, 10,
 * CTL_SIZE_UNITS, ...) and proto_size_text() of size.h, the daemon's too. */
#define CTL_SIZE_UNITS 6
/* s fit for a terminal, into buf: printable ASCII and UTF-8 text as they
 * are; control characters (C0, DEL, C1), bidirectional formatting and
 * bytes that are not UTF-8 as \xNN, so that another user's strings
 * (meta, exe, column names) cannot move the cursor or recolour the
 * screen.  Cut with "..." where buf is too small.  Returns buf. */
const char *ctl_text(const char *s, char *buf, size_t len);
/* Big enough for 1024 bytes of text as they are (meta.user's values). */
#define CTL_TEXT_MAX 1040
/* "5m"-style ages, into buf. */
const char *ctl_age(uint64_t created_ms, char *buf, size_t len);
uint64_t ctl_now_ms(void);

/* json.c */
const char *ctl_kind(gpuipc_kind k);
void json_str(FILE *f, const char *s);
/* One registration as a JSON object with every gpuipc_info field. */
void json_info(FILE *f, const gpuipc_info *info, const char *indent);
/* json_info() with "holders" (the info's lease holders) when holders. */
void json_info_ex(FILE *f, const gpuipc_info *info, const char *indent, bool holders);
/* ,"holders": [...] of info, for json_info_ex(). */
void json_holders(FILE *f, const gpuipc_info *info, const char *indent);
/* A batch's rows, parts and columns (batch.c): as text lines, and as the
 * ,"batch": {...} member of a JSON record. */
void batch_print(const gpuipc_info *info);
void batch_json(FILE *f, const gpuipc_info *info, const char *indent);

#endif
