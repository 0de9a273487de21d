package org.gpuipc;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A shared-memory buffer created by {@link GpuIpcClient#allocateHost(long)}
 * for a producer to fill and register (a sealed memfd, mapped read-write and
 * zero-filled: {@code gpuipc_hostbuf} in C).
 *
 * <h2>Ownership</h2>
 * The Java object owns the producer's mapping and fd; {@link #close()} unmaps
 * and closes them. Registering the buffer gives the daemon its own reference
 * to the memory, so a registered buffer lives on in the daemon (and in its
 * consumers) after {@code close()}, until it is unregistered and its last
 * lease is released. Closing after {@link GpuIpcClient#registerHost} is
 * therefore correct once the producer has finished writing.
 *
 * <p>A HostBuffer must outlive every {@link ByteBuffer} obtained from it.
 * The ByteBuffers are plain direct buffers over the mapping: the JVM cannot
 * tell that the memory went away, so touching one after {@code close()} reads
 * or writes unmapped memory (or whatever was mapped there since) and may crash
 * the JVM. Methods of this class throw {@link IllegalStateException} after
 * {@code close()}. There is no finalizer or cleaner: an unclosed HostBuffer
 * stays mapped until the process exits (a cleaner could unmap memory under a
 * still-reachable ByteBuffer, which is worse than a leak).
 *
 * <p>{@link BatchBuffer#of(java.nio.ByteBuffer)} recognizes a ByteBuffer
 * over an open HostBuffer's mapping (this class keeps a table of the open
 * ones, by address) and treats it as {@link BatchBuffer#of(HostBuffer, long, long)}:
 * a batch then checks and holds the HostBuffer open while it reads it.
 *
 * <h2>Size limit</h2>
 * A {@link ByteBuffer} holds at most {@link Integer#MAX_VALUE} bytes.
 * {@link #asByteBuffer()} refuses larger buffers; use
 * {@link #asByteBuffer(long, int)} for windows of them, or {@link #address()}
 * with code that takes raw addresses.
 *
 * <p>Thread safety: the methods are synchronized; concurrent writes through
 * the ByteBuffers are the application's business.
 */
public final class HostBuffer implements AutoCloseable {
    private static final AtomicLong SERIALS = new AtomicLong();
    /* The open HostBuffers by mapping address (unsigned), for
     * BatchBuffer.of(ByteBuffer): a buffer is in it from its creation until
     * close() unmaps it, so open mappings never overlap here. Guarded by its
     * own monitor, which is taken inside a HostBuffer's and never around one. */
    private static final TreeMap<Long, HostBuffer> OPEN = new TreeMap<>(Long::compareUnsigned);

    private long handle;
    private final long address;
    private final long size;
    private final long serial;

    HostBuffer(long handle) {
        this.handle = handle;
        this.address = Native.hostbufAddress(handle);
        this.size = Native.hostbufSize(handle);
        this.serial = SERIALS.incrementAndGet();
        synchronized (OPEN) {
            OPEN.put(address, this);
        }
    }

    /**
     * The open HostBuffer whose mapping holds all of [address, address +
     * length), or null. It may be closed by the time the caller uses it.
     */
    static HostBuffer containing(long address, long length) {
        synchronized (OPEN) {
            Map.Entry<Long, HostBuffer> e = OPEN.floorEntry(address);
            if (e == null)
                return null;
            HostBuffer h = e.getValue();
            long off = address - h.address;         /* >= 0 (unsigned): floor entry */
            if (Long.compareUnsigned(off, h.size) <= 0 && length >= 0 && length <= h.size - off)
                return h;
            return null;
        }
    }

    /**
     * This buffer's place in the order in which a thread holding several
     * HostBuffers' monitors takes them: creation order, unique per process.
     */
    long serial() {
        return serial;
    }

    /**
     * The size in bytes, as requested.
     *
     * @return the size
     */
    public long size() {
        return size;
    }

    /**
     * The address of the mapping in this process, for APIs that take raw
     * addresses. Valid until {@link #close()}.
     *
     * @return the address
     * @throws IllegalStateException if the buffer is closed
     */
    public synchronized long address() {
        checkOpen();
        return address;
    }

    /**
     * The whole buffer as a new writable direct ByteBuffer in native byte
     * order (position 0, limit = capacity = size). Each call returns a new
     * ByteBuffer over the same memory. It must not be used after
     * {@link #close()}.
     *
     * @return the ByteBuffer
     * @throws IllegalStateException if the buffer is closed
     * @throws UnsupportedOperationException if the buffer is larger than
     *         {@link Integer#MAX_VALUE} bytes: use {@link #asByteBuffer(long, int)}
     */
    public ByteBuffer asByteBuffer() {
        return asByteBuffer(0, Native.wholeLength(size));
    }

    /**
     * A window of the buffer as a new writable direct ByteBuffer in native
     * byte order. It must not be used after {@link #close()}.
     *
     * @param offset where the window starts, in bytes
     * @param length its length in bytes
     * @return the ByteBuffer
     * @throws IllegalStateException if the buffer is closed
     * @throws IndexOutOfBoundsException if the window is not inside the buffer
     */
    public synchronized ByteBuffer asByteBuffer(long offset, int length) {
        checkOpen();
        return Native.window(address, size, offset, length, true);
    }

    /**
     * Whether {@link #close()} has been called.
     *
     * @return true when closed
     */
    public synchronized boolean isClosed() {
        return handle == 0;
    }

    /**
     * Unmaps and closes the producer's copy ({@code gpuipc_hostbuf_free}).
     * A registered buffer lives on in the daemon. Idempotent.
     */
    @Override
    public synchronized void close() {
        if (handle != 0) {
            synchronized (OPEN) {
                OPEN.remove(address, this);     /* before the mapping goes */
            }
            Native.hostbufFree(handle);
            handle = 0;
        }
    }

    /** The C handle; the caller holds this object's monitor. */
    long handle() {
        checkOpen();
        return handle;
    }

    private void checkOpen() {
        if (handle == 0)
            throw new IllegalStateException("HostBuffer is closed");
    }
}
