/* trace.c: the profiling build's timestamps (trace.h). */
#include "trace.h"

#ifdef GPUIPC_TRACE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define TRACE_MAX (1u << 16)

static struct {
        uint64_t ns, value;
        const char *point;
} marks[TRACE_MAX];
static atomic_uint n_marks;

void trace_mark(const char *point, uint64_t value)
{
        unsigned i = atomic_fetch_add_explicit(&n_marks, 1, memory_order_relaxed);
        struct timespec ts;

        if (i >= TRACE_MAX)
                return;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        marks[i].ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        marks[i].point = point;
        marks[i].value = value;
}

__attribute__((destructor)) static void trace_write(void)
{
        const char *dir = getenv("GPUIPC_TRACE_DIR");
        unsigned n = atomic_load(&n_marks);
        char path[4096];
        FILE *f;

        if (!dir || n == 0)
                return;
        snprintf(path, sizeof(path), "%s/trace.%d", dir, (int)getpid());
        f = fopen(path, "w");
        if (!f)
                return;
        if (n > TRACE_MAX)
                n = TRACE_MAX;
        for (unsigned i = 0; i < n; i++)
                fprintf(f, "%.3f %s %llu\n", (double)marks[i].ns / 1000.0, marks[i].point,
                        (unsigned long long)marks[i].value);
        fclose(f);
}
#else
typedef int trace_unused;       /* ISO C wants something in a file */
#endif
