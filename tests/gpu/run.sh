#!/bin/sh
# The real-GPU suite: starts gpuipcd on a temporary socket and runs gpu_test.
# usage: tests/gpu/run.sh [BUILDDIR]     (make check-gpu runs it)
set -u
B=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/gpuipc-gpu.XXXXXX)
export GPUIPC_SOCKET="$dir/gpuipcd.sock"

if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi
"$B/gpuipcd" --no-config --socket "$GPUIPC_SOCKET" --log-level 6 2>"$dir/daemon.log" &
dpid=$!
i=0
while [ ! -S "$GPUIPC_SOCKET" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done

GPUIPC_GPU_PTX="$here/kernels.ptx" GPUIPC_LIBCUDA="$B/gpu/libcountcuda.so" \
        "$B/gpu/gpu_test" all
rc=$?
# Two GPUs that can reach each other: run the peer case again as if they
# could not (the shim says so), for -EXDEV and the copy fallback.
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -ge 2 ]; then
        echo "peer again, peer access denied by the shim:"
        "$B/gpuipcctl" rm gpu/peer/ipc >/dev/null 2>&1
        "$B/gpuipcctl" rm gpu/peer/vmm >/dev/null 2>&1
        GPUIPC_GPU_DENY_PEER=1 GPUIPC_GPU_PTX="$here/kernels.ptx" \
                GPUIPC_LIBCUDA="$B/gpu/libcountcuda.so" "$B/gpu/gpu_test" peer || rc=1
fi

kill -TERM "$dpid"
wait "$dpid"
drc=$?
if [ $drc -ne 0 ] || [ $rc -ne 0 ]; then
        echo "--- gpuipcd log (exit $drc)"
        cat "$dir/daemon.log"
fi
rm -rf "$dir"
[ $drc -eq 0 ] || rc=1
exit $rc
