package org.gpuipc;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Locale;
import java.util.Objects;

/**
 * The JNI entry points of libgpuipc_jni. Handles are the C pointers as
 * longs; every method taking a client handle must be called with that
 * client's monitor held (see {@link GpuIpcClient}).
 *
 * <p>The library is loaded, in order, from: the file named by the system
 * property {@value #LIBRARY_PROPERTY}; the jar, where {@code make java} puts
 * it under {@code org/gpuipc/native/linux-ARCH/} (ARCH as {@code os.arch}
 * says: amd64, aarch64), copied to a private temporary file that is deleted
 * once loaded; {@code /usr/lib/TRIPLET/jni/libgpuipc_jni.so}, where the
 * Debian package libgpuipc-jni installs it; {@code java.library.path}.
 */
final class Native {
    /** System property naming the JNI library file; it wins over every other place. */
    static final String LIBRARY_PROPERTY = "org.gpuipc.library";
    /** Where the jar carries the library, below the platform folder. */
    static final String RESOURCE_DIR = "/org/gpuipc/native/";
    static final String LIBRARY_FILE = "libgpuipc_jni.so";

    /** Where the library was loaded from, for messages and tests. */
    static final String LOADED_FROM;

    static {
        LOADED_FROM = loadLibrary();
    }

    /** {@code linux-amd64}, {@code linux-aarch64}...: the folder in the jar. */
    static String platform() {
        return System.getProperty("os.name", "").toLowerCase(Locale.ROOT).replace(' ', '-')
                + "-" + System.getProperty("os.arch", "");
    }

    /** The Debian multiarch triplet of this JVM's architecture, or null. */
    static String triplet() {
        switch (System.getProperty("os.arch", "")) {
        case "amd64":
        case "x86_64":
            return "x86_64-linux-gnu";
        case "aarch64":
            return "aarch64-linux-gnu";
        case "ppc64le":
            return "powerpc64le-linux-gnu";
        default:
            return null;
        }
    }

    private static String loadLibrary() {
        String path = System.getProperty(LIBRARY_PROPERTY);
        if (path != null && !path.isEmpty()) {
            System.load(path);
            return path;
        }
        String resource = RESOURCE_DIR + platform() + "/" + LIBRARY_FILE;
        try (InputStream in = Native.class.getResourceAsStream(resource)) {
            if (in != null)
                return loadCopy(in, resource);
        } catch (IOException e) {
            throw new UnsatisfiedLinkError("gpuipc: cannot extract " + resource + " from the jar: " + e);
        }
        String t = triplet();
        if (t != null) {
            Path system = Paths.get("/usr/lib", t, "jni", LIBRARY_FILE);
            if (Files.isRegularFile(system)) {
                System.load(system.toString());
                return system.toString();
            }
        }
        try {
            System.loadLibrary("gpuipc_jni");
        } catch (UnsatisfiedLinkError e) {
            UnsatisfiedLinkError u = new UnsatisfiedLinkError("gpuipc: no " + LIBRARY_FILE
                    + " in the jar (" + resource + "), in /usr/lib/" + t + "/jni or on java.library.path;"
                    + " set -D" + LIBRARY_PROPERTY + "=PATH: " + e.getMessage());
            u.initCause(e);
            throw u;
        }
        return "java.library.path";
    }

    /* The copy is private (createTempFile makes it rw-------) and deleted
     * once loaded: the mapping keeps it alive, and no file is left behind. */
    private static String loadCopy(InputStream in, String resource) throws IOException {
        Path tmp = Files.createTempFile("gpuipc_jni-", ".so");
        try {
            Files.copy(in, tmp, StandardCopyOption.REPLACE_EXISTING);
            System.load(tmp.toString());
        } finally {
            Files.deleteIfExists(tmp);
        }
        return "jar:" + resource;
    }

    private Native() {
    }

    /** Makes sure the library is loaded (class initialisation does it). */
    static void load() {
    }

    static native String version();

    static native String defaultSocket();

    static native long connect(byte[] path) throws GpuIpcException;

    static native void clientFree(long c);

    static native void ping(long c) throws GpuIpcException;

    static native long hostbufNew(long size) throws GpuIpcException;

    static native long hostbufAddress(long b);

    static native long hostbufSize(long b);

    static native void hostbufFree(long b);

    static native ByteBuffer directBuffer(long address, long length);

    /**
     * Bytes [offset, offset + len) of the size bytes at address as a new
     * direct ByteBuffer in native byte order, read-only unless writable: the
     * windows of {@link HostBuffer}, {@link View} and {@link ColumnBuffer}.
     *
     * @throws IndexOutOfBoundsException if the window is not inside the size bytes
     */
    static ByteBuffer window(long address, long size, long offset, int len, boolean writable) {
        Objects.checkFromIndexSize(offset, len, size);
        ByteBuffer b = directBuffer(address + offset, len);
        return (writable ? b : b.asReadOnlyBuffer()).order(ByteOrder.nativeOrder());
    }

    /**
     * size as the length of a ByteBuffer over a whole buffer.
     *
     * @throws UnsupportedOperationException past {@link Integer#MAX_VALUE}
     */
    static int wholeLength(long size) {
        if (size > Integer.MAX_VALUE)
            throw new UnsupportedOperationException("buffer of " + size
                    + " bytes exceeds a ByteBuffer's limit; use asByteBuffer(offset, length)");
        return (int) size;
    }

    static native long registerHost(long c, byte[] name, long b, byte[][] keys, byte[][] values,
                                    int flags) throws GpuIpcException;

    static native long registerCuda(long c, byte[] name, long dptr, long size, byte[][] keys,
                                    byte[][] values, int flags) throws GpuIpcException;

    static native void unregister(long c, byte[] name) throws GpuIpcException;

    static native void setTtl(long c, long ttlMs) throws GpuIpcException;

    static native void waitReleased(long c, long id, int timeoutMs) throws GpuIpcException;

    static native void waitUnmapped(long c, long id, int timeoutMs) throws GpuIpcException;

    static native long lookup(long c, byte[] name, int timeoutMs, int flags) throws GpuIpcException;

    static native long viewAddress(long v);

    static native long viewSize(long v);

    static native int viewDevice(long v);

    static native BufferInfo viewInfo(long v);

    static native int viewRelease(long v);

    static native BufferInfo[] list(long c, byte[] prefix) throws GpuIpcException;

    /* Batches (batch_jni.c). */

    static native long directAddress(ByteBuffer b);

    static native long batchNew() throws GpuIpcException;

    static native void batchFree(long b);

    /** One column, its arrays in pre-order: see batch_jni.c for the layout of the arrays. */
    static native void batchAddColumn(long b, int device, byte[][] names, byte[][] formats,
                                      byte[][] metadata, long[] nodes, long[] buffers)
            throws GpuIpcException;

    static native void batchSetMetadata(long b, byte[][] keys, byte[][] values)
            throws GpuIpcException;

    static native void batchSetEvent(long b, long event, int device) throws GpuIpcException;

    static native long batchRegister(long c, byte[] name, long b, int flags) throws GpuIpcException;

    static native long batchLookup(long c, byte[] name, int timeoutMs, int flags)
            throws GpuIpcException;

    static native long batchViewRows(long v);

    static native int batchViewNodeCount(long v);

    /** Fills the arrays (7 and 9 longs per node, one element per node for the others). */
    static native void batchViewNodes(long v, long[] nodes, long[] buffers, byte[][] names,
                                      byte[][] formats, byte[][][] metaKeys, byte[][][] metaValues);

    static native BufferInfo batchViewInfo(long v);

    static native int batchViewRelease(long v);
}
