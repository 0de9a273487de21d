/* helper-producer: registers a host buffer filled with h_pattern(seed).
 *
 *   helper-producer NAME SIZE SEED [--ephemeral] [--shared-write] [--delay MS] [--hold]
 *
 * Connects to $GPUIPC_SOCKET, waits --delay ms, creates SIZE bytes, fills
 * them, registers them under NAME (durable unless --ephemeral), prints
 * "id N" on stdout and exits; with --hold it stays connected until its
 * stdin reaches EOF.  Exit status says what happened (see enum). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpuipc.h"
#include "harness.h"

enum {
        OK = 0,
        USAGE = 2,
        NO_CONNECT = 3,
        NO_BUFFER = 4,
        REG_EXISTS = 5,
        REG_FAILED = 6,
};

int main(int argc, char **argv)
{
        gpuipc_client *c = NULL;
        gpuipc_hostbuf *b = NULL;
        bool ephemeral = false, hold = false;
        unsigned flags = 0;
        int delay = 0, r;
        uint64_t id = 0;
        size_t size;
        uint32_t seed;
        uint8_t *p;

        if (argc < 4)
                return USAGE;
        size = strtoull(argv[2], NULL, 0);
        seed = (uint32_t)strtoul(argv[3], NULL, 0);
        for (int i = 4; i < argc; i++) {
                if (strcmp(argv[i], "--ephemeral") == 0)
                        ephemeral = true;
                else if (strcmp(argv[i], "--shared-write") == 0)
                        flags |= GPUIPC_REGISTER_SHARED_WRITE;
                else if (strcmp(argv[i], "--hold") == 0)
                        hold = true;
                else if (strcmp(argv[i], "--delay") == 0 && i + 1 < argc)
                        delay = atoi(argv[++i]);
                else
                        return USAGE;
        }
        r = gpuipc_client_connect(NULL, &c);
        if (r < 0) {
                fprintf(stderr, "helper-producer: connect: %s\n", gpuipc_strerror(r));
                return NO_CONNECT;
        }
        if (delay > 0) {
                struct timespec ts = { .tv_sec = delay / 1000, .tv_nsec = (long)(delay % 1000) * 1000000 };
                nanosleep(&ts, NULL);
        }
        r = gpuipc_hostbuf_new(size, &b);
        if (r < 0) {
                fprintf(stderr, "helper-producer: hostbuf_new: %s\n", gpuipc_strerror(r));
                gpuipc_client_free(c);
                return NO_BUFFER;
        }
        p = gpuipc_hostbuf_data(b);
        for (size_t i = 0; i < size; i++)
                p[i] = h_pattern(i, seed);
        if (ephemeral)
                flags |= GPUIPC_REGISTER_EPHEMERAL;
        r = gpuipc_hostbuf_register(c, argv[1], b, NULL, flags, &id);
        /* the daemon holds the memory now */
        gpuipc_hostbuf_free(b);
        if (r < 0) {
                if (r != -EEXIST)
                        fprintf(stderr, "helper-producer: register %s: %s (%s)\n", argv[1],
                                gpuipc_strerror(r), gpuipc_errmsg(c));
                gpuipc_client_free(c);
                return r == -EEXIST ? REG_EXISTS : REG_FAILED;
        }
        printf("id %llu\n", (unsigned long long)id);
        fflush(stdout);
        if (hold) {
                char buf[64];
                while (read(0, buf, sizeof(buf)) > 0)
                        ;
        }
        gpuipc_client_free(c);
        return OK;
}
