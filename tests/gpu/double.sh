#!/bin/sh
# The real-GPU programs against the CUDA driver double, for make check: the
# C GPU suite (tests/gpu/run.sh, with queued stream work so that the event
# control reads stale bytes) and gpu_bench's cases at 2 ms and 1 MiB, two
# timed rounds each.  It keeps the programs that otherwise run only on a GPU
# from rotting; their timings here mean nothing.
# usage: tests/gpu/double.sh BUILDDIR
set -u
B=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
# The double's "device memory" is files (256 MiB buffers among them): in
# memory where /dev/shm has room for them, else in /tmp.
shm=/tmp
if [ -w /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -gt 2097152 ]; then
        shm=/dev/shm
fi
dir=$(mktemp -d "$shm/gpuipc-gpudouble.XXXXXX")
dpid=
cleanup() {
        [ -n "$dpid" ] && kill -TERM "$dpid" 2>/dev/null
        rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
export LD_LIBRARY_PATH="$B/tests/cuda-double${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GPUIPC_CUDA_DOUBLE_SHM_DIR="$dir"
rc=0

echo "== tests/gpu/run.sh on the driver double"
GPUIPC_CUDA_DOUBLE_EVENT_DELAY_MS=1000 timeout 300 sh "$here/run.sh" "$B" || rc=1

echo "== gpu_bench on the driver double (floor, gpuipc, relay, pinned; 2 rounds)"
sock="$dir/gpuipcd.sock"
"$B/gpuipcd" --no-config --socket "$sock" --log-level 4 2>"$dir/daemon.log" &
dpid=$!
i=0
while [ ! -S "$sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
[ -S "$sock" ] || { echo "gpuipcd did not listen on $sock"; rc=1; }
GPUIPC_SOCKET="$sock" GPUIPC_GPU_PTX="$here/kernels.ptx" GPU_BENCH_ONLY='*,*,*,2,1MiB' \
        timeout 300 "$B/bench/gpu_bench" all 3 >"$dir/bench.csv" || rc=1
rows=$(tail -n +2 "$dir/bench.csv" | wc -l)
[ "$rows" -eq 13 ] || { echo "gpu_bench: $rows rows, not 13"; rc=1; }
kill -TERM "$dpid"
wait "$dpid" || rc=1
dpid=
if [ $rc -eq 0 ]; then
        echo "PASS: the GPU programs on the driver double"
else
        echo "FAIL: the GPU programs on the driver double"
        cat "$dir/bench.csv" "$dir/daemon.log"
fi
exit $rc
