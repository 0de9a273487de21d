#!/bin/bash
# Builds the Debian packages gpuipcd, libgpuipc1, libgpuipc-dev,
# python3-gpuipc, libgpuipc-jni and libgpuipc-java into build/deb/ (make deb).
#
# dpkg-buildpackage wants debian/ at the source root, and the tree keeps it
# in packaging/debian/.  So: copy the working tree's files (tracked ones and
# untracked ones git does not ignore; never build/) into a temporary
# directory, copy packaging/debian there as debian/ (its unit files are
# symbolic links to systemd/, copied as files), and build binary packages
# only, unsigned.
#
#   packaging/build-deb.sh [--deps]   --deps: make deps first (root)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/build/deb

if [ "${1:-}" = --deps ]; then
        make -C "$ROOT" deps    # the Makefile's DEB_DEPS hold the packaging tools too
fi
for tool in dpkg-buildpackage dh; do
        command -v $tool >/dev/null 2>&1 || {
                echo "build-deb.sh: $tool not found: apt-get install dpkg-dev debhelper" \
                     "(or run with --deps)" >&2
                exit 1
        }
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpuipcd-deb.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
SRC=$TMP/gpuipcd-$(sed -n '1s/^gpuipcd (\([^)]*\)).*/\1/p' "$ROOT/packaging/debian/changelog")
mkdir -p "$SRC"

cd "$ROOT"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        # --others --exclude-standard: files not committed yet, without
        # what .gitignore names (build/, caches).  Files deleted in the work
        # tree but still in the index are skipped.
        git ls-files -z --cached --others --exclude-standard |
                while IFS= read -r -d '' f; do
                        case $f in build/*|debian/*) continue ;; esac
                        [ -e "$f" ] || [ -L "$f" ] || continue
                        printf '%s\0' "$f"
                done | xargs -0 cp --parents -P -t "$SRC"
else
        tar -C "$ROOT" --exclude=./build --exclude=./debian --exclude=.git -cf - . |
                tar -C "$SRC" -xf -
fi
rm -rf "$SRC/debian"
cp -RL "$ROOT/packaging/debian" "$SRC/debian"

# Where cuda.h comes from (debian/control): Debian's nvidia-cuda-dev, which
# the Build-Depends name, else the toolkit in CUDA_HOME (build profile
# pkg.gpuipcd.cudahome), else a host-only build only if GPUIPC_NO_CUDA=1.
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export CUDA_HOME
profiles=
if dpkg-query -W -f '${Status}' nvidia-cuda-dev 2>/dev/null | grep -q ' installed$'; then
        :
elif [ -f "$CUDA_HOME/include/cuda.h" ]; then
        profiles=pkg.gpuipcd.cudahome
elif [ "${GPUIPC_NO_CUDA:-}" = 1 ]; then
        profiles=pkg.gpuipcd.nocuda
else
        echo "build-deb.sh: no cuda.h: install nvidia-cuda-dev (non-free), set CUDA_HOME" \
             "to the CUDA toolkit, or set GPUIPC_NO_CUDA=1 for a host-only build" >&2
        exit 1
fi

# The system's tools only, as on a Debian build machine: pybuild runs
# "python3.11", which must be /usr/bin's (with dh-python's modules), not an
# interpreter that PATH finds first (pyenv, a venv).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

cd "$SRC"
echo "== dpkg-buildpackage -us -uc -b ${profiles:+-P$profiles }in $SRC (CUDA_HOME=$CUDA_HOME)"
dpkg-buildpackage -us -uc -b ${profiles:+-P$profiles}
mkdir -p "$OUT"
rm -f "$OUT"/*.deb "$OUT"/*.buildinfo "$OUT"/*.changes
cp "$TMP"/*.deb "$TMP"/*.buildinfo "$TMP"/*.changes "$OUT"/
echo "== packages in $OUT:"
ls -l "$OUT"
