# gpuipcd: GPU buffer handoff broker.  README.md ("Building and installing")
# explains the targets: all (into build/), check (tests/README.md), run,
# install (PREFIX, DESTDIR: packaging/install.sh), deps, check-gpu, fuzz,
# fuzz-ops, fuzz-journal, fuzz-client and clean.  V=1 shows the commands; SANITIZE=1
# builds with ASan+UBSan into build/sanitize; CFLAGS adds to the warnings.

VERSION := 0.1.0
ifneq ($(shell sed -n 's/^\#define GPUIPC_VERSION_\(MAJOR\|MINOR\|PATCH\) //p' client/gpuipc.h | paste -sd.),$(VERSION))
$(error client/gpuipc.h and the Makefile ($(VERSION)) differ on the version)
endif
# libgpuipc.so.1.ABIMINOR.0: ABIMINOR counts compatible additions.
SONAME  := libgpuipc.so.1
LIBREAL := $(SONAME).1.0
ifeq ($(SANITIZE),1)
BUILDDIR ?= build/sanitize
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
endif
BUILDDIR ?= build
# What `make deps` installs (.ci/run too, adding DEPS_EXTRA=clang).
DEB_DEPS := build-essential pkg-config libuv1-dev libmsgpack-dev libcriterion-dev python3 python3-pytest \
            python3-numpy python3-msgpack python3-yaml python3-venv python3-pip python3-setuptools python3-wheel mypy \
            default-jdk-headless junit5 dpkg-dev debhelper fakeroot dh-python pybuild-plugin-pyproject lintian
PKG_CONFIG ?= pkg-config
MSGPACK_PC := $(shell $(PKG_CONFIG) --exists msgpack-c && echo msgpack-c || echo msgpack)
DEPS_PC    := libuv $(MSGPACK_PC)
CUDA_HOME  ?= /usr/local/cuda
OBJCOPY    ?= objcopy
CFLAGS   ?= -O2 -g
ALL_CFLAGS = -std=gnu11 -Wall -Wextra -Wshadow -Wno-unused-parameter -MMD -MP \
             -fvisibility=hidden -fPIC $(SANFLAGS) $(CFLAGS)
CPPFLAGS += -D_GNU_SOURCE -DGPUIPC_VERSION=\"$(VERSION)\" -Iproto -Iclient -I$(CUDA_HOME)/include \
            $(shell $(PKG_CONFIG) --cflags $(DEPS_PC) 2>/dev/null)
