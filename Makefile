# gpuipcd: GPU buffer handoff broker.  See README.md.
#
#   make              build daemon, CLI and library into build/
#   make check        build and run every test, plain and under ASan+UBSan
#   make run          start gpuipcd in the foreground on run/gpuipcd.sock
#                     (GPUIPC_SOCKET=PATH or ARGS="--socket PATH ..." to change)
#   make install      PREFIX=/usr/local DESTDIR= (staged installs)
#   make deps         install the Debian build dependencies (as root)
#   make check-gpu    the real-GPU suite (tests/gpu; needs an NVIDIA GPU)
#   make fuzz         the frame decoder under libFuzzer (clang), FUZZ_SECONDS
#   make fuzz-ops     the request handlers under libFuzzer, likewise
#   make fuzz-journal the fd store's journal replay under libFuzzer, likewise
#   make clean        remove BUILDDIR (build/, with build/sanitize in it)
#
# V=1 shows the full commands.  SANITIZE=1 builds with ASan+UBSan into
# build/sanitize.  CC=clang works as well as gcc.  CFLAGS (default -O2 -g)
# add to the warnings and code flags, which are always on.

VERSION   := 0.1.0
# client/gpuipc.h carries it too (GPUIPC_VERSION_MAJOR/MINOR/PATCH).
HDR_VERSION := $(shell sed -n 's/^\#define GPUIPC_VERSION_\(MAJOR\|MINOR\|PATCH\) //p' client/gpuipc.h | paste -sd.)
ifneq ($(HDR_VERSION),$(VERSION))
$(error client/gpuipc.h says version $(HDR_VERSION), the Makefile $(VERSION))
endif
SOVERSION := 1
# libgpuipc.so.SOVERSION.ABIMINOR.0: ABIMINOR counts compatible additions.
ABIMINOR  := 1
LIBREAL   := libgpuipc.so.$(SOVERSION).$(ABIMINOR).0

PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
MANDIR     ?= $(PREFIX)/share/man
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
# zsh's own default is site-functions; Debian's zsh reads vendor-completions.
ZSHCOMPDIR  ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/share/zsh/vendor-completions,$(PREFIX)/share/zsh/site-functions)
DESTDIR    ?=

ifeq ($(SANITIZE),1)
BUILDDIR ?= build/sanitize
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else
BUILDDIR ?= build
SANFLAGS :=
endif

# The Debian packages `make deps` installs (.ci/run installs them so too).
DEB_DEPS := build-essential pkg-config libuv1-dev libmsgpack-dev libcriterion-dev \
            python3 python3-pytest python3-numpy python3-msgpack default-jdk-headless junit5 \
            python3-venv python3-pip python3-setuptools python3-wheel mypy \
            dpkg-dev debhelper fakeroot dh-python pybuild-plugin-pyproject lintian
PKG_CONFIG ?= pkg-config
MSGPACK_PC := $(shell $(PKG_CONFIG) --exists msgpack-c && echo msgpack-c || echo msgpack)
DEPS_PC    := libuv $(MSGPACK_PC)
CUDA_HOME  ?= /usr/local/cuda

# CFLAGS is the caller's (make CFLAGS="-O2 -g -Werror"); the rest always
# applies, so a CFLAGS on the command line keeps the warnings.
CFLAGS   ?= -O2 -g
WARN_CFLAGS := -std=gnu11 -Wall -Wextra -Wshadow -Wno-unused-parameter
ALL_CFLAGS   = $(WARN_CFLAGS) -MMD -MP -fvisibility=hidden -fPIC $(SANFLAGS) $(CFLAGS)
CPPFLAGS += -D_GNU_SOURCE -DGPUIPC_VERSION=\"$(VERSION)\" -Iproto -Iclient -I$(CUDA_HOME)/include \
            $(shell $(PKG_CONFIG) --cflags $(DEPS_PC) 2>/dev/null)
