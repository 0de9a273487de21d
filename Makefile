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
#
# V=1 shows the full commands.  SANITIZE=1 builds with ASan+UBSan into
# build/sanitize.  CC=clang works as well as gcc.

VERSION   := 0.1.0
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

PKG_CONFIG ?= pkg-config
MSGPACK_PC := $(shell $(PKG_CONFIG) --exists msgpack-c && echo msgpack-c || echo msgpack)
DEPS_PC    := libuv $(MSGPACK_PC)
CUDA_HOME  ?= /usr/local/cuda

CFLAGS   ?= -O2 -g
CFLAGS   += -std=gnu11 -Wall -Wextra -Wshadow -Wno-unused-parameter -MMD -MP \
            -fvisibility=hidden -fPIC $(SANFLAGS)
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

ifeq ($(V),1)
Q :=
else
Q := @
MAKEFLAGS += --no-print-directory
endif

PROTO_SRC  := $(wildcard proto/*.c)
DAEMON_SRC := $(wildcard daemon/*.c)
LIB_SRC    := $(wildcard client/lib/*.c)
CTL_SRC    := $(wildcard client/ctl/*.c)
UNIT_SRC   := $(wildcard tests/unit/*.c)
INTEG_SRC  := $(filter-out tests/integration/helper-%.c,$(wildcard tests/integration/*.c))
INTEG_HELPER_SRC := $(wildcard tests/integration/helper-*.c)

obj = $(patsubst %.c,$(BUILDDIR)/obj/%.o,$(1))
PROTO_OBJ  := $(call obj,$(PROTO_SRC))
DAEMON_OBJ := $(call obj,$(DAEMON_SRC))
DAEMON_LIB_OBJ := $(filter-out %/daemon/main.o,$(DAEMON_OBJ))
LIB_OBJ    := $(call obj,$(LIB_SRC))
CTL_OBJ    := $(call obj,$(CTL_SRC))

SONAME  := libgpuipc.so.$(SOVERSION)
LIBSO   := $(BUILDDIR)/libgpuipc.so
LIBA    := $(BUILDDIR)/libgpuipc.a
DAEMON  := $(BUILDDIR)/gpuipcd
CTL     := $(BUILDDIR)/gpuipcctl
UNIT_BIN  := $(patsubst tests/unit/%.c,$(BUILDDIR)/tests/%,$(UNIT_SRC))
INTEG_BIN := $(patsubst tests/integration/%.c,$(BUILDDIR)/tests/%,$(INTEG_SRC))
INTEG_HELPER_BIN := $(patsubst tests/integration/%.c,$(BUILDDIR)/tests/%,$(INTEG_HELPER_SRC))

all: $(DAEMON) $(CTL) $(LIBSO) $(LIBA)

$(BUILDDIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(DAEMON): $(DAEMON_OBJ) $(PROTO_OBJ)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(UV_LIBS) $(MSGPACK_LIBS) -ldl

$(BUILDDIR)/$(LIBREAL): $(LIB_OBJ) $(PROTO_OBJ) client/libgpuipc.sym
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,-soname,$(SONAME) \
		-Wl,--version-script=client/libgpuipc.sym -o $@ \
		$(LIB_OBJ) $(PROTO_OBJ) $(MSGPACK_LIBS) -ldl

$(LIBSO): $(BUILDDIR)/$(LIBREAL)
	$(Q)ln -sf $(LIBREAL) $(BUILDDIR)/$(SONAME)
	$(Q)ln -sf $(SONAME) $@

$(LIBA): $(LIB_OBJ) $(PROTO_OBJ)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(CTL): $(CTL_OBJ) $(LIBA)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(CTL_OBJ) $(LIBA) $(MSGPACK_LIBS) -ldl

# Unit tests link the codec and the daemon's modules (not main.c) directly.
$(BUILDDIR)/obj/tests/unit/%.o: CPPFLAGS += -Idaemon
$(BUILDDIR)/tests/test_%: $(BUILDDIR)/obj/tests/unit/test_%.o $(DAEMON_LIB_OBJ) $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(CRITERION_LIBS) $(UV_LIBS) $(MSGPACK_LIBS) -ldl

# Integration tests drive a real daemon through the static library.
$(BUILDDIR)/tests/integ_%: $(BUILDDIR)/obj/tests/integration/integ_%.o $(BUILDDIR)/obj/tests/integration/harness.o $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(CRITERION_LIBS) $(MSGPACK_LIBS) -ldl

# integ_restart plays systemd for the daemon: sdhost.o, with a notify thread.
$(BUILDDIR)/tests/integ_restart: $(BUILDDIR)/obj/tests/integration/sdhost.o
$(BUILDDIR)/tests/integ_restart: LDFLAGS += -pthread
$(BUILDDIR)/tests/integ_survive: $(BUILDDIR)/obj/tests/integration/sdhost.o
$(BUILDDIR)/tests/integ_survive: LDFLAGS += -pthread
$(BUILDDIR)/tests/integ_client: LDFLAGS += -pthread
$(BUILDDIR)/tests/integ_harden: $(BUILDDIR)/obj/tests/integration/sdhost.o
$(BUILDDIR)/tests/integ_harden: LDFLAGS += -pthread
$(BUILDDIR)/tests/integ_operate: $(BUILDDIR)/obj/tests/integration/sdhost.o
$(BUILDDIR)/tests/integ_operate: LDFLAGS += -pthread

$(BUILDDIR)/tests/helper-%: $(BUILDDIR)/obj/tests/integration/helper-%.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(MSGPACK_LIBS) -ldl

# The CUDA driver double: a libcuda.so.1 whose device memory is shared
# memory, loaded through GPUIPC_LIBCUDA where no GPU is.  Built without
# sanitizers or hidden visibility: it must export the cu* entry points.
CUDA_DOUBLE_SRC := $(filter-out tests/cuda/test_double.c,$(wildcard tests/cuda/*.c))
CUDA_DOUBLE := $(BUILDDIR)/tests/cuda/libcuda.so.1
DOUBLE_CFLAGS := -std=gnu11 -O2 -g -Wall -Wextra -Wshadow -fPIC -I$(CUDA_HOME)/include

$(CUDA_DOUBLE): $(CUDA_DOUBLE_SRC) tests/cuda/double.h tests/cuda/exports.map
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(DOUBLE_CFLAGS) -shared -Wl,-soname,libcuda.so.1 -Wl,--no-undefined \
		-Wl,--version-script=tests/cuda/exports.map -o $@ $(CUDA_DOUBLE_SRC) -lpthread

$(BUILDDIR)/tests/cuda/test_double: tests/cuda/test_double.c $(CUDA_DOUBLE)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(DOUBLE_CFLAGS) $(SANFLAGS) -o $@ $< -ldl -lpthread

TEST_BINS := $(UNIT_BIN) $(filter $(BUILDDIR)/tests/integ_%,$(INTEG_BIN)) $(INTEG_HELPER_BIN) \
             $(CUDA_DOUBLE) $(BUILDDIR)/tests/cuda/test_double $(BUILDDIR)/tests/fuzz-replay \
             $(BUILDDIR)/tests/fuzz-ops-replay $(BUILDDIR)/tests/fuzz-journal-replay

tests: all $(TEST_BINS)

# Runs every test binary; the integration tests find the binaries under
# test through GPUIPC_BUILDDIR.
# Bindings and other suites add themselves through fragments beside their
# sources: each appends its test target to CHECK_EXTRA.
CHECK_EXTRA :=
-include client/python/python.mk client/java/java.mk tests/bench/bench.mk \
         tests/systemd/systemd.mk packaging/packaging.mk

check-run: tests $(CHECK_EXTRA)
	$(Q)set -e; for t in $(filter $(BUILDDIR)/tests/test_% $(BUILDDIR)/tests/integ_%,$(TEST_BINS)); do \
		echo "== $$t"; GPUIPC_BUILDDIR=$(abspath $(BUILDDIR)) $$t --jobs 2; \
	done
	@echo "== $(BUILDDIR)/tests/cuda/test_double"
	$(Q)$(BUILDDIR)/tests/cuda/test_double $(CUDA_DOUBLE)
	@echo "== $(BUILDDIR)/tests/fuzz-replay tests/fuzz/corpus"
	$(Q)$(BUILDDIR)/tests/fuzz-replay tests/fuzz/corpus
	@echo "== $(BUILDDIR)/tests/fuzz-ops-replay tests/fuzz/corpus-ops"
	$(Q)$(BUILDDIR)/tests/fuzz-ops-replay tests/fuzz/corpus-ops
	@echo "== $(BUILDDIR)/tests/fuzz-journal-replay tests/fuzz/corpus-journal"
	$(Q)$(BUILDDIR)/tests/fuzz-journal-replay tests/fuzz/corpus-journal

# The frame decoder under libFuzzer (clang): `make fuzz` runs it for
# FUZZ_SECONDS; check-run replays tests/fuzz/corpus through the same entry
# point with any compiler, so every kept input is a regression test.
CODEC_SRC := $(filter-out proto/cuda_drv.c,$(PROTO_SRC))
FUZZ_SECONDS ?= 60

$(BUILDDIR)/fuzz/fuzz-frame: $(CODEC_SRC) tests/fuzz/fuzz-frame.c
	@mkdir -p $(dir $@)
	$(Q)clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined -D_GNU_SOURCE -Iproto -o $@ $^ $(MSGPACK_LIBS)

$(BUILDDIR)/tests/fuzz-replay: $(CODEC_SRC) tests/fuzz/fuzz-frame.c tests/fuzz/replay.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -std=gnu11 -g -O1 -Wall -Wextra -D_GNU_SOURCE -Iproto $(SANFLAGS) -o $@ $^ \
		$(MSGPACK_LIBS)

# The request handlers under libFuzzer: a daemon in-process, frames built
# from the input; its corpus is replayed by make check too.
FUZZ_OPS_SRC := $(filter-out daemon/main.c,$(DAEMON_SRC)) $(PROTO_SRC) tests/fuzz/fuzz-ops.c

$(BUILDDIR)/fuzz/fuzz-ops: $(FUZZ_OPS_SRC)
	@mkdir -p $(dir $@)
	$(Q)clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined $(CPPFLAGS) -Idaemon -o $@ $^ $(UV_LIBS) \
		$(MSGPACK_LIBS) -ldl

$(BUILDDIR)/tests/fuzz-ops-replay: tests/fuzz/fuzz-ops.c tests/fuzz/replay.c $(DAEMON_LIB_OBJ) $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -std=gnu11 -g -O1 -Wall -Wextra -Wshadow -Wno-unused-parameter $(CPPFLAGS) \
		-Idaemon $(SANFLAGS) -o $@ $^ $(UV_LIBS) $(MSGPACK_LIBS) -ldl

fuzz-ops: $(BUILDDIR)/fuzz/fuzz-ops
	@mkdir -p $(BUILDDIR)/fuzz/corpus-ops
	$< -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 $(BUILDDIR)/fuzz/corpus-ops tests/fuzz/corpus-ops

# The journal replay (restart_replay.c) under libFuzzer: a daemon
# in-process, the input a journal; its corpus is replayed by make check too.
FUZZ_JOURNAL_SRC := $(filter-out daemon/main.c,$(DAEMON_SRC)) $(PROTO_SRC) tests/fuzz/fuzz-journal.c

$(BUILDDIR)/fuzz/fuzz-journal: $(FUZZ_JOURNAL_SRC)
	@mkdir -p $(dir $@)
	$(Q)clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined $(CPPFLAGS) -Idaemon -o $@ $^ $(UV_LIBS) \
		$(MSGPACK_LIBS) -ldl

$(BUILDDIR)/tests/fuzz-journal-replay: tests/fuzz/fuzz-journal.c tests/fuzz/replay.c $(DAEMON_LIB_OBJ) $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -std=gnu11 -g -O1 -Wall -Wextra -Wshadow -Wno-unused-parameter $(CPPFLAGS) \
		-Idaemon $(SANFLAGS) -o $@ $^ $(UV_LIBS) $(MSGPACK_LIBS) -ldl

fuzz-journal: $(BUILDDIR)/fuzz/fuzz-journal
	@mkdir -p $(BUILDDIR)/fuzz/corpus-journal
	$< -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 $(BUILDDIR)/fuzz/corpus-journal \
		tests/fuzz/corpus-journal

fuzz: $(BUILDDIR)/fuzz/fuzz-frame
	@mkdir -p $(BUILDDIR)/fuzz/corpus
	$< -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 $(BUILDDIR)/fuzz/corpus tests/fuzz/corpus

# The real-GPU suite (tests/gpu): needs an NVIDIA GPU and driver to run,
# only the toolkit's headers and libcuda stub to build.
GPU_BIN := $(BUILDDIR)/gpu/gpu_test $(BUILDDIR)/gpu/libcountcuda.so
CUDA_STUBS := -L$(CUDA_HOME)/lib64/stubs -lcuda

$(BUILDDIR)/gpu/gpu_test: $(call obj,tests/gpu/gpu_test.c tests/gpu/gpu_util.c) $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(MSGPACK_LIBS) $(CUDA_STUBS) -ldl -lpthread

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

deps:
	@if [ "$$(id -u)" != 0 ]; then echo "make deps: run as root (apt-get)" >&2; exit 1; fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		build-essential pkg-config libuv1-dev libmsgpack-dev libcriterion-dev \
		python3 python3-pytest python3-numpy python3-msgpack default-jdk-headless junit5 \
		python3-venv python3-pip python3-setuptools python3-wheel mypy \
		dpkg-dev debhelper fakeroot dh-python pybuild-plugin-pyproject lintian

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
	rm -rf build

.PHONY: FORCE all tests check ensure-cuda-h check-run check-gpu fuzz fuzz-ops fuzz-journal gpu-tests ensure-deps run deps install clean
.PRECIOUS: $(BUILDDIR)/obj/%.o

-include $(shell find $(BUILDDIR)/obj -name '*.d' 2>/dev/null)
