# client/python/python.mk: the Python package.  check-python (tests/python/run.sh);
# check-mypy: the annotations it ships; wheel: a platform wheel needing only glibc
# (client/python/build-wheel.sh); check-wheel: it in a fresh venv (wheel-check.sh).
PYTHON ?= /usr/bin/python3
export PYTHON PYTEST_ARGS
WHEEL_LIB := $(BUILDDIR)/wheel-lib/$(LIBREAL)
check-python: $(LIBSO) $(DAEMON) $(CUDA_DOUBLE)
	$(Q)CC="$(CC)" tests/python/run.sh $(BUILDDIR) $(if $(SANFLAGS),--sanitized)
check-mypy:
	@echo "== mypy client/python/gpuipc"
	$(Q)command -v mypy >/dev/null || { echo "check-mypy: mypy is missing (make deps)" >&2; exit 1; }
	$(Q)cd client/python && mypy --no-incremental gpuipc
$(WHEEL_LIB): FORCE
	$(Q)$(MAKE) BUILDDIR=$(BUILDDIR)/wheel-lib STATIC_DEPS=1 SANITIZE= $@
$(BUILDDIR)/python/wheel.stamp: $(WHEEL_LIB) LICENSE $(addprefix client/python/,pyproject.toml setup.py \
                                README.md gpuipc/py.typed) $(wildcard client/python/gpuipc/*.py)
	$(Q)client/python/build-wheel.sh $(BUILDDIR)/python $(WHEEL_LIB) && touch $@
wheel: $(BUILDDIR)/python/wheel.stamp
ifneq ($(SANITIZE),1)
check-wheel: wheel $(DAEMON)
	tests/python/wheel-check.sh $(BUILDDIR)/python/dist $(DAEMON) $(VERSION)
endif
CHECK_EXTRA += check-python check-mypy
PLAIN_ONLY += check-wheel
.PHONY: check-python check-mypy wheel check-wheel
