package org.gpuipc;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Objects;

/**
 * One Arrow buffer of a producer's column (validity bitmap, offsets or
 * data), for {@link ColumnSpec}: host memory (a direct {@link ByteBuffer}
 * or a {@link HostBuffer}) or device memory (a {@code CUdeviceptr}).
 *
 * <h2>Ownership</h2>
 * A BatchBuffer refers to memory that stays the caller's; it holds the
 * ByteBuffer or HostBuffer reachable, nothing more. The memory must stay
 * valid (a HostBuffer open, device memory allocated and written) until
 * {@link GpuIpcClient#registerBatch} returns. A buffer inside a HostBuffer
 * ({@link #of(HostBuffer, long, long)}, or {@link #of(ByteBuffer)} of a
 * ByteBuffer over an open HostBuffer's mapping) is checked open, and held
 * open (its {@code close()} waits), while {@link Batch#addColumn} and
 * {@link GpuIpcClient#registerBatch} read it; once the HostBuffer is closed
 * they throw {@link IllegalStateException}. At registration, host memory
 * inside a {@link HostBuffer} is shared in place (zero copy; the buffer may
 * be closed afterwards, as after {@link GpuIpcClient#registerHost}); other
 * host memory, such as a {@link ByteBuffer#allocateDirect} buffer, is
 * copied into shared memory of the daemon's (the registration's
 * {@code copied} says so), and nothing can check that it is still valid.
 * Device memory is shared as
 * {@link GpuIpcClient#registerDevice} shares it, and stays the caller's for
 * {@link BufferKind#CUDA_IPC} memory.
 */
public final class BatchBuffer {
    private final long address;
    private final long size;
    private final int device;
    private final ByteBuffer bytes;     /* host: a view of the memory, for reading offsets */
    private final HostBuffer host;      /* when inside one: to check it is open */
    private final long hostOffset;

    private BatchBuffer(long address, long size, int device, ByteBuffer bytes, HostBuffer host,
                        long hostOffset) {
        this.address = address;
        this.size = size;
        this.device = device;
        this.bytes = bytes;
        this.host = host;
        this.hostOffset = hostOffset;
    }

    /**
     * The bytes of a direct ByteBuffer from its position to its limit.
     *
     * <p>When those bytes lie inside a {@link HostBuffer} that is open now
     * (a ByteBuffer from {@link HostBuffer#asByteBuffer()} or
     * {@link HostBuffer#asByteBuffer(long, int)}, or a slice or duplicate of
     * one), the result is {@link #of(HostBuffer, long, long)} of that window:
     * shared in place at registration, and checked and held open as that
     * form is (closing the HostBuffer before the batch is registered makes
     * {@link Batch#addColumn} and {@link GpuIpcClient#registerBatch} throw
     * {@link IllegalStateException}). Other direct ByteBuffers are copied at
     * registration; they must stay valid until then, unchecked. A ByteBuffer
     * of a HostBuffer that was closed before this call is memory already
     * unmapped: it is not recognized and must not be used, here as anywhere.
     *
     * @param buffer a direct ByteBuffer (read-only ones too)
     * @return the buffer
     * @throws IllegalArgumentException if buffer is not direct
     * @throws IllegalStateException if the HostBuffer it lies in is closed
     *         during this call
     */
    public static BatchBuffer of(ByteBuffer buffer) {
        Objects.requireNonNull(buffer, "buffer");
        if (!buffer.isDirect())
            throw new IllegalArgumentException("a batch buffer is a direct ByteBuffer "
                    + "(ByteBuffer.allocateDirect, HostBuffer.asByteBuffer), not a heap one");
        ByteBuffer b = buffer.slice().order(ByteOrder.nativeOrder());
        long at = Native.directAddress(b);
        HostBuffer h = HostBuffer.containing(at, b.capacity());
        if (h != null)
            return of(h, at - h.address(), b.capacity());
        return new BatchBuffer(at, b.capacity(), -1, b, null, 0);
    }

