package org.gpuipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.gpuipc.gpu.GpuProducer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Device buffers through the CUDA driver double ($GPUIPC_LIBCUDA): its
 * device pointers are host addresses, so consumers can compare bytes.
 */
class DeviceBufferTest {
    /** The double's UUID of physical device 0 (tests/cuda-double/README.md). */
    static final String DOUBLE_UUID0 = "GPU-67707569-7063-2d64-6f75-626c652d3000";
    private static TestSupport.Daemon daemon;

    @BeforeAll
    static void startDaemon() throws Exception {
        String lib = System.getenv("GPUIPC_LIBCUDA");
        assumeTrue(lib != null && lib.contains("tests/cuda"), "needs the CUDA double in GPUIPC_LIBCUDA");
        daemon = TestSupport.Daemon.inTmp("device");
    }

    @AfterAll
    static void stopDaemon() throws Exception {
        if (daemon != null)
            daemon.close();
    }

    /** Starts build/tests/HELPER ARGS against the test daemon, stderr inherited. */
    private static Process startHelper(String helper, String... args) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(TestSupport.buildDir().resolve("tests/" + helper).toString());
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.environment().put("GPUIPC_SOCKET", daemon.socket);
        pb.redirectError(ProcessBuilder.Redirect.INHERIT);
        return pb.start();
    }

    /** A helper's stdout, line by line. */
    private static BufferedReader lines(Process p) {
        return new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
    }

    @Test
    void javaProducerCConsumer() throws Exception {
        int seed = 33, n = 65536;
        byte[] data = new byte[n];
        for (int i = 0; i < n; i++)
            data[i] = TestSupport.hPattern(i, seed);
        long base = CudaTestDriver.alloc(1 << 20);
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket)) {
            long dptr = base + 8192;                /* a pool block inside an allocation */
            CudaTestDriver.copyToDevice(dptr, data);
            long id = c.registerDevice("dev/java-to-c", dptr, n,
                    Map.of("schema", "x:uint8", "rows", "65536"));
            BufferInfo info = c.list("dev/java-to-c").get(0);
            assertEquals(BufferKind.CUDA_IPC, info.kind());
            assertEquals(DOUBLE_UUID0, info.device());
            assertEquals(n, info.size());
            assertEquals(8192, info.offset());
            assertEquals("65536", info.metadata().get("rows"));

            /* The C consumer (libgpuipc) maps it in its own process and checks
             * every byte; the double's device pointers are host addresses. */
            TestSupport.Result r = TestSupport.run(daemon.socket, null, List.of(
                    TestSupport.buildDir().resolve("tests/helper-consumer").toString(),
                    "dev/java-to-c", Integer.toString(n), Integer.toString(seed)));
            assertEquals(0, r.exit(), "helper-consumer: " + r.stderr());
            c.awaitRelease(id, Duration.ofSeconds(10));
            c.unregister("dev/java-to-c");
        } finally {
            CudaTestDriver.free(base);
        }
    }

    @Test
    void javaProducerPythonConsumer() throws Exception {
        /* tests/gpu/java's producer and consumer.py in --host mode: the same
         * code the real-GPU run uses, with ctypes reading the double's memory. */
        Path py = Path.of("/usr/bin/python3");
        assumeTrue(Files.isExecutable(py), "no /usr/bin/python3");
        String consumer = TestSupport.srcDir().resolve("tests/gpu/java/consumer.py").toString();
        int rc = GpuProducer.run(daemon.socket, "dev/java-to-python", 3 << 20,
                List.of(py.toString(), consumer, "--host",
                        "--lib", TestSupport.buildDir().resolve("libgpuipc.so.1").toString()));
        assertEquals(0, rc);
    }

    @Test
    void cProducerJavaConsumer() throws Exception {
        int seed = 77;
        long size = 3 << 20;
        TestSupport.Result r = TestSupport.run(daemon.socket, null, List.of(
                TestSupport.buildDir().resolve("tests/helper-cuda-producer").toString(),
                "vmm", "dev/c-to-java", "0", Long.toString(size), Integer.toString(seed)));
        assertEquals(0, r.exit(), r.stderr());
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket);
             View v = c.lookup("dev/c-to-java", Duration.ofSeconds(5))) {
            assertEquals(BufferKind.CUDA_VMM, v.kind());
            assertEquals(size, v.length());
            assertEquals(DOUBLE_UUID0, v.device());
            assertEquals(0, v.deviceOrdinal());
            assertNotEquals(0, v.address());
            assertThrows(IllegalStateException.class, v::asByteBuffer, "device memory");
            int n = 1 << 16;
            byte[] got = CudaTestDriver.copyFromDevice(v.address() + size - n, n);
            for (int i = 0; i < n; i++)
                if (got[i] != TestSupport.hPattern(size - n + i, seed))
                    throw new AssertionError("byte " + (size - n + i) + " differs");
        }
        assertEquals(0, TestSupport.ctl(daemon.socket, "rm", "dev/c-to-java").exit());
    }

    @Test
    void cIpcProducerJavaConsumer() throws Exception {
        int seed = 5;
        Process p = startHelper("helper-cuda-producer", "ipc", "dev/c-ipc", "0", "1", "1",
                Integer.toString(seed));
        try (OutputStream stdin = p.getOutputStream()) {
            byte[] line = new byte[6];
            assertEquals(6, p.getInputStream().readNBytes(line, 0, 6));
            assertEquals("ready\n", new String(line, StandardCharsets.US_ASCII));
            try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket);
                 View v = c.lookup("dev/c-ipc", Duration.ofSeconds(5))) {
                assertEquals(BufferKind.CUDA_IPC, v.kind());
                assertEquals(32768, v.length());
                byte[] got = CudaTestDriver.copyFromDevice(v.address(), (int) v.length());
                for (int i = 0; i < got.length; i++)
                    if (got[i] != TestSupport.hPattern(i, seed))
                        throw new AssertionError("byte " + i + " differs");
            }
        }
        assertTrue(p.waitFor(10, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue());
    }

    @Test
    void cacheableStaysMappedUntilAwaitUnmapped() throws Exception {
        /* A CACHEABLE block registered again after its unregister (a pool
         * handing it back): the consumer keeps it mapped after its view, and
         * awaitUnmapped returns only once the consumer has let go. */
        int seed = 41, n = 1 << 16;
        byte[] data = new byte[n];
        for (int i = 0; i < n; i++)
            data[i] = TestSupport.hPattern(i, seed);
        long dptr = CudaTestDriver.alloc(n);
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket)) {
            CudaTestDriver.copyToDevice(dptr, data);
            long id = c.registerDevice("dev/cache-a", dptr, n, null, RegisterFlag.CACHEABLE);
            Process p = startHelper("helper-consumer", "dev/cache-a", Integer.toString(n),
                    Integer.toString(seed), "--stay");
            try (BufferedReader out = lines(p)) {
                assertEquals("released", out.readLine());
                c.awaitRelease(id, Duration.ofSeconds(10));
                c.unregister("dev/cache-a");
                /* Registered again and unregistered: still the last registration's
                 * allocation, still mapped by the consumer. */
                id = c.registerDevice("dev/cache-b", dptr, n, null, RegisterFlag.CACHEABLE);
                c.unregister("dev/cache-b");
                long last = id;
                GpuIpcException e = assertThrows(GpuIpcException.class,
                        () -> c.awaitUnmapped(last, Duration.ofMillis(300)));
                assertEquals(GpuIpcException.ETIMEDOUT, e.code(), e.getMessage());
                assertTrue(e.getMessage().startsWith("await unmapping of registration"),
                        e.getMessage());
            } finally {
                p.getOutputStream().close();            /* the consumer lets go and exits */
            }
            assertTrue(p.waitFor(30, TimeUnit.SECONDS));
            assertEquals(0, p.exitValue());
            c.awaitUnmapped(id, Duration.ofSeconds(10));
            GpuIpcException e = assertThrows(GpuIpcException.class,
                    () -> c.awaitUnmapped(12345678L, Duration.ZERO));
            assertEquals(GpuIpcException.ENOENT, e.code(), e.getMessage());
        } finally {
            CudaTestDriver.free(dptr);
        }
    }

    @Test
    void hostMemoryIsNotDeviceMemory() throws Exception {
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket);
             HostBuffer b = c.allocateHost(4096)) {
            GpuIpcException e = assertThrows(GpuIpcException.class,
                    () -> c.registerDevice("dev/not-device", b.address(), 4096, null));
            assertTrue(e.code() < 0);
            assertTrue(e.getMessage().startsWith("register dev/not-device"), e.getMessage());
        }
    }

    @Test
    void poolPointerFromACProducer() throws Exception {
        /* helper-alloc pool: two allocations of an exportable stream-ordered
         * pool (cuda-pool); it frees them only after both released events. */
        Process p = startHelper("helper-alloc", "pool", "dev/pool", "3");
        try (BufferedReader out = lines(p)) {
            assertEquals("ready", out.readLine());
            try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket)) {
                for (String name : List.of("dev/pool", "dev/pool-b")) {
                    try (View v = c.lookup(name, Duration.ofSeconds(5))) {
                        assertEquals(BufferKind.CUDA_POOL, v.kind());
                        assertEquals("cuda-pool", v.kind().wireName());
                        assertTrue(v.kind().isDevice());
                        int n = name.endsWith("-b") ? 2900 : 1 << 20;
                        int off = name.endsWith("-b") ? 100 : 0;
                        int seed = name.endsWith("-b") ? 4 : 3;
                        assertEquals(n, v.length());
                        byte[] got = CudaTestDriver.copyFromDevice(v.address(), n);
                        for (int i = 0; i < n; i++)
                            if (got[i] != TestSupport.hPattern(off + i, seed))
                                throw new AssertionError(name + ": byte " + i + " differs");
                    }
                }
            }
            assertEquals("released", out.readLine());
            assertEquals("freed", out.readLine());
        } finally {
            p.getOutputStream().close();
            assertTrue(p.waitFor(30, TimeUnit.SECONDS));
        }
        assertEquals(0, p.exitValue());
    }
}
