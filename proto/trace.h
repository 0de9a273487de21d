/* trace.h: timestamps at named points, for profiling builds only.
 *
 * Built with -DGPUIPC_TRACE (make CFLAGS="-O2 -g -DGPUIPC_TRACE"),
 * TRACE("point", value) records CLOCK_MONOTONIC in microseconds, the point
 * and a value in a buffer of this process, which is written at exit to
 * $GPUIPC_TRACE_DIR/trace.PID, one "microseconds point value" line each
 * (nothing when the variable is unset).  The daemon and the library each
 * write their own file, so one handoff can be followed across processes
 * (tests/bench/trace_summary.py).  Otherwise TRACE() is nothing at all. */
#ifndef GPUIPC_TRACE_H
#define GPUIPC_TRACE_H

#include <stdint.h>

#ifdef GPUIPC_TRACE
void trace_mark(const char *point, uint64_t value);
#define TRACE(point, value) trace_mark((point), (uint64_t)(value))
#else
#define TRACE(point, value) ((void)0)
#endif

#endif
