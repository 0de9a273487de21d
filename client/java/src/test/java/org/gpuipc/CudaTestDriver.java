package org.gpuipc;

/**
 * Test-only access to the CUDA driver (the double under make check-java, the
 * real driver in tests/gpu/java): device 0's primary context, loaded through
 * $GPUIPC_LIBCUDA or libcuda.so.1. Lives in the test tree with its own
 * native library, so the binding's public API has no test hooks.
 */
public final class CudaTestDriver {
    static {
        System.load(System.getProperty("org.gpuipc.test.native"));
    }

    private CudaTestDriver() {
    }

    /** cuMemAlloc_v2 of size bytes on device 0. */
    public static native long alloc(long size);

    /** cuMemFree_v2. */
    public static native void free(long dptr);

    /** cuMemcpyHtoD_v2 and cuCtxSynchronize. */
    public static native void copyToDevice(long dptr, byte[] data);

    /** cuMemcpyDtoH_v2 of n bytes. */
    public static native byte[] copyFromDevice(long dptr, int n);
}
