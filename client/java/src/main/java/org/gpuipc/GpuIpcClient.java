package org.gpuipc;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A connection to gpuipcd, the GPU buffer handoff broker: the Java face of
 * libgpuipc's {@code gpuipc_client}.
 *
 * <p>A producer registers buffers under names ({@code spark/<appId>/...});
 * a consumer in another process, in any language, looks a name up and maps
 * the same memory. See {@code docs/java.md} for the Spark executor flow.
 *
 * <h2>Ownership</h2>
 * <ul>
 * <li>The client owns its connection; {@link #close()} ends it, and the
 *     daemon then drops this connection's leases and its
 *     {@link RegisterFlag#EPHEMERAL ephemeral} registrations. Durable
 *     registrations stay.</li>
 * <li>{@link HostBuffer}s and {@link View}s are separate resources that the
 *     caller closes; they are not closed by the client's {@code close()}.</li>
 * <li>Device memory registered with {@link #registerDevice} stays the
 *     caller's (for example a spark-rapids {@code DeviceMemoryBuffer}). For
 *     ordinary {@code cudaMalloc}/pool memory (shared as
 *     {@link BufferKind#CUDA_IPC}) keep it allocated, and this client open,
 *     until {@link #awaitRelease} returns; then unregister and free it.
 *     Registered {@link RegisterFlag#CACHEABLE}, it is freed only after
 *     {@link #awaitUnmapped} returns.</li>
 * </ul>
 *
 * <h2>Errors</h2>
 * Every failure reported by the daemon or libgpuipc becomes a checked
 * {@link GpuIpcException} with the negative errno ({@link GpuIpcException#code()}),
 * its name and the daemon's message. Misuse on the Java side throws unchecked
 * exceptions: {@link NullPointerException} for null names,
 * {@link IllegalArgumentException} for names or metadata containing NUL or
 * negative sizes, {@link IllegalStateException} after {@link #close()}.
 *
 * <h2>Threads</h2>
 * A client is not thread-safe in the C library. This class serialises its
 * calls by synchronizing on the client object, so sharing one client between
 * threads is safe but the calls run one at a time: a blocking
 * {@link #lookup} or {@link #awaitRelease} holds up the other threads'
 * calls on the same client (including {@link View#close()} of its views).
 * Use one client per thread where calls block.
 *
 * <h2>Timeouts</h2>
 * A {@link Duration} timeout of zero means do not wait; {@code null} or a
 * negative duration means wait as long as the daemon allows (one hour).
 * Positive durations are rounded up to whole milliseconds, and capped at one
 * hour by the daemon.
 *
 * <h2>Native library</h2>
 * The JNI library {@code libgpuipc_jni.so} (libgpuipc linked in statically)
 * is loaded from the file named by the system property
 * {@code org.gpuipc.library}, else from the jar itself (the jar that
 * {@code make java} builds carries it, with msgpack-c linked in too, under
 * {@code org/gpuipc/native/linux-ARCH/}), else from
 * {@code /usr/lib/TRIPLET/jni} (the Debian package libgpuipc-jni), else
 * through {@code java.library.path}. So {@code java -cp gpuipc.jar} needs
 * no setting. CUDA is reached as libgpuipc does: by dlopen of
 * {@code libcuda.so.1} or of {@code $GPUIPC_LIBCUDA}.
 */
public final class GpuIpcClient implements AutoCloseable {
    private static final byte[][] NO_STRINGS = new byte[0][];

    private long handle;
    private final String socketPath;

    private GpuIpcClient(long handle, String socketPath) {
        this.handle = handle;
        this.socketPath = socketPath;
    }

    /**
     * Connects to the daemon at the default socket, as the C library does:
     * {@code $GPUIPC_SOCKET} when set and not empty, else
     * {@code /run/gpuipcd/gpuipcd.sock}.
     *
     * @return the connected client; the caller closes it
     * @throws GpuIpcException {@link GpuIpcException#ENOENT} or
     *         {@link GpuIpcException#ECONNREFUSED} when no daemon listens there,
     *         {@link GpuIpcException#EPROTONOSUPPORT} without a common protocol version
     */
    public static GpuIpcClient connect() throws GpuIpcException {
        return connect(defaultSocket());
    }

    /**
     * Connects to the daemon listening at {@code socketPath} and performs the
     * protocol hello.
     *
     * @param socketPath the daemon's socket
     * @return the connected client; the caller closes it
     * @throws GpuIpcException {@link GpuIpcException#ENOENT} or
     *         {@link GpuIpcException#ECONNREFUSED} when no daemon listens there,
     *         {@link GpuIpcException#ENAMETOOLONG} when the path does not fit a
     *         socket address
     */
    public static GpuIpcClient connect(String socketPath) throws GpuIpcException {
        Objects.requireNonNull(socketPath, "socketPath");
        long h = Native.connect(cstr(socketPath, "socketPath"));
        return new GpuIpcClient(h, socketPath);
    }

    /**
     * The socket {@link #connect()} uses: {@code $GPUIPC_SOCKET} when set and
     * not empty, else {@code /run/gpuipcd/gpuipcd.sock}.
     *
     * @return the path
     */
    public static String defaultSocket() {
        return Native.defaultSocket();
    }

    /**
     * The version of the libgpuipc linked into the JNI library.
     *
     * @return e.g. {@code "0.1.0"}
     */
    public static String libraryVersion() {
        return Native.version();
    }

    /**
     * The socket this client connected to.
     *
     * @return the path
     */
    public String socketPath() {
        return socketPath;
    }

    /**
     * One round trip to the daemon.
     *
     * @throws GpuIpcException when the daemon did not answer (e.g.
     *         {@link GpuIpcException#ECONNRESET})
     */
    public synchronized void ping() throws GpuIpcException {
        Native.ping(handle());
    }

    /**
     * Creates a zero-filled shared-memory buffer of {@code size} bytes for
     * this process to fill and then {@link #registerHost register}. The
     * buffer does not depend on this client: it may be registered through
     * any client, and is closed by the caller.
     *
     * @param size bytes, at least 1 (above {@link Integer#MAX_VALUE}, see
     *             {@link HostBuffer} for the ByteBuffer limit)
     * @return the buffer; the caller closes it
     * @throws GpuIpcException e.g. {@link GpuIpcException#ENOMEM}
     * @throws IllegalArgumentException if size is not positive
     */
    public HostBuffer allocateHost(long size) throws GpuIpcException {
        if (size <= 0)
            throw new IllegalArgumentException("size must be positive: " + size);
        synchronized (this) {
            handle();
        }
        return new HostBuffer(Native.hostbufNew(size));
    }

    /**
     * Registers all of {@code buf} under {@code name}
     * ({@code gpuipc_hostbuf_register}). The daemon keeps its own reference to
     * the memory: {@code buf} may be closed afterwards, and the registration
     * lives until unregistered (and its last lease released) unless
     * {@link RegisterFlag#EPHEMERAL}. Write the contents before registering:
     * consumers may map it at once.
     *
     * @param name  the name, {@code ns/sub/name}: segments of
     *              {@code [A-Za-z0-9._:@+=-]} joined by {@code /}
     * @param buf   an open host buffer
     * @param meta  free-form string pairs for consumers (at most 32; keys at
     *              most 64 bytes, values 1024), or null
     * @param flags options
     * @return the registration id, for {@link #awaitRelease}
     * @throws GpuIpcException {@link GpuIpcException#EEXIST} when the name is
     *         taken, {@link GpuIpcException#EINVAL} for an invalid name or metadata
     * @throws IllegalStateException if this client or {@code buf} is closed
     */
    public long registerHost(String name, HostBuffer buf, Map<String, String> meta,
                             RegisterFlag... flags) throws GpuIpcException {
        byte[] n = cstr(name, "name");
        Objects.requireNonNull(buf, "buf");
        byte[][][] kv = metaArrays(meta);
        synchronized (this) {
            long c = handle();
            synchronized (buf) {
                return Native.registerHost(c, n, buf.handle(), kv[0], kv[1], RegisterFlag.bits(flags));
            }
        }
    }

    /**
     * Registers {@code length} bytes of device memory at {@code address}
     * (a {@code CUdeviceptr}, e.g. spark-rapids'
     * {@code DeviceMemoryBuffer.getAddress()} / {@code getLength()}) under
     * {@code name} ({@code gpuipc_cuda_register}). The address may lie inside
     * a larger allocation (a memory pool's block).
     *
     * <p>The memory must be current on its device and fully written (the
     * writing stream synchronized) before this call: no event is attached.
     * Ordinary device memory is shared as {@link BufferKind#CUDA_IPC} and
     * stays the caller's: keep it allocated and this client open until
     * {@link #awaitRelease} returns, then {@link #unregister} and free it.
     * VMM allocations exportable as POSIX fds become durable
     * {@link BufferKind#CUDA_VMM} registrations. With
     * {@link RegisterFlag#CACHEABLE} consumers keep the allocation mapped
     * after their views, until {@link #awaitUnmapped}.
     *
     * @param name    the name, as for {@link #registerHost}
     * @param address the device pointer
     * @param length  bytes, at least 1
     * @param meta    free-form string pairs for consumers, or null
     * @param flags   options
     * @return the registration id, for {@link #awaitRelease}
     * @throws GpuIpcException {@link GpuIpcException#ENOTSUP} when no CUDA
     *         driver can be loaded, {@link GpuIpcException#EINVAL} when the
     *         address is not device memory, {@link GpuIpcException#EEXIST}
     *         when the name is taken
     * @throws IllegalStateException if this client is closed
     */
    public long registerDevice(String name, long address, long length, Map<String, String> meta,
                               RegisterFlag... flags) throws GpuIpcException {
        byte[] n = cstr(name, "name");
        if (length <= 0)
            throw new IllegalArgumentException("length must be positive: " + length);
        byte[][][] kv = metaArrays(meta);
        synchronized (this) {
            return Native.registerCuda(handle(), n, address, length, kv[0], kv[1],
                    RegisterFlag.bits(flags));
        }
    }

    /**
     * Looks {@code name} up and maps it read-only, taking a lease; waits up
     * to {@code timeout} for the name to be registered.
     *
     * @param name    the name
     * @param timeout zero: fail at once when absent; null or negative: wait
     *                as long as the daemon allows
     * @return the view; the caller closes it
     * @throws GpuIpcException {@link GpuIpcException#ENOENT} when absent and
     *         not waiting, {@link GpuIpcException#ETIMEDOUT} when the wait
     *         expired, {@link GpuIpcException#ENOTSUP} for a device buffer
     *         without a CUDA driver, {@link GpuIpcException#EMEDIUMTYPE} for
     *         a batch (use {@link #lookupBatch})
     * @throws IllegalStateException if this client is closed
     */
    public View lookup(String name, Duration timeout) throws GpuIpcException {
        return lookup(name, timeout, false);
    }

    /**
     * Like {@link #lookup(String, Duration)}, optionally mapping the buffer
     * read-write ({@code GPUIPC_LOOKUP_WRITABLE}): writes are seen by the
     * producer and by every other consumer.
     *
     * @param name     the name
     * @param timeout  as for {@link #lookup(String, Duration)}
     * @param writable map read-write
     * @return the view; the caller closes it
     * @throws GpuIpcException as for {@link #lookup(String, Duration)}
     */
    public View lookup(String name, Duration timeout, boolean writable) throws GpuIpcException {
        byte[] n = cstr(name, "name");
        int ms = millis(timeout);
        synchronized (this) {
            long v = Native.lookup(handle(), n, ms, writable ? 0x1 : 0);
            try {
                return new View(this, v, writable);
            } catch (RuntimeException | Error e) {
                Native.viewRelease(v);
                throw e;
            }
        }
    }

    /**
     * Registers a table of Arrow columns under {@code name} in one request
     * ({@code gpuipc_batch_register}): one registration, one lease per
     * consumer, one {@link #awaitRelease} for all of its buffers. Host
     * buffers inside a {@link HostBuffer} are shared in place, other host
     * memory is copied into one sealed memfd; device buffers are shared as
     * {@link #registerDevice} shares them (a batch with
     * {@link BufferKind#CUDA_IPC} memory is ephemeral, as such memory stays
     * this process's). {@code batch} stays the caller's, to close.
     *
     * @param name  the name, as for {@link #registerHost}
     * @param batch the columns, metadata and event; at least one column
     * @param flags {@link RegisterFlag#EPHEMERAL}, {@link RegisterFlag#CUDA_IPC},
     *              {@link RegisterFlag#COPY}, {@link RegisterFlag#CACHEABLE} (for
     *              its cuda-ipc and cuda-pool buffers: free them only after
     *              {@link #awaitUnmapped} of the batch's id; its cuda-vmm
     *              buffers as for {@link #registerDevice})
     * @return the registration id, for {@link #awaitRelease}
     * @throws GpuIpcException {@link GpuIpcException#EEXIST} when the name is
     *         taken, {@link GpuIpcException#EINVAL} for an empty batch or an
     *         invalid name, {@link GpuIpcException#E2BIG} past 64 fds,
     *         {@link GpuIpcException#EMSGSIZE} when its description does not
     *         fit a frame, {@link GpuIpcException#ENOTSUP} for device
     *         columns without a CUDA driver
     * @throws IllegalStateException if this client, the batch or a
     *         HostBuffer of it is closed
     */
    public long registerBatch(String name, Batch batch, RegisterFlag... flags)
            throws GpuIpcException {
        byte[] n = cstr(name, "name");
        Objects.requireNonNull(batch, "batch");
        int bits = RegisterFlag.bits(flags);
        synchronized (this) {
            return batch.register(handle(), n, bits);
        }
    }

    /**
     * Builds a batch of {@code columns} with the schema metadata
     * {@code metadata} and registers it, as
     * {@link #registerBatch(String, Batch, RegisterFlag...)} does.
     *
     * @param name     the name
     * @param columns  the columns, in order; at least one
     * @param metadata the schema's metadata, or null
     * @param flags    options
     * @return the registration id
     * @throws GpuIpcException as {@link Batch#addColumn(ColumnSpec)} and
     *         {@link #registerBatch(String, Batch, RegisterFlag...)}
     */
    public long registerBatch(String name, List<ColumnSpec> columns, Map<String, String> metadata,
                              RegisterFlag... flags) throws GpuIpcException {
        Objects.requireNonNull(columns, "columns");
        try (Batch b = new Batch()) {
            for (ColumnSpec c : columns)
                b.addColumn(c);
            if (metadata != null && !metadata.isEmpty())
                b.setMetadata(metadata);
            return registerBatch(name, b, flags);
        }
    }

    /**
     * Looks a batch up in one round trip and maps every buffer under one
     * lease ({@code gpuipc_batch_view_lookup}), waiting up to {@code timeout}
     * for the name to be registered, and for the batch's CUDA event.
     *
     * @param name    the name
     * @param timeout zero: fail at once when absent; null or negative: wait
     *                as long as the daemon allows
     * @return the view; the caller closes it
     * @throws GpuIpcException {@link GpuIpcException#ENOENT} when absent and
     *         not waiting, {@link GpuIpcException#ETIMEDOUT} when the wait
     *         expired, {@link GpuIpcException#EMEDIUMTYPE} when the name is a
     *         single buffer (use {@link #lookup}), {@link GpuIpcException#ENOTSUP}
     *         for device columns without a CUDA driver
     * @throws IllegalStateException if this client is closed
     */
    public BatchView lookupBatch(String name, Duration timeout) throws GpuIpcException {
        byte[] n = cstr(name, "name");
        int ms = millis(timeout);
        synchronized (this) {
            long v = Native.batchLookup(handle(), n, ms, 0);
            try {
                return new BatchView(this, v);
            } catch (RuntimeException | Error e) {
                Native.batchViewRelease(v);
                throw e;
            }
        }
    }

    /**
     * Waits until registration {@code id} (registered through this client)
     * has had a lease and its last lease was released: the consumers are
     * done with it ({@code gpuipc_reg_wait_released}). A release before this
     * call counts; each release is reported once, so a second call for the
     * same release waits for another one. After it returns, the producer
     * may unregister the name and reuse or free the memory.
     *
     * @param id      a registration id from this client
     * @param timeout zero: only check; null or negative: wait as long as the
     *                daemon allows
     * @throws GpuIpcException {@link GpuIpcException#ETIMEDOUT} when the
     *         consumers did not finish in time, {@link GpuIpcException#ENOENT}
     *         for an unknown id
     * @throws IllegalStateException if this client is closed
     */
    public void awaitRelease(long id, Duration timeout) throws GpuIpcException {
        int ms = millis(timeout);
        synchronized (this) {
            Native.waitReleased(handle(), id, ms);
        }
    }

    /**
     * For a registration made with {@link RegisterFlag#CACHEABLE}, after
     * its allocation's last registration is gone ({@link #unregister}):
     * tells the daemon the producer is about to free the memory and waits
     * until no consumer keeps it mapped ({@code gpuipc_reg_wait_unmapped}).
     * Only then may the memory be freed. Until this call, consumers keep the
     * allocation mapped, so registering the same block again costs them a
     * warm lookup.
     *
     * @param id      a registration id from this client (its last one of
     *                that allocation; a batch's stands for every allocation
     *                of its device buffers shared in place)
     * @param timeout zero: only check; null or negative: wait as long as the
     *                daemon allows
     * @throws GpuIpcException {@link GpuIpcException#ETIMEDOUT} when a
     *         consumer still maps it, {@link GpuIpcException#ENOENT} for an
     *         id this client did not register {@code CACHEABLE},
     *         {@link GpuIpcException#EEXIST} when the
     *         allocation has been registered again
     * @throws IllegalStateException if this client is closed
     */
    public void awaitUnmapped(long id, Duration timeout) throws GpuIpcException {
        int ms = millis(timeout);
        synchronized (this) {
            Native.waitUnmapped(handle(), id, ms);
        }
    }

    /**
     * A lifetime for the registrations this client makes from now on
     * ({@code gpuipc_client_set_ttl}): the daemon unregisters each that long after
     * it was registered, as {@link #unregister} does (consumers holding a
     * lease keep their mapping). Without a TTL (or
     * {@link RegisterFlag#EPHEMERAL}) a registration outlives this process
     * until someone unregisters it.
     *
     * @param ttl the lifetime, rounded up to milliseconds; null or zero for
     *            none (the default)
     * @throws GpuIpcException {@link GpuIpcException#EINVAL} above ten years
     * @throws IllegalArgumentException if ttl is negative
     * @throws IllegalStateException if this client is closed
     */
    public void setTtl(Duration ttl) throws GpuIpcException {
        long ms = 0;
        if (ttl != null) {
            if (ttl.isNegative())
                throw new IllegalArgumentException("negative TTL: " + ttl);
            try {
                ms = ttl.toMillis();
                if (Duration.ofMillis(ms).compareTo(ttl) < 0)
                    ms++;
            } catch (ArithmeticException e) {
                ms = Long.MAX_VALUE;
            }
        }
        synchronized (this) {
            Native.setTtl(handle(), ms);
        }
    }

    /**
     * {@link #setTtl(Duration)} with the lifetime as text, as gpuipcctl's
     * {@code --ttl} takes it.
     *
     * @param ttl e.g. {@code "500ms"}, {@code "30s"}, {@code "5m"}, {@code "2h"}
     *            (see {@link #parseDuration})
     * @throws GpuIpcException {@link GpuIpcException#EINVAL} above ten years
     * @throws IllegalArgumentException if ttl is not a duration
     */
    public void setTtl(String ttl) throws GpuIpcException {
        setTtl(parseDuration(ttl));
    }

    /**
     * Parses a duration: a whole number followed by {@code ms}, {@code s},
     * {@code m}, {@code h} or {@code d}; a bare number is seconds.
     *
     * @param s the text, e.g. {@code "30s"}
     * @return the duration
     * @throws IllegalArgumentException if s is not one
     */
    public static Duration parseDuration(String s) {
        Objects.requireNonNull(s, "duration");
        Matcher m = DURATION.matcher(s.trim());
        if (!m.matches())
            throw new IllegalArgumentException("bad duration '" + s
                    + "': expected e.g. 500ms, 30s, 5m, 2h");
        long v;
        try {
            v = Long.parseLong(m.group(1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("duration too large: " + s);
        }
        String unit = m.group(2) == null ? "s" : m.group(2);
        try {
            switch (unit) {
            case "ms": return Duration.ofMillis(v);
            case "s": return Duration.ofSeconds(v);
            case "m": return Duration.ofMinutes(v);
            case "h": return Duration.ofHours(v);
            default: return Duration.ofDays(v);
            }
        } catch (ArithmeticException e) {
            throw new IllegalArgumentException("duration too large: " + s);
        }
    }

    /**
     * Removes {@code name} from the namespace. Consumers holding a lease keep
     * their mapping; host and VMM memory is freed with the last lease.
     *
     * @param name the name
     * @throws GpuIpcException {@link GpuIpcException#ENOENT} when not
     *         registered, {@link GpuIpcException#EPERM} when this peer may not
     * @throws IllegalStateException if this client is closed
     */
    public void unregister(String name) throws GpuIpcException {
        byte[] n = cstr(name, "name");
        synchronized (this) {
            Native.unregister(handle(), n);
        }
    }

    /**
     * The registrations in namespace {@code prefix} (names equal to it or
     * starting with {@code prefix + "/"}), ordered by id.
     *
     * @param prefix the namespace, or null or empty for all
     * @return snapshots of the registrations (unmodifiable)
     * @throws GpuIpcException {@link GpuIpcException#EINVAL} for an invalid prefix
     * @throws IllegalStateException if this client is closed
     */
    public List<BufferInfo> list(String prefix) throws GpuIpcException {
        byte[] p = prefix == null || prefix.isEmpty() ? null : cstr(prefix, "prefix");
        synchronized (this) {
            return List.of(Native.list(handle(), p));
        }
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
     * Closes the connection ({@code gpuipc_client_free}): the daemon drops
     * this connection's leases and ephemeral registrations. A
     * {@link BufferKind#CUDA_IPC} registration still refers to this process's
     * device memory: close the client only after {@link #awaitRelease}.
     * Open {@link View}s stay mapped and must still be closed. Idempotent.
     */
    @Override
    public synchronized void close() {
        if (handle != 0) {
            Native.clientFree(handle);
            handle = 0;
        }
    }

    private static final Pattern DURATION = Pattern.compile("([0-9]+)(ms|s|m|h|d)?");

    /** The C handle; the caller holds this object's monitor. */
    private long handle() {
        if (handle == 0)
            throw new IllegalStateException("GpuIpcClient is closed");
        return handle;
    }

    static int millis(Duration timeout) {
        if (timeout == null || timeout.isNegative())
            return -1;
        if (timeout.isZero())
            return 0;
        long ms;
        try {
            ms = timeout.toMillis();
            if (Duration.ofMillis(ms).compareTo(timeout) < 0)
                ms++;
        } catch (ArithmeticException e) {
            ms = Integer.MAX_VALUE;
        }
        return (int) Math.min(ms, Integer.MAX_VALUE);
    }

    /** UTF-8 bytes of s for a C string; refuses NUL, which C cannot carry. */
    static byte[] cstr(String s, String what) {
        Objects.requireNonNull(s, what);
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        for (byte x : b)
            if (x == 0)
                throw new IllegalArgumentException(what + " contains a NUL character");
        return b;
    }

    static byte[][][] metaArrays(Map<String, String> meta) {
        if (meta == null || meta.isEmpty())
            return new byte[][][] {NO_STRINGS, NO_STRINGS};
        byte[][] keys = new byte[meta.size()][];
        byte[][] values = new byte[meta.size()][];
        int i = 0;
        for (Map.Entry<String, String> e : meta.entrySet()) {
            if (i == keys.length)
                break;
            keys[i] = cstr(e.getKey(), "metadata key");
            values[i] = cstr(e.getValue(), "metadata value for " + e.getKey());
            i++;
        }
        if (i != keys.length) {
            keys = Arrays.copyOf(keys, i);
            values = Arrays.copyOf(values, i);
        }
        return new byte[][][] {keys, values};
    }
}
