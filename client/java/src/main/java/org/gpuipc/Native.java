package org.gpuipc;

import java.nio.ByteBuffer;

/**
 * The JNI entry points of libgpuipc_jni. Handles are the C pointers as
 * longs; every method taking a client handle must be called with that
 * client's monitor held (see {@link GpuIpcClient}).
 */
final class Native {
    /** System property naming the JNI library file; else {@code System.loadLibrary("gpuipc_jni")}. */
    static final String LIBRARY_PROPERTY = "org.gpuipc.library";

    static {
        String path = System.getProperty(LIBRARY_PROPERTY);
        if (path != null && !path.isEmpty())
            System.load(path);
        else
            System.loadLibrary("gpuipc_jni");
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

    static native long registerHost(long c, byte[] name, long b, byte[][] keys, byte[][] values,
                                    int flags) throws GpuIpcException;

    static native long registerCuda(long c, byte[] name, long dptr, long size, byte[][] keys,
                                    byte[][] values, int flags) throws GpuIpcException;

    static native void unregister(long c, byte[] name) throws GpuIpcException;

    static native void setTtl(long c, long ttlMs) throws GpuIpcException;

    static native void waitReleased(long c, long id, int timeoutMs) throws GpuIpcException;

    static native long lookup(long c, byte[] name, int timeoutMs, int flags) throws GpuIpcException;

    static native long viewAddress(long v);

    static native long viewSize(long v);

    static native int viewDevice(long v);

    static native BufferInfo viewInfo(long v);

    static native int viewRelease(long v);

    static native BufferInfo[] list(long c, byte[] prefix) throws GpuIpcException;
}
