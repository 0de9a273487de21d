# tests/systemd: the units in systemd/ checked with systemd-analyze,
# systemd-sysusers and systemd-tmpfiles, and socket activation exercised
# with systemd-socket-activate (no systemd as PID 1 needed).  Skips when the
# systemd tools are missing.  Included from the top Makefile.
check-systemd: all
	tests/systemd/check.sh $(BUILDDIR)

CHECK_EXTRA += check-systemd
.PHONY: check-systemd
