package org.gpuipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ReadOnlyBufferException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Collectors;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** The binding against a real gpuipcd: host buffers, errors, releases, listing, lifetimes. */
class ClientTest {
    private static TestSupport.Daemon daemon;
    private GpuIpcClient client;

    @BeforeAll
    static void startDaemon() throws Exception {
        daemon = TestSupport.Daemon.inTmp("client");
    }

    @AfterAll
    static void stopDaemon() throws Exception {
        daemon.close();
    }

    @BeforeEach
    void connect() throws Exception {
        client = GpuIpcClient.connect(daemon.socket);
    }

    @AfterEach
    void disconnect() {
        client.close();
    }

    private static void fill(HostBuffer b, byte[] data) {
        b.asByteBuffer().put(data);
    }

    @Test
    void hostRoundTrip() throws Exception {
        byte[] data = TestSupport.pattern(10000, 1);
        Map<String, String> meta = new LinkedHashMap<>();
        meta.put("schema", "a:int32,b:float64");
        meta.put("rows", "1250");
        meta.put("note", "ünïcødé ✓");
        try (HostBuffer b = client.allocateHost(data.length)) {
            assertEquals(data.length, b.size());
            assertEquals(0, b.asByteBuffer().get(9999), "zero-filled");
            fill(b, data);
            long id = client.registerHost("java-test/round-trip", b, meta);
            assertTrue(id > 0);
            try (View v = client.lookup("java-test/round-trip", Duration.ofSeconds(1))) {
                assertEquals(BufferKind.HOST, v.kind());
                assertEquals(id, v.id());
                assertEquals("java-test/round-trip", v.name());
                assertEquals(data.length, v.length());
                assertEquals("", v.device());
                assertEquals(-1, v.deviceOrdinal());
                assertEquals(meta, v.metadata());
                assertEquals(List.copyOf(meta.keySet()), List.copyOf(v.metadata().keySet()));
                assertEquals(ProcessHandle.current().pid(), v.info().ownerPid());
                assertFalse(v.info().ephemeral());
                assertNotEquals(0, v.address());
                ByteBuffer bb = v.asByteBuffer();
                assertTrue(bb.isDirect());
                assertTrue(bb.isReadOnly());
                assertEquals(data.length, bb.capacity());
                assertArrayEquals(data, TestSupport.bytes(bb));
                assertThrows(ReadOnlyBufferException.class, () -> bb.put(0, (byte) 1));
            }
            client.awaitRelease(id, Duration.ofSeconds(5));
            client.unregister("java-test/round-trip");
        }
    }

    @Test
    void writableLookupWritesSharedMemory() throws Exception {
        try (HostBuffer b = client.allocateHost(4096)) {
            client.registerHost("java-test/writable", b, null, RegisterFlag.SHARED_WRITE);
            try (View v = client.lookup("java-test/writable", Duration.ZERO, true)) {
                assertTrue(v.isWritable());
                ByteBuffer w = v.asByteBuffer();
                assertFalse(w.isReadOnly());
                w.putLong(8, 0x1122334455667788L);
                assertEquals(0x1122334455667788L, b.asByteBuffer().getLong(8),
                        "producer and consumer share the memory");
            }
            client.unregister("java-test/writable");
        }
    }

    @Test
    void notFoundCarriesErrnoAndDaemonMessage() {
        GpuIpcException e = assertThrows(GpuIpcException.class,
                () -> client.lookup("java-test/missing", Duration.ZERO));
        assertEquals(-2, e.code());
        assertEquals(GpuIpcException.ENOENT, e.code());
        assertEquals("ENOENT", e.codeName());
        assertFalse(e.daemonMessage().isEmpty());
        assertTrue(e.daemonMessage().contains("java-test/missing"), e.daemonMessage());
        assertTrue(e.getMessage().contains("lookup java-test/missing"), e.getMessage());
        assertTrue(e.getMessage().contains("ENOENT"), e.getMessage());
    }

