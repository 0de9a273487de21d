#!/bin/sh
# GPU handoff benchmark: starts gpuipcd on a temporary socket, runs
# gpu_bench (C: cuda-ipc and cuda-vmm cold and warm, the pinned copy) and
# gpu_handoff.py (Python: gpuipc against torch.multiprocessing) when torch
# imports; prints the CSVs on stdout and keeps copies in
# BUILDDIR/bench/gpu.csv and BUILDDIR/bench/gpu_handoff.csv.
# usage: tests/bench/gpu_run.sh [BUILDDIR] [ROUNDS]
# Build first (here or on a build host, then carry BUILDDIR):
#   make STATIC_DEPS=1 BUILDDIR=build/gpub gpu-bench
set -u
B=$(cd "${1:-build}" 2>/dev/null && pwd) || { echo "gpu_run: no build dir ${1:-build}" >&2; exit 2; }
ROUNDS=${2:-3}
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
"$B/bench/gpu_bench" all "$ROUNDS" > "$out"
rc=$?
cat "$out"
PY=${PYTHON:-python3}
# Python, side by side in one run: gpuipc (torch consumers) against
# torch.multiprocessing, reused and fresh blocks, 2 ms and 50 ms idle, and
# 1000 small tensors (gpu_handoff.py; PYROUNDS rounds, the first a warm-up).
# GPUIPC_BENCH_PY=0 skips it.
if [ "${GPUIPC_BENCH_PY:-1}" = 0 ]; then
        echo "gpu_run: Python rows skipped (GPUIPC_BENCH_PY=0)" >&2
elif "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        GPUIPC_LIBRARY="$B/libgpuipc.so.1" PYTHONPATH="$here/../../client/python${PYTHONPATH:+:$PYTHONPATH}" \
                "$PY" "$here/gpu_handoff.py" "${PYROUNDS:-16}" > "$B/bench/gpu_handoff.csv" || rc=1
        cat "$B/bench/gpu_handoff.csv"
else
        echo "gpu_run: torch with CUDA not importable by $PY: Python rows skipped" >&2
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
