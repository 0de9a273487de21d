#!/bin/sh
# The jar as a user gets it: `java -cp gpuipc.jar` with no setting (no
# -Dorg.gpuipc.library, no java.library.path, no LD_LIBRARY_PATH) loads the
# JNI library the jar carries and talks to a daemon; the classes-only jar
# alone fails with a message that says where it looked.
#
#   tests/java/jar-check.sh JAVA_DIR DAEMON       (make check-java-jar)
#
# Prints PASS/FAIL lines and "N passed, N failed"; exits 1 if any failed.
set -u

JD=$(cd "$1" && pwd)
DAEMON=$2
JAVA=${JAVA:-java}
JAVAC=${JAVAC:-javac}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../checks.sh"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpuipc-jar.XXXXXX")
DPID=
cleanup() { [ -n "$DPID" ] && kill "$DPID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 1' INT TERM

arch=$(uname -m | sed -e 's/^x86_64$/amd64/')
check "gpuipc.jar carries org/gpuipc/native/linux-$arch/libgpuipc_jni.so" sh -c \
        'unzip -l "$1" 2>/dev/null | grep -q " org/gpuipc/native/linux-$2/libgpuipc_jni.so$" ||
         jar --list --file "$1" | grep -qx "org/gpuipc/native/linux-$2/libgpuipc_jni.so"' - "$JD/gpuipc.jar" "$arch"
check "gpuipc-noarch.jar carries no native library" \
        sh -c '! jar --list --file "$1" | grep -q "\.so$"' - "$JD/gpuipc-noarch.jar"

mkdir -p "$TMP/classes" "$TMP/tmpdir"
"$JAVAC" --release 17 -d "$TMP/classes" -cp "$JD/gpuipc.jar" "$HERE/SelfLoad.java" >"$TMP/javac.log" 2>&1
rc=$?
[ $rc -eq 0 ] || sed 's/^/    /' "$TMP/javac.log"
check "javac SelfLoad.java against gpuipc.jar" [ $rc -eq 0 ]

S=$TMP/d.sock
env -u GPUIPC_LIBCUDA "$DAEMON" --no-config --socket "$S" >"$TMP/daemon.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do [ -S "$S" ] && break; sleep 0.05; done
check "daemon listens on $S" [ -S "$S" ]

clean_env="env -u LD_LIBRARY_PATH -u JAVA_TOOL_OPTIONS -u _JAVA_OPTIONS -u JDK_JAVA_OPTIONS -u GPUIPC_SOCKET"
(cd / && $clean_env "$JAVA" -Djava.io.tmpdir="$TMP/tmpdir" -cp "$JD/gpuipc.jar:$TMP/classes" \
        SelfLoad "$S" jar/selfload >"$TMP/run.out" 2>&1)
rc=$?
sed 's/^/    /' "$TMP/run.out"
check "java -cp gpuipc.jar, nothing set: register and lookup through the daemon (exit $rc)" \
        grep -qx "roundtrip ok" "$TMP/run.out"
check "the JNI library mapped is the jar's copy in java.io.tmpdir" \
        grep -q "^mapped $TMP/tmpdir/gpuipc_jni-[^ ]*\.so" "$TMP/run.out"
check "the copy is deleted once loaded (nothing left in java.io.tmpdir)" \
        sh -c 'grep -qx "roundtrip ok" "$2" && [ -z "$(ls -A "$1")" ]' - "$TMP/tmpdir" "$TMP/run.out"

# The classes-only jar: only /usr/lib/TRIPLET/jni or java.library.path help.
triplet=$(gcc -dumpmachine 2>/dev/null | sed 's/-pc-/-/')
if [ -e "/usr/lib/$triplet/jni/libgpuipc_jni.so" ]; then
        echo "    /usr/lib/$triplet/jni/libgpuipc_jni.so is installed: the no-library case is not checked"
else
        (cd / && $clean_env "$JAVA" -cp "$JD/gpuipc-noarch.jar:$TMP/classes" SelfLoad "$S" jar/noarch \
                >"$TMP/noarch.out" 2>&1)
        rc=$?
        sed 's/^/    /' "$TMP/noarch.out" | head -n 3
        check "gpuipc-noarch.jar without a library fails, naming where it looked" sh -c \
                '[ "$2" -ne 0 ] && grep -q "UnsatisfiedLinkError: gpuipc: no libgpuipc_jni.so in the jar" "$1" &&
                 grep -q "/usr/lib/[^ ]*/jni" "$1"' - "$TMP/noarch.out" "$rc"
fi
finish
