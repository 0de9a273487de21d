package org.gpuipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** Test helpers: a real gpuipcd on a temporary socket, child processes, patterns. */
final class TestSupport {
    /** The bytes from b's position to its limit (b itself is left as it was). */
    static byte[] bytes(ByteBuffer b) {
        byte[] a = new byte[b.remaining()];
        b.duplicate().get(a);
        return a;
    }

    private TestSupport() {
    }

    static Path buildDir() {
        return Paths.get(System.getProperty("org.gpuipc.test.builddir", "build")).toAbsolutePath();
    }

    static Path srcDir() {
        return Paths.get(System.getProperty("org.gpuipc.test.srcdir", ".")).toAbsolutePath();
    }

    static Path tmpDir() throws IOException {
        String t = System.getProperty("org.gpuipc.test.tmpdir");
        return t != null ? Paths.get(t) : Files.createTempDirectory("gpuipc-java");
    }

    /** gpuipcd started on a socket; close() sends SIGTERM and asserts exit status 0. */
    static final class Daemon implements AutoCloseable {
        final String socket;
        final Process process;
        final Path log;

        Daemon(String socket) throws Exception {
            this.socket = socket;
            Files.deleteIfExists(Paths.get(socket));
            this.log = Paths.get(socket + ".log");
            ProcessBuilder pb = new ProcessBuilder(buildDir().resolve("gpuipcd").toString(),
                    "--no-config", "--socket", socket, "--log-level", "6");
            pb.redirectErrorStream(true).redirectOutput(log.toFile());
            process = pb.start();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (true) {
                if (!process.isAlive())
                    fail("gpuipcd exited with " + process.exitValue() + ":\n" + logText());
                try (GpuIpcClient c = GpuIpcClient.connect(socket)) {
                    c.ping();
                    return;
                } catch (GpuIpcException e) {
                    if (System.nanoTime() > deadline)
                        fail("gpuipcd does not accept on " + socket + ": " + e.getMessage());
                    Thread.sleep(20);
                }
            }
        }

        static Daemon inTmp(String name) throws Exception {
            return new Daemon(tmpDir().resolve(name + ".sock").toString());
        }

        String logText() {
            try {
                return Files.readString(log);
            } catch (IOException e) {
                return "(no log: " + e + ")";
            }
        }

        @Override
        public void close() throws Exception {
            process.destroy();          /* SIGTERM */
            assertTrue(process.waitFor(10, TimeUnit.SECONDS), "gpuipcd did not stop on SIGTERM");
            assertEquals(0, process.exitValue(), "gpuipcd exit status; log:\n" + logText());
        }
    }

    /** What a child process did. */
    record Result(int exit, byte[] stdout, String stderr) {
    }

    /** Runs a command with GPUIPC_SOCKET=socket (and the inherited environment). */
    static Result run(String socket, Map<String, String> env, List<String> cmd) throws Exception {
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.environment().put("GPUIPC_SOCKET", socket);
        if (env != null)
            pb.environment().putAll(env);
        Path err = Files.createTempFile(tmpDir(), "stderr", ".txt");
        pb.redirectError(err.toFile()).redirectInput(ProcessBuilder.Redirect.PIPE);
        Process p = pb.start();
        p.getOutputStream().close();
        byte[] out = p.getInputStream().readAllBytes();
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "timed out: " + cmd);
        String errText = Files.readString(err);
        Files.delete(err);
        return new Result(p.exitValue(), out, errText);
    }

    static Result ctl(String socket, String... args) throws Exception {
        List<String> cmd = new ArrayList<>();
        cmd.add(buildDir().resolve("gpuipcctl").toString());
        cmd.addAll(Arrays.asList(args));
        return run(socket, null, cmd);
    }

    static byte[] pattern(int n, int seed) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++)
            b[i] = (byte) (i * 31 + seed + (i >>> 8));
        return b;
    }

    /** tests/integration/harness.h's h_pattern(i, seed). */
    static byte hPattern(long i, int seed) {
        long x = (i >>> 3) * 0x9e3779b97f4a7c15L + (seed & 0xffffffffL);
        x ^= x >>> 29;
        return (byte) (x >>> (8 * (i & 7)));
    }
}
