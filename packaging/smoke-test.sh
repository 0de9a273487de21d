#!/bin/bash
# Installs the packages from build/deb/ (make deb) on this machine and checks
# them as a user would: the installed daemon, CLI, library, pkg-config file,
# man pages, Python module, Java jar, sysusers/tmpfiles results.  systemd is not PID 1
# here, so the daemon is started by hand, not through systemctl.
#
#   packaging/smoke-test.sh [--keep]      (make check-deb; root)
#
# Purges the packages again at the end unless --keep: the installed
# /usr/sbin/gpuipcd must not shadow the build.  Prints PASS/FAIL lines and
# "N passed, N failed"; exits 1 if any failed.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEBDIR=$ROOT/build/deb
PKGS="gpuipcd libgpuipc1 libgpuipc-dev python3-gpuipc libgpuipc-jni libgpuipc-java"
KEEP=${1:-}
. "$ROOT/tests/checks.sh"

if [ "$(id -u)" != 0 ]; then
        echo "smoke-test.sh: installs packages: run as root" >&2
        exit 1
fi
debs=()
for p in $PKGS; do
        f=$(ls "$DEBDIR"/${p}_*.deb 2>/dev/null | head -1)
        [ -n "$f" ] || { fail "$DEBDIR has no ${p}_*.deb (run make deb)"; finish; }
        debs+=("$f")
done
already=$(dpkg-query -W -f '${Package} ${Status}\n' $PKGS 2>/dev/null | grep -c ' installed$')
[ "$already" -eq 0 ] || echo "note: some of $PKGS were installed before; they are purged at the end"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpuipc-smoke.XXXXXX")
DPID=
cleanup() {
        [ -n "$DPID" ] && kill "$DPID" 2>/dev/null
        rm -rf "$TMP"
        if [ "$KEEP" != --keep ]; then
                DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq $PKGS >/dev/null 2>&1
                for f in /usr/sbin/gpuipcd /usr/bin/gpuipcctl; do
                        [ -e "$f" ] && echo "FAIL $f is still there after the purge"
                done
        fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

echo "== apt-get install ${debs[*]}"
if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debs[@]}" >"$TMP/apt.log" 2>&1; then
        pass "apt-get install of the six packages"
else
        sed 's/^/    /' "$TMP/apt.log"
        fail "apt-get install of the six packages"
        finish
fi

# What the maintainer scripts did (dh_installsysusers, dh_installtmpfiles).
check "installed /usr/sbin/gpuipcd, /usr/bin/gpuipcctl" [ -x /usr/sbin/gpuipcd -a -x /usr/bin/gpuipcctl ]
check "installed the units" [ -f /lib/systemd/system/gpuipcd.socket -o -f /usr/lib/systemd/system/gpuipcd.socket ]
check "postinst created system user gpuipcd" sh -c 'getent passwd gpuipcd >/dev/null'
check "postinst created group gpuipc with member gpuipcd" \
        sh -c 'getent group gpuipc | grep -q ":gpuipcd\$"'
check "postinst created /run/gpuipcd owned gpuipcd:gpuipc, 0755" \
        [ "$(stat -c '%U:%G %a' /run/gpuipcd 2>/dev/null)" = "gpuipcd:gpuipc 755" ]
check "gpuipcd.socket is enabled (sockets.target.wants)" \
        [ -L /etc/systemd/system/sockets.target.wants/gpuipcd.socket ]
# Upgrades (docs/deploy.md): the postinst try-restarts the service alone; no
# maintainer script restarts or stops the socket on upgrade.
info=/var/lib/dpkg/info
check "postinst try-restarts gpuipcd.service on upgrade" \
        grep -q '^ *deb-systemd-invoke try-restart gpuipcd.service' $info/gpuipcd.postinst
check "no maintainer script restarts gpuipcd.socket" \
        sh -c '! grep -hE "deb-systemd-invoke (try-)?restart.*gpuipcd\.socket" "$@"' - $info/gpuipcd.*inst $info/gpuipcd.*rm
check "prerm stops the socket only on remove" \
        sh -c 'grep -B2 "deb-systemd-invoke stop .gpuipcd.socket" "$1" | grep -q "\"\$1\" = remove"' - $info/gpuipcd.prerm
