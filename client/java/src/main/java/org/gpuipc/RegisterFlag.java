package org.gpuipc;

/**
 * Options of {@link GpuIpcClient#registerHost} and
 * {@link GpuIpcClient#registerDevice} ({@code GPUIPC_REGISTER_*} in C).
 */
public enum RegisterFlag {
    /**
     * Unregister automatically when this client's connection ends (close,
     * crash or exit of the producer). Leases already taken keep the memory
     * until released.
     */
    EPHEMERAL(0x1),
    /**
     * Device buffers only: share through a legacy CUDA IPC handle even when
     * the memory is a VMM allocation that could be shared as a durable fd.
     */
    CUDA_IPC(0x2),
    /**
     * Host buffers only: let consumers map the buffer writable (a writable
     * lookup, by the owner's uid or root). Without it the memfd is sealed
     * against new writers ({@code F_SEAL_FUTURE_WRITE}): the producer's own
     * mapping stays writable, every other mapping is read-only.
     */
    SHARED_WRITE(0x4),
    /**
     * Device buffers only: when the memory cannot be shared without a copy
     * (the device's default stream-ordered pool, as spark-rapids' ASYNC pool
     * uses unless it exports a handle type; VMM memory without an export
     * handle type), copy it into VMM memory the daemon holds and register
     * that. The record's {@code copied} says why.
     */
    COPY(0x8),
    /**
     * Device buffers only. {@code cuda-ipc}, {@code cuda-pool}: a promise
     * not to free the memory before {@link GpuIpcClient#awaitUnmapped}
     * returns for its registration, after its last registration is gone. So
     * consumers keep the allocation mapped after their views, and a block
     * registered again (a pool handing the same memory back) costs them a
     * warm lookup instead of an open. For {@code cuda-vmm} memory, consumers
     * keep the mapping over an unregister and a register again, until
     * {@link GpuIpcClient#awaitUnmapped} (freeing earlier is safe, but the
     * memory lives on in the consumers until then).
     */
    CACHEABLE(0x10);

    final int bit;

    RegisterFlag(int bit) {
        this.bit = bit;
    }

    static int bits(RegisterFlag... flags) {
        int b = 0;
        if (flags != null)
            for (RegisterFlag f : flags)
                b |= f.bit;
        return b;
    }
}
