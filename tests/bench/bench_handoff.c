/* bench_handoff.c: host buffer handoff, producer register -> consumer has
 * read every byte, for 1 MiB, 64 MiB and 1 GiB:
 *   4k      a memfd of 4 KiB pages (gpuipc_hostbuf_new), first lookup
 *   huge    an MFD_HUGETLB memfd (gpuipc_fd_register), when the host has
 *           huge pages configured (HugePages_Total), else "not available"
 *   cached  a second lookup of the same buffer in the same consumer (the
 *           library reuses the mapping; its pages are already faulted in)
 *   copy    the bytes sent over an AF_UNIX socket into a touched buffer
 * The producer is this process; each consumer is a forked process.  t0 is
 * taken just before register (or the first write); the consumer reports the
 * time it finished reading.  Median [min-max] over BENCH_ROUNDS (default 3).
 *
 * usage: bench_handoff GPUIPCD CSV */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "gpuipc.h"

#define MiB (1ull << 20)
#define MAXR 16

static const char *sock;

static uint64_t sum_all(const void *p, size_t n)
{
        const volatile uint64_t *q = p;
        uint64_t s = 0;

        for (size_t i = 0; i < n / 8; i++)
                s += q[i];
        return s;
}

static void gk(gpuipc_client *c, int r, const char *what)
{
        if (r < 0)
                die("%s: %s (%s)", what, gpuipc_strerror(r), c ? gpuipc_errmsg(c) : "-");
}

static void put(int fd, const void *p, size_t n)
{
        if (write(fd, p, n) != (ssize_t)n)
                die("pipe write: %s", strerror(errno));
}

static void get(int fd, void *p, size_t n)
{
        size_t got = 0;

        while (got < n) {
                ssize_t k = read(fd, (char *)p + got, n - got);
                if (k <= 0)
                        die("consumer died (pipe read returned %zd)", k);
                got += (size_t)k;
        }
}

/* Consumer of a registered buffer: reports [lookup done, read done, second
 * lookup start, second read done]. */
static void consumer_lookup(const char *name, size_t size, int out)
{
        gpuipc_client *c;
        gpuipc_view *v1, *v2;
        double t[4];
        uint64_t s1, s2;
        char ready = 1;

        gk(NULL, gpuipc_client_connect(sock, &c), "consumer connect");
        put(out, &ready, 1);
        gk(c, gpuipc_view_lookup(c, name, 30000, 0, &v1), "consumer lookup");
        t[0] = now_us();
        if (gpuipc_view_size(v1) != size)
                die("view is %zu bytes, expected %zu", gpuipc_view_size(v1), size);
        s1 = sum_all(gpuipc_view_data(v1), size);
        t[1] = now_us();
        t[2] = now_us();
        gk(c, gpuipc_view_lookup(c, name, 0, 0, &v2), "consumer second lookup");
        s2 = sum_all(gpuipc_view_data(v2), size);
        t[3] = now_us();
        if (s1 != s2)
                die("the two reads differ");
        put(out, t, sizeof(t));
        gpuipc_view_release(v2);
        gpuipc_view_release(v1);
        gpuipc_client_free(c);
        _exit(0);
}

static void consumer_copy(int s, size_t size, int out)
{
        char *buf = malloc(size);
        double t[4] = { 0 };
        size_t got = 0;
        char ready = 1;

        if (!buf)
                die("out of memory");
        memset(buf, 1, size);   /* a warm buffer, as a real receiver reuses */
        put(out, &ready, 1);
        while (got < size) {
                ssize_t k = read(s, buf + got, size - got);
                if (k <= 0)
                        die("copy: read: %s", k ? strerror(errno) : "EOF");
                got += (size_t)k;
        }
        t[0] = now_us();
        (void)sum_all(buf, size);
        t[1] = now_us();
        put(out, t, sizeof(t));
        _exit(0);
}