# The symbols file: installed, one line per export of the installed library.
symf=$(ls $info/libgpuipc1:*.symbols $info/libgpuipc1.symbols 2>/dev/null | head -1)
lib=$(ls /usr/lib/*/libgpuipc.so.1 2>/dev/null | head -1)
check "libgpuipc1 ships a symbols file ($symf)" [ -n "$symf" ]
check "the symbols file lists each GPUIPC_1 export of $lib" sh -c \
        '[ "$(objdump -T "$2" | grep -cE "[[:space:]]GPUIPC_1[[:space:]]")" = "$(grep -c "@GPUIPC_1 " "$1")" ]' - "$symf" "$lib"
check "man pages installed (gpuipcd.8, gpuipcctl.1, libgpuipc.3)" sh -c \
        'for p in 8/gpuipcd.8 1/gpuipcctl.1 3/libgpuipc.3; do [ -f /usr/share/man/man${p%%/*}/${p#*/}.gz ] || exit 1; done'
check "man gpuipcd renders" sh -c 'man -P cat 8 gpuipcd 2>/dev/null | grep -q "socket activation\|LISTEN_FDS"'
check "gpuipcd --version is $(sed -n 's/^VERSION *:= *//p' "$ROOT/Makefile")" \
        sh -c '/usr/sbin/gpuipcd --version | grep -q "^gpuipcd $1 "' - "$(sed -n 's/^VERSION *:= *//p' "$ROOT/Makefile")"

# The installed daemon, as the unit would run it but started by hand.
S=$TMP/x.sock
export GPUIPC_SOCKET=$S
# --no-config where the daemon has it: /etc/gpuipcd may hold the host's own.
noconf=
/usr/sbin/gpuipcd --help | grep -q -- --no-config && noconf=--no-config
/usr/sbin/gpuipcd --socket "$S" $noconf >"$TMP/daemon.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do [ -S "$S" ] && break; sleep 0.05; done
check "installed daemon listens on $S" [ -S "$S" ]
check "gpuipcctl ping" sh -c '/usr/bin/gpuipcctl ping | grep -q "pid '"$DPID"'"'
head -c 1048576 /dev/urandom >"$TMP/x.bin"
check "gpuipcctl put smoke/x" sh -c '/usr/bin/gpuipcctl put smoke/x "$1" >/dev/null' - "$TMP/x.bin"
check "gpuipcctl list shows smoke/x" sh -c '/usr/bin/gpuipcctl list smoke | grep -q "smoke/x"'
check "gpuipcctl get returns the same bytes" sh -c '/usr/bin/gpuipcctl get smoke/x | cmp -s - "$1"' - "$TMP/x.bin"

# The -dev package: pkg-config, header, shared library.
cat >"$TMP/hello.c" <<'C'
#include <gpuipc.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
        const char *name = argc > 1 ? argv[1] : "smoke/hello";
        gpuipc_client *c;
        gpuipc_hostbuf *b;
        gpuipc_view *v;
        int r;

        if ((r = gpuipc_client_connect(NULL, &c)) < 0) {
                fprintf(stderr, "connect: %s\n", gpuipc_strerror(r));
                return 1;
        }
        if (gpuipc_hostbuf_new(4096, &b) < 0)
                return 1;
        strcpy(gpuipc_hostbuf_data(b), "hello from libgpuipc");
        r = gpuipc_hostbuf_register(c, name, b, NULL, 0, NULL);
        gpuipc_hostbuf_free(b);
        if (r < 0) {
                fprintf(stderr, "register: %s\n", gpuipc_errmsg(c));
                return 1;
        }
        if ((r = gpuipc_view_lookup(c, name, 1000, 0, &v)) < 0) {
                fprintf(stderr, "lookup: %s\n", gpuipc_errmsg(c));
                return 1;
        }
        printf("%s %s\n", gpuipc_version_string(), (const char *)gpuipc_view_data(v));
        gpuipc_view_release(v);
        if (gpuipc_name_unregister(c, name) < 0) {
                fprintf(stderr, "unregister: %s\n", gpuipc_errmsg(c));
                return 1;
        }
        gpuipc_client_free(c);
        return 0;
}
C
flags=$(pkg-config --cflags --libs gpuipc 2>"$TMP/pc.err")
check "pkg-config --cflags --libs gpuipc ($flags)" [ -n "$flags" ]
[ -s "$TMP/pc.err" ] && sed 's/^/    /' "$TMP/pc.err"
check "cc hello.c \$(pkg-config --cflags --libs gpuipc)" \
        sh -c 'cc -Wall -o "$1/hello" "$1/hello.c" $2 2>&1' - "$TMP" "$flags"
check "hello links the installed libgpuipc.so.1" \
        sh -c 'ldd "$1/hello" | grep -Eq "libgpuipc.so.1 => (/usr)?/lib/[^ ]*/libgpuipc.so.1 "' - "$TMP"
