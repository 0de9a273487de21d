/* helper-consumer: looks a name up and checks every byte of its pattern.
 *
 *   helper-consumer NAME SIZE SEED [--timeout MS] [--hold | --hold-ms MS | --stay]
 *
 * With --hold it prints "ok" after checking and keeps the lease until its
 * stdin reaches EOF (or it is killed); with --hold-ms, for MS ms.  With
 * --stay it releases the view, prints "released" and keeps the client (and
 * so any mapping the library caches) until its stdin reaches EOF.  Exit
 * status says what happened. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpuipc.h"
#include "harness.h"

enum {
        OK = 0,
        USAGE = 2,
        NO_CONNECT = 3,
        NOT_FOUND = 4,
        TIMED_OUT = 5,
        LOOKUP_FAILED = 6,
        WRONG_SIZE = 7,
        WRONG_BYTES = 8,
        RELEASE_FAILED = 9,
};

int main(int argc, char **argv)
{
        gpuipc_client *c = NULL;
        gpuipc_view *v = NULL;
        bool hold = false, stay = false;
        int timeout = 0, hold_ms = 0, r, ret = OK;
        size_t size;
        uint32_t seed;
        const uint8_t *p;

        if (argc < 4)
                return USAGE;
        size = strtoull(argv[2], NULL, 0);
        seed = (uint32_t)strtoul(argv[3], NULL, 0);
        for (int i = 4; i < argc; i++) {
                if (strcmp(argv[i], "--hold") == 0)
                        hold = true;
                else if (strcmp(argv[i], "--stay") == 0)
                        stay = true;
                else if (strcmp(argv[i], "--hold-ms") == 0 && i + 1 < argc)
                        hold_ms = atoi(argv[++i]);
                else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc)
                        timeout = atoi(argv[++i]);
                else
                        return USAGE;
        }
        r = gpuipc_client_connect(NULL, &c);
        if (r < 0) {
                fprintf(stderr, "helper-consumer: connect: %s\n", gpuipc_strerror(r));
                return NO_CONNECT;
        }
        r = gpuipc_view_lookup(c, argv[1], timeout, 0, &v);
        if (r < 0) {
                if (r != -ENOENT && r != -ETIMEDOUT)
                        fprintf(stderr, "helper-consumer: lookup %s: %s\n", argv[1], gpuipc_strerror(r));
                gpuipc_client_free(c);
                return r == -ENOENT ? NOT_FOUND : r == -ETIMEDOUT ? TIMED_OUT : LOOKUP_FAILED;
        }
        if (gpuipc_view_size(v) != size || gpuipc_view_info(v)->size != size) {
                fprintf(stderr, "helper-consumer: size %zu, want %zu\n", gpuipc_view_size(v), size);
                ret = WRONG_SIZE;
                goto out;
        }
        p = gpuipc_view_data(v);
        for (size_t i = 0; i < size; i++) {
                if (p[i] != h_pattern(i, seed)) {
                        fprintf(stderr, "helper-consumer: byte %zu is 0x%02x, want 0x%02x\n", i, p[i],
                                h_pattern(i, seed));
                        ret = WRONG_BYTES;
                        goto out;
                }
        }
        if (hold) {
                char buf[64];
                printf("ok\n");
                fflush(stdout);
                while (read(0, buf, sizeof(buf)) > 0)
                        ;
        } else if (hold_ms > 0) {
                printf("ok\n");
                fflush(stdout);
                usleep((useconds_t)hold_ms * 1000);
        }
out:
        r = gpuipc_view_release(v);
        if (stay && ret == OK && r == 0) {
                char buf[64];
                printf("released\n");
                fflush(stdout);
                while (read(0, buf, sizeof(buf)) > 0)
                        ;
        }
        gpuipc_client_free(c);
        if (ret == OK && r < 0)
                ret = RELEASE_FAILED;
        return ret;
}
