#!/bin/sh
# Restart without loss on a real GPU.  gpuipcd runs under fdstore-host.py,
# which plays systemd's socket activation and fd store; a cuda-vmm and an
# adopted buffer are registered by producers that exit, then the daemon is
# SIGKILLed and restarted, then SIGTERMed and restarted, and consumers check
# every byte after each restart with a kernel (gpu_test's vmm and adopt
# consumers).  usage: tests/gpu/restart.sh [BUILDDIR]
set -u
B=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/gpuipc-restart.XXXXXX)
export GPUIPC_SOCKET="$dir/gpuipcd.sock" GPUIPC_GPU_PTX="$here/kernels.ptx"
fails=0

mkfifo "$dir/ctl"
python3 "$here/fdstore-host.py" "$dir" -- "$B/gpuipcd" --no-config --log-level 6 \
        <"$dir/ctl" >"$dir/host.out" 2>&1 &
host=$!
exec 3>"$dir/ctl"

# Waits until host.out has $1 lines.
lines() {
        i=0
        while [ "$(wc -l <"$dir/host.out")" -lt "$1" ] && [ $i -lt 300 ]; do
                sleep 0.1
                i=$((i + 1))
        done
        tail -n 1 "$dir/host.out"
}

check() {       # what, command...
        what=$1
        shift
        if "$@"; then
                echo "PASS: $what"
        else
                echo "FAIL: $what"
                fails=$((fails + 1))
        fi
}

lines 1
check "vmm producer registers and exits" "$B/gpu/gpu_test" producer vmm
check "adopt producer registers, adopts and frees its memory" "$B/gpu/gpu_test" producer adopt
"$B/gpuipcctl" list
echo kill >&3
lines 2
"$B/gpuipcctl" list
check "vmm bytes after a SIGKILL restart" "$B/gpu/gpu_test" consumer vmm
check "adopted bytes after a SIGKILL restart" "$B/gpu/gpu_test" consumer adopt
echo term >&3
lines 3
check "vmm bytes after a SIGTERM restart" "$B/gpu/gpu_test" consumer vmm
check "adopted bytes after a SIGTERM restart" "$B/gpu/gpu_test" consumer adopt
"$B/gpuipcctl" list
exec 3>&-
wait $host
echo "--- gpuipcd log"
grep -v "^<7>" "$dir/daemon.log"
rm -rf "$dir"
echo "$fails failed"
[ $fails -eq 0 ]