    @Test
    void existsIsEEXIST() throws Exception {
        try (HostBuffer b = client.allocateHost(64)) {
            client.registerHost("java-test/twice", b, null);
            GpuIpcException e = assertThrows(GpuIpcException.class,
                    () -> client.registerHost("java-test/twice", b, null));
            assertEquals(GpuIpcException.EEXIST, e.code());
            assertEquals("EEXIST", e.codeName());
            assertFalse(e.daemonMessage().isEmpty());
            client.unregister("java-test/twice");
        }
    }

    @Test
    void lookupTimesOut() {
        long t0 = System.nanoTime();
        GpuIpcException e = assertThrows(GpuIpcException.class,
                () -> client.lookup("java-test/never", Duration.ofMillis(300)));
        long ms = (System.nanoTime() - t0) / 1_000_000;
        assertEquals(GpuIpcException.ETIMEDOUT, e.code());
        assertEquals("ETIMEDOUT", e.codeName());
        assertTrue(ms >= 250, "waited " + ms + " ms");
    }

    @Test
    void lookupWaitsForRegistration() throws Exception {
        ExecutorService ex = Executors.newSingleThreadExecutor();
        try (GpuIpcClient producer = GpuIpcClient.connect(daemon.socket);
             HostBuffer b = producer.allocateHost(128)) {
            fill(b, TestSupport.pattern(128, 9));
            Future<?> f = ex.submit(() -> {
                Thread.sleep(200);
                return producer.registerHost("java-test/later", b, null);
            });
            try (View v = client.lookup("java-test/later", Duration.ofSeconds(10))) {
                assertArrayEquals(TestSupport.pattern(128, 9), TestSupport.bytes(v.asByteBuffer()));
            }
            f.get();
            producer.unregister("java-test/later");
        } finally {
            ex.shutdownNow();
        }
    }

