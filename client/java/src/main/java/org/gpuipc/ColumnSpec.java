package org.gpuipc;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * A producer's description of one Arrow array (a column, or a child of a
 * nested column) for {@link Batch#addColumn(ColumnSpec)}: what an
 * {@code ArrowSchema} / {@code ArrowArray} pair of the Arrow C Data
 * Interface says, with the buffers as {@link BatchBuffer}s. Immutable: the
 * {@code with*} methods return a new description.
 *
 * <p>The format is Arrow's C Data Interface format string: {@code "c"},
 * {@code "s"}, {@code "i"}, {@code "l"} (signed 8 to 64 bits),
 * {@code "C"}, {@code "S"}, {@code "I"}, {@code "L"} (unsigned),
 * {@code "e"}, {@code "f"}, {@code "g"} (floats of 16 to 64 bits),
 * {@code "b"} (booleans, one bit each), {@code "u"} / {@code "U"} (UTF-8
 * strings with int32 / int64 offsets), {@code "z"} / {@code "Z"} (binary),
 * {@code "w:N"}, {@code "d:P,S"}, the temporal types ({@code "tdD"},
 * {@code "tsu:UTC"}, ...), {@code "n"} (null), and the nested
 * {@code "+s"} (struct), {@code "+l"} / {@code "+L"} (lists),
 * {@code "+w:N"} and {@code "+m"} (map). Dictionary, union, run-end and
 * view types are refused.
 *
 * <p>The buffers come in Arrow's order, as many as the format has, with
 * {@code null} for an absent one: {@code [validity, data]} for fixed-width
 * types and booleans, {@code [validity, offsets, data]} for strings and
 * binaries, {@code [validity]} for structs and fixed-size lists,
 * {@code [validity, offsets]} for lists and maps, none for {@code "n"}.
 * The validity bitmap (bit i set: element i is valid, least significant
 * bit first) may be absent when there are no nulls. Bitmaps and values
 * are little-endian bit- and byte-wise, as Arrow's are; offsets start at
 * element 0 (the array's offset is always 0 here). All buffers of a column
 * and its children are in one memory: host memory, or one device.
 */
public final class ColumnSpec {
    private final String name;
    private final String format;
    private final long length;
    private final long nullCount;
    private final List<BatchBuffer> buffers;
    private final List<ColumnSpec> children;
    private final Boolean nullable;
    private final Map<String, String> metadata;

    private ColumnSpec(String name, String format, long length, long nullCount,
                       List<BatchBuffer> buffers, List<ColumnSpec> children, Boolean nullable,
                       Map<String, String> metadata) {
        this.name = name;
        this.format = format;
        this.length = length;
        this.nullCount = nullCount;
        this.buffers = buffers;
        this.children = children;
        this.nullable = nullable;
        this.metadata = metadata;
    }

    /**
     * An array without children.
     *
     * @param name      the column's (or field's) name; may be empty
     * @param format    the Arrow format string, e.g. {@code "i"} or {@code "u"}
     * @param length    the number of elements (rows, for a column)
     * @param nullCount the number of nulls, or -1 for unknown
     * @param buffers   the buffers in Arrow's order, {@code null} for an absent one.
     *                  A lone {@code null} is one absent buffer, as a struct's
     *                  validity: {@code of(n, "+s", len, 0, null)} (which Java
     *                  passes as a null array) and
     *                  {@code of(n, "+s", len, 0, (BatchBuffer) null)} both
     *                  describe one absent buffer, never zero buffers
     * @return the description
     */
    public static ColumnSpec of(String name, String format, long length, long nullCount,
                                BatchBuffer... buffers) {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(format, "format");
        /* A bare null argument arrives as a null array: it means one absent buffer. */
        List<BatchBuffer> b = Collections.unmodifiableList(new ArrayList<>(
                Arrays.asList(buffers == null ? new BatchBuffer[] {null} : buffers)));
        return new ColumnSpec(name, format, length, nullCount, b, List.of(), null, Map.of());
    }

    /**
     * A struct array ({@code "+s"}) of the given fields, each as long as it.
     *
     * @param name      the column's name
     * @param length    the number of elements
     * @param nullCount the number of null structs, or -1 for unknown
     * @param validity  the struct's validity bitmap, or null when no struct is null
     * @param fields    the fields, in order
     * @return the description
     */
    public static ColumnSpec struct(String name, long length, long nullCount, BatchBuffer validity,
                                    ColumnSpec... fields) {
        return of(name, "+s", length, nullCount, validity).withChildren(fields);
    }

    /**
     * This description with the given children (a struct's fields, a list's
     * one element array, a map's one entries struct).
     *
     * @param children the child arrays, in order
     * @return a new description
     */
    public ColumnSpec withChildren(ColumnSpec... children) {
        Objects.requireNonNull(children, "children");
        List<ColumnSpec> c = new ArrayList<>(children.length);
        for (ColumnSpec x : children)
            c.add(Objects.requireNonNull(x, "child"));
        return new ColumnSpec(name, format, length, nullCount, buffers,
                Collections.unmodifiableList(c), nullable, metadata);
    }

    /**
     * This description with the Arrow nullable flag set or cleared. By
     * default an array is nullable when it has a validity bitmap or a null
     * count other than 0.
     *
     * @param nullable whether the field is nullable
     * @return a new description
     */
    public ColumnSpec withNullable(boolean nullable) {
        return new ColumnSpec(name, format, length, nullCount, buffers, children, nullable,
                metadata);
    }

    /**
     * This description with the field's metadata (the {@code ArrowSchema}'s:
     * at most 32 pairs, keys at most 64 bytes, values 1024).
     *
     * @param metadata the pairs, in iteration order; null or empty for none
     * @return a new description
     */
    public ColumnSpec withMetadata(Map<String, String> metadata) {
        Map<String, String> m = new LinkedHashMap<>();
        if (metadata != null)
            for (Map.Entry<String, String> e : metadata.entrySet())
                m.put(Objects.requireNonNull(e.getKey(), "metadata key"),
                        Objects.requireNonNull(e.getValue(), "metadata value"));
        return new ColumnSpec(name, format, length, nullCount, buffers, children, nullable,
                Collections.unmodifiableMap(m));
    }

    /**
     * The name.
     *
     * @return the name, possibly empty
     */
    public String name() {
        return name;
    }

    /**
     * The Arrow format string.
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
     * The number of nulls, or -1 for unknown.
     *
     * @return the null count
     */
    public long nullCount() {
        return nullCount;
    }

    /**
     * The buffers, in Arrow's order (an absent one is null).
     *
     * @return an unmodifiable list
     */
    public List<BatchBuffer> buffers() {
        return buffers;
    }

    /**
     * The child arrays.
     *
     * @return an unmodifiable list, possibly empty
     */
    public List<ColumnSpec> children() {
        return children;
    }

    /**
     * Whether the field is nullable: as set by {@link #withNullable}, else
     * whether it has a validity bitmap or a null count other than 0.
     *
     * @return the flag
     */
    public boolean isNullable() {
        if (nullable != null)
            return nullable;
        return nullCount != 0 || (!buffers.isEmpty() && buffers.get(0) != null
                && !"n".equals(format));
    }

    /**
     * The field's metadata.
     *
     * @return an unmodifiable map, possibly empty
     */
    public Map<String, String> metadata() {
        return metadata;
    }
}
