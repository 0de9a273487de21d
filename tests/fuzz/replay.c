/* replay.c: runs LLVMFuzzerTestOneInput over every file in the directories
 * (or files) named on the command line, so that corpus and crash inputs are
 * regression tests without libFuzzer.  Exit status 0 when all ran.
 *
 *   cc -D_GNU_SOURCE -Iproto -fsanitize=address,undefined -fno-sanitize-recover=undefined $P \
 *      tests/fuzz/fuzz-frame.c tests/fuzz/replay.c -lmsgpackc -o build/fuzz-replay
 * with $P the codec sources (see fuzz-frame.c).
 *   build/fuzz-replay tests/fuzz/corpus */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
        FILE *f = fopen(path, "rb");
        uint8_t *buf = NULL;
        size_t n = 0, cap = 0;

        if (!f) {
                fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
                return -1;
        }
        for (;;) {
                if (n == cap) {
                        uint8_t *p;
                        cap = cap ? cap * 2 : 4096;
                        p = realloc(buf, cap);
                        if (!p) {
                                fclose(f);
                                free(buf);
                                return -1;
                        }
                        buf = p;
                }
                size_t k = fread(buf + n, 1, cap - n, f);
                if (k == 0)
                        break;
                n += k;
        }
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
        free(buf);
        return 0;
}

static int cmp(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
        unsigned ran = 0, failed = 0;

        for (int i = 1; i < argc; i++) {
                struct stat st;
                DIR *d;
                struct dirent *e;
                char **names = NULL;
                size_t n = 0;

                if (stat(argv[i], &st) < 0) {
                        fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
                        failed++;
                        continue;
                }
                if (!S_ISDIR(st.st_mode)) {
                        if (run_file(argv[i]) < 0)
                                failed++;
                        else
                                ran++;
                        continue;
                }
                d = opendir(argv[i]);
                if (!d) {
                        failed++;
                        continue;
                }
                while ((e = readdir(d))) {
                        char **p;
                        if (e->d_name[0] == '.')
                                continue;
                        p = realloc(names, (n + 1) * sizeof(*names));
                        if (!p)
                                abort();
                        names = p;
                        if (asprintf(&names[n], "%s/%s", argv[i], e->d_name) < 0)
                                abort();
                        n++;
                }
                closedir(d);
                qsort(names, n, sizeof(*names), cmp);
                for (size_t j = 0; j < n; j++) {
                        if (run_file(names[j]) < 0)
                                failed++;
                        else
                                ran++;
                        free(names[j]);
                }
                free(names);
        }
        fprintf(stderr, "replay: %u inputs ran, %u failed to open\n", ran, failed);
        return failed ? 1 : 0;
}
