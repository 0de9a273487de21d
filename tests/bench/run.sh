#!/bin/sh
# make bench: the host benchmark (5-8 minutes), a table on stdout and
# BUILDDIR/bench/results.csv (the batch row in batch.csv), plots where
# matplotlib imports.  The Redis
# column needs redis-server: installed with apt-get when missing (as root),
# or skipped with REDIS_SERVER=none.  BENCH_SECONDS, BENCH_ROUNDS and
# BENCH_SCALE_MAX tune it.
#
#   tests/bench/run.sh BUILDDIR       after make bench-build
set -e
B=$1
if [ "${REDIS_SERVER:-}" != none ] && ! command -v redis-server >/dev/null; then
        if [ "$(id -u)" != 0 ]; then
                echo "bench: redis-server is missing; run as root to install it, or set REDIS_SERVER=none" >&2
                exit 1
        fi
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
fi
mkdir -p "$B/bench"
"$B/bench/bench_ipc" "$B/gpuipcd" "$B/bench/results.csv"
"$B/bench/bench_handoff" "$B/gpuipcd" "$B/bench/handoff.csv"
tail -n +2 "$B/bench/handoff.csv" | sed 's/^/handoff,/' >> "$B/bench/results.csv"
"$B/bench/bench_batch" "$B/gpuipcd" "$B/bench/batch.csv"
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
        /usr/bin/python3 tests/bench/plot.py "$B/bench/results.csv" "$B/bench"
else
        echo "bench: no matplotlib in /usr/bin/python3, no plots"
fi
echo "bench: results in $B/bench/results.csv"
