package org.gpuipc;

import java.nio.ByteBuffer;
import java.util.Map;

/**
 * A consumer's mapping of a registered buffer, from
 * {@link GpuIpcClient#lookup(String, java.time.Duration)}: it holds a lease
 * that keeps the buffer alive, even if the producer unregisters it or exits
 * ({@code gpuipc_view} in C).
 *
 * <h2>Ownership</h2>
 * The View owns the lease and the mapping; {@link #close()} releases the
 * lease and, with the last view of that buffer in this process, unmaps it.
 * Always close a View (try-with-resources): the producer's
 * {@link GpuIpcClient#awaitRelease} waits for exactly that. Closing the
 * {@link GpuIpcClient} drops the lease on the daemon's side, but the mapping
 * stays until the View itself is closed.
 *
 * <p>A ByteBuffer from {@link #asByteBuffer()} must not be used after
 * {@link #close()}: it is a plain direct buffer over the mapping, which is
 * gone then (using it may crash the JVM). {@link #address()},
 * {@link #deviceOrdinal()} and {@link #asByteBuffer()} throw
 * {@link IllegalStateException} after close; the descriptive accessors
 * ({@link #info()}, {@link #name()}, {@link #metadata()}, ...) keep working.
 * There is no cleaner: an unclosed View keeps its mapping until the process
 * exits and its lease until the client is closed.
 *
 * <h2>Device buffers</h2>
 * For {@link BufferKind#CUDA_IPC} and {@link BufferKind#CUDA_VMM} views,
 * {@link #address()} is a {@code CUdeviceptr} valid in the primary context of
 * device {@link #deviceOrdinal()} of this process (wrap it, e.g. with
 * spark-rapids' {@code DeviceMemoryBuffer} APIs that take an address, without
 * taking ownership). The lookup has already waited for the producer's event.
 *
 * <p>Thread safety: close() synchronizes on the client that created the View.
 */
public final class View implements AutoCloseable {
    private final GpuIpcClient client;
    private long handle;
    private final long address;
    private final long length;
    private final int deviceOrdinal;
    private final boolean writable;
    private final BufferInfo info;

    View(GpuIpcClient client, long handle, boolean writable) {
        this.client = client;
        this.handle = handle;
        this.writable = writable;
        this.address = Native.viewAddress(handle);
        this.length = Native.viewSize(handle);
        this.deviceOrdinal = Native.viewDevice(handle);
        this.info = Native.viewInfo(handle);
    }

    /**
     * The registration as it was at lookup time.
     *
     * @return the record
     */
    public BufferInfo info() {
        return info;
    }

    /**
     * The registered name.
     *
     * @return the name
     */
    public String name() {
        return info.name();
    }

    /**
     * The registration id.
     *
     * @return the id
     */
    public long id() {
        return info.id();
    }

    /**
     * Host or device memory.
     *
     * @return the kind
     */
    public BufferKind kind() {
        return info.kind();
    }

    /**
     * The device's UUID ({@code GPU-...}); empty for host buffers.
     *
     * @return the UUID
     */
    public String device() {
        return info.device();
    }

    /**
     * The user metadata pairs given at registration (unmodifiable).
     *
     * @return the map, possibly empty
     */
    public Map<String, String> metadata() {
        return info.metadata();
    }

    /**
     * The size of the buffer in bytes.
     *
     * @return the length
     */
    public long length() {
        return length;
    }

    /**
     * Whether the buffer was mapped writable.
     *
     * @return true for lookups with {@code writable}
     */
    public boolean isWritable() {
        return writable;
    }

    /**
     * The start of the buffer in this process: a host address for host
     * buffers, a {@code CUdeviceptr} for device buffers.
     *
     * @return the address
     * @throws IllegalStateException after {@link #close()}
     */
    public long address() {
        synchronized (client) {
            checkOpen();
            return address;
        }
    }

    /**
     * The device ordinal of a device buffer in this process (its UUID mapped
     * through this process's {@code CUDA_VISIBLE_DEVICES}), or -1 for host
     * memory.
     *
     * @return the ordinal or -1
     * @throws IllegalStateException after {@link #close()}
     */
    public int deviceOrdinal() {
        synchronized (client) {
            checkOpen();
            return deviceOrdinal;
        }
    }

    /**
     * A host buffer's bytes as a new direct ByteBuffer in native byte order
     * (position 0, limit = capacity = length), read-only unless the lookup
     * asked for a writable mapping. Must not be used after {@link #close()}.
     *
     * @return the ByteBuffer
     * @throws IllegalStateException after {@link #close()}, or for device buffers
     * @throws UnsupportedOperationException if the buffer is larger than
     *         {@link Integer#MAX_VALUE} bytes: use {@link #asByteBuffer(long, int)}
     */
    public ByteBuffer asByteBuffer() {
        return asByteBuffer(0, Native.wholeLength(length));
    }

    /**
     * A window of a host buffer as a new direct ByteBuffer in native byte
     * order, read-only unless the lookup asked for a writable mapping. Must
     * not be used after {@link #close()}.
     *
     * @param offset where the window starts, in bytes
     * @param len    its length in bytes
     * @return the ByteBuffer
     * @throws IllegalStateException after {@link #close()}, or for device buffers
     * @throws IndexOutOfBoundsException if the window is not inside the buffer
     */
    public ByteBuffer asByteBuffer(long offset, int len) {
        synchronized (client) {
            checkOpen();
            if (info.kind().isDevice())
                throw new IllegalStateException(name() + " is device memory (" + info.kind().wireName()
                        + "); use address() with a CUDA API");
            return Native.window(address, length, offset, len, writable);
        }
    }

    /**
     * Whether {@link #close()} has been called.
     *
     * @return true when closed
     */
    public boolean isClosed() {
        synchronized (client) {
            return handle == 0;
        }
    }

    /**
     * Releases the lease and frees the view ({@code gpuipc_view_release}).
     * Idempotent. A failure to send the release (the connection is gone) is
     * not reported: the daemon drops a connection's leases when it ends, and
     * the view is freed either way.
     */
    @Override
    public void close() {
        synchronized (client) {
            if (handle != 0) {
                Native.viewRelease(handle);
                handle = 0;
            }
        }
    }

    private void checkOpen() {
        if (handle == 0)
            throw new IllegalStateException("View of " + name() + " is closed");
    }
}
