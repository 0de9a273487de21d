package org.gpuipc;

/**
 * The kind of memory a registration refers to (the protocol's {@code kind}).
 */
public enum BufferKind {
    /** Host shared memory (a memfd). {@link View#asByteBuffer()} works for these. */
    HOST("host"),
    /**
     * Device memory shared through a legacy CUDA IPC handle. It stays the
     * producer's: the producer must keep it allocated and its client open
     * until {@link GpuIpcClient#awaitRelease} says the consumers are done.
     */
    CUDA_IPC("cuda-ipc"),
    /** CUDA VMM memory shared as POSIX fds; the daemon keeps it alive. */
    CUDA_VMM("cuda-vmm"),
    /**
     * A pointer of a stream-ordered memory pool created with the POSIX fd
     * handle type. It stays the producer's, as {@link #CUDA_IPC} memory.
     */
    CUDA_POOL("cuda-pool"),
    /**
     * A batch: one registration for a table of Arrow columns, whose buffers
     * may be host or device memory ({@link GpuIpcClient#registerBatch},
     * {@link GpuIpcClient#lookupBatch}). {@link GpuIpcClient#lookup} refuses
     * it with {@link GpuIpcException#EMEDIUMTYPE}.
     */
    BATCH("batch");

    private final String wireName;

    BufferKind(String wireName) {
        this.wireName = wireName;
    }

    /**
     * The name the protocol and {@code gpuipcctl} use for this kind.
     *
     * @return {@code "host"}, {@code "cuda-ipc"}, {@code "cuda-vmm"},
     *         {@code "cuda-pool"} or {@code "batch"}
     */
    public String wireName() {
        return wireName;
    }

    /**
     * Whether buffers of this kind live in device memory.
     *
     * @return true for the CUDA kinds; false for {@link #HOST} and for
     *         {@link #BATCH}, whose columns say for themselves
     *         ({@link BatchColumn#isDevice()})
     */
    public boolean isDevice() {
        return this != HOST && this != BATCH;
    }

    /** Maps the C library's {@code gpuipc_kind} value. */
    static BufferKind fromNative(int kind) {
        switch (kind) {
        case 0:
            return HOST;
        case 1:
            return CUDA_IPC;
        case 2:
            return CUDA_VMM;
        case 3:
            return CUDA_POOL;
        case 4:
            return BATCH;
        default:
            throw new IllegalStateException("unknown gpuipc_kind " + kind);
        }
    }
}