    @Test
    void invalidNamesAndArguments() throws Exception {
        GpuIpcException e = assertThrows(GpuIpcException.class,
                () -> client.lookup("bad//name", Duration.ZERO));
        assertEquals(GpuIpcException.EINVAL, e.code());
        assertThrows(IllegalArgumentException.class, () -> client.lookup("nul\0name", Duration.ZERO));
        assertThrows(NullPointerException.class, () -> client.lookup(null, Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> client.allocateHost(0));
        try (HostBuffer b = client.allocateHost(16)) {
            Map<String, String> meta = new LinkedHashMap<>();
            meta.put("k", "v\0");
            assertThrows(IllegalArgumentException.class, () -> client.registerHost("java-test/x", b, meta));
            e = assertThrows(GpuIpcException.class,
                    () -> client.registerHost("java-test/bad meta", b, null));
            assertEquals(GpuIpcException.EINVAL, e.code());
        }
    }

    @Test
    void awaitRelease() throws Exception {
        try (HostBuffer b = client.allocateHost(256)) {
            long id = client.registerHost("java-test/await", b, null);
            GpuIpcException e = assertThrows(GpuIpcException.class,
                    () -> client.awaitRelease(id, Duration.ofMillis(100)));
            assertEquals(GpuIpcException.ETIMEDOUT, e.code(), "no consumer yet");
            try (GpuIpcClient consumer = GpuIpcClient.connect(daemon.socket)) {
                View v = consumer.lookup("java-test/await", Duration.ZERO);
                e = assertThrows(GpuIpcException.class,
                        () -> client.awaitRelease(id, Duration.ofMillis(100)));
                assertEquals(GpuIpcException.ETIMEDOUT, e.code(), "lease still held");
                Thread t = new Thread(() -> {
                    try {
                        Thread.sleep(200);
                    } catch (InterruptedException ignored) {
                        Thread.currentThread().interrupt();
                    }
                    v.close();
                });
                t.start();
                client.awaitRelease(id, Duration.ofSeconds(10));
                t.join();
            }
            client.unregister("java-test/await");
        }
    }

    @Test
    void listByPrefix() throws Exception {
        try (HostBuffer a = client.allocateHost(100); HostBuffer b = client.allocateHost(200);
             HostBuffer c = client.allocateHost(300)) {
            long ida = client.registerHost("java-list/app-1/a", a, Map.of("col", "0"));
            long idb = client.registerHost("java-list/app-1/b", b, null, RegisterFlag.EPHEMERAL);
            client.registerHost("java-list/app-12/c", c, null);
            List<BufferInfo> l = client.list("java-list/app-1");
            assertEquals(List.of("java-list/app-1/a", "java-list/app-1/b"),
                    l.stream().map(BufferInfo::name).collect(Collectors.toList()));
            assertEquals(ida, l.get(0).id());
            assertEquals(idb, l.get(1).id());
            assertEquals(100, l.get(0).size());
            assertEquals(Map.of("col", "0"), l.get(0).metadata());
            assertEquals(BufferKind.HOST, l.get(0).kind());
            assertFalse(l.get(0).ephemeral());
            assertTrue(l.get(1).ephemeral());
            assertEquals(0, l.get(0).leases());
            try (View v = client.lookup("java-list/app-1/a", Duration.ZERO)) {
                assertEquals(1, client.list("java-list/app-1/a").get(0).leases());
            }
            assertEquals(3, client.list("java-list").size());
            assertTrue(client.list(null).size() >= 3);
            assertTrue(client.list("java-list/none").isEmpty());
            for (String n : List.of("java-list/app-1/a", "java-list/app-1/b", "java-list/app-12/c"))
                client.unregister(n);
        }
    }

    @Test
    void unregister() throws Exception {
        byte[] data = TestSupport.pattern(512, 3);
        try (HostBuffer b = client.allocateHost(data.length)) {
            fill(b, data);
            client.registerHost("java-test/unreg", b, null);
        }   /* the daemon keeps the memory */
        try (View v = client.lookup("java-test/unreg", Duration.ZERO)) {
            client.unregister("java-test/unreg");
            GpuIpcException e = assertThrows(GpuIpcException.class,
                    () -> client.lookup("java-test/unreg", Duration.ZERO));
            assertEquals(GpuIpcException.ENOENT, e.code());
            assertArrayEquals(data, TestSupport.bytes(v.asByteBuffer()), "the lease keeps the memory");
        }
        GpuIpcException e = assertThrows(GpuIpcException.class, () -> client.unregister("java-test/unreg"));
        assertEquals(GpuIpcException.ENOENT, e.code());
    }

    @Test
    void ephemeralEndsWithTheConnection() throws Exception {
        try (GpuIpcClient producer = GpuIpcClient.connect(daemon.socket);
             HostBuffer b = producer.allocateHost(64)) {
            producer.registerHost("java-test/ephemeral", b, null, RegisterFlag.EPHEMERAL);
            client.lookup("java-test/ephemeral", Duration.ZERO).close();
        }
        /* The daemon learns of the close asynchronously: poll for a while. */
        long deadline = System.nanoTime() + 5_000_000_000L;
        GpuIpcException e = null;
        while (e == null) {
            try {
                client.lookup("java-test/ephemeral", Duration.ZERO).close();
                assertTrue(System.nanoTime() < deadline,
                        "still registered 5 s after its connection closed");
                Thread.sleep(10);
            } catch (GpuIpcException x) {
                e = x;
            }
        }
        assertEquals(GpuIpcException.ENOENT, e.code());
    }

    @Test
    void useAfterCloseThrowsIllegalState() throws Exception {
        HostBuffer b = client.allocateHost(64);
        client.registerHost("java-test/closed", b, null);
        b.close();
        b.close();
        assertTrue(b.isClosed());
        assertThrows(IllegalStateException.class, b::asByteBuffer);
        assertThrows(IllegalStateException.class, b::address);
        assertThrows(IllegalStateException.class, () -> client.registerHost("java-test/closed2", b, null));

        View v = client.lookup("java-test/closed", Duration.ZERO);
        v.close();
        v.close();
        assertTrue(v.isClosed());
        assertThrows(IllegalStateException.class, v::asByteBuffer);
        assertThrows(IllegalStateException.class, v::address);
        assertEquals("java-test/closed", v.name(), "the snapshot stays readable");
        client.unregister("java-test/closed");

        GpuIpcClient c2 = GpuIpcClient.connect(daemon.socket);
        View v2;
        try (HostBuffer b2 = c2.allocateHost(64)) {
            c2.registerHost("java-test/closed3", b2, null);
            v2 = c2.lookup("java-test/closed3", Duration.ZERO);
        }
        c2.close();
        c2.close();
        assertTrue(c2.isClosed());
        assertThrows(IllegalStateException.class, () -> c2.lookup("java-test/closed3", Duration.ZERO));
        assertThrows(IllegalStateException.class, c2::ping);
        assertEquals(64, v2.asByteBuffer().capacity(), "a view outlives its client");
        v2.close();
        client.unregister("java-test/closed3");
    }

    @Test
    void buffersBeyondByteBufferLimit() throws Exception {
        long size = Integer.MAX_VALUE + 8192L;
        try (HostBuffer b = client.allocateHost(size)) {
            assertEquals(size, b.size());
            assertThrows(UnsupportedOperationException.class, b::asByteBuffer);
            b.asByteBuffer(size - 16, 16).putLong(8, 42L);
            assertThrows(IndexOutOfBoundsException.class, () -> b.asByteBuffer(size - 8, 16));
            client.registerHost("java-test/big", b, null);
            try (View v = client.lookup("java-test/big", Duration.ZERO)) {
                assertEquals(size, v.length());
                assertThrows(UnsupportedOperationException.class, v::asByteBuffer);
                assertEquals(42L, v.asByteBuffer(size - 16, 16).getLong(8));
            }
            client.unregister("java-test/big");
        }
    }

    @Test
    void oneClientSharedByThreads() throws Exception {
        try (HostBuffer b = client.allocateHost(1024)) {
            fill(b, TestSupport.pattern(1024, 5));
            long id = client.registerHost("java-test/threads", b, null);
            ExecutorService ex = Executors.newFixedThreadPool(8);
            List<Future<Integer>> fs = new ArrayList<>();
            for (int t = 0; t < 8; t++) {
                fs.add(ex.submit(() -> {
                    int ok = 0;
                    for (int i = 0; i < 50; i++) {
                        try (View v = client.lookup("java-test/threads", Duration.ofSeconds(5))) {
                            if (v.asByteBuffer().get(1000) == TestSupport.pattern(1024, 5)[1000])
                                ok++;
                        }
                        client.list("java-test");
                    }
                    return ok;
                }));
            }
            for (Future<Integer> f : fs)
                assertEquals(50, f.get());
            ex.shutdown();
            client.awaitRelease(id, Duration.ZERO);
            client.unregister("java-test/threads");
        }
    }

    @Test
    void connectFailures() throws Exception {
        GpuIpcException e = assertThrows(GpuIpcException.class,
                () -> GpuIpcClient.connect(TestSupport.tmpDir().resolve("nobody.sock").toString()));
        assertTrue(e.code() == GpuIpcException.ENOENT || e.code() == GpuIpcException.ECONNREFUSED,
                e.getMessage());
        e = assertThrows(GpuIpcException.class, () -> GpuIpcClient.connect("/tmp/" + "x".repeat(200)));
        assertEquals(GpuIpcException.ENAMETOOLONG, e.code());
        assertDoesNotThrow(client::ping);
        assertFalse(GpuIpcClient.libraryVersion().isEmpty());
    }
}
