package org.gpuipc.gpu;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import org.gpuipc.BufferInfo;
import org.gpuipc.CudaTestDriver;
import org.gpuipc.GpuIpcClient;

/**
 * The Java side of tests/gpu/java: allocates device memory through the CUDA
 * driver (cuMemAlloc in device 0's primary context, as RMM/cudf memory is),
 * fills bytes i*7+3 (mod 256), registers a block 1 MiB into the allocation
 * with {@link GpuIpcClient#registerDevice}, runs a consumer process (given
 * NAME and SIZE as its last two arguments), waits for its release, then
 * unregisters and frees. Used by run.sh on a real GPU and by
 * DeviceBufferTest with the CUDA double.
 *
 * <pre>java ... org.gpuipc.gpu.GpuProducer NAME SIZE -- CONSUMER ARGS...</pre>
 */
public final class GpuProducer {
    private GpuProducer() {
    }

    /** The pattern's byte i. */
    static byte at(long i) {
        return (byte) (i * 7 + 3);
    }

    /** Runs the handoff; returns 0 when the consumer checked every byte. */
    public static int run(String socket, String name, int size, List<String> consumer) throws Exception {
        final long offset = 1 << 20;
        long base = CudaTestDriver.alloc(offset + size);
        try (GpuIpcClient c = GpuIpcClient.connect(socket)) {
            byte[] data = new byte[size];
            for (int i = 0; i < size; i++)
                data[i] = at(i);
            CudaTestDriver.copyToDevice(base + offset, data);
            long t0 = System.nanoTime();
            long id = c.registerDevice(name, base + offset, size,
                    Map.of("pattern", "i*7+3", "producer", "java"));
            long t1 = System.nanoTime();
            BufferInfo info = c.list(name).get(0);
            System.out.printf("producer: registered %s id %d kind %s device %s size %d offset %d (%.1f us)%n",
                    name, id, info.kind().wireName(), info.device(), info.size(), info.offset(),
                    (t1 - t0) / 1e3);

            List<String> cmd = new ArrayList<>(consumer);
            cmd.add(name);
            cmd.add(Integer.toString(size));
            ProcessBuilder pb = new ProcessBuilder(cmd).inheritIO();
            pb.environment().put("GPUIPC_SOCKET", socket);
            int rc = pb.start().waitFor();
            if (rc != 0) {
                System.out.println("producer: consumer exited with " + rc);
                c.unregister(name);
                return rc == 77 ? 77 : 1;
            }
            c.awaitRelease(id, Duration.ofSeconds(60));
            c.unregister(name);
            System.out.println("producer: consumer released " + name);
            return 0;
        } finally {
            CudaTestDriver.free(base);
        }
    }

    /**
     * Entry point.
     *
     * @param args NAME SIZE -- CONSUMER...
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        int dash = Arrays.asList(args).indexOf("--");
        if (args.length < 4 || dash != 2) {
            System.err.println("usage: GpuProducer NAME SIZE -- CONSUMER [ARGS...]");
            System.exit(2);
        }
        List<String> consumer = Arrays.asList(args).subList(3, args.length);
        System.exit(run(GpuIpcClient.defaultSocket(), args[0], Integer.parseInt(args[1]), consumer));
    }
}