check "hello registers and looks up through the installed daemon" \
        sh -c '"$1/hello" | grep -q "hello from libgpuipc"' - "$TMP"
check "static link: cc hello.c \$(pkg-config --static --libs gpuipc)" \
        sh -c 'cc -o "$1/hello-static" "$1/hello.c" $(pkg-config --cflags gpuipc) \
                -Wl,-Bstatic -lgpuipc -Wl,-Bdynamic $(pkg-config --static --libs-only-l gpuipc | sed "s/-lgpuipc//") &&
                "$1/hello-static" smoke/static | grep -q "hello from libgpuipc" &&
                ! ldd "$1/hello-static" | grep -q libgpuipc' - "$TMP"

# python3-gpuipc, with the system interpreter (not a pyenv one).
check "python3-gpuipc imports from dist-packages and loads the installed library" \
        sh -c 'cd / && /usr/bin/python3 -c "import gpuipc, sys; p = gpuipc.__file__; print(p); sys.exit(0 if p.startswith(\"/usr/lib/python3/dist-packages/\") else 1)"'
check "python3-gpuipc has its .dist-info: importlib.metadata says gpuipc $(sed -n 's/^VERSION *:= *//p' "$ROOT/Makefile"), Apache-2.0" \
        sh -c 'cd / && /usr/bin/python3 -c "import importlib.metadata as m, sys; d = m.distribution(\"gpuipc\"); sys.exit(0 if (d.version, d.metadata[\"License\"]) == (sys.argv[1], \"Apache-2.0\") and str(d._path).startswith(\"/usr/lib/python3/dist-packages/\") else 1)" "$1"' \
        - "$(sed -n 's/^VERSION *:= *//p' "$ROOT/Makefile")"
cat >"$TMP/smoke.py" <<'PY'
import sys
import gpuipc
want = open(sys.argv[1], "rb").read()
with gpuipc.connect() as c, c.lookup("smoke/x", timeout=5) as v:
    got = v.tobytes()
# Which file the loader mapped (library_path may be a bare soname).
print(sorted({l.split()[-1] for l in open("/proc/self/maps") if "libgpuipc" in l}))
sys.exit(0 if got == want else 1)
PY
check "python3-gpuipc looks up smoke/x (put by gpuipcctl) with the same bytes" \
        sh -c 'cd / && /usr/bin/python3 "$1/smoke.py" "$1/x.bin" >"$1/py.out" 2>&1' - "$TMP"
sed 's/^/    /' "$TMP/py.out"
check "python3-gpuipc loaded the installed libgpuipc" grep -q "'/usr/lib/[^']*/libgpuipc.so.1" "$TMP/py.out"
# libgpuipc-java: /usr/share/java/gpuipc.jar alone on the class path loads
# libgpuipc-jni's library from /usr/lib/TRIPLET/jni, with nothing set.
if command -v javac >/dev/null 2>&1; then
        mkdir -p "$TMP/java"
        check "javac SelfLoad.java against /usr/share/java/gpuipc.jar" \
                javac --release 17 -d "$TMP/java" -cp /usr/share/java/gpuipc.jar "$ROOT/tests/java/SelfLoad.java"
        (cd / && env -u LD_LIBRARY_PATH -u JAVA_TOOL_OPTIONS java -cp "/usr/share/java/gpuipc.jar:$TMP/java" \
                SelfLoad "$S" smoke/java >"$TMP/java.out" 2>&1)
        sed 's/^/    /' "$TMP/java.out"
        check "java -cp /usr/share/java/gpuipc.jar: register and lookup, nothing set" \
                grep -qx "roundtrip ok" "$TMP/java.out"
        check "the JVM mapped /usr/lib/<triplet>/jni/libgpuipc_jni.so" \
                grep -Eq "^mapped /usr/lib/[^/]+/jni/libgpuipc_jni.so$" "$TMP/java.out"
else
        fail "javac not found: the Java packages are not exercised (apt-get install default-jdk-headless)"
fi
check "gpuipcctl rm smoke/x" /usr/bin/gpuipcctl rm smoke/x

kill -TERM "$DPID"
for _ in $(seq 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.05; done
wait "$DPID"
rc=$?
DPID=
check "installed daemon exits 0 on SIGTERM" [ $rc -eq 0 ]
check "and removes the socket it created" [ ! -e "$S" ]
[ "$failed" -eq 0 ] || sed 's/^/    daemon: /' "$TMP/daemon.log"
finish
