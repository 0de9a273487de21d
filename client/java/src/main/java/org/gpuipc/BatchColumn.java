package org.gpuipc;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * One array of a looked-up batch: a top-level column
 * ({@link BatchView#column(int)}) or a child of a nested one
 * ({@link #children()}), as its producer described it in Arrow terms, with
 * its buffers mapped. An immutable description; its buffers are valid
 * until the {@link BatchView} is closed (see {@link ColumnBuffer}).
 *
 * <p>The buffers are the Arrow C Data Interface's, in its order:
 * {@link #buffer(int)} 0 is the validity bitmap (absent, null, when the
 * producer sent none: no nulls), then offsets and data as the
 * {@link #format()} has them. An element i of the array is at index
 * {@link #offset()} + i of its buffers.
 */
public final class BatchColumn {
    private final String name;
    private final String format;
    private final long flags;
    private final long length;
    private final long nullCount;
    private final long offset;
    private final Map<String, String> metadata;
    private final ColumnBuffer[] buffers;
    private final int device;
    private final int offsetsIndex;     /* the offsets buffer's index, or -1 */
    private List<BatchColumn> children = List.of();

    BatchColumn(String name, String format, long flags, long length, long nullCount, long offset,
                Map<String, String> metadata, ColumnBuffer[] buffers) {
        this.name = name;
        this.format = format;
        this.flags = flags;
        this.length = length;
        this.nullCount = nullCount;
        this.offset = offset;
        this.metadata = metadata;
        this.buffers = buffers;
        int d = -1;
        for (ColumnBuffer b : buffers)
            if (b != null && b.isDevice())
                d = b.deviceOrdinal();
        this.device = d;
        this.offsetsIndex = offsetsIndex(format, buffers.length);
    }

    /* The index of format's offsets buffer, once per column; -1 for a format
     * batches do not take, one without offsets, or one whose layout has
     * another number of buffers than nbuffers. */
    private static int offsetsIndex(String format, int nbuffers) {
        ArrowLayout l = ArrowLayout.tryParse(format);
        if (l == null || l.buffers.length != nbuffers)
            return -1;
        for (int i = 0; i < nbuffers; i++)
            if (l.isOffsets(i))
                return i;
        return -1;
    }

    void setChildren(List<BatchColumn> kids) {
        this.children = Collections.unmodifiableList(new ArrayList<>(kids));
    }

    /**
     * The name (a struct's field names; often empty for a list's child).
     *
     * @return the name
     */
    public String name() {
        return name;
    }

    /**
     * The Arrow C Data Interface format string, e.g. {@code "i"},
     * {@code "u"}, {@code "+s"}.
     *
     * @return the format
     */
    public String format() {
        return format;
    }

    /**
     * The number of elements.
     *
     * @return the length
     */
    public long length() {
        return length;
    }

    /**
     * The number of nulls, or -1 when the producer did not know it.
     *
     * @return the null count
     */
    public long nullCount() {
        return nullCount;
    }

    /**
     * The array's offset into its buffers, in elements (0 from the Java
     * producer; other producers may send slices).
     *
     * @return the offset
     */
    public long offset() {
        return offset;
    }

    /**
     * Whether the field is nullable (Arrow's {@code ARROW_FLAG_NULLABLE}).
     *
     * @return the flag
     */
    public boolean isNullable() {
        return (flags & 2) != 0;
    }

    /**
     * The field's metadata, in order.
     *
     * @return an unmodifiable map, possibly empty
     */
    public Map<String, String> metadata() {
        return metadata;
    }

    /**
     * How many buffers the array has (absent ones included).
     *
     * @return 0 to 3
     */
    public int numBuffers() {
        return buffers.length;
    }

    /**
     * Buffer i in Arrow's order.
     *
     * @param i the index, 0 to {@link #numBuffers()} - 1
     * @return the buffer, or null when absent
     * @throws IndexOutOfBoundsException for another index
     */
    public ColumnBuffer buffer(int i) {
        return buffers[java.util.Objects.checkIndex(i, buffers.length)];
    }

    /**
     * The validity bitmap (bit i set: element i valid, least significant
     * bit first).
     *
     * @return the buffer, or null when absent (no nulls) or the type has none
     */
    public ColumnBuffer validity() {
        return buffers.length > 0 && !"n".equals(format) ? buffers[0] : null;
    }

    /**
     * The offsets of a string, binary, list or map array (int32, or int64
     * for {@code "U"}, {@code "Z"}, {@code "+L"}).
     *
     * @return the buffer, or null for other types
     */
    public ColumnBuffer offsets() {
        return offsetsIndex < 0 ? null : buffers[offsetsIndex];
    }

    /**
     * The values: the data buffer of fixed-width, boolean, string and
     * binary arrays (the last buffer).
     *
     * @return the buffer, or null for nested types and {@code "n"}
     */
    public ColumnBuffer data() {
        if (format.startsWith("+") || "n".equals(format) || buffers.length < 2)
            return null;
        return buffers[buffers.length - 1];
    }

    /**
     * The child arrays: a struct's fields, a list's elements, a map's entries.
     *
     * @return an unmodifiable list, possibly empty
     */
    public List<BatchColumn> children() {
        return children;
    }

    /**
     * The first child called name.
     *
     * @param name the child's name
     * @return the child
     * @throws IllegalArgumentException if there is none
     */
    public BatchColumn child(String name) {
        for (BatchColumn c : children)
            if (c.name.equals(name))
                return c;
        throw new IllegalArgumentException("array " + this.name + " has no child " + name);
    }

    /**
     * Whether the array's own buffers are device memory (a struct without
     * a validity bitmap has none: see its children).
     *
     * @return true for device memory
     */
    public boolean isDevice() {
        return device >= 0;
    }

    /**
     * The CUDA device ordinal of the array's device buffers in this
     * process, or -1.
     *
     * @return the ordinal or -1
     */
    public int deviceOrdinal() {
        return device;
    }

    /**
     * A short description, e.g. {@code x: i[3, 1 null]}.
     *
     * @return the text
     */
    @Override
    public String toString() {
        return name + ": " + format + "[" + length + ", " + nullCount + " null]";
    }
}
