# packaging: Debian packages (packaging/debian, built by build-deb.sh into
# build/deb/) and their smoke test.  Included from the top Makefile.
#
#   make deb           gpuipcd, libgpuipc1, libgpuipc-dev, python3-gpuipc,
#                      libgpuipc-jni, libgpuipc-java .debs
#   make lint-deb      lintian on them: any error or warning fails (overrides
#                      in packaging/debian/*.lintian-overrides, each with its
#                      reason)
#   make check-deb     lint-deb, then install them on this machine (root),
#                      exercise the installed daemon, CLI, library, pkg-config
#                      file, Python module and Java jar, then purge them.  Not part of
#                      make check: it changes the system's packages.
#   make symbols       rewrite packaging/debian/libgpuipc1.symbols from the
#                      built library (new symbols get VERSION)
#   make check-symbols that file lists exactly what the library exports
#                      (part of make check; the package build checks it too)
deb:
	packaging/build-deb.sh

LINTIAN_FLAGS ?= --fail-on error,warning --display-info --pedantic --show-overrides

lint-deb: deb
	@command -v lintian >/dev/null 2>&1 || { echo "lint-deb: lintian not found: apt-get install lintian" >&2; exit 1; }
	@echo "== lintian $(LINTIAN_FLAGS) build/deb/*.deb"
	$(Q)lintian $(LINTIAN_FLAGS) build/deb/*.deb

check-deb: lint-deb
	packaging/smoke-test.sh

symbols: $(BUILDDIR)/$(LIBREAL)
	packaging/gen-symbols.sh $<

check-symbols: $(BUILDDIR)/$(LIBREAL)
	@echo "== packaging/gen-symbols.sh --check $<"
	$(Q)packaging/gen-symbols.sh --check $<

CHECK_EXTRA += check-symbols
.PHONY: deb lint-deb check-deb symbols check-symbols
