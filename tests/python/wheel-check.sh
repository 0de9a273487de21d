#!/bin/sh
# The platform wheel as a user gets it: installed with pip into a fresh
# virtual environment (no system site-packages, no network), imported from
# outside the source tree with nothing set by hand (no GPUIPC_LIBRARY, no
# LD_LIBRARY_PATH, no PYTHONPATH), talking to a daemon.
#
#   tests/python/wheel-check.sh DISTDIR DAEMON VERSION     (make check-wheel)
#
# Prints PASS/FAIL lines and "N passed, N failed"; exits 1 if any failed.
set -u

DIST=$1
DAEMON=$2
VERSION=$3
PYTHON=${PYTHON:-/usr/bin/python3}
. "$(dirname "$0")/../checks.sh"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpuipc-wheel.XXXXXX")
DPID=
cleanup() { [ -n "$DPID" ] && kill "$DPID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 1' INT TERM

whl=$(ls "$DIST"/gpuipc-"$VERSION"-py3-none-linux_*.whl 2>/dev/null | head -1)
check "one platform wheel gpuipc-$VERSION-py3-none-linux_*.whl in $DIST" [ -n "$whl" ]
[ -n "$whl" ] || finish

# What is inside, before installing it.
"$PYTHON" - "$whl" "$VERSION" >"$TMP/meta.out" 2>&1 <<'PY'
import sys, zipfile
from email.parser import Parser
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
di = f"gpuipc-{sys.argv[2]}.dist-info/"
meta = Parser().parsestr(z.read(di + "METADATA").decode())
wheel = Parser().parsestr(z.read(di + "WHEEL").decode())
print("lib", "gpuipc/libgpuipc.so.1" in names)
print("typed", "gpuipc/py.typed" in names)
print("license", di + "LICENSE" in names and b"Apache License" in z.read(di + "LICENSE"))
print("purelib", wheel["Root-Is-Purelib"])
for key in ("Name", "Version", "License", "Requires-Python"):
    print(key, meta[key])
print("urls", len(meta.get_all("Project-URL") or []))
print("classifiers", " | ".join(meta.get_all("Classifier") or []))
PY
sed 's/^/    /' "$TMP/meta.out"
has() { grep -qxF "$1" "$TMP/meta.out"; }
check "the wheel carries gpuipc/libgpuipc.so.1" has "lib True"
check "the wheel carries py.typed" has "typed True"
check "the wheel carries the Apache-2.0 LICENSE in its .dist-info" has "license True"
check "the wheel is not pure (Root-Is-Purelib: false)" has "purelib false"
check "metadata: Name gpuipc, Version $VERSION" sh -c 'grep -qx "Name gpuipc" "$1" && grep -qx "Version $2" "$1"' - "$TMP/meta.out" "$VERSION"
check "metadata: License Apache-2.0, Requires-Python >=3.9" \
        sh -c 'grep -qx "License Apache-2.0" "$1" && grep -qx "Requires-Python >=3.9" "$1"' - "$TMP/meta.out"
check "metadata: project URLs and the licence classifier" sh -c \
        '! grep -qx "urls 0" "$1" && grep -q "License :: OSI Approved :: Apache Software License" "$1"' - "$TMP/meta.out"

# The bundled library needs nothing but glibc (msgpack-c is linked in).
unzip -q -o "$whl" gpuipc/libgpuipc.so.1 -d "$TMP/x" 2>/dev/null ||
        "$PYTHON" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("gpuipc/libgpuipc.so.1", sys.argv[2])' "$whl" "$TMP/x"
objdump -p "$TMP/x/gpuipc/libgpuipc.so.1" | awk '$1 == "NEEDED" { print $2 }' >"$TMP/needed"
echo "    NEEDED: $(tr '\n' ' ' <"$TMP/needed")"
check "the bundled library needs glibc only (msgpack-c linked in)" sh -c \
        '[ -s "$1" ] && ! grep -vqE "^(libc|libm|libdl|libpthread|librt)\.so\.[0-9]+$" "$1"' - "$TMP/needed"

# A fresh venv, offline.
if ! "$PYTHON" -m venv "$TMP/venv" >"$TMP/venv.log" 2>&1; then
        sed 's/^/    /' "$TMP/venv.log"
        fail "$PYTHON -m venv (apt-get install python3-venv)"
        finish
fi
VPY=$TMP/venv/bin/python
env -u PYTHONPATH PIP_NO_CACHE_DIR=1 "$VPY" -m pip install -q --no-index --no-deps "$whl" \
        >"$TMP/pip.log" 2>&1
rc=$?
[ $rc -eq 0 ] || sed 's/^/    /' "$TMP/pip.log"
check "pip install --no-index the wheel into a fresh venv" [ $rc -eq 0 ]

S=$TMP/d.sock
env -u GPUIPC_LIBCUDA "$DAEMON" --no-config --socket "$S" >"$TMP/daemon.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do [ -S "$S" ] && break; sleep 0.05; done
check "daemon listens on $S" [ -S "$S" ]

cat >"$TMP/use.py" <<'PY'
import os, sys
import gpuipc
site = sys.argv[1]
lib = os.path.realpath(gpuipc.library_path)
print("file", gpuipc.__file__.startswith(site))
print("lib", lib.startswith(site), lib)
mapped = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libgpuipc" in l})
print("mapped", mapped == [lib], mapped)
print("version", gpuipc.version(), gpuipc.__version__)
with gpuipc.connect() as c:
    c.register("wheel/x", b"hello from the wheel")
    with c.lookup("wheel/x", timeout=5) as v:
        print("lookup", bytes(v.buffer).decode())
    c.unregister("wheel/x")
PY
site=$("$VPY" -c 'import os, sysconfig; print(os.path.realpath(sysconfig.get_paths()["platlib"]))')
(cd / && env -u GPUIPC_LIBRARY -u LD_LIBRARY_PATH -u PYTHONPATH -u LD_PRELOAD GPUIPC_SOCKET="$S" \
        "$VPY" "$TMP/use.py" "$site" >"$TMP/use.out" 2>&1)
rc=$?
sed 's/^/    /' "$TMP/use.out"
check "import and use from / with nothing set (exit $rc)" [ $rc -eq 0 ]
check "the package is the venv's" grep -qx "file True" "$TMP/use.out"
check "the library loaded is the wheel's, next to the package" grep -q "^lib True " "$TMP/use.out"
check "the only libgpuipc mapped is the wheel's" grep -q "^mapped True " "$TMP/use.out"
check "libgpuipc and the package are $VERSION" grep -qx "version $VERSION $VERSION" "$TMP/use.out"
check "register and lookup through the daemon" grep -qx "lookup hello from the wheel" "$TMP/use.out"

# Next to the package comes first: another libgpuipc.so.1 on the loader's
# path (the daemon's build directory) is not the one taken.
other=$(dirname "$DAEMON")
if [ -e "$other/libgpuipc.so.1" ]; then
        (cd / && env -u GPUIPC_LIBRARY -u PYTHONPATH -u LD_PRELOAD LD_LIBRARY_PATH="$other" \
                "$VPY" -c 'import gpuipc, os; print(os.path.realpath(gpuipc.library_path))' \
                >"$TMP/order.out" 2>&1)
        check "with $other on LD_LIBRARY_PATH the wheel's library still comes first" \
                grep -q "^$site/gpuipc/libgpuipc.so.1\$" "$TMP/order.out"
fi

# mypy, where Debian's is installed: the installed package type-checks as a
# user's code sees it (py.typed).
if command -v mypy >/dev/null 2>&1; then
        printf 'import gpuipc\nc: gpuipc.Client = gpuipc.connect()\nn: int = c.register("x", b"y")\n' \
                >"$TMP/user.py"
        (cd "$TMP" && MYPYPATH= mypy --no-incremental --cache-dir=/dev/null \
                --python-executable "$VPY" user.py >"$TMP/mypy.out" 2>&1)
        rc=$?
        sed 's/^/    /' "$TMP/mypy.out"
        check "mypy sees the installed package's types (py.typed)" [ $rc -eq 0 ]
fi
finish
