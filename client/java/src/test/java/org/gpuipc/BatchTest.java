package org.gpuipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.ObjIntConsumer;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Column batches: registerBatch / lookupBatch, Java to Java, to and from Python, device. */
class BatchTest {
    private static TestSupport.Daemon daemon;

    @BeforeAll
    static void startDaemon() throws Exception {
        daemon = TestSupport.Daemon.inTmp("batch");
    }

    @AfterAll
    static void stopDaemon() throws Exception {
        daemon.close();
    }

    /* ---- building buffers ---- */

    static ByteBuffer direct(int n) {
        return ByteBuffer.allocateDirect(Math.max(n, 1)).order(ByteOrder.nativeOrder());
    }

    /** n values of width bytes, value i written by put(buffer, i). */
    static ByteBuffer values(int width, int n, ObjIntConsumer<ByteBuffer> put) {
        ByteBuffer b = direct(width * n);
        for (int i = 0; i < n; i++)
            put.accept(b, i);
        return b.flip();
    }

    static ByteBuffer ints(int... v) {
        return values(4, v.length, (b, i) -> b.putInt(v[i]));
    }

    static ByteBuffer longs(long... v) {
        return values(8, v.length, (b, i) -> b.putLong(v[i]));
    }

    static ByteBuffer shorts(short... v) {
        return values(2, v.length, (b, i) -> b.putShort(v[i]));
    }

    static ByteBuffer floats(float... v) {
        return values(4, v.length, (b, i) -> b.putFloat(v[i]));
    }

    static ByteBuffer doubles(double... v) {
        return values(8, v.length, (b, i) -> b.putDouble(v[i]));
    }

    /** Arrow's bitmap: bit i of byte i/8, least significant first. */
    static ByteBuffer bits(boolean... v) {
        ByteBuffer b = direct((v.length + 7) / 8);
        byte[] a = new byte[(v.length + 7) / 8];
        for (int i = 0; i < v.length; i++)
            if (v[i])
                a[i / 8] |= (byte) (1 << (i % 8));
        return b.put(a).flip();
    }

    /** int32 offsets and UTF-8 bytes of v (null: empty). */
    static ByteBuffer[] strings(String... v) {
        List<byte[]> raw = new ArrayList<>();
        int total = 0;
        for (String s : v) {
            byte[] x = s == null ? new byte[0] : s.getBytes(StandardCharsets.UTF_8);
            raw.add(x);
            total += x.length;
        }
        ByteBuffer offs = direct(4 * (v.length + 1));
        ByteBuffer data = direct(total);
        int at = 0;
        offs.putInt(0);
        for (byte[] x : raw) {
            data.put(x);
            at += x.length;
            offs.putInt(at);
        }
        return new ByteBuffer[] {offs.flip(), data.flip()};
    }

    static byte[] bytes(ByteBuffer b) {
        return TestSupport.bytes(b);
    }

    static byte[] bytes(ColumnBuffer b) {
        return bytes(b.asByteBuffer());
    }

    static String hex(ByteBuffer b) {
        return HexFormat.of().formatHex(bytes(b));
    }

    static BatchBuffer bb(ByteBuffer b) {
        return BatchBuffer.of(b);
    }

    /* ---- the table: 5 rows of every kind the issue names ---- */

    static final long[] IDS = {1, 2, 3, 4, 5};
    static final float[] SCORES = {0.5f, -1.25f, 3e9f, 0f, Float.MIN_VALUE};
    static final double[] RATIOS = {Math.PI, -0.0, 1e-300, 2.5, Double.MAX_VALUE};
    static final boolean[] OK = {true, false, true, true, false};
    static final int[] MAYBE = {10, 0, 30, 0, 50};
    static final boolean[] MAYBE_VALID = {true, false, true, false, true};
    static final String[] NAMES = {"a", "bb", null, "d\u00e9", ""};
    static final short[] PX = {-1, 2, -3, 4, -5};
    static final String[] PY = {"x", "yy", "zzz", "", "\u2603"};

