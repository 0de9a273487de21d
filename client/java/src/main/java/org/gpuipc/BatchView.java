package org.gpuipc;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * A consumer's mapping of a whole batch, from
 * {@link GpuIpcClient#lookupBatch(String, java.time.Duration)}: every
 * column's buffers, mapped in one round trip under one lease
 * ({@code gpuipc_batch_view} in C).
 *
 * <h2>Ownership</h2>
 * The BatchView owns the lease and the mappings; {@link #close()} releases
 * the lease (the producer's {@link GpuIpcClient#awaitRelease} sees it) and
 * unmaps the buffers. Always close it (try-with-resources). Its
 * {@link BatchColumn}s and their descriptions stay usable after close;
 * {@link ColumnBuffer#address()} and {@link ColumnBuffer#asByteBuffer()}
 * throw {@link IllegalStateException} then, and ByteBuffers handed out
 * before must not be used any more (they would read unmapped memory). There
 * is no cleaner: an unclosed view keeps its mappings until the process
 * exits and its lease until the client is closed.
 *
 * <p>The lookup has waited for the producer's CUDA event, if the batch has
 * one. Thread safety: close() and the buffer accessors synchronize on the
 * client that created the view.
 */
public final class BatchView implements AutoCloseable {
    private final GpuIpcClient client;
    private long handle;
    private final BufferInfo info;
    private final long rows;
    private final List<BatchColumn> columns;
    private final List<String> names;

    BatchView(GpuIpcClient client, long handle) {
        this.client = client;
        this.handle = handle;
        this.info = Native.batchViewInfo(handle);
        this.rows = Native.batchViewRows(handle);
        int n = Native.batchViewNodeCount(handle);
        long[] nodes = new long[n * 7];
        long[] bufs = new long[n * 9];
        byte[][] nodeNames = new byte[n][];
        byte[][] formats = new byte[n][];
        byte[][][] keys = new byte[n][][];
        byte[][][] values = new byte[n][][];
        Native.batchViewNodes(handle, nodes, bufs, nodeNames, formats, keys, values);
        BatchColumn[] all = new BatchColumn[n];
        List<List<BatchColumn>> kids = new ArrayList<>(n);
        List<BatchColumn> top = new ArrayList<>();
        List<String> topNames = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            int nb = (int) Math.min(3, Math.max(0, nodes[7 * i + 6]));
            ColumnBuffer[] cb = new ColumnBuffer[nb];
            for (int j = 0; j < nb; j++) {
                long addr = bufs[9 * i + 3 * j];
                if (addr != 0)
                    cb[j] = new ColumnBuffer(this, addr, bufs[9 * i + 3 * j + 1],
                            (int) bufs[9 * i + 3 * j + 2]);
            }
            Map<String, String> meta = new LinkedHashMap<>();
            for (int k = 0; k < keys[i].length; k++)
                meta.put(str(keys[i][k]), str(values[i][k]));
            all[i] = new BatchColumn(str(nodeNames[i]), str(formats[i]), nodes[7 * i + 1],
                    nodes[7 * i + 2], nodes[7 * i + 3], nodes[7 * i + 4],
                    Collections.unmodifiableMap(meta), cb);
            kids.add(new ArrayList<>());
            long parent = nodes[7 * i];
            if (parent >= 0 && parent < i) {
                kids.get((int) parent).add(all[i]);
            } else {
                top.add(all[i]);
                topNames.add(all[i].name());
            }
        }
        for (int i = 0; i < n; i++)
            all[i].setChildren(kids.get(i));
        this.columns = Collections.unmodifiableList(top);
        this.names = Collections.unmodifiableList(topNames);
    }

    private static String str(byte[] b) {
        return b == null ? "" : new String(b, StandardCharsets.UTF_8);
    }

    /**
     * The registration as it was at lookup time (kind {@link BufferKind#BATCH};
     * its size is the sum of the buffers').
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
     * The batch's row count.
     *
     * @return the rows
     */
    public long numRows() {
        return rows;
    }

    /**
     * The number of top-level columns.
     *
     * @return the count
     */
    public int numColumns() {
        return columns.size();
    }

    /**
     * The top-level columns' names, in order ("" for a column without one).
     *
     * @return an unmodifiable list
     */
    public List<String> columns() {
        return names;
    }

    /**
     * Top-level column i.
     *
     * @param i the index, 0 to {@link #numColumns()} - 1
     * @return the column
     * @throws IndexOutOfBoundsException for another index
     */
    public BatchColumn column(int i) {
        return columns.get(Objects.checkIndex(i, columns.size()));
    }

    /**
     * The first top-level column called name.
     *
     * @param name the column's name
     * @return the column
     * @throws IllegalArgumentException if there is none
     */
    public BatchColumn column(String name) {
        int i = names.indexOf(Objects.requireNonNull(name, "name"));
        if (i < 0)
            throw new IllegalArgumentException(name() + " has no column " + name
                    + " (columns: " + names + ")");
        return columns.get(i);
    }

    /**
     * Whether there is a top-level column called name.
     *
     * @param name the column's name
     * @return true when there is
     */
    public boolean hasColumn(String name) {
        return names.contains(name);
    }

    /**
     * The schema's metadata, in order.
     *
     * @return an unmodifiable map, possibly empty
     */
    public Map<String, String> metadata() {
        return info.metadata();
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
     * Releases the lease and unmaps the batch
     * ({@code gpuipc_batch_view_release}). Idempotent. A failure to send
     * the release (the connection is gone) is not reported: the daemon drops
     * a connection's leases when it ends, and the view is freed either way.
     */
    @Override
    public void close() {
        synchronized (client) {
            if (handle != 0) {
                Native.batchViewRelease(handle);
                handle = 0;
            }
        }
    }

    Object lock() {
        return client;
    }

    /** The caller holds lock(). */
    void checkOpen() {
        if (handle == 0)
            throw new IllegalStateException("BatchView of " + name() + " is closed");
    }
}
