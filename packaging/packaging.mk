# packaging/packaging.mk: the Debian packages (README.md): deb, lint-deb, check-deb
# (installs them: root, not in make check), symbols and check-symbols (libgpuipc1.symbols);
# check-kubernetes (packaging/kubernetes/gpuipcd.yaml's structure, python3-yaml).
LINTIAN_FLAGS ?= --fail-on error,warning --display-info --pedantic --show-overrides
deb:
	packaging/build-deb.sh
lint-deb: deb
	@command -v lintian >/dev/null || { echo "lint-deb: lintian not found: apt-get install lintian" >&2; exit 1; }
	@echo "== lintian $(LINTIAN_FLAGS) build/deb/*.deb"
	$(Q)lintian $(LINTIAN_FLAGS) build/deb/*.deb
check-deb: lint-deb
	packaging/smoke-test.sh
symbols check-symbols: $(BUILDDIR)/$(LIBREAL)
	packaging/gen-symbols.sh $(if $(filter check-%,$@),--check) $<
CHECK_EXTRA += check-symbols
PYTHON ?= /usr/bin/python3
check-kubernetes: $(DAEMON)
	$(PYTHON) tests/kubernetes/check.py $(BUILDDIR)
CHECK_EXTRA += check-kubernetes
.PHONY: deb lint-deb check-deb symbols check-symbols check-kubernetes