    /** The table's columns; "id" and "ratio" lie in hb (shared in place), the rest in direct buffers. */
    static List<ColumnSpec> table(HostBuffer hb) {
        ByteBuffer w = hb.asByteBuffer();
        for (int i = 0; i < 5; i++) {
            w.putLong(8 * i, IDS[i]);
            w.putDouble(64 + 8 * i, RATIOS[i]);
        }
        ByteBuffer[] names = strings(NAMES);
        ByteBuffer[] py = strings(PY);
        return List.of(
                ColumnSpec.of("id", "l", 5, 0, null, BatchBuffer.of(hb, 0, 40))
                        .withMetadata(Map.of("unit", "count")),
                ColumnSpec.of("score", "f", 5, 0, null, bb(floats(SCORES))),
                ColumnSpec.of("ratio", "g", 5, 0, null, BatchBuffer.of(hb, 64, 40)),
                ColumnSpec.of("ok", "b", 5, 0, null, bb(bits(OK))),
                ColumnSpec.of("maybe", "i", 5, 2, bb(bits(MAYBE_VALID)), bb(ints(MAYBE))),
                ColumnSpec.of("name", "u", 5, 1, bb(bits(true, true, false, true, true)),
                        bb(names[0]), bb(names[1])),
                ColumnSpec.struct("pt", 5, 0, null,
                        ColumnSpec.of("x", "s", 5, 0, null, bb(shorts(PX))),
                        ColumnSpec.of("y", "u", 5, 0, null, bb(py[0]), bb(py[1]))));
    }

    static final Map<String, String> META = Map.of("origin", "java", "rows", "5");

    /** Every value of the table, read back through the consumer's mapping. */
    static void checkTable(BatchView v) {
        assertEquals(5, v.numRows());
        assertEquals(List.of("id", "score", "ratio", "ok", "maybe", "name", "pt"), v.columns());
        assertEquals(META, v.metadata());
        assertEquals(BufferKind.BATCH, v.info().kind());

        BatchColumn id = v.column("id");
        assertEquals("l", id.format());
        assertEquals(Map.of("unit", "count"), id.metadata());
        assertFalse(id.isNullable());
        assertNull(id.validity());
        assertFalse(id.isDevice());
        assertArrayEquals(bytes(longs(IDS)), bytes(id.data()));
        assertTrue(id.data().asByteBuffer().isReadOnly());

        assertArrayEquals(bytes(floats(SCORES)), bytes(v.column("score").data()));
        assertArrayEquals(bytes(doubles(RATIOS)), bytes(v.column(2).data()));
        BatchColumn ok = v.column("ok");
        assertEquals("b", ok.format());
        assertEquals(1, ok.data().size());
        assertEquals(0b01101, ok.data().asByteBuffer().get(0));

        BatchColumn maybe = v.column("maybe");
        assertEquals(2, maybe.nullCount());
        assertTrue(maybe.isNullable());
        assertEquals(0b10101, maybe.validity().asByteBuffer().get(0));
        assertArrayEquals(bytes(ints(MAYBE)), bytes(maybe.data()));

        BatchColumn name = v.column("name");
        ByteBuffer[] names = strings(NAMES);
        assertEquals("u", name.format());
        assertEquals(1, name.nullCount());
        assertEquals(0b11011, name.validity().asByteBuffer().get(0));
        assertArrayEquals(bytes(names[0]), bytes(name.offsets()));
        assertArrayEquals(bytes(names[1]), bytes(name.data()));
        assertEquals(3, name.numBuffers());

        BatchColumn pt = v.column("pt");
        assertEquals("+s", pt.format());
        assertNull(pt.data());
        assertEquals(2, pt.children().size());
        assertEquals("x", pt.children().get(0).name());
        assertArrayEquals(bytes(shorts(PX)), bytes(pt.child("x").data()));
        BatchColumn y = pt.child("y");
        ByteBuffer[] py = strings(PY);
        assertArrayEquals(bytes(py[0]), bytes(y.offsets()));
        assertArrayEquals(bytes(py[1]), bytes(y.data()));
    }

