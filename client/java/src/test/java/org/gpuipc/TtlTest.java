package org.gpuipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Registrations with a lifetime (setTtl), and the errors of a missing daemon. */
class TtlTest {
    private static TestSupport.Daemon daemon;

    @BeforeAll
    static void startDaemon() throws Exception {
        daemon = TestSupport.Daemon.inTmp("ttl");
    }

    @AfterAll
    static void stopDaemon() throws Exception {
        daemon.close();
    }

    private static boolean listed(GpuIpcClient c, String name) throws GpuIpcException {
        return c.list("ttl").stream().anyMatch(i -> i.name().equals(name));
    }

    @Test
    void registrationExpiresReadersKeepTheirMapping() throws Exception {
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket);
             HostBuffer b = c.allocateHost(4096)) {
            b.asByteBuffer().put(0, (byte) 42);
            c.setTtl("2s");
            c.registerHost("ttl/short", b, null);
            c.setTtl((Duration) null);
            c.registerHost("ttl/kept", b, null);
            try (View v = c.lookup("ttl/short", Duration.ZERO)) {
                long deadline = System.nanoTime() + 10_000_000_000L;
                while (listed(c, "ttl/short")) {
                    assertTrue(System.nanoTime() < deadline, "ttl/short did not expire");
                    Thread.sleep(50);
                }
                ByteBuffer bb = v.asByteBuffer();
                assertEquals(42, bb.get(0), "the reader keeps its mapping");
            }
            GpuIpcException e = assertThrows(GpuIpcException.class,
                    () -> c.lookup("ttl/short", Duration.ZERO));
            assertEquals(GpuIpcException.ENOENT, e.code());
            assertTrue(listed(c, "ttl/kept"), "a registration without a TTL stays");
        }
    }

    @Test
    void durations() {
        assertEquals(Duration.ofMillis(500), GpuIpcClient.parseDuration("500ms"));
        assertEquals(Duration.ofSeconds(30), GpuIpcClient.parseDuration("30s"));
        assertEquals(Duration.ofSeconds(30), GpuIpcClient.parseDuration("30"));
        assertEquals(Duration.ofMinutes(5), GpuIpcClient.parseDuration("5m"));
        assertEquals(Duration.ofHours(2), GpuIpcClient.parseDuration("2h"));
        for (String bad : new String[] { "", "s", "-1s", "5x", "1.5s" })
            assertThrows(IllegalArgumentException.class, () -> GpuIpcClient.parseDuration(bad), bad);
    }

    @Test
    void tooLongTtlIsRefused() throws Exception {
        try (GpuIpcClient c = GpuIpcClient.connect(daemon.socket)) {
            GpuIpcException e = assertThrows(GpuIpcException.class,
                    () -> c.setTtl(Duration.ofDays(20 * 366)));
            assertEquals(GpuIpcException.EINVAL, e.code());
            assertThrows(IllegalArgumentException.class, () -> c.setTtl(Duration.ofSeconds(-1)));
        }
    }

    @Test
    void missingSocketIsNamed() {
        String path = Path.of(daemon.socket).resolveSibling("nobody.sock").toString();
        GpuIpcException e = assertThrows(GpuIpcException.class, () -> GpuIpcClient.connect(path));
        assertTrue(e.getMessage().contains(path), e.getMessage());
        assertTrue(e.getMessage().contains("is gpuipcd running?"), e.getMessage());
    }
}