static bool huge_available(size_t *ret_free_bytes)
{
        char line[256];
        unsigned long total = 0, fr = 0, pgkb = 2048;
        FILE *f = fopen("/proc/meminfo", "r");

        if (!f)
                return false;
        while (fgets(line, sizeof(line), f)) {
                sscanf(line, "HugePages_Total: %lu", &total);
                sscanf(line, "HugePages_Free: %lu", &fr);
                sscanf(line, "Hugepagesize: %lu kB", &pgkb);
        }
        fclose(f);
        *ret_free_bytes = (size_t)fr * pgkb * 1024;
        return total > 0;
}

/* One handoff; returns ms from register to read done ([0]), to the end of
 * the second (cached) read ([1]), and register -> lookup returned ([2]). */
static bool run_one(const char *mode, size_t size, int round, double res[3])
{
        static int serial;
        int pfd[2], sp[2] = { -1, -1 };
        char name[64], ready;
        double t[4], t0;
        pid_t pid;
        int st;

        if (pipe(pfd) < 0)
                die("pipe: %s", strerror(errno));
        snprintf(name, sizeof(name), "bench/handoff/%s/%d/%d", mode, round, serial++);
        if (!strcmp(mode, "copy")) {
                char *src = malloc(size);
                if (!src)
                        die("out of memory");
                memset(src, 7, size);
                if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
                        die("socketpair: %s", strerror(errno));
                pid = fork();
                if (pid == 0) {
                        close(sp[0]);
                        consumer_copy(sp[1], size, pfd[1]);
                }
                close(sp[1]);
                get(pfd[0], &ready, 1);
                usleep(20000);
                t0 = now_us();
                for (size_t off = 0; off < size; off += MiB)
                        send_all(sp[0], src + off, size - off < MiB ? size - off : MiB, -1);
                get(pfd[0], t, sizeof(t));
                close(sp[0]);
                free(src);
                res[0] = (t[1] - t0) / 1e3;
                res[1] = NAN;
                res[2] = (t[0] - t0) / 1e3;
        } else {
                bool huge = !strcmp(mode, "huge");
                gpuipc_client *c;
                gpuipc_hostbuf *hb = NULL;
                uint64_t id;
                void *p;
                int fd = -1;

                gk(NULL, gpuipc_client_connect(sock, &c), "producer connect");
                if (huge) {
                        fd = memfd_sealed(size < 2 * MiB ? 2 * MiB : size, true);
                        if (fd < 0) {
                                gpuipc_client_free(c);
                                return false;
                        }
                        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                        if (p == MAP_FAILED)
                                die("mmap hugetlb memfd: %s", strerror(errno));
                } else {
                        gk(c, gpuipc_hostbuf_new(size, &hb), "gpuipc_hostbuf_new");
                        p = gpuipc_hostbuf_data(hb);
                }
                memset(p, 7, size);
                /* Filled: now sealed against writes, as the daemon requires. */
                if (huge && fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0)
                        die("F_SEAL_FUTURE_WRITE on the hugetlb memfd: %s", strerror(errno));
                pid = fork();
                if (pid == 0)
                        consumer_lookup(name, size, pfd[1]);
                get(pfd[0], &ready, 1);
                usleep(20000);
                t0 = now_us();
                if (huge)
                        gk(c, gpuipc_fd_register(c, name, fd, 0, size, NULL, 0, &id),
                           "gpuipc_fd_register (hugetlb)");
                else
                        gk(c, gpuipc_hostbuf_register(c, name, hb, NULL, 0, &id),
                           "gpuipc_hostbuf_register");
                get(pfd[0], t, sizeof(t));
                res[0] = (t[1] - t0) / 1e3;
                res[1] = (t[3] - t[2]) / 1e3;
                res[2] = (t[0] - t0) / 1e3;
                gk(c, gpuipc_name_unregister(c, name), "gpuipc_name_unregister");
                if (huge) {
                        munmap(p, size);
                        close(fd);
                } else {
                        gpuipc_hostbuf_free(hb);
                }
                gpuipc_client_free(c);
        }
        close(pfd[0]);
        close(pfd[1]);
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
                die("consumer failed");
        return true;
}

