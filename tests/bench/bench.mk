# tests/bench/bench.mk: benchmarks, not tests.  bench: the host one (tests/bench/run.sh);
# gpu-bench: the GPU one, run by tests/bench/gpu_run.sh where nvidia-smi sees a GPU.
GPU_BENCH_ROUNDS ?= 16
BENCH := $(BUILDDIR)/bench
$(BENCH)/bench_%: $(call obj,tests/bench/bench_%.c tests/bench/bench_util.c) $(PROTO_OBJ) $(LIBA)
	$(call link,$(CLIENT_LIBS) -lpthread -lm)
$(call obj,tests/bench/gpu_bench.c): CPPFLAGS += -Itests/gpu
$(BENCH)/gpu_bench: $(call obj,tests/bench/gpu_bench.c tests/gpu/gpu_util.c) $(PROTO_OBJ) $(LIBA) \
                   $(CUDA_STUB_LIB)
	$(call link,$(CLIENT_LIBS) $(CUDA_STUBS) -lpthread -lm)
$(BENCH)/libtimecuda.so: tests/bench/timecuda.c $(CUDA_STUB_LIB)
	$(Q)$(SHIM)
bench-build: all $(BENCH)/bench_ipc $(BENCH)/bench_handoff $(BENCH)/bench_batch
bench: bench-build
	$(Q)tests/bench/run.sh $(BUILDDIR)
gpu-bench: all $(BENCH)/gpu_bench $(BENCH)/libtimecuda.so
	$(Q)cp tests/gpu/kernels.ptx tests/bench/gpu_run.sh tests/bench/*.py $(BENCH)/
	$(Q)if nvidia-smi -L >/dev/null 2>&1; then tests/bench/gpu_run.sh $(BUILDDIR) $(GPU_BENCH_ROUNDS); else \
		echo "gpu-bench: built $(BENCH)/gpu_bench; no GPU here: on a GPU host run tests/bench/gpu_run.sh $(BUILDDIR)"; fi
.PHONY: bench bench-build gpu-bench
