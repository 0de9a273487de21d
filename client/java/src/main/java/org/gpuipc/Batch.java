package org.gpuipc;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.Comparator;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * A table of Arrow columns being put together for
 * {@link GpuIpcClient#registerBatch(String, Batch, RegisterFlag...)}: one
 * name, one request and one lease for all of its buffers
 * ({@code gpuipc_batch} in C). Columns are added in order; every column
 * has the same number of rows. The schema's metadata and an optional CUDA
 * event go with the whole batch.
 *
 * <pre>{@code
 * try (Batch b = new Batch()) {
 *     b.addColumn("x", "i", 3, 1, BatchBuffer.of(validity), BatchBuffer.of(ints));
 *     b.addColumn("s", "u", 3, 0, null, BatchBuffer.of(offsets), BatchBuffer.of(chars));
 *     b.setMetadata(Map.of("origin", "spark"));
 *     long id = client.registerBatch("spark/app-1/batch-0", b);
 * }
 * }</pre>
 *
 * <h2>Checks</h2>
 * {@link #addColumn(ColumnSpec)} checks the description at once, against
 * the format's layout and the buffers' sizes (a buffer shorter than its
 * format needs is refused: nothing is read past a buffer's end), and the
 * library checks it again; a refused column leaves the batch as it was.
 * Limits: 1024 arrays and 256 distinct buffers per batch, 64 memfds and
 * exported allocations, 32 metadata pairs.
 *
 * <h2>Ownership</h2>
 * The Batch owns native memory that {@link #close()} frees; it refers to
 * the columns' memory, which stays the caller's and must stay valid until
 * the batch is registered (see {@link BatchBuffer}). A batch may be
 * registered more than once, under different names. Thread safety: the
 * methods are synchronized.
 */
public final class Batch implements AutoCloseable {
    /** The most arrays (columns and their children) of one batch ({@code GPUIPC_BATCH_NODES_MAX}). */
    public static final int MAX_ARRAYS = 1024;
    /** The most distinct buffers of one batch ({@code GPUIPC_BATCH_PARTS_MAX}). */
    public static final int MAX_BUFFERS = 256;

    private long handle;
    private final List<ColumnSpec> columns = new ArrayList<>();
    /* The HostBuffers the columns lie in, each once: kept open while in use. */
    private final Set<HostBuffer> hostBuffers = identitySet();
    private long rows = -1;
    private int device = -1;            /* a device column's ordinal, for the event */

    /**
     * An empty batch.
     *
     * @throws GpuIpcException {@link GpuIpcException#ENOMEM}
     */
    public Batch() throws GpuIpcException {
        handle = Native.batchNew();
    }

    /**
     * Appends a column without children
     * ({@link ColumnSpec#of(String, String, long, long, BatchBuffer...)}).
     *
     * @param name      the column's name
     * @param format    the Arrow format string
     * @param length    the rows
     * @param nullCount the nulls, or -1 for unknown
     * @param buffers   the buffers in Arrow's order, null for an absent one (a
     *                  lone null is one absent buffer, as in {@link ColumnSpec#of})
     * @return this batch
     * @throws GpuIpcException as {@link #addColumn(ColumnSpec)}
     */
    public Batch addColumn(String name, String format, long length, long nullCount,
                           BatchBuffer... buffers) throws GpuIpcException {
        return addColumn(ColumnSpec.of(name, format, length, nullCount, buffers));
    }

    /**
     * Appends a column, with its children ({@code gpuipc_batch_add_column}).
     *
     * @param column the column
     * @return this batch
     * @throws GpuIpcException {@link GpuIpcException#EINVAL} for a bad
     *         format, a buffer too short for its format, the wrong number
     *         of buffers or children, a length other than the batch's
     *         rows, or buffers in more than one memory;
     *         {@link GpuIpcException#ENOTSUP} for a type batches do not
     *         carry (union, run-end, view); {@link GpuIpcException#E2BIG}
     *         past the batch's limits. The batch is then unchanged.
     * @throws IllegalStateException if this batch, or a HostBuffer of the
     *         column, is closed
     * @throws IllegalArgumentException for a name or metadata containing NUL
     */
    public synchronized Batch addColumn(ColumnSpec column) throws GpuIpcException {
        Objects.requireNonNull(column, "column");
        long b = handle();
        String op = "add column " + column.name();
        Flat f = new Flat();
        f.add(column, op, 0);
        if (f.nodes > MAX_ARRAYS)
            throw new GpuIpcException(GpuIpcException.E2BIG, op, "more than "
                    + MAX_ARRAYS + " arrays in one column");
        if (rows >= 0 && column.length() != rows)
            throw new GpuIpcException(GpuIpcException.EINVAL, op, column.length()
                    + " rows; the batch has " + rows);
        withOpen(f.hostBuffers, () -> {
            f.check(column, op);
            Native.batchAddColumn(b, f.device, f.names(), f.formats(), f.metas(), f.nodeArray(),
                    f.bufferArray());
            return 0L;
        });
        columns.add(column);
        hostBuffers.addAll(f.hostBuffers);
        rows = column.length();
        if (f.device >= 0)
            device = f.device;
        return this;
    }

    /**
     * Sets the schema's metadata, replacing any ({@code gpuipc_batch_set_metadata}):
     * consumers read it as {@link BatchView#metadata()}.
     *
     * @param metadata at most 32 pairs, keys at most 64 bytes, values 1024
     *                 (UTF-8); null or empty clears it
     * @return this batch
     * @throws GpuIpcException {@link GpuIpcException#E2BIG} past the limits
     * @throws IllegalStateException if this batch is closed
     */
    public synchronized Batch setMetadata(Map<String, String> metadata) throws GpuIpcException {
        byte[][][] kv = GpuIpcClient.metaArrays(metadata);
        Native.batchSetMetadata(handle(), kv[0], kv[1]);
        return this;
    }

    /**
     * Sets the batch's CUDA event ({@code gpuipc_batch_set_event}): a
     * {@code CUevent} recorded on the stream that wrote the device columns,
     * after the writes. It is shared with consumers, whose lookup waits for
     * it (an event created with {@code CU_EVENT_INTERPROCESS} is shared as
     * it is; another is waited for at registration). Without one, write the
     * device columns completely (synchronize) before registering. The event
     * does not cover a device string or binary column's offsets, whose last
     * one {@link #addColumn} reads with a plain copy: they must be complete
     * before that call (see {@link BatchBuffer#device}).
     *
     * @param cuEvent the {@code CUevent}, or 0 to clear it
     * @param device  the CUDA device ordinal it was recorded on
     * @return this batch
     * @throws GpuIpcException {@link GpuIpcException#EINVAL} for a negative device
     * @throws IllegalStateException if this batch is closed
     */
    public synchronized Batch setEvent(long cuEvent, int device) throws GpuIpcException {
        Native.batchSetEvent(handle(), cuEvent, device);
        return this;
    }

    /**
     * The rows of every column: -1 before the first column.
     *
     * @return the row count
     */
    public synchronized long numRows() {
        return rows;
    }

    /**
     * The names of the columns added, in order.
     *
     * @return an unmodifiable copy
     */
    public synchronized List<String> columnNames() {
        List<String> names = new ArrayList<>(columns.size());
        for (ColumnSpec c : columns)
            names.add(c.name());
        return Collections.unmodifiableList(names);
    }

    /**
     * The columns added, in order.
     *
     * @return an unmodifiable copy
     */
    public synchronized List<ColumnSpec> columns() {
        return Collections.unmodifiableList(new ArrayList<>(columns));
    }

    /**
     * The CUDA device ordinal of the last device column added, or -1 when
     * all columns are host memory.
     *
     * @return the ordinal or -1
     */
    public synchronized int deviceOrdinal() {
        return device;
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
     * Frees the batch's native description ({@code gpuipc_batch_free});
     * registrations made from it are not affected. Idempotent.
     */
    @Override
    public synchronized void close() {
        if (handle != 0) {
            Native.batchFree(handle);
            handle = 0;
        }
    }

    /** Registers through client c; the caller holds c's monitor. */
    synchronized long register(long c, byte[] name, int flags) throws GpuIpcException {
        long b = handle();
        if (columns.isEmpty())
            throw new GpuIpcException(GpuIpcException.EINVAL, "register batch "
                    + new String(name, StandardCharsets.UTF_8), "a batch needs at least one column");
        return withOpen(hostBuffers, () -> Native.batchRegister(c, name, b, flags));
    }

    private static Set<HostBuffer> identitySet() {
        return Collections.newSetFromMap(new IdentityHashMap<>());
    }

    private long handle() {
        if (handle == 0)
            throw new IllegalStateException("Batch is closed");
        return handle;
    }

    /** A native call that reads the columns' host memory. */
    private interface Call {
        long run() throws GpuIpcException;
    }

    /* Runs call holding every HostBuffer's monitor, each checked open, so
     * that none is unmapped while C reads it (HostBuffer.close() waits).
     *
     * The monitors are taken in one total order, ascending HostBuffer.serial()
     * (creation order), whatever the batch: two threads whose batches share
     * HostBuffers A and B then both take A before B, so neither can hold one
     * while waiting for the other (a set's iteration order could differ from
     * batch to batch, and nesting in it could deadlock). Nothing takes a
     * Batch's or a client's monitor while holding a HostBuffer's. */
    private static long withOpen(Collection<HostBuffer> bufs, Call call) throws GpuIpcException {
        List<HostBuffer> order = new ArrayList<>(bufs);
        order.sort(Comparator.comparingLong(HostBuffer::serial));
        return withOpen(order, 0, call);
    }

    private static long withOpen(List<HostBuffer> bufs, int i, Call call) throws GpuIpcException {
        if (i == bufs.size())
            return call.run();
        HostBuffer h = bufs.get(i);
        synchronized (h) {
            if (h.isClosed())
                throw new IllegalStateException("a HostBuffer of the batch is closed");
            return withOpen(bufs, i + 1, call);
        }
    }

    /** A column flattened in pre-order for Native.batchAddColumn (see batch_jni.c). */
    private static final class Flat {
        final List<ColumnSpec> order = new ArrayList<>();
        final Set<HostBuffer> hostBuffers = identitySet();
        int nodes;
        int device = -2;                /* -2: no buffer yet */
        String firstMemory;

        /* Pre-order, with the structural checks that need no memory. */
        void add(ColumnSpec c, String op, int depth) throws GpuIpcException {
            if (depth > 64)
                throw new GpuIpcException(GpuIpcException.E2BIG, op, "nested more than 64 deep");
            if (++nodes > MAX_ARRAYS)
                return;
            order.add(c);
            for (BatchBuffer b : c.buffers()) {
                if (b == null)
                    continue;
                String mem = b.isDevice() ? "device " + b.deviceOrdinal() : "host memory";
                if (device == -2) {
                    device = b.deviceOrdinal();
                    firstMemory = mem;
                } else if (device != b.deviceOrdinal()) {
                    throw new GpuIpcException(GpuIpcException.EINVAL, op, "array \"" + c.name()
                            + "\" has buffers in " + firstMemory + " and in " + mem
                            + ": a column's buffers are in one memory");
                }
                if (b.hostBuffer() != null)
                    hostBuffers.add(b.hostBuffer());
            }
            for (ColumnSpec k : c.children())
                add(k, op, depth + 1);
            if (depth == 0 && device == -2)
                device = -1;
        }

        /* Each array against its format; host offsets are read (under the locks). */
        void check(ColumnSpec root, String op) throws GpuIpcException {
            for (ColumnSpec c : order) {
                String what = c == root ? "" : "array \"" + c.name() + "\": ";
                ArrowLayout l = ArrowLayout.parse(c.format(), op);
                if (c.length() < 0 || c.nullCount() < -1 || c.nullCount() > c.length())
                    throw new GpuIpcException(GpuIpcException.EINVAL, op, what + "length "
                            + c.length() + " and null count " + c.nullCount()
                            + ": a length is >= 0, a null count -1 (unknown) to the length");
                if (c.buffers().size() != l.buffers.length)
                    throw new GpuIpcException(GpuIpcException.EINVAL, op, what + c.buffers().size()
                            + " buffers; format \"" + c.format() + "\" has " + l.buffers.length
                            + " (null for an absent one)");
                int n = c.children().size();
                if (l.children >= 0 && n != l.children)
                    throw new GpuIpcException(GpuIpcException.EINVAL, op, what + n
                            + " children; format \"" + c.format() + "\" takes "
                            + (l.children == 0 ? "none" : "one"));
                long last = 0;
                for (int i = 0; i < l.buffers.length; i++) {
                    BatchBuffer b = c.buffers().get(i);
                    if (b == null)
                        continue;       /* the library says which may be absent */
                    if (l.isData(i)) {
                        BatchBuffer offs = c.buffers().get(i - 1);
                        if (offs == null || b.isDevice())
                            continue;   /* C reads a device column's last offset itself */
                        last = offs.readOffset(c.length(), l.buffers[i] == ArrowLayout.DATA64);
                        if (last < 0)
                            throw new GpuIpcException(GpuIpcException.EINVAL, op, what
                                    + "its last offset is negative (" + last + ")");
                    }
                    long need;
                    try {
                        need = l.bytes(i, c.length(), last);
                    } catch (ArithmeticException e) {
                        throw new GpuIpcException(GpuIpcException.EINVAL, op, what + "buffer " + i
                                + " would exceed 2^63 bytes");
                    }
                    if (b.size() < need)
                        throw new GpuIpcException(GpuIpcException.EINVAL, op, what + "buffer " + i
                                + " (" + l.role(i) + ") holds " + b.size() + " bytes; format \""
                                + c.format() + "\" at length " + c.length() + " needs " + need);
                }
            }
        }

        byte[][] names() {
            byte[][] a = new byte[order.size()][];
            for (int i = 0; i < a.length; i++)
                a[i] = GpuIpcClient.cstr(order.get(i).name(), "column name");
            return a;
        }

        byte[][] formats() {
            byte[][] a = new byte[order.size()][];
            for (int i = 0; i < a.length; i++)
                a[i] = order.get(i).format().getBytes(StandardCharsets.US_ASCII);
            return a;
        }

        /* Arrow's binary metadata: int32 count, then int32-length-prefixed
         * keys and values, native byte order. */
        byte[][] metas() {
            byte[][] a = new byte[order.size()][];
            for (int i = 0; i < a.length; i++) {
                Map<String, String> m = order.get(i).metadata();
                if (m.isEmpty())
                    continue;
                ByteArrayOutputStream out = new ByteArrayOutputStream();
                out.writeBytes(i32(m.size()));
                for (Map.Entry<String, String> e : m.entrySet()) {
                    for (String s : new String[] {e.getKey(), e.getValue()}) {
                        byte[] x = GpuIpcClient.cstr(s, "metadata of " + order.get(i).name());
                        out.writeBytes(i32(x.length));
                        out.writeBytes(x);
                    }
                }
                a[i] = out.toByteArray();
            }
            return a;
        }

        private static byte[] i32(int v) {
            return ByteBuffer.allocate(4).order(ByteOrder.nativeOrder()).putInt(v).array();
        }

        long[] nodeArray() {
            long[] a = new long[order.size() * 5];
            for (int i = 0; i < order.size(); i++) {
                ColumnSpec c = order.get(i);
                a[5 * i] = c.isNullable() ? 2 : 0;      /* ARROW_FLAG_NULLABLE */
                a[5 * i + 1] = c.length();
                a[5 * i + 2] = c.nullCount();
                a[5 * i + 3] = c.children().size();
                a[5 * i + 4] = c.buffers().size();
            }
            return a;
        }

        long[] bufferArray() {
            long[] a = new long[order.size() * 3];
            for (int i = 0; i < order.size(); i++) {
                List<BatchBuffer> b = order.get(i).buffers();
                for (int j = 0; j < b.size() && j < 3; j++)
                    a[3 * i + j] = b.get(j) == null ? 0 : b.get(j).address();
            }
            return a;
        }
    }
}