int main(int argc, char **argv)
{
        static const size_t sizes[] = { MiB, 64 * MiB, 1024 * MiB };
        static const char *const sname[] = { "1MiB", "64MiB", "1GiB" };
        int rounds = getenv("BENCH_ROUNDS") ? atoi(getenv("BENCH_ROUNDS")) : 3;
        char path[128];
        size_t huge_free = 0;
        bool huge = huge_available(&huge_free);
        FILE *csv;
        pid_t d;

        if (argc < 3) {
                fprintf(stderr, "usage: %s GPUIPCD CSV\n", argv[0]);
                return 2;
        }
        if (rounds < 1 || rounds > MAXR)
                die("BENCH_ROUNDS must be 1..%d", MAXR);
        signal(SIGPIPE, SIG_IGN);
        csv = fopen(argv[2], "w");
        if (!csv)
                die("%s: %s", argv[2], strerror(errno));
        snprintf(path, sizeof(path), "%s/gpuipcd.sock", tmpdir_get());
        sock = path;
        d = daemon_start(argv[1], path, 0, NULL);

        printf("\nhost handoff: register -> consumer has read every byte, ms, median [min-max] "
               "of %d rounds\n", rounds);
        printf("huge pages: %s\n", huge ? "configured" : "not available (HugePages_Total is 0)");
        printf("%-6s %-34s %10s %20s %12s\n", "size", "mode", "ms", "[min-max]", "copy/this");
        fprintf(csv, "size,mode,median_ms,min_ms,max_ms,copy_over_this\n");
        for (size_t s = 0; s < 3; s++) {
                double v[5][MAXR], lk[MAXR];
                bool have_huge = huge && huge_free >= (sizes[s] < 2 * MiB ? 2 * MiB : sizes[s]);
                for (int r = 0; r < rounds; r++) {
                        double res[3];
                        run_one("copy", sizes[s], r, res);
                        v[3][r] = res[0];
                        run_one("4k", sizes[s], r, res);
                        v[0][r] = res[0];
                        v[2][r] = res[1];
                        lk[r] = res[2];
                        v[1][r] = NAN;
                        if (have_huge && run_one("huge", sizes[s], r, res))
                                v[1][r] = res[0];
                }
                static const char *const mname[] = {
                        "4k pages; first lookup", "huge pages (MFD_HUGETLB)",
                        "cached mapping; second lookup", "copy through the socket",
                };
                double copy = median(v[3], rounds);
                for (int m = 0; m < 4; m++) {
                        double med = median(v[m], rounds), mn = INFINITY, mx = -INFINITY;
                        for (int r = 0; r < rounds; r++) {
                                if (isnan(v[m][r]))
                                        continue;
                                mn = fmin(mn, v[m][r]);
                                mx = fmax(mx, v[m][r]);
                        }
                        if (isnan(med)) {
                                printf("%-6s %-34s %10s\n", sname[s], mname[m], "not available");
                                fprintf(csv, "%s,%s,not available,,,\n", sname[s], mname[m]);
                                continue;
                        }
                        printf("%-6s %-34s %10.3f %9.3f-%-10.3f %12.2f\n", sname[s], mname[m],
                               med, mn, mx, copy / med);
                        fprintf(csv, "%s,%s,%.4f,%.4f,%.4f,%.3f\n", sname[s], mname[m], med, mn,
                                mx, copy / med);
                }
                printf("%-6s %-34s %10.3f\n", sname[s], "(4k: register -> lookup returned)",
                       median(lk, rounds));
                fprintf(csv, "%s,register to lookup returned (4k),%.4f,,,\n", sname[s],
                        median(lk, rounds));
                fflush(stdout);
        }
        proc_stop(d);
        fclose(csv);
        tmpdir_remove();
        return 0;
}
