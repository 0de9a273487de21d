# packaging: Debian packages (packaging/debian, built by build-deb.sh into
# build/deb/) and their smoke test.  Included from the top Makefile.
#
#   make deb         gpuipcd, libgpuipc1, libgpuipc-dev, python3-gpuipc .debs
#   make check-deb   install them on this machine (root), exercise the
#                    installed daemon, CLI, library, pkg-config file and Python
#                    module, then purge them.  Not part of make check: it
#                    changes the system's packages.
deb:
	packaging/build-deb.sh

check-deb: deb
	packaging/smoke-test.sh

.PHONY: deb check-deb
