# client/python/python.mk: the Python package's tests (tests/python), run by
# `make check` through CHECK_EXTRA.  Included by the top-level Makefile after
# LIBSO, DAEMON, CUDA_DOUBLE and BUILDDIR are defined.
#
# Under SANITIZE=1 libgpuipc is ASan/UBSan-instrumented: python loads it only
# with the sanitizer runtimes preloaded, and with leak detection off (the
# interpreter itself "leaks" at exit).  The daemon the tests start keeps the
# ASAN_OPTIONS of the make run (GPUIPC_DAEMON_ASAN_OPTIONS).
PYTHON ?= /usr/bin/python3
PYTEST_ARGS ?= -q -p no:cacheprovider

ifeq ($(SANITIZE),1)
PY_SAN_ENV = LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
             GPUIPC_DAEMON_ASAN_OPTIONS="$${ASAN_OPTIONS:-detect_leaks=1}" \
             ASAN_OPTIONS=detect_leaks=0:abort_on_error=0
else
PY_SAN_ENV =
endif

check-python: $(LIBSO) $(DAEMON) $(CUDA_DOUBLE)
	@echo "== tests/python ($(PYTHON) -m pytest)"
	$(Q)if ! $(PYTHON) -c 'import pytest, numpy' 2>/dev/null; then \
		echo "check-python: $(PYTHON) lacks pytest or numpy (make deps)" >&2; exit 1; fi
	$(Q)GPUIPC_BUILDDIR=$(abspath $(BUILDDIR)) GPUIPC_LIBRARY=$(abspath $(LIBSO)).$(SOVERSION) \
		$(PY_SAN_ENV) $(PYTHON) -m pytest $(PYTEST_ARGS) tests/python; rc=$$?; \
		if [ $$rc = 5 ]; then echo "check-python: pytest collected no tests" >&2; fi; \
		exit $$rc

CHECK_EXTRA += check-python
.PHONY: check-python
