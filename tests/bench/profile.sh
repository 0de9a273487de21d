#!/bin/sh
# Profiles gpuipcd's hot path under a fixed lookup load (bench_ipc --load:
# library lookup+release on one connection plus pipelined lookups on another).
# Uses `perf record -e cpu-clock` when perf works here, else
# `valgrind --tool=callgrind` (slower: the load then runs ~50x slower).
# With MODE "have" the pipelined lookups offer a held lease, so their
# replies come without an fd (see `have` in docs/protocol.md).
# usage: tests/bench/profile.sh [BUILDDIR] [SECONDS] [MODE]
set -u
B=$(cd "${1:-build}" && pwd)
SECS=${2:-5}
MODE=${3:-}
dir=$(mktemp -d /tmp/gpuipc-prof.XXXXXX)
S="$dir/gpuipcd.sock"
[ -x "$B/bench/bench_ipc" ] || { echo "profile: build $B/bench/bench_ipc first (make bench-build)" >&2; exit 2; }
if command -v perf >/dev/null && perf record -q -e cpu-clock -o "$dir/t.data" true 2>/dev/null; then
        "$B/gpuipcd" --socket "$S" --no-config --log-level 3 --max-leases 100000000 --max-leases-per-uid 100000000 &
        dpid=$!
        sleep 0.3
        perf record -q -e cpu-clock -g -o "$dir/perf.data" -p "$dpid" &
        tool=perf
else
        valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "$B/gpuipcd" --socket "$S" \
                --no-config --log-level 3 --max-leases 100000000 --max-leases-per-uid 100000000 2>"$dir/vg.log" &
        dpid=$!
        tool=callgrind
fi
pid=$!
i=0
while [ ! -S "$S" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
"$B/bench/bench_ipc" --load "$S" "$SECS" $MODE
if [ "$tool" = perf ]; then
        kill -INT "$pid"; wait "$pid"
fi
kill -TERM "$dpid"; wait "$dpid"
if [ "$tool" = perf ]; then
        perf report -i "$dir/perf.data" --no-children --stdio -g none --sort symbol 2>/dev/null \
                | grep -v '^#' | grep -v '^$' | grep '%' | head -40
        perf report -i "$dir/perf.data" --no-children --stdio -g none --sort dso 2>/dev/null \
                | grep '%' | head -10
else
        callgrind_annotate "$dir/cg.out" 2>/dev/null | head -60
fi
echo "profile: data in $dir" >&2
