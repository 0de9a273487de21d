# tests/bench/bench.mk: benchmarks (included by the top Makefile).
#
#   make bench      build and run the host benchmark: a table on stdout and
#                   $(BUILDDIR)/bench/results.csv (about 5-8 minutes), the
#                   batch row (bench_batch) in $(BUILDDIR)/bench/batch.csv.  It
#                   installs redis-server with apt-get (as root) when missing,
#                   so that the Redis column is never empty; REDIS_SERVER=none
#                   skips Redis instead.  BENCH_SECONDS,
#                   BENCH_ROUNDS, BENCH_SCALE_MAX tune it.
#   make gpu-bench  build the GPU benchmark into $(BUILDDIR)/bench/ (needs
#                   only the CUDA headers and libcuda stub) and, where
#                   nvidia-smi sees a GPU, run it: tests/bench/gpu_run.sh
#                   (C and Python side by side, CSVs, ratio tables, a plot;
#                   GPU_BENCH_ROUNDS, default 16).  Elsewhere, carry
#                   $(BUILDDIR) to a GPU host and run gpu_run.sh there.
# Benchmarks are not tests: nothing here joins CHECK_EXTRA.

BENCH_DIR  := $(BUILDDIR)/bench
GPU_BENCH_ROUNDS ?= 16
BENCH_UTIL := $(call obj,tests/bench/bench_util.c)
BENCH_HOST := $(BENCH_DIR)/bench_ipc $(BENCH_DIR)/bench_handoff $(BENCH_DIR)/bench_batch

$(BENCH_DIR)/bench_%: $(call obj,tests/bench/bench_%.c) $(BENCH_UTIL) $(PROTO_OBJ) $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(MSGPACK_LIBS) -ldl -lpthread -lm

$(call obj,tests/bench/gpu_bench.c): CPPFLAGS += -Itests/gpu
$(BENCH_DIR)/gpu_bench: $(call obj,tests/bench/gpu_bench.c tests/gpu/gpu_util.c) $(PROTO_OBJ) $(LIBA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(MSGPACK_LIBS) -L$(CUDA_HOME)/lib64/stubs -lcuda -ldl -lpthread -lm

bench-build: all $(BENCH_HOST)

# As `make run` installs build dependencies: the Redis comparison needs a
# server, and a fresh machine has none.
ensure-redis:
	$(Q)if [ "$${REDIS_SERVER:-}" != none ] && ! command -v redis-server >/dev/null; then \
		if [ "$$(id -u)" != 0 ]; then \
			echo "bench: redis-server is missing; run as root to install it, or set REDIS_SERVER=none" >&2; \
			exit 1; \
		fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends redis-server >/dev/null; \
	fi

bench: bench-build ensure-redis
	$(Q)mkdir -p $(BENCH_DIR)
	$(Q)$(BENCH_DIR)/bench_ipc $(DAEMON) $(BENCH_DIR)/results.csv
	$(Q)$(BENCH_DIR)/bench_handoff $(DAEMON) $(BENCH_DIR)/handoff.csv
	$(Q)tail -n +2 $(BENCH_DIR)/handoff.csv | sed 's/^/handoff,/' >> $(BENCH_DIR)/results.csv
	$(Q)$(BENCH_DIR)/bench_batch $(DAEMON) $(BENCH_DIR)/batch.csv
	$(Q)if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then \
		/usr/bin/python3 tests/bench/plot.py $(BENCH_DIR)/results.csv $(BENCH_DIR); \
	else echo "bench: no matplotlib in /usr/bin/python3, no plots"; fi
	@echo "bench: results in $(BENCH_DIR)/results.csv"

# The profile's timing shim in front of the real driver (GPUIPC_LIBCUDA).
$(BENCH_DIR)/libtimecuda.so: tests/bench/timecuda.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(DOUBLE_CFLAGS) -shared -o $@ $< -Wl,--no-as-needed $(CUDA_STUBS) -ldl

gpu-bench: all $(BENCH_DIR)/gpu_bench $(BENCH_DIR)/libtimecuda.so
	$(Q)cp tests/gpu/kernels.ptx tests/bench/gpu_run.sh tests/bench/gpu_handoff.py \
		tests/bench/gpu_summary.py tests/bench/plot_gpu.py $(BENCH_DIR)/
	$(Q)if nvidia-smi -L >/dev/null 2>&1; then \
		tests/bench/gpu_run.sh $(BUILDDIR) $(GPU_BENCH_ROUNDS); \
	else \
		echo "gpu-bench: built $(BENCH_DIR)/gpu_bench; no GPU here: on a GPU host run tests/bench/gpu_run.sh $(BUILDDIR)"; \
	fi

.PHONY: bench bench-build gpu-bench ensure-redis
