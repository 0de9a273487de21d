#!/bin/sh
# make wheel: OUT/dist/gpuipc-VERSION-py3-none-linux_ARCH.whl, a platform
# wheel that carries LIB (libgpuipc built with STATIC_DEPS=1, so that it
# needs only glibc) stripped, as gpuipc/libgpuipc.so.1, where the loader
# looks first.  Built offline from a staging copy of client/python with the
# system's setuptools and wheel.
#
#   client/python/build-wheel.sh OUT LIB
set -eu
OUT=$1 LIB=$2
PYTHON=${PYTHON:-/usr/bin/python3}
echo "  WHEEL   $OUT/dist"
rm -rf "$OUT/src" "$OUT/dist"
mkdir -p "$OUT/src/gpuipc"
cp client/python/pyproject.toml client/python/setup.py client/python/README.md LICENSE "$OUT/src/"
cp client/python/gpuipc/*.py client/python/gpuipc/py.typed "$OUT/src/gpuipc/"
strip --strip-unneeded -o "$OUT/src/gpuipc/libgpuipc.so.1" "$LIB"
cd "$OUT/src"
PIP_NO_CACHE_DIR=1 "$PYTHON" -m pip wheel -q --no-build-isolation --no-index --no-deps \
        -w ../dist . >../wheel.log 2>&1 || { cat ../wheel.log; exit 1; }
