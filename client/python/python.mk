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

# The package ships py.typed: its own annotations must hold (mypy, from
# Debian's mypy package, which make deps and .ci/run install).
check-mypy:
	@echo "== mypy client/python/gpuipc"
	$(Q)command -v mypy >/dev/null || { echo "check-mypy: mypy is missing (make deps)" >&2; exit 1; }
	$(Q)cd client/python && mypy --no-incremental gpuipc

CHECK_EXTRA += check-python check-mypy
.PHONY: check-python check-mypy

# The wheel (make wheel): a platform wheel, py3-none-linux_<arch>, carrying
# libgpuipc.so.1 next to the package, where the loader looks first.  The
# library is built again with msgpack-c linked in (STATIC_DEPS=1, into
# $(WHEEL_LIBDIR)) so that the wheel needs nothing but glibc, and stripped.
# Built offline from a staging copy of client/python with the system's
# setuptools and wheel: pip wheel --no-build-isolation --no-index.
#
#   make wheel         build/python/dist/gpuipc-VERSION-py3-none-linux_ARCH.whl
#   make check-wheel   install it into a fresh venv and talk to a daemon
#                      (tests/python/wheel-check.sh; part of make check)
WHEEL_DIR    := $(BUILDDIR)/python
WHEEL_LIBDIR := $(BUILDDIR)/wheel-lib
WHEEL_LIB    := $(WHEEL_LIBDIR)/$(LIBREAL)
WHEEL_SRC    := client/python/pyproject.toml client/python/setup.py client/python/README.md \
                $(wildcard client/python/gpuipc/*.py) client/python/gpuipc/py.typed LICENSE
WHEEL_STAMP  := $(WHEEL_DIR)/wheel.stamp

$(WHEEL_LIB): $(LIB_SRC) $(PROTO_SRC) client/libgpuipc.sym client/gpuipc.h FORCE
	$(Q)$(MAKE) BUILDDIR=$(WHEEL_LIBDIR) STATIC_DEPS=1 SANITIZE= $(WHEEL_LIB)

$(WHEEL_STAMP): $(WHEEL_LIB) $(WHEEL_SRC)
	@$(if $(Q),echo "  WHEEL   $(WHEEL_DIR)/dist")
	$(Q)rm -rf $(WHEEL_DIR)/src $(WHEEL_DIR)/dist && mkdir -p $(WHEEL_DIR)/src/gpuipc && \
		cp client/python/pyproject.toml client/python/setup.py client/python/README.md \
			LICENSE $(WHEEL_DIR)/src/ && \
		cp client/python/gpuipc/*.py client/python/gpuipc/py.typed $(WHEEL_DIR)/src/gpuipc/ && \
		strip --strip-unneeded -o $(WHEEL_DIR)/src/gpuipc/libgpuipc.so.1 $(WHEEL_LIB) && \
		cd $(WHEEL_DIR)/src && PIP_NO_CACHE_DIR=1 $(PYTHON) -m pip wheel -q --no-build-isolation \
			--no-index --no-deps -w ../dist . >../wheel.log 2>&1 || { cat ../wheel.log; exit 1; }
	$(Q)touch $@

wheel: $(WHEEL_STAMP)

ifeq ($(SANITIZE),1)
# The wheel's library is a plain build; the plain pass has checked it.
check-wheel:
	@echo "== check-wheel: skipped under SANITIZE=1 (the wheel carries a plain libgpuipc; the plain pass ran it)"
else
check-wheel: $(WHEEL_STAMP) $(DAEMON)
	@echo "== tests/python/wheel-check.sh $(WHEEL_DIR)/dist"
	$(Q)tests/python/wheel-check.sh $(WHEEL_DIR)/dist $(DAEMON) $(VERSION)
endif

CHECK_EXTRA += check-wheel
.PHONY: wheel check-wheel
