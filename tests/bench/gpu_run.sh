#!/bin/sh
# GPU handoff benchmark, side by side in one run (issue 13): starts gpuipcd
# on a temporary socket, runs gpu_bench (C: the driver floor, direct and
# through a relay process, the C library and the pinned copy; cuda-ipc and
# cuda-vmm, fresh and reused, 2 and 50 ms idle) and gpu_handoff.py (Python:
# gpuipc with torch and CuPy consumers against torch.multiprocessing and the
# Python floor, direct and through gpu_bench's relay, then gpu_exports.py)
# when torch imports, then gpu_summary.py's ratio tables.  Prints the CSVs
# on stdout and keeps copies in BUILDDIR/bench/gpu.csv, gpu_handoff.csv,
# gpu_exports.csv and gpu_summary.md.
# GPUIPC_BENCH_C=0 or GPUIPC_BENCH_PY=0 skips a half (then no summary).
# GPU_BENCH_PASSES=N and GPU_HANDOFF_PASSES=N run the C and the Python rows
# N times each, interleaved, new processes every pass (gpu_bench.c and
# gpu_handoff.py say how); each row then covers every pass's rounds.
# usage: tests/bench/gpu_run.sh [BUILDDIR] [ROUNDS]      (ROUNDS 16: 15 timed)
# Build first (here or on a build host, then carry BUILDDIR):
#   make STATIC_DEPS=1 BUILDDIR=build/gpub gpu-bench
set -u
B=$(cd "${1:-build}" 2>/dev/null && pwd) || { echo "gpu_run: no build dir ${1:-build}" >&2; exit 2; }
ROUNDS=${2:-16}
here=$(cd "$(dirname "$0")" && pwd)
PTX="$here/../gpu/kernels.ptx"
[ -f "$PTX" ] || PTX="$B/bench/kernels.ptx"
for f in "$B/gpuipcd" "$B/bench/gpu_bench"; do
        [ -x "$f" ] || { echo "gpu_run: $f missing: make STATIC_DEPS=1 BUILDDIR=... gpu-bench" >&2; exit 2; }
done
[ -f "$PTX" ] || { echo "gpu_run: kernels.ptx not found (tests/gpu/kernels.ptx)" >&2; exit 2; }
if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >&2 \
                || { echo "gpu_run: nvidia-smi failed: no usable GPU?" >&2; exit 2; }
else
        echo "gpu_run: nvidia-smi not found; trying anyway" >&2
fi