LDFLAGS  += $(SANFLAGS)
UV_LIBS      := $(shell $(PKG_CONFIG) --libs libuv 2>/dev/null || echo -luv)
MSGPACK_LIBS := $(shell $(PKG_CONFIG) --libs $(MSGPACK_PC) 2>/dev/null || echo -lmsgpackc)
ifeq ($(STATIC_DEPS),1)
# For hosts without libuv and msgpack-c (a GPU machine); glibc stays dynamic.
UV_LIBS      := -Wl,-Bstatic -luv_a -Wl,-Bdynamic -lpthread -ldl -lrt
MSGPACK_LIBS := -Wl,-Bstatic -lmsgpackc -Wl,-Bdynamic
endif
CRITERION_LIBS := $(shell $(PKG_CONFIG) --libs criterion 2>/dev/null || echo -lcriterion)
DAEMON_LIBS := $(UV_LIBS) $(MSGPACK_LIBS) -ldl
CLIENT_LIBS := $(MSGPACK_LIBS) -ldl
Q := $(if $(filter 1,$(V)),,@)
MAKEFLAGS += $(if $(Q),--no-print-directory)
# ---- daemon, library, CLI: every .c in their folders (MODULES: the daemon but main.c)
obj = $(patsubst %.c,$(BUILDDIR)/obj/%.o,$(1))
PROTO_OBJ := $(call obj,$(wildcard proto/*.c proto/cuda/*.c))
LIB_OBJ   := $(call obj,$(wildcard client/lib/*.c))
MODULES   := $(filter-out %/main.o,$(call obj,$(wildcard daemon/*.c))) $(PROTO_OBJ)
DAEMON := $(BUILDDIR)/gpuipcd
CTL    := $(BUILDDIR)/gpuipcctl
LIBSO  := $(BUILDDIR)/libgpuipc.so
LIBA   := $(BUILDDIR)/libgpuipc.a
T      := $(BUILDDIR)/tests

all: $(DAEMON) $(CTL) $(LIBSO) $(LIBA)
$(BUILDDIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -c -o $@ $<
# $(call link,LIBS): the one link recipe, of the objects and archives among the prerequisites.
define link
@mkdir -p $(dir $@)
@$(if $(Q),echo "  LD      $@")
$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o %.a,$^) $(1)
endef
$(DAEMON): $(call obj,daemon/main.c) $(MODULES)
	$(call link,$(DAEMON_LIBS))
LIB_LDFLAGS := -shared -Wl,-soname,$(SONAME) -Wl,--version-script=client/libgpuipc.sym
$(BUILDDIR)/$(LIBREAL): $(LIB_OBJ) $(PROTO_OBJ) client/libgpuipc.sym
	$(call link,$(LIB_LDFLAGS) $(CLIENT_LIBS))
$(LIBSO): $(BUILDDIR)/$(LIBREAL)
	$(Q)ln -sf $(LIBREAL) $(BUILDDIR)/$(SONAME) && ln -sf $(SONAME) $@
# The archive defines only gpuipc_*: one relocatable object, its hidden symbols made local.
$(LIBA): $(LIB_OBJ) $(PROTO_OBJ)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(LD) -r -o $@.o $^ && $(OBJCOPY) --localize-hidden $@.o && \
		$(AR) rcs $@ $@.o && rm -f $@.o
$(CTL): $(call obj,$(wildcard client/ctl/*.c)) $(PROTO_OBJ) $(LIBA)
	$(call link,$(CLIENT_LIBS))

# ---- tests: every test_*, integ_*, helper-* in their folders ---------------------
# test_lib_* link the library's objects (libgpuipc.a keeps them local).
UNIT_BIN   := $(patsubst tests/unit/%.c,$(T)/%,$(wildcard tests/unit/test_*.c))
INTEG_BIN  := $(patsubst tests/integration/%.c,$(T)/%,$(wildcard tests/integration/integ_*.c))
HELPER_BIN := $(patsubst tests/integration/%.c,$(T)/%,$(wildcard tests/integration/helper-*.c))
$(BUILDDIR)/obj/tests/unit/%.o $(BUILDDIR)/obj/tests/fuzz/%.o: CPPFLAGS += -Idaemon -Iclient/lib
$(T)/test_%: $(BUILDDIR)/obj/tests/unit/test_%.o $(MODULES)
	$(call link,$(CRITERION_LIBS) $(DAEMON_LIBS))
$(T)/test_proto: $(call obj,tests/fuzz/walk.c)
$(T)/test_lib_%: $(BUILDDIR)/obj/tests/unit/test_lib_%.o $(LIB_OBJ) $(PROTO_OBJ)
	$(call link,$(CRITERION_LIBS) $(CLIENT_LIBS))
$(T)/integ_%: $(call obj,$(addprefix tests/integration/,integ_%.c harness.c sdhost.c)) $(PROTO_OBJ) $(LIBA)
	$(call link,$(CRITERION_LIBS) $(CLIENT_LIBS) -pthread)
$(T)/helper-%: $(call obj,tests/integration/helper-%.c) $(PROTO_OBJ) $(LIBA)
	$(call link,$(CLIENT_LIBS))

# The CUDA driver double (tests/cuda-double/README.md) and the shims in front of
# the real one (tests/gpu, tests/bench) export cu*: no sanitizers, no -fvisibility.
CUDA_DOUBLE := $(T)/cuda-double/libcuda.so.1
DOUBLE_SRC  := $(filter-out %/test_double.c,$(wildcard tests/cuda-double/*.c))
DOUBLE_CFLAGS := -std=gnu11 -O2 -g -Wall -Wextra -Wshadow -fPIC -I$(CUDA_HOME)/include
# What the GPU programs link against: the toolkit's stub, or where a toolkit
# has only headers, the double (the same soname, so a GPU's driver loads).
CUDA_STUB_LIB := $(firstword $(wildcard $(CUDA_HOME)/lib64/stubs/libcuda.so) $(CUDA_DOUBLE))
CUDA_STUBS  := -L$(dir $(CUDA_STUB_LIB)) -l:$(notdir $(CUDA_STUB_LIB))
$(CUDA_DOUBLE): $(DOUBLE_SRC) tests/cuda-double/double.h tests/cuda-double/exports.map
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(DOUBLE_CFLAGS) -shared -Wl,-soname,libcuda.so.1 -Wl,--no-undefined \
		-Wl,--version-script=tests/cuda-double/exports.map -o $@ $(DOUBLE_SRC) -lpthread
$(T)/cuda-double/test_double: tests/cuda-double/test_double.c $(CUDA_DOUBLE)
	$(Q)$(CC) $(DOUBLE_CFLAGS) $(SANFLAGS) -o $@ $< -ldl -lpthread
SHIM = mkdir -p $(dir $@) && $(CC) $(DOUBLE_CFLAGS) -shared -o $@ $< -Wl,--no-as-needed $(CUDA_STUBS) -ldl

# $(call fuzzer,HARNESS,TARGET,CORPUS,OBJECTS,LIBS): `make TARGET` runs tests/fuzz/HARNESS.c
# under libFuzzer (clang) from tests/fuzz/CORPUS; $(T)/TARGET-replay replays it in make check.
FUZZ_SECONDS ?= 60
define fuzzer
$(BUILDDIR)/fuzz/$(1): $(patsubst $(BUILDDIR)/obj/%.o,%.c,$(4)) tests/fuzz/$(1).c
	@mkdir -p $$(dir $$@)
	$$(Q)clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined $$(CPPFLAGS) -Idaemon -o $$@ $$^ $(5)
$(T)/$(2)-replay: $(call obj,tests/fuzz/$(1).c tests/fuzz/replay.c) $(4)
	$$(call link,$(5))
$(2): $(BUILDDIR)/fuzz/$(1)
	@mkdir -p $(BUILDDIR)/fuzz/$(3)
	$$< -max_total_time=$$(FUZZ_SECONDS) -rss_limit_mb=2048 $$(FUZZ_FLAGS) $(BUILDDIR)/fuzz/$(3) tests/fuzz/$(3)
FUZZ_REPLAY += $(T)/$(2)-replay:tests/fuzz/$(3)
endef
$(eval $(call fuzzer,fuzz-frame,fuzz,corpus,$(filter-out %/cuda/driver.o,$(PROTO_OBJ)) $(call obj,tests/fuzz/walk.c),$(MSGPACK_LIBS)))
$(eval $(call fuzzer,fuzz-ops,fuzz-ops,corpus-ops,$(MODULES),$(DAEMON_LIBS)))
$(eval $(call fuzzer,fuzz-journal,fuzz-journal,corpus-journal,$(MODULES),$(DAEMON_LIBS)))
# The library against a fake daemon (threads; -max_len: see fuzz-client.c).
$(eval $(call fuzzer,fuzz-client,fuzz-client,corpus-client,$(LIB_OBJ) $(PROTO_OBJ),$(CLIENT_LIBS) -pthread))
fuzz-client: FUZZ_FLAGS := -max_len=16384 -timeout=10

# The fragments add suites to CHECK_EXTRA, or to PLAIN_ONLY where they load
# libgpuipc into a JVM or a wheel's Python (so not under SANITIZE=1).
-include client/python/python.mk client/java/java.mk tests/bench/bench.mk packaging/packaging.mk
check-systemd: all
	tests/systemd/check.sh $(BUILDDIR)
CHECK_EXTRA += check-systemd check-gpu-double
# Each test as PROGRAM:ARGUMENT; integration tests find what they test by GPUIPC_BUILDDIR.
TEST_RUNS = $(addsuffix :--jobs=2,$(UNIT_BIN) $(INTEG_BIN)) $(T)/cuda-double/test_double:$(CUDA_DOUBLE) \
            $(FUZZ_REPLAY)
tests: all $(HELPER_BIN) $(foreach r,$(TEST_RUNS),$(firstword $(subst :, ,$(r))))
check-run: tests $(CHECK_EXTRA) $(PLAIN_ONLY)
	$(Q)set -e; for r in $(TEST_RUNS); do echo "== $${r%%:*} $${r#*:}"; \
		GPUIPC_BUILDDIR=$(abspath $(BUILDDIR)) $${r%%:*} $${r#*:}; done
ifeq ($(SANITIZE),1)
$(PLAIN_ONLY):
	@echo "== $@: skipped under SANITIZE=1 (ASan-built libgpuipc cannot load there; the plain pass ran it)"
endif
# The tests need the toolkit's cuda.h, not a GPU (the daemon and library build without it).
check: ensure-deps
	@test -f $(CUDA_HOME)/include/cuda.h || { echo "make check: $(CUDA_HOME)/include/cuda.h" \
		"not found: the tests need the CUDA toolkit's headers (set CUDA_HOME)" >&2; exit 1; }
	$(Q)$(MAKE) check-run
	$(Q)ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		$(MAKE) SANITIZE=1 check-run

$(BUILDDIR)/gpu/gpu_test: $(call obj,tests/gpu/gpu_test.c tests/gpu/gpu_util.c) $(PROTO_OBJ) $(LIBA) \
                          $(CUDA_STUB_LIB)
	$(call link,$(CLIENT_LIBS) $(CUDA_STUBS) -lpthread)
$(BUILDDIR)/gpu/libcountcuda.so: tests/gpu/countcuda.c $(CUDA_STUB_LIB)
	$(Q)$(SHIM)
gpu-tests: all $(BUILDDIR)/gpu/gpu_test $(BUILDDIR)/gpu/libcountcuda.so
check-gpu: gpu-tests
	tests/gpu/run.sh $(BUILDDIR)
# The same programs on the driver double, in make check (no GPU needed).
check-gpu-double: gpu-tests $(CUDA_DOUBLE) $(BUILDDIR)/bench/gpu_bench
	$(Q)tests/gpu/double.sh $(BUILDDIR)

ensure-deps:
	$(Q)$(PKG_CONFIG) --exists $(DEPS_PC) criterion 2>/dev/null || $(MAKE) deps
deps:
	@if [ "$$(id -u)" != 0 ]; then echo "make deps: run as root (apt-get)" >&2; exit 1; fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(DEB_DEPS) $(DEPS_EXTRA)
run: ensure-deps
	$(Q)$(MAKE) all
	$(Q)mkdir -p run
	exec $(DAEMON) --socket "$${GPUIPC_SOCKET:-$(CURDIR)/run/gpuipcd.sock}" $(ARGS)
install: all
	packaging/install.sh $(BUILDDIR) $(VERSION) $(MSGPACK_PC)
clean:
	rm -rf $(BUILDDIR)

.PHONY: FORCE all tests check check-run check-systemd check-gpu check-gpu-double gpu-tests ensure-deps \
	deps run install clean fuzz fuzz-ops fuzz-journal fuzz-client
.PRECIOUS: $(BUILDDIR)/obj/%.o
-include $(shell find $(BUILDDIR)/obj -name '*.d' 2>/dev/null)