    /**
     * All of a host buffer, shared in place at registration.
     *
     * @param buffer an open host buffer
     * @return the buffer
     * @throws IllegalStateException if buffer is closed
     */
    public static BatchBuffer of(HostBuffer buffer) {
        return of(buffer, 0, buffer.size());
    }

    /**
     * A window of a host buffer, shared in place at registration: several
     * columns' buffers may lie in one HostBuffer, which then travels once.
     *
     * @param buffer an open host buffer
     * @param offset where the window starts, in bytes
     * @param size   its length in bytes
     * @return the buffer
     * @throws IllegalStateException if buffer is closed
     * @throws IndexOutOfBoundsException if the window is not inside the buffer
     */
    public static BatchBuffer of(HostBuffer buffer, long offset, long size) {
        Objects.requireNonNull(buffer, "buffer");
        Objects.checkFromIndexSize(offset, size, buffer.size());
        return new BatchBuffer(buffer.address() + offset, size, -1, null, buffer, offset);
    }

    /**
     * Device memory: {@code size} bytes at {@code address} (a
     * {@code CUdeviceptr}, e.g. spark-rapids' {@code DeviceMemoryBuffer}
     * {@code getAddress()} / {@code getLength()}) on CUDA device ordinal
     * {@code device}. Write it completely before registering, or give the
     * batch an event ({@link Batch#setEvent}). Its size bounds what its
     * format needs, except for a string or binary column's data
     * ({@code u}, {@code U}, {@code z}, {@code Z}), whose size the library
     * reads from the device's last offset with a plain copy during
     * {@link Batch#addColumn}, waiting for no event: such a column's
     * offsets must be complete (their stream synchronized) before
     * {@code addColumn}.
     *
     * @param address the device pointer, not 0
     * @param size    bytes, at least 0
     * @param device  the CUDA device ordinal in this process, at least 0
     * @return the buffer
     * @throws IllegalArgumentException for a zero address, a negative size
     *         or a negative device
     */
    public static BatchBuffer device(long address, long size, int device) {
        if (address == 0 || size < 0 || device < 0)
            throw new IllegalArgumentException("a device buffer needs an address, a size >= 0 "
                    + "and a device ordinal >= 0 (got 0x" + Long.toHexString(address) + ", "
                    + size + ", " + device + ")");
        return new BatchBuffer(address, size, device, null, null, 0);
    }

    /**
     * The buffer's size in bytes.
     *
     * @return the size
     */
    public long size() {
        return size;
    }

    /**
     * Whether this is device memory.
     *
     * @return true for {@link #device(long, long, int)} buffers
     */
    public boolean isDevice() {
        return device >= 0;
    }

    /**
     * The CUDA device ordinal, or -1 for host memory.
     *
     * @return the ordinal or -1
     */
    public int deviceOrdinal() {
        return device;
    }

    /**
     * The buffer's address in this process (host address or
     * {@code CUdeviceptr}).
     *
     * @return the address
     */
    public long address() {
        return address;
    }

    /** The HostBuffer it lies in, or null. */
    HostBuffer hostBuffer() {
        return host;
    }

    /**
     * The int32 or int64 at element index of a host buffer (native order),
     * bounds checked: for reading a string column's last offset. The caller
     * holds the HostBuffer's monitor, if any.
     */
    long readOffset(long index, boolean large) {
        int w = large ? 8 : 4;
        long at = Math.multiplyExact(index, w);
        if (at > size - w)
            throw new IndexOutOfBoundsException("offset " + index + " of a " + size + "-byte buffer");
        if (bytes != null)
            return large ? bytes.getLong((int) at) : bytes.getInt((int) at);
        ByteBuffer b = host.asByteBuffer(hostOffset + at, w);
        return large ? b.getLong(0) : b.getInt(0);
    }
}
