#!/bin/sh
# The real-GPU Java run: a Java producer registers device memory allocated
# through the CUDA driver, a CuPy consumer checks it on the GPU.
# usage: tests/gpu/java/run.sh [BUILDDIR]      (see README.md here)
# Exit 0 pass, 1 fail, 77 skip (no java, no CuPy, or no built Java binding).
set -u
B=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
J="$B/java"

if ! command -v java >/dev/null 2>&1; then
        echo "tests/gpu/java: skipped: no 'java' on this machine (a Java 17+ runtime is needed," \
             "e.g. apt-get install openjdk-17-jre-headless)"
        exit 77
fi
if ! python3 -c 'import cupy' >/dev/null 2>&1; then
        echo "tests/gpu/java: skipped: python3 cannot import cupy"
        exit 77
fi
if [ ! -f "$J/test-classes.stamp" ] || [ ! -f "$J/test/libgpuipc_jni_test.so" ]; then
        if command -v javac >/dev/null 2>&1; then
                make -C "$top" BUILDDIR="$B" java-tests || exit 1
        else
                echo "tests/gpu/java: skipped: $J has no built binding and there is no javac here;" \
                     "run 'make java-tests' (STATIC_DEPS=1 for another machine) and copy $B"
                exit 77
        fi
fi
for f in "$B/gpuipcd" "$B/libgpuipc.so.1" "$J/gpuipc.jar" "$J/libgpuipc_jni.so"; do
        [ -e "$f" ] || { echo "tests/gpu/java: missing $f" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/gpuipc-gpu-java.XXXXXX)
export GPUIPC_SOCKET="$dir/gpuipcd.sock"
unset GPUIPC_LIBCUDA                    # the real driver, libcuda.so.1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
java -version 2>&1 | head -1

"$B/gpuipcd" --socket "$GPUIPC_SOCKET" --log-level 6 2>"$dir/daemon.log" &
dpid=$!
i=0
while [ ! -S "$GPUIPC_SOCKET" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done

java -Dorg.gpuipc.library="$J/libgpuipc_jni.so" \
     -Dorg.gpuipc.test.native="$J/test/libgpuipc_jni_test.so" \
     -cp "$J/gpuipc.jar:$J/test-classes" org.gpuipc.gpu.GpuProducer \
     "gpu-java/batch-0" "${GPUIPC_JAVA_SIZE:-67108864}" -- \
     python3 "$here/consumer.py" --lib "$B/libgpuipc.so.1"
rc=$?

kill -TERM "$dpid"
wait "$dpid"
drc=$?
if [ $drc -ne 0 ] || [ $rc -ne 0 ]; then
        echo "--- gpuipcd log (exit $drc)"
        cat "$dir/daemon.log"
fi
rm -rf "$dir"
[ $drc -eq 0 ] || rc=1
[ $rc -eq 0 ] && echo "tests/gpu/java: PASS" || echo "tests/gpu/java: FAIL ($rc)"
exit $rc