LDFLAGS  += $(SANFLAGS)
ifeq ($(STATIC_DEPS),1)
# Binaries that run where libuv and msgpack-c are not installed (the GPU
# machine): Debian's static archives, glibc stays dynamic.
UV_LIBS      := -Wl,-Bstatic -luv_a -Wl,-Bdynamic -lpthread -ldl -lrt
MSGPACK_LIBS := -Wl,-Bstatic -lmsgpackc -Wl,-Bdynamic
else
UV_LIBS      := $(shell $(PKG_CONFIG) --libs libuv 2>/dev/null || echo -luv)
MSGPACK_LIBS := $(shell $(PKG_CONFIG) --libs $(MSGPACK_PC) 2>/dev/null || echo -lmsgpackc)
endif
CRITERION_LIBS := $(shell $(PKG_CONFIG) --libs criterion 2>/dev/null || echo -lcriterion)
DAEMON_LIBS := $(UV_LIBS) $(MSGPACK_LIBS) -ldl
CLIENT_LIBS := $(MSGPACK_LIBS) -ldl

ifeq ($(V),1)
Q :=
else
Q := @
MAKEFLAGS += --no-print-directory
endif

# ---- what is built, by feature -----------------------------------------------

obj = $(patsubst %.c,$(BUILDDIR)/obj/%.o,$(1))
CODEC_OBJ  := $(call obj,$(wildcard proto/*.c))
PROTO_OBJ  := $(CODEC_OBJ) $(call obj,$(wildcard proto/cuda/*.c))
DAEMON_OBJ := $(call obj,$(wildcard daemon/*.c))
DAEMON_LIB_OBJ := $(filter-out %/daemon/main.o,$(DAEMON_OBJ))
LIB_OBJ    := $(call obj,$(wildcard client/lib/*.c))
CTL_OBJ    := $(call obj,$(wildcard client/ctl/*.c))

SONAME  := libgpuipc.so.$(SOVERSION)
LIBSO   := $(BUILDDIR)/libgpuipc.so
LIBA    := $(BUILDDIR)/libgpuipc.a
DAEMON  := $(BUILDDIR)/gpuipcd
CTL     := $(BUILDDIR)/gpuipcctl
T       := $(BUILDDIR)/tests
UNIT_BIN   := $(patsubst tests/unit/%.c,$(T)/%,$(wildcard tests/unit/test_*.c))
INTEG_BIN  := $(patsubst tests/integration/%.c,$(T)/%,$(wildcard tests/integration/integ_*.c))
HELPER_BIN := $(patsubst tests/integration/%.c,$(T)/%,$(wildcard tests/integration/helper-*.c))
# The suites that play systemd for the daemon: sdhost.o, with a notify thread.
SDHOST_BIN := $(patsubst %,$(T)/integ_%,restart survive harden operate batch)

all: $(DAEMON) $(CTL) $(LIBSO) $(LIBA)

$(BUILDDIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -c -o $@ $<

# The one link recipe: $(call link,LIBS) links the objects and archives of
# the prerequisites into $@.
define link
@mkdir -p $(dir $@)
@$(if $(Q),echo "  LD      $@")
$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) $(1)
endef

$(DAEMON): $(DAEMON_OBJ) $(PROTO_OBJ)
	$(call link,$(DAEMON_LIBS))

LIB_LDFLAGS := -shared -Wl,-soname,$(SONAME) -Wl,--version-script=client/libgpuipc.sym
$(BUILDDIR)/$(LIBREAL): $(LIB_OBJ) $(PROTO_OBJ) client/libgpuipc.sym
	$(call link,$(LIB_LDFLAGS) $(CLIENT_LIBS))

$(LIBSO): $(BUILDDIR)/$(LIBREAL)
	$(Q)ln -sf $(LIBREAL) $(BUILDDIR)/$(SONAME)
	$(Q)ln -sf $(SONAME) $@

# One relocatable object in which every hidden symbol is made local, so
# that the archive defines only gpuipc_* (as the shared library exports).
$(LIBA): $(LIB_OBJ) $(PROTO_OBJ)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(LD) -r -o $@.o $^ && $(OBJCOPY) --localize-hidden $@.o && \
		$(AR) rcs $@ $@.o && rm -f $@.o

$(CTL): $(CTL_OBJ) $(PROTO_OBJ) $(LIBA)
	$(call link,$(CLIENT_LIBS))

OBJCOPY ?= objcopy

# Unit tests link the codec and the daemon's modules (not main.c) directly;
# integration tests drive a real daemon through the static library.
$(BUILDDIR)/obj/tests/unit/%.o: CPPFLAGS += -Idaemon
$(T)/test_%: $(BUILDDIR)/obj/tests/unit/test_%.o $(DAEMON_LIB_OBJ) $(PROTO_OBJ)
	$(call link,$(CRITERION_LIBS) $(DAEMON_LIBS))
$(T)/integ_%: $(call obj,tests/integration/integ_%.c tests/integration/harness.c) $(PROTO_OBJ) $(LIBA)
	$(call link,$(CRITERION_LIBS) $(CLIENT_LIBS))
$(SDHOST_BIN): $(call obj,tests/integration/sdhost.c)
$(SDHOST_BIN) $(T)/integ_client $(T)/integ_batch_client: LDFLAGS += -pthread
$(T)/helper-%: $(call obj,tests/integration/helper-%.c) $(PROTO_OBJ) $(LIBA)
	$(call link,$(CLIENT_LIBS))

# The CUDA driver double: a libcuda.so.1 whose device memory is shared
# memory, loaded through GPUIPC_LIBCUDA where no GPU is.  Built without
# sanitizers or hidden visibility: it must export the cu* entry points.
CUDA_DOUBLE_SRC := $(filter-out tests/cuda-double/test_double.c,$(wildcard tests/cuda-double/*.c))
CUDA_DOUBLE := $(T)/cuda-double/libcuda.so.1
DOUBLE_CFLAGS := -std=gnu11 -O2 -g -Wall -Wextra -Wshadow -fPIC -I$(CUDA_HOME)/include

$(CUDA_DOUBLE): $(CUDA_DOUBLE_SRC) tests/cuda-double/double.h tests/cuda-double/exports.map
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(DOUBLE_CFLAGS) -shared -Wl,-soname,libcuda.so.1 -Wl,--no-undefined \
		-Wl,--version-script=tests/cuda-double/exports.map -o $@ $(CUDA_DOUBLE_SRC) -lpthread

$(T)/cuda-double/test_double: tests/cuda-double/test_double.c $(CUDA_DOUBLE)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(DOUBLE_CFLAGS) $(SANFLAGS) -o $@ $< -ldl -lpthread

# ---- fuzzers ---------------------------------------------------------------
#
# $(call fuzzer,HARNESS,TARGET,CORPUS,REPLAY,OBJECTS,LIBS): tests/fuzz/HARNESS.c
# under libFuzzer (clang) as `make TARGET`, run for FUZZ_SECONDS from
# tests/fuzz/CORPUS; and, with any compiler, $(T)/REPLAY, which `make check`
# runs over that corpus, so every kept input is a regression test.
FUZZ_SECONDS ?= 60
FUZZ_REPLAY :=

define fuzzer
$(BUILDDIR)/fuzz/$(1): $(patsubst $(BUILDDIR)/obj/%.o,%.c,$(5)) tests/fuzz/$(1).c
	@mkdir -p $$(dir $$@)
	$$(Q)clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined $$(CPPFLAGS) -Idaemon -o $$@ $$^ $(6)
$(T)/$(4): $(call obj,tests/fuzz/$(1).c tests/fuzz/replay.c) $(5)
	$$(call link,$(6))
$(2): $(BUILDDIR)/fuzz/$(1)
	@mkdir -p $(BUILDDIR)/fuzz/$(3)
	$$< -max_total_time=$$(FUZZ_SECONDS) -rss_limit_mb=2048 $(BUILDDIR)/fuzz/$(3) tests/fuzz/$(3)
FUZZ_REPLAY += $(T)/$(4):tests/fuzz/$(3)
endef

$(BUILDDIR)/obj/tests/fuzz/%.o: CPPFLAGS += -Idaemon
$(eval $(call fuzzer,fuzz-frame,fuzz,corpus,fuzz-replay,$(CODEC_OBJ),$(MSGPACK_LIBS)))
$(eval $(call fuzzer,fuzz-ops,fuzz-ops,corpus-ops,fuzz-ops-replay,$(DAEMON_LIB_OBJ) \
	$(PROTO_OBJ),$(DAEMON_LIBS)))
$(eval $(call fuzzer,fuzz-journal,fuzz-journal,corpus-journal,fuzz-journal-replay,\
	$(DAEMON_LIB_OBJ) $(PROTO_OBJ),$(DAEMON_LIBS)))

# ---- tests -------------------------------------------------------------------

TEST_BINS := $(UNIT_BIN) $(INTEG_BIN) $(HELPER_BIN) $(CUDA_DOUBLE) $(T)/cuda-double/test_double \
             $(foreach r,$(FUZZ_REPLAY),$(firstword $(subst :, ,$(r))))

tests: all $(TEST_BINS)

# Bindings and other suites add themselves through fragments beside their
# sources: each appends its test target to CHECK_EXTRA.
CHECK_EXTRA :=
-include client/python/python.mk client/java/java.mk tests/bench/bench.mk \
         tests/systemd/systemd.mk packaging/packaging.mk

# Runs every test binary; the integration tests find the binaries under
# test through GPUIPC_BUILDDIR.
check-run: tests $(CHECK_EXTRA)
	$(Q)set -e; for t in $(UNIT_BIN) $(INTEG_BIN); do \
		echo "== $$t"; GPUIPC_BUILDDIR=$(abspath $(BUILDDIR)) $$t --jobs 2; \
	done
	@echo "== $(T)/cuda-double/test_double"
	$(Q)$(T)/cuda-double/test_double $(CUDA_DOUBLE)
	$(Q)set -e; for r in $(FUZZ_REPLAY); do \
		echo "== $${r%%:*} $${r#*:}"; $${r%%:*} $${r#*:}; \
	done

# The real-GPU suite (tests/gpu): needs an NVIDIA GPU and driver to run,
# only the toolkit's headers and libcuda stub to build.
GPU_BIN := $(BUILDDIR)/gpu/gpu_test $(BUILDDIR)/gpu/libcountcuda.so
CUDA_STUBS := -L$(CUDA_HOME)/lib64/stubs -lcuda

$(BUILDDIR)/gpu/gpu_test: $(call obj,tests/gpu/gpu_test.c tests/gpu/gpu_util.c) $(PROTO_OBJ) $(LIBA)
	$(call link,$(CLIENT_LIBS) $(CUDA_STUBS) -lpthread)

$(BUILDDIR)/gpu/libcountcuda.so: tests/gpu/countcuda.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(DOUBLE_CFLAGS) -shared -o $@ $< -Wl,--no-as-needed $(CUDA_STUBS) -ldl

gpu-tests: all $(GPU_BIN)

check-gpu: gpu-tests
	tests/gpu/run.sh $(BUILDDIR)

ensure-deps:
	$(Q)$(PKG_CONFIG) --exists $(DEPS_PC) criterion 2>/dev/null || $(MAKE) deps

# The tests build the CUDA driver double and CUDA clients against the
# toolkit's cuda.h (no GPU or driver needed); the daemon and library build
# without it, with their CUDA paths compiled out.
ensure-cuda-h:
	@test -f $(CUDA_HOME)/include/cuda.h || { echo "make check: $(CUDA_HOME)/include/cuda.h" \
		"not found: the tests need the CUDA toolkit's headers (set CUDA_HOME)" >&2; exit 1; }

# Plain first, then the same suite under AddressSanitizer and UBSan.
check: ensure-deps ensure-cuda-h
	$(Q)$(MAKE) check-run
	$(Q)ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(MAKE) SANITIZE=1 check-run

run: ensure-deps
	$(Q)$(MAKE) all
	$(Q)mkdir -p run
	exec $(BUILDDIR)/gpuipcd --socket "$${GPUIPC_SOCKET:-$(CURDIR)/run/gpuipcd.sock}" $(ARGS)

# DEPS_EXTRA: more packages to install with them (.ci/run adds clang).
deps:
	@if [ "$$(id -u)" != 0 ]; then echo "make deps: run as root (apt-get)" >&2; exit 1; fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		$(DEB_DEPS) $(DEPS_EXTRA)

# ---- install -----------------------------------------------------------------

# Regenerated every time: it records PREFIX and LIBDIR, which may differ
# between two installs from one build.
$(BUILDDIR)/gpuipc.pc: packaging/gpuipc.pc.in FORCE
	@mkdir -p $(dir $@)
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
		-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|' \
		-e 's|@MSGPACK_PC@|$(MSGPACK_PC)|' $< > $@

install: all $(BUILDDIR)/gpuipc.pc
	install -v -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) \
		$(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -v -m 0755 $(DAEMON) $(DESTDIR)$(SBINDIR)/gpuipcd
	install -v -m 0755 $(CTL) $(DESTDIR)$(BINDIR)/gpuipcctl
	install -v -m 0755 $(BUILDDIR)/$(LIBREAL) $(DESTDIR)$(LIBDIR)/
	ln -sf $(LIBREAL) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libgpuipc.so
	install -v -m 0644 $(LIBA) $(DESTDIR)$(LIBDIR)/
	install -v -m 0644 client/gpuipc.h $(DESTDIR)$(INCLUDEDIR)/
	install -v -m 0644 $(BUILDDIR)/gpuipc.pc $(DESTDIR)$(PKGCONFIGDIR)/
	install -v -d $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(PREFIX)/lib/sysusers.d \
		$(DESTDIR)$(PREFIX)/lib/tmpfiles.d
	sed 's|^ExecStart=/usr/sbin/gpuipcd|ExecStart=$(SBINDIR)/gpuipcd|' systemd/gpuipcd.service \
		> $(DESTDIR)$(SYSTEMDUNITDIR)/gpuipcd.service
	install -v -m 0644 systemd/gpuipcd.socket $(DESTDIR)$(SYSTEMDUNITDIR)/
	install -v -m 0644 systemd/gpuipcd.sysusers $(DESTDIR)$(PREFIX)/lib/sysusers.d/gpuipcd.conf
	install -v -m 0644 systemd/gpuipcd.tmpfiles $(DESTDIR)$(PREFIX)/lib/tmpfiles.d/gpuipcd.conf
	for s in 1 3 5 8; do install -v -d $(DESTDIR)$(MANDIR)/man$$s; \
		install -v -m 0644 docs/man/*.$$s $(DESTDIR)$(MANDIR)/man$$s/; done
	install -v -d $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR)
	$(CTL) completion bash > $(DESTDIR)$(BASHCOMPDIR)/gpuipcctl
	$(CTL) completion zsh > $(DESTDIR)$(ZSHCOMPDIR)/_gpuipcctl

clean:
	rm -rf $(BUILDDIR)

.PHONY: FORCE all tests check ensure-cuda-h check-run check-gpu fuzz fuzz-ops fuzz-journal \
	gpu-tests ensure-deps run deps install clean
.PRECIOUS: $(BUILDDIR)/obj/%.o

-include $(shell find $(BUILDDIR)/obj -name '*.d' 2>/dev/null)
