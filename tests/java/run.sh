#!/bin/sh
# make check-java: the JUnit 5 suite (client/java/src/test) against a real
# gpuipcd, and docs/java.md's code sample compiled against the current API.
#
#   tests/java/run.sh BUILDDIR        after make java-tests
#
# -Xcheck:jni makes the JVM verify every JNI call, and any warning it prints
# fails the run; --fail-if-no-tests fails a run that found no tests.  The
# run gets its own socket directory and CUDA-double shm directory.
set -u
B=$(cd "$1" && pwd)
J=$B/java
JAVA=${JAVA:-java}
JAVAC=${JAVAC:-javac}
JUNIT=${JUNIT_DIR:-/usr/share/java}/junit-platform-console-standalone.jar
[ -f "$JUNIT" ] || { echo "check-java: $JUNIT missing: apt-get install junit5" >&2; exit 1; }

echo "== docs/java.md sample"
rm -rf "$J/doc-sample" && mkdir -p "$J/doc-sample" &&
        awk '/^```java$/ {on = 1; next} /^```$/ {on = 0} on' docs/java.md \
                > "$J/doc-sample/SparkHandoffExample.java" &&
        "$JAVAC" --release 17 -encoding UTF-8 -Xlint:all,-try -Werror -d "$J/doc-sample" \
                -cp "$J/classes" "$J/doc-sample/SparkHandoffExample.java" || exit 1

echo "== check-java"
tmp=$(mktemp -d /tmp/gpuipc-java.XXXXXX)
GPUIPC_LIBCUDA=$B/tests/cuda-double/libcuda.so.1 GPUIPC_CUDA_DOUBLE_SHM_DIR=$tmp \
GPUIPC_SOCKET=$tmp/default.sock \
"$JAVA" -Xcheck:jni -Dorg.gpuipc.library="$J/libgpuipc_jni.so" \
        -Dorg.gpuipc.test.native="$J/test/libgpuipc_jni_test.so" \
        -Dorg.gpuipc.test.builddir="$B" -Dorg.gpuipc.test.srcdir="$(pwd)" \
        -Dorg.gpuipc.test.tmpdir="$tmp" \
        -jar "$JUNIT" --disable-banner --disable-ansi-colors --fail-if-no-tests --details=tree \
        --reports-dir="$J/test-reports" --class-path "$J/gpuipc.jar:$J/test-classes" \
        --scan-class-path "$J/test-classes" > "$tmp/junit.out" 2>&1
rc=$?
cat "$tmp/junit.out"
if [ $rc -eq 0 ] && grep -q 'WARNING in native method' "$tmp/junit.out"; then
        echo "check-java: -Xcheck:jni reported JNI misuse" >&2
        rc=1
fi
rm -rf "$tmp"
exit $rc