dir=$(mktemp -d /tmp/gpuipc-gpubench.XXXXXX)
export GPUIPC_SOCKET="$dir/gpuipcd.sock"
export GPUIPC_GPU_PTX="$PTX"
"$B/gpuipcd" --socket "$GPUIPC_SOCKET" --log-level 4 2>"$dir/daemon.log" &
dpid=$!
i=0
while [ ! -S "$GPUIPC_SOCKET" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
if [ ! -S "$GPUIPC_SOCKET" ]; then
        echo "gpu_run: gpuipcd did not start:" >&2; cat "$dir/daemon.log" >&2; exit 1
fi

out="$B/bench/gpu.csv"
rc=0
if [ "${GPUIPC_BENCH_C:-1}" != 0 ]; then
        "$B/bench/gpu_bench" all "$ROUNDS" > "$out" || rc=1
        cat "$out"
fi
PY=${PYTHON:-python3}
shim=
[ -f "$B/bench/libtimecuda.so" ] && shim="$B/bench/libtimecuda.so"
# bench_py LIBCUDA SCRIPT ARGS...: a bench script with this build's
# libgpuipc and package, and GPUIPC_LIBCUDA=LIBCUDA (empty: the driver);
# the caller's environment adds the socket and the pass's settings.
bench_py() {
        libcuda=$1 script=$2
        shift 2
        GPUIPC_LIBCUDA=$libcuda GPUIPC_LIBRARY="$B/libgpuipc.so.1" GPU_HANDOFF_RELAY="$B/bench/gpu_bench" \
                PYTHONPATH="$here/../../client/python${PYTHONPATH:+:$PYTHONPATH}" \
                "$PY" "$here/$script" "$@"
}
# gpu_handoff.py on the driver itself (no timing shim, no Probe: its
# profile columns stay NaN; see the profile pass below).
handoff_py() {
        bench_py "${GPUIPC_LIBCUDA:-}" gpu_handoff.py "${PYROUNDS:-$ROUNDS}"
}
# Python, side by side in one run: gpuipc (torch consumers) against
# torch.multiprocessing, reused and fresh blocks, 2 ms and 50 ms idle, and
# 1000 small tensors (gpu_handoff.py; ROUNDS rounds, the first a warm-up);
# then gpu_exports.py's register, lookup and export costs.
if [ "${GPUIPC_BENCH_PY:-1}" = 0 ]; then
        echo "gpu_run: Python rows skipped (GPUIPC_BENCH_PY=0)" >&2
elif "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        handoff_py > "$B/bench/gpu_handoff.csv" || rc=1
        cat "$B/bench/gpu_handoff.csv"
        # The binding's own costs, warm: register, lookup, the exports.
        bench_py "${GPUIPC_LIBCUDA:-}" gpu_exports.py 300 > "$B/bench/gpu_exports.csv" || rc=1
        cat "$B/bench/gpu_exports.csv"
else
        echo "gpu_run: torch with CUDA not importable by $PY: Python rows skipped" >&2
fi

# GPUIPC_BENCH_PROFILE=1: a pass of the gpuipc rows with the profile
# columns (GPU_HANDOFF_PROFILE=1: the C calls under the Python ones timed,
# libgpuipc's driver calls through the timing shim, timecuda.c), appended as
# system "gpuipc-profile" (GPU_HANDOFF_SIZES, default 1MiB; no small
# tensors).  Apart from the other rows: the timing is a Python call and
# clock reads on each side of the handoff.
if [ "${GPUIPC_BENCH_PROFILE:-0}" = 1 ] && [ "${GPUIPC_BENCH_PY:-1}" != 0 ] && [ -n "$shim" ]; then
        GPU_HANDOFF_PROFILE=1 GPU_HANDOFF_LABEL=-profile GPU_HANDOFF_SIZES=${GPU_HANDOFF_SIZES:-1MiB} \
                GPU_HANDOFF_MANY=0 bench_py "$shim" gpu_handoff.py "${PYROUNDS:-$ROUNDS}" |
                tail -n +2 >> "$B/bench/gpu_handoff.csv" || rc=1
fi

# GPUIPC_BENCH_BUSY_US=N: a second pass of the gpuipc rows with busy polling
# on both sides (a second gpuipcd with --busy-poll-us N, clients with
# GPUIPC_BUSY_POLL_US=N), appended as system "gpuipc-busy" (C: 1 MiB and
# 64 MiB; Python: GPU_HANDOFF_SIZES, default 1MiB,64MiB, no small tensors).
if [ -n "${GPUIPC_BENCH_BUSY_US:-}" ]; then
        bsock="$dir/busy.sock"
        "$B/gpuipcd" --socket "$bsock" --log-level 4 --busy-poll-us "$GPUIPC_BENCH_BUSY_US" \
                2>"$dir/busy.log" &
        bpid=$!
        i=0
        while [ ! -S "$bsock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
        if [ "${GPUIPC_BENCH_C:-1}" != 0 ]; then
                for sz in 1MiB 64MiB; do
                        GPUIPC_SOCKET=$bsock GPUIPC_BUSY_POLL_US=$GPUIPC_BENCH_BUSY_US \
                                GPU_BENCH_ONLY="gpuipc,*,$sz" "$B/bench/gpu_bench" all "$ROUNDS" |
                                tail -n +2 | sed 's/^gpuipc,/gpuipc-busy,/' >> "$out" || rc=1
                done
        fi
        if [ "${GPUIPC_BENCH_PY:-1}" != 0 ]; then
                GPUIPC_SOCKET=$bsock GPUIPC_BUSY_POLL_US=$GPUIPC_BENCH_BUSY_US GPU_HANDOFF_LABEL=-busy \
                        GPU_HANDOFF_SIZES=${GPU_HANDOFF_SIZES:-1MiB,64MiB} GPU_HANDOFF_MANY=0 \
                        handoff_py | tail -n +2 >> "$B/bench/gpu_handoff.csv" || rc=1
        fi
        kill -TERM "$bpid"
        wait "$bpid" || { rc=1; cat "$dir/busy.log" >&2; }
fi

if [ -s "$out" ] && [ -s "$B/bench/gpu_handoff.csv" ]; then
        "$PY" "$here/gpu_summary.py" "$out" "$B/bench/gpu_handoff.csv" > "$B/bench/gpu_summary.md" &&
                cat "$B/bench/gpu_summary.md"
        if "$PY" -c 'import matplotlib' 2>/dev/null; then
                "$PY" "$here/plot_gpu.py" "$out" "$B/bench/gpu_handoff.csv" "$B/bench/gpu_handoff.png" ||
                        echo "gpu_run: plot failed" >&2
        fi
fi

kill -TERM "$dpid"
wait "$dpid"
drc=$?
if [ $drc -ne 0 ] || [ $rc -ne 0 ]; then
        echo "--- gpuipcd log (exit $drc)" >&2
        cat "$dir/daemon.log" >&2
fi
rm -rf "$dir"
echo "gpu_run: CSV in $out" >&2
[ $drc -eq 0 ] || rc=1
exit $rc
