#!/bin/sh
# Column batches on a GPU host (issue 19): starts gpuipcd on a temporary
# socket and runs the producer/consumer pairs of batch_gpu.py, each pair in
# two processes.  Exit 0 when every consumer read every byte zero-copy.
#   tests/gpu/batch.sh BUILDDIR        (gpuipcd and libgpuipc.so.1 in it;
#                                       gpu/libcountcuda.so for the cacheable pair)
set -u
B=$(cd "${1:-build}" && pwd) || exit 2
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/gpuipc-batch.XXXXXX)
export GPUIPC_SOCKET="$dir/gpuipcd.sock" GPUIPC_LIBRARY="$B/libgpuipc.so.1"
export PYTHONPATH="$here/../../client/python${PYTHONPATH:+:$PYTHONPATH}"
"$B/gpuipcd" --socket "$GPUIPC_SOCKET" 2>"$dir/daemon.log" &
dpid=$!
i=0
while [ ! -S "$GPUIPC_SOCKET" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
rc=0
for kind in device arrow; do
        python3 "$here/batch_gpu.py" "produce-$kind" "gpu/batch-$kind" &
        ppid=$!
        python3 "$here/batch_gpu.py" "consume-$kind" "gpu/batch-$kind" || rc=1
        wait $ppid || rc=1
        echo "batch $kind: $([ $rc = 0 ] && echo ok || echo FAILED)"
done
# Cacheable: the consumer through the counting shim; a warm second lookup
# opens nothing, so two opens in all (one per column, each its own
# allocation), where closing after each view would make four.
if [ -f "$B/gpu/libcountcuda.so" ]; then
        python3 "$here/batch_gpu.py" produce-cacheable gpu/batch-cache &
        ppid=$!
        GPUIPC_LIBCUDA="$B/gpu/libcountcuda.so" GPUIPC_GPU_COUNT_FILE="$dir/counts" \
                python3 "$here/batch_gpu.py" consume-cacheable gpu/batch-cache || rc=1
        wait $ppid || rc=1
        opens=$(awk '$1 == "cuIpcOpenMemHandle_v2" { print $2 }' "$dir/counts" 2>/dev/null)
        echo "batch cacheable: cuIpcOpenMemHandle ${opens:-?} over two lookups of two columns"
        [ -n "$opens" ] && [ "$opens" -le 2 ] || rc=1
        echo "batch cacheable: $([ $rc = 0 ] && echo ok || echo FAILED)"
else
        echo "batch cacheable: skipped ($B/gpu/libcountcuda.so missing: make gpu-tests)"
fi
kill $dpid; wait $dpid 2>/dev/null
[ $rc = 0 ] || cat "$dir/daemon.log" >&2
rm -rf "$dir"
exit $rc
