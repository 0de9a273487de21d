#!/bin/sh
# make check-python: tests/python (pytest) against the library and daemon
# in BUILDDIR.  With --sanitized (SANITIZE=1) python loads the ASan/UBSan
# build of libgpuipc only with the sanitizer runtimes preloaded (CC names
# them) and leak detection off (the interpreter "leaks" at exit); the
# daemons the tests start keep this run's ASAN_OPTIONS.
#
#   tests/python/run.sh BUILDDIR [--sanitized]
set -u
B=$(cd "$1" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
echo "== tests/python ($PYTHON -m pytest)"
"$PYTHON" -c 'import pytest, numpy' 2>/dev/null ||
        { echo "check-python: $PYTHON lacks pytest or numpy (make deps)" >&2; exit 1; }
export GPUIPC_BUILDDIR="$B" GPUIPC_LIBRARY="$B/libgpuipc.so.1"
if [ "${2:-}" = --sanitized ]; then
        LD_PRELOAD="$(${CC:-cc} -print-file-name=libasan.so) $(${CC:-cc} -print-file-name=libubsan.so)"
        export LD_PRELOAD
        export GPUIPC_DAEMON_ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
        export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0
fi
# shellcheck disable=SC2086 # PYTEST_ARGS is a list of words
"$PYTHON" -m pytest ${PYTEST_ARGS:--q -p no:cacheprovider} tests/python
rc=$?
[ $rc != 5 ] || echo "check-python: pytest collected no tests" >&2
exit $rc