    @Test
    void hostRoundTrip() throws Exception {
        try (GpuIpcClient producer = GpuIpcClient.connect(daemon.socket);
             GpuIpcClient consumer = GpuIpcClient.connect(daemon.socket);
             HostBuffer hb = producer.allocateHost(4096);
             Batch b = new Batch()) {
            for (ColumnSpec c : table(hb))
                b.addColumn(c);
            b.setMetadata(META);
            assertEquals(5, b.numRows());
            assertEquals(7, b.columnNames().size());
            long id = producer.registerBatch("bt/host", b);

            BufferInfo rec = producer.list("bt/host").get(0);
            assertEquals(BufferKind.BATCH, rec.kind());
            assertEquals(id, rec.id());
            assertEquals(0, rec.leases());

            BatchView v = consumer.lookupBatch("bt/host", Duration.ofSeconds(5));
            ColumnBuffer idData;
            try (v) {
                assertEquals(id, v.id());
                checkTable(v);
                /* Zero copy: "id" is the producer's HostBuffer itself. */
                idData = v.column("id").data();
                hb.asByteBuffer().putLong(0, 42);
                assertEquals(42, idData.asByteBuffer().getLong(0));
                assertEquals(1, producer.list("bt/host").get(0).leases());
                GpuIpcException e = assertThrows(GpuIpcException.class,
                        () -> producer.awaitRelease(id, Duration.ZERO));
                assertEquals(GpuIpcException.ETIMEDOUT, e.code());
            }
            /* close() gave the one lease back. */
            producer.awaitRelease(id, Duration.ofSeconds(5));
            assertEquals(0, producer.list("bt/host").get(0).leases());
            assertTrue(v.isClosed());
            assertThrows(IllegalStateException.class, idData::address);
            assertThrows(IllegalStateException.class, idData::asByteBuffer);
            assertThrows(IllegalStateException.class, () -> v.column("score").data().asByteBuffer());
            assertEquals("l", v.column("id").format());     /* descriptions stay */
            v.close();                                      /* idempotent */
            producer.unregister("bt/host");
        }
    }

