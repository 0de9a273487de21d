package org.gpuipc;

import java.nio.ByteBuffer;

/**
 * One buffer of a looked-up batch's column ({@link BatchColumn#buffer(int)}):
 * the consumer's mapping of it, host memory or device memory, valid until
 * its {@link BatchView} is closed.
 *
 * <p>A host buffer's {@link #asByteBuffer()} is a read-only direct
 * ByteBuffer over the mapped memory itself (zero copy). It must not be used
 * after {@link BatchView#close()}: the mapping is gone then, and using it
 * may crash the JVM. A device buffer's {@link #address()} is a
 * {@code CUdeviceptr} valid in the primary context of device
 * {@link #deviceOrdinal()} of this process. {@link #address()} and
 * {@link #asByteBuffer()} throw {@link IllegalStateException} once the view
 * is closed.
 */
public final class ColumnBuffer {
    private final BatchView view;
    private final long address;
    private final long size;
    private final int device;

    ColumnBuffer(BatchView view, long address, long size, int device) {
        this.view = view;
        this.address = address;
        this.size = size;
        this.device = device;
    }

    /**
     * The buffer's size in bytes: the part the producer registered, which
     * covers what the column's format needs at its offset and length.
     *
     * @return the size
     */
    public long size() {
        return size;
    }

    /**
     * Whether the buffer is device memory.
     *
     * @return true for device memory
     */
    public boolean isDevice() {
        return device >= 0;
    }

    /**
     * The CUDA device ordinal of device memory in this process, or -1 for
     * host memory.
     *
     * @return the ordinal or -1
     */
    public int deviceOrdinal() {
        return device;
    }

    /**
     * The buffer's start in this process: a host address, or a
     * {@code CUdeviceptr}.
     *
     * @return the address
     * @throws IllegalStateException once the view is closed
     */
    public long address() {
        synchronized (view.lock()) {
            view.checkOpen();
            return address;
        }
    }

    /**
     * A host buffer as a new read-only direct ByteBuffer over the mapping,
     * in native byte order (position 0, limit = capacity = size).
     *
     * @return the ByteBuffer
     * @throws IllegalStateException once the view is closed, or for device memory
     * @throws UnsupportedOperationException above {@link Integer#MAX_VALUE}
     *         bytes: use {@link #asByteBuffer(long, int)}
     */
    public ByteBuffer asByteBuffer() {
        return asByteBuffer(0, Native.wholeLength(size));
    }

    /**
     * A window of a host buffer as a new read-only direct ByteBuffer in
     * native byte order.
     *
     * @param offset where the window starts, in bytes
     * @param len    its length in bytes
     * @return the ByteBuffer
     * @throws IllegalStateException once the view is closed, or for device memory
     * @throws IndexOutOfBoundsException if the window is not inside the buffer
     */
    public ByteBuffer asByteBuffer(long offset, int len) {
        synchronized (view.lock()) {
            view.checkOpen();
            if (device >= 0)
                throw new IllegalStateException("device memory (device " + device
                        + "); use address() with a CUDA API");
            return Native.window(address, size, offset, len, false);
        }
    }
}
