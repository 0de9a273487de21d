package org.gpuipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Java and C (gpuipcctl, on libgpuipc) hand host buffers to each other. */
class CrossLanguageTest {
    private static TestSupport.Daemon daemon;

    @BeforeAll
    static void startDaemon() throws Exception {
        daemon = TestSupport.Daemon.inTmp("cross");
    }

    @AfterAll
    static void stopDaemon() throws Exception {
        daemon.close();
    }

    @Test
    void javaProducerCConsumer() throws Exception {
        byte[] data = TestSupport.pattern(3 * 4096 + 17, 11);
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket);
             HostBuffer b = c.allocateHost(data.length)) {
            b.asByteBuffer().put(data);
            long id = c.registerHost("cross/java-to-c", b, Map.of("from", "java"));
            TestSupport.Result r = TestSupport.ctl(daemon.socket, "get", "cross/java-to-c");
            assertEquals(0, r.exit(), r.stderr());
            assertArrayEquals(data, r.stdout());
            c.awaitRelease(id, Duration.ofSeconds(5));      /* gpuipcctl released its lease */
            r = TestSupport.ctl(daemon.socket, "show", "cross/java-to-c");
            assertEquals(0, r.exit(), r.stderr());
            c.unregister("cross/java-to-c");
        }
    }

    @Test
    void cProducerJavaConsumer() throws Exception {
        byte[] data = TestSupport.pattern(1024, 22);
        Path f = Files.createTempFile(TestSupport.tmpDir(), "put", ".bin");
        Files.write(f, data);
        TestSupport.Result r = TestSupport.ctl(daemon.socket, "put", "cross/c-to-java", f.toString(),
                "--dtype", "uint8", "--shape", "4,256", "--meta", "from=c");
        Files.delete(f);
        assertEquals(0, r.exit(), r.stderr());
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket);
             View v = c.lookup("cross/c-to-java", Duration.ofSeconds(5))) {
            ByteBuffer bb = v.asByteBuffer();
            byte[] got = new byte[bb.remaining()];
            bb.get(got);
            assertArrayEquals(data, got);
            assertEquals("uint8", v.info().dtype());
            assertEquals(List.of(4L, 256L), v.info().shape());
            assertEquals(Map.of("from", "c"), v.metadata());
            assertEquals(BufferKind.HOST, v.kind());
        }
        r = TestSupport.ctl(daemon.socket, "rm", "cross/c-to-java");
        assertEquals(0, r.exit(), r.stderr());
    }
}