    @Test
    void oneShotRegisterAndEphemeral() throws Exception {
        try (GpuIpcClient producer = GpuIpcClient.connect(daemon.socket);
             GpuIpcClient consumer = GpuIpcClient.connect(daemon.socket);
             HostBuffer hb = producer.allocateHost(4096)) {
            producer.registerBatch("bt/oneshot", table(hb), META, RegisterFlag.EPHEMERAL);
            try (BatchView v = consumer.lookupBatch("bt/oneshot", Duration.ZERO)) {
                checkTable(v);
                assertTrue(v.info().ephemeral());
            }
        }
        /* Ephemeral: gone with the producer's connection. */
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket)) {
            assertEquals(0, c.list("bt/oneshot").size());
        }
    }

    @Test
    void hostBufferByteBufferIsSharedInPlace() throws Exception {
        try (GpuIpcClient producer = GpuIpcClient.connect(daemon.socket);
             GpuIpcClient consumer = GpuIpcClient.connect(daemon.socket);
             HostBuffer hb = producer.allocateHost(4096);
             Batch b = new Batch()) {
            ByteBuffer w = hb.asByteBuffer();
            w.putLong(64, 1).putLong(72, 2);
            w.putInt(128, 7).putInt(132, 8);
            /* Windows of hb, as ByteBuffers: taken as BatchBuffer.of(hb, offset, size). */
            BatchBuffer x = BatchBuffer.of(hb.asByteBuffer(64, 16));
            assertSame(hb, x.hostBuffer());
            assertEquals(hb.address() + 64, x.address());
            assertEquals(16, x.size());
            BatchBuffer y = BatchBuffer.of(w.duplicate().position(128).limit(136));
            assertSame(hb, y.hostBuffer());
            assertNull(BatchBuffer.of(ints(1, 2)).hostBuffer());     /* copied, as before */
            b.addColumn("x", "l", 2, 0, null, x);
            b.addColumn("y", "i", 2, 0, null, y);
            long id = producer.registerBatch("bt/bytebuffer", b);
            try (BatchView v = consumer.lookupBatch("bt/bytebuffer", Duration.ofSeconds(5))) {
                ColumnBuffer d = v.column("x").data();
                assertArrayEquals(bytes(longs(1, 2)), bytes(d));
                assertArrayEquals(bytes(ints(7, 8)), bytes(v.column("y").data()));
                /* Zero copy: a write after registering shows in the consumer's mapping. */
                w.putLong(64, 42);
                assertEquals(42, d.asByteBuffer().getLong(0));
            }
            producer.awaitRelease(id, Duration.ofSeconds(5));
            producer.unregister("bt/bytebuffer");
        }

        /* Closed before the batch is registered: refused as the HostBuffer form is, never read. */
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket)) {
            HostBuffer hb = c.allocateHost(64);
            try (Batch b = new Batch()) {
                BatchBuffer x = BatchBuffer.of(hb.asByteBuffer());
                b.addColumn("x", "l", 2, 0, null, x);
                hb.close();
                assertThrows(IllegalStateException.class, () -> c.registerBatch("bt/bb-closed", b));
                assertThrows(IllegalStateException.class,
                        () -> b.addColumn("z", "l", 2, 0, null, x));
                assertEquals(List.of("x"), b.columnNames());
            }
            assertEquals(0, c.list("bt/bb-closed").size());
        }
    }

    /* ---- across languages ---- */

    static Path python() {
        Path py = Path.of("/usr/bin/python3");
        assumeTrue(Files.isExecutable(py), "no /usr/bin/python3");
        return py;
    }

    static TestSupport.Result peer(String mode, String name) throws Exception {
        Map<String, String> env = Map.of(
                "PYTHONPATH", TestSupport.srcDir().resolve("client/python").toString(),
                "GPUIPC_LIBRARY", TestSupport.buildDir().resolve("libgpuipc.so.1").toString());
        return TestSupport.run(daemon.socket, env, List.of(python().toString(),
                TestSupport.srcDir().resolve("tests/java/batch_peer.py").toString(), mode, name));
    }

    static Map<String, String> lines(byte[] out) {
        Map<String, String> m = new HashMap<>();
        for (String l : new String(out, StandardCharsets.UTF_8).split("\n"))
            if (l.contains("="))
                m.put(l.substring(0, l.indexOf('=')), l.substring(l.indexOf('=') + 1));
        return m;
    }

    @Test
    void javaProducerPythonConsumer() throws Exception {
        python();
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket);
             HostBuffer hb = c.allocateHost(4096)) {
            long id = c.registerBatch("bt/java-to-py", table(hb), META);
            TestSupport.Result r = peer("consume", "bt/java-to-py");
            assertEquals(0, r.exit(), r.stderr());
            Map<String, String> m = lines(r.stdout());
            assertEquals("5", m.get("rows"));
            assertEquals("id,score,ratio,ok,maybe,name,pt", m.get("columns"));
            assertEquals("java", m.get("meta.origin"));
            assertEquals(hex(longs(IDS)), m.get("id.data"));
            assertEquals(hex(floats(SCORES)), m.get("score.data"));
            assertEquals(hex(doubles(RATIOS)), m.get("ratio.data"));
            assertEquals("[true, false, true, true, false]", m.get("ok.values"));
            assertEquals("2", m.get("maybe.null_count"));
            assertEquals("true", m.get("maybe.nullable"));
            assertEquals("15", m.get("maybe.validity"));
            assertEquals(hex(ints(MAYBE)), m.get("maybe.data"));
            assertEquals("[\"a\", \"bb\", null, \"d\u00e9\", \"\"]", m.get("name.values"));
            assertEquals("+s", m.get("pt.format"));
            assertEquals(hex(shorts(PX)), m.get("pt.x.data"));
            assertEquals("[\"x\", \"yy\", \"zzz\", \"\", \"\u2603\"]", m.get("pt.y.values"));
            /* The same values through the Arrow PyCapsule interface, zero copy. */
            assertEquals(hex(longs(IDS)), m.get("id.arrow"));
            assertEquals(hex(floats(SCORES)), m.get("score.arrow"));
            assertEquals(hex(doubles(RATIOS)), m.get("ratio.arrow"));
            assertEquals(hex(ints(MAYBE)), m.get("maybe.arrow"));
            for (String col : List.of("id", "score", "ratio", "maybe"))
                assertEquals("true", m.get(col + ".arrow_zero_copy"), col);
            c.awaitRelease(id, Duration.ofSeconds(10));     /* Python released its lease */
            c.unregister("bt/java-to-py");
        }
    }

    @Test
    void pythonProducerJavaConsumer() throws Exception {
        python();
        TestSupport.Result r = peer("produce", "bt/py-to-java");
        assertEquals(0, r.exit(), r.stderr());
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket)) {
            try (BatchView v = c.lookupBatch("bt/py-to-java", Duration.ofSeconds(5))) {
                assertEquals(4, v.numRows());
                assertEquals(List.of("n", "w", "p"), v.columns());
                assertEquals(Map.of("from", "python"), v.metadata());
                BatchColumn n = v.column("n");
                assertEquals("i", n.format());
                ByteBuffer nb = n.data().asByteBuffer();
                assertEquals(7, nb.getInt(0));
                assertEquals(-1, nb.getInt(4));
                assertEquals(Integer.MAX_VALUE, nb.getInt(12));
                BatchColumn w = v.column("w");
                assertEquals("u", w.format());
                ByteBuffer[] expect = strings("py", "", "th\u00f6n", "x");
                assertArrayEquals(bytes(expect[0]), bytes(w.offsets()));
                assertArrayEquals(bytes(expect[1]), bytes(w.data()));
                BatchColumn p = v.column("p");
                assertEquals("+s", p.format());
                assertEquals(List.of("a", "b"), List.of(p.children().get(0).name(),
                        p.children().get(1).name()));
                assertArrayEquals(bytes(longs(0, 10, 20, 30)), bytes(p.child("a").data()));
                assertArrayEquals(bytes(doubles(0.5, 1.5, 2.5, 3.5)), bytes(p.child("b").data()));
            }
            c.unregister("bt/py-to-java");
        }
    }

    /* ---- device columns, through the CUDA driver double ---- */

    @Test
    void deviceBatch() throws Exception {
        String lib = System.getenv("GPUIPC_LIBCUDA");
        assumeTrue(lib != null && lib.contains("tests/cuda"), "needs the CUDA double in GPUIPC_LIBCUDA");
        long base = CudaTestDriver.alloc(1 << 20);
        try (GpuIpcClient producer = GpuIpcClient.connect(daemon.socket);
             GpuIpcClient consumer = GpuIpcClient.connect(daemon.socket);
             Batch b = new Batch()) {
            byte[] vals = bytes(longs(IDS));
            byte[] valid = bytes(bits(true, false, true, true, true));
            ByteBuffer[] s = strings(NAMES);
            byte[] offs = bytes(s[0]), chars = bytes(s[1]);
            CudaTestDriver.copyToDevice(base, vals);
            CudaTestDriver.copyToDevice(base + 4096, valid);
            CudaTestDriver.copyToDevice(base + 8192, offs);
            CudaTestDriver.copyToDevice(base + 12288, chars);
            b.addColumn("v", "l", 5, 1, BatchBuffer.device(base + 4096, valid.length, 0),
                    BatchBuffer.device(base, vals.length, 0));
            /* The library reads the string column's last offset from the device. */
            b.addColumn("s", "u", 5, 0, null, BatchBuffer.device(base + 8192, offs.length, 0),
                    BatchBuffer.device(base + 12288, chars.length, 0));
            b.addColumn("h", "i", 5, 0, null, bb(ints(MAYBE)));     /* a host column beside */
            assertEquals(0, b.deviceOrdinal());
            long id = producer.registerBatch("bt/device", b);
            try (BatchView v = consumer.lookupBatch("bt/device", Duration.ofSeconds(5))) {
                BatchColumn c = v.column("v");
                assertTrue(c.isDevice());
                assertEquals(0, c.deviceOrdinal());
                assertNotEquals(0, c.data().address());
                assertThrows(IllegalStateException.class, () -> c.data().asByteBuffer());
                assertArrayEquals(vals, CudaTestDriver.copyFromDevice(c.data().address(), vals.length));
                assertArrayEquals(valid, CudaTestDriver.copyFromDevice(c.validity().address(), 1));
                BatchColumn sc = v.column("s");
                assertEquals(chars.length, sc.data().size());
                assertArrayEquals(offs, CudaTestDriver.copyFromDevice(sc.offsets().address(),
                        offs.length));
                assertArrayEquals(chars, CudaTestDriver.copyFromDevice(sc.data().address(),
                        chars.length));
                assertFalse(v.column("h").isDevice());
                assertArrayEquals(bytes(ints(MAYBE)), bytes(v.column("h").data()));
            }
            producer.awaitRelease(id, Duration.ofSeconds(5));
            producer.unregister("bt/device");
        } finally {
            CudaTestDriver.free(base);
        }
    }

    @Test
    void cacheableDeviceBatchStaysMappedUntilAwaitUnmapped() throws Exception {
        /* A CACHEABLE batch over two allocations, looked up by a Python
         * consumer: it keeps both mapped after its view, awaitUnmapped
         * counts each, and returns once the consumer has read the unmap
         * request and let go. */
        python();
        long a = CudaTestDriver.alloc(1 << 16), a2 = CudaTestDriver.alloc(1 << 16);
        ProcessBuilder pb = new ProcessBuilder(python().toString(),
                TestSupport.srcDir().resolve("tests/java/batch_peer.py").toString(), "hold",
                "bt/cacheable");
        pb.environment().putAll(Map.of("GPUIPC_SOCKET", daemon.socket,
                "PYTHONPATH", TestSupport.srcDir().resolve("client/python").toString(),
                "GPUIPC_LIBRARY", TestSupport.buildDir().resolve("libgpuipc.so.1").toString()));
        pb.redirectError(ProcessBuilder.Redirect.INHERIT);
        try (GpuIpcClient producer = GpuIpcClient.connect(daemon.socket);
             Batch b = new Batch()) {
            CudaTestDriver.copyToDevice(a, bytes(longs(IDS)));
            CudaTestDriver.copyToDevice(a2, bytes(ints(MAYBE)));
            b.addColumn("v", "l", 5, 0, null, BatchBuffer.device(a, 40, 0));
            b.addColumn("m", "i", 5, 0, null, BatchBuffer.device(a2, 20, 0));
            long id = producer.registerBatch("bt/cacheable", b, RegisterFlag.CACHEABLE);
            Process p = pb.start();
            try (BufferedReader out = new BufferedReader(
                    new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
                 Writer in = new OutputStreamWriter(p.getOutputStream(), StandardCharsets.UTF_8)) {
                assertEquals("columns=v,m", out.readLine());
                assertEquals("released", out.readLine());
                producer.awaitRelease(id, Duration.ofSeconds(5));
                producer.unregister("bt/cacheable");
                /* The consumer has not read the unmap request: both stay mapped. */
                GpuIpcException e = assertThrows(GpuIpcException.class,
                        () -> producer.awaitUnmapped(id, Duration.ofMillis(300)));
                assertEquals(GpuIpcException.ETIMEDOUT, e.code(), e.getMessage());
                assertTrue(e.getMessage().contains("2 of the 2 allocations of registration " + id),
                        e.getMessage());
                in.write("ping\n");           /* it reads the request and closes both */
                in.flush();
                assertEquals("pinged", out.readLine());
                producer.awaitUnmapped(id, Duration.ofSeconds(10));
            } finally {
                p.getOutputStream().close();
                assertTrue(p.waitFor(30, TimeUnit.SECONDS));
            }
            assertEquals(0, p.exitValue());
        } finally {
            CudaTestDriver.free(a);
            CudaTestDriver.free(a2);
        }
    }

    /* ---- errors ---- */

    static GpuIpcException refused(int code, String text, Batch b, ColumnSpec c) {
        GpuIpcException e = assertThrows(GpuIpcException.class, () -> b.addColumn(c));
        assertEquals(code, e.code(), e.getMessage());
        assertTrue(e.getMessage().contains(text), e.getMessage());
        assertTrue(e.getMessage().startsWith("add column " + c.name()), e.getMessage());
        return e;
    }

    @Test
    void badColumnsAreRefused() throws Exception {
        try (Batch b = new Batch()) {
            refused(GpuIpcException.EINVAL, "format \"q\" is an unknown format", b,
                    ColumnSpec.of("q", "q", 2, 0, null, bb(ints(1, 2))));
            /* A width past 2^63 is a bad format too, not a NumberFormatException. */
            refused(GpuIpcException.EINVAL, "format \"d:1,2,99999999999999999999\" is an unknown "
                    + "format", b, ColumnSpec.of("dec", "d:1,2,99999999999999999999", 2, 0, null,
                            bb(longs(1, 2, 3, 4))));
            refused(GpuIpcException.ENOTSUP, "a union type, which batches do not support", b,
                    ColumnSpec.of("u", "+ud:0,1", 2, 0, (BatchBuffer) null));
            refused(GpuIpcException.EINVAL, "buffer 1 (data) holds 8 bytes; format \"i\" at "
                    + "length 3 needs 12", b, ColumnSpec.of("short", "i", 3, 0, null, bb(ints(1, 2))));
            refused(GpuIpcException.EINVAL, "1 buffers; format \"i\" has 2", b,
                    ColumnSpec.of("few", "i", 2, 0, bb(ints(1, 2))));
            ByteBuffer[] s = strings("abc", "de");
            refused(GpuIpcException.EINVAL, "buffer 2 (data) holds 4 bytes", b,
                    ColumnSpec.of("chars", "u", 2, 0, null, bb(s[0]),
                            bb(s[1].duplicate().limit(4))));
            refused(GpuIpcException.EINVAL, "1 children; format \"l\" takes none", b,
                    ColumnSpec.of("kid", "l", 2, 0, null, bb(longs(1, 2)))
                            .withChildren(ColumnSpec.of("", "l", 2, 0, null, bb(longs(1, 2)))));
            /* What only the C library checks comes back with its message. */
            refused(GpuIpcException.EINVAL, "it has 1 nulls but no validity bitmap", b,
                    ColumnSpec.of("nulls", "i", 2, 1, null, bb(ints(1, 2))));
            /* The metadata limits are the library's: 32 entries, keys of 64 bytes. */
            Map<String, String> many = new java.util.HashMap<>();
            for (int i = 0; i < 33; i++)
                many.put("k" + i, "v");
            refused(GpuIpcException.E2BIG, "33 metadata entries", b,
                    ColumnSpec.of("m33", "i", 2, 0, null, bb(ints(1, 2))).withMetadata(many));
            refused(GpuIpcException.E2BIG, "metadata key", b,
                    ColumnSpec.of("mkey", "i", 2, 0, null, bb(ints(1, 2)))
                            .withMetadata(Map.of("k".repeat(65), "v")));
            assertEquals(-1, b.numRows());                   /* nothing was added */

            b.addColumn("ok", "i", 2, 0, null, bb(ints(1, 2)));
            refused(GpuIpcException.EINVAL, "3 rows; the batch has 2", b,
                    ColumnSpec.of("long", "i", 3, 0, null, bb(ints(1, 2, 3))));
            GpuIpcException e = assertThrows(GpuIpcException.class,
                    () -> b.setMetadata(Map.of("k".repeat(65), "v")));
            assertTrue(e.getMessage().contains("key"), e.getMessage());
            assertEquals(List.of("ok"), b.columnNames());
        }
        assertThrows(IllegalArgumentException.class,
                () -> BatchBuffer.of(ByteBuffer.allocate(8)), "a heap ByteBuffer");
        assertThrows(IllegalArgumentException.class, () -> BatchBuffer.device(0, 8, 0));
    }

    @Test
    void loneNullIsOneAbsentBuffer() throws Exception {
        /* What of(n, "+s", len, 0, null) passes: a null array, one absent validity. */
        ColumnSpec s = ColumnSpec.of("st", "+s", 2, 0, (BatchBuffer[]) null);
        assertEquals(1, s.buffers().size());
        assertNull(s.buffers().get(0));
        assertEquals(1, ColumnSpec.of("st", "+s", 2, 0, (BatchBuffer) null).buffers().size());
        assertEquals(0, ColumnSpec.of("st", "+s", 2, 0).buffers().size());
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket);
             Batch b = new Batch()) {
            b.addColumn(s.withChildren(ColumnSpec.of("x", "i", 2, 0, null, bb(ints(7, 8)))));
            b.addColumn("t", "+s", 2, 0, (BatchBuffer[]) null);
            assertEquals(List.of("st", "t"), b.columnNames());
            c.registerBatch("bt/lone-null", b);
            try (BatchView v = c.lookupBatch("bt/lone-null", Duration.ZERO)) {
                assertEquals("+s", v.column("st").format());
                assertNull(v.column("st").validity());
                assertArrayEquals(bytes(ints(7, 8)), bytes(v.column("st").child("x").data()));
                assertEquals(0, v.column("t").children().size());
            }
            c.unregister("bt/lone-null");
        }
    }

    @Test
    void lookupErrors() throws Exception {
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket)) {
            GpuIpcException e = assertThrows(GpuIpcException.class,
                    () -> c.lookupBatch("bt/none", Duration.ZERO));
            assertEquals(GpuIpcException.ENOENT, e.code());
            assertTrue(e.getMessage().startsWith("lookup batch bt/none"), e.getMessage());
            e = assertThrows(GpuIpcException.class,
                    () -> c.lookupBatch("bt/none", Duration.ofMillis(100)));
            assertEquals(GpuIpcException.ETIMEDOUT, e.code());

            /* A batch is not a buffer, and a buffer is not a batch. */
            try (HostBuffer hb = c.allocateHost(64)) {
                c.registerHost("bt/single", hb, null);
                e = assertThrows(GpuIpcException.class, () -> c.lookupBatch("bt/single", null));
                assertEquals(GpuIpcException.EMEDIUMTYPE, e.code());
            }
            c.registerBatch("bt/batch", List.of(ColumnSpec.of("x", "i", 2, 0, null, bb(ints(1, 2)))),
                    null);
            e = assertThrows(GpuIpcException.class, () -> c.lookup("bt/batch", null));
            assertEquals(GpuIpcException.EMEDIUMTYPE, e.code());
            assertEquals("EMEDIUMTYPE", e.codeName());
            e = assertThrows(GpuIpcException.class, () -> c.registerBatch("bt/batch",
                    List.of(ColumnSpec.of("x", "i", 2, 0, null, bb(ints(1, 2)))), null));
            assertEquals(GpuIpcException.EEXIST, e.code());
            c.unregister("bt/single");
            c.unregister("bt/batch");
        }
    }

    @Test
    void closedObjectsAreRefused() throws Exception {
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket)) {
            Batch empty = new Batch();
            GpuIpcException e = assertThrows(GpuIpcException.class,
                    () -> c.registerBatch("bt/empty", empty));
            assertEquals(GpuIpcException.EINVAL, e.code());
            empty.close();
            assertThrows(IllegalStateException.class, () -> c.registerBatch("bt/empty", empty));
            assertThrows(IllegalStateException.class,
                    () -> empty.addColumn("x", "i", 1, 0, null, bb(ints(1))));

            /* A HostBuffer closed before the batch is registered is never read. */
            HostBuffer hb = c.allocateHost(64);
            try (Batch b = new Batch()) {
                b.addColumn("x", "l", 2, 0, null, BatchBuffer.of(hb, 0, 16));
                hb.close();
                assertThrows(IllegalStateException.class, () -> c.registerBatch("bt/closed", b));
            }
            assertEquals(0, c.list("bt/closed").size());
        }
    }
}
