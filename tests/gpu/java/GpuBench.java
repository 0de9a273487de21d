package org.gpuipc.gpu;

import java.time.Duration;
import java.util.Arrays;
import java.util.Map;

import org.gpuipc.CudaTestDriver;
import org.gpuipc.GpuIpcClient;
import org.gpuipc.RegisterFlag;

/**
 * The Java producer of tests/bench/gpu_java.py: the GPU handoff benchmark's
 * producer side through the Java binding. Each round it fills SIZE bytes of
 * device memory (cuMemAlloc in device 0's primary context, as RMM/cudf
 * memory is; a new allocation each round for "fresh", the same one for
 * "reused") with the byte 91, sleeps IDLE_MS, registers it as PREFIX/ROUND
 * with {@link GpuIpcClient#registerDevice} and prints
 * {@code t0 ROUND T0_NS CALL_NS} (System.nanoTime, CLOCK_MONOTONIC on
 * Linux), then waits for the consumer's release, unregisters and, for
 * "fresh", frees. "reused" registers {@link RegisterFlag#CACHEABLE}, as
 * gpu_handoff.py's reused producer does, so the consumer keeps the block
 * mapped between rounds; it frees the block after
 * {@link GpuIpcClient#awaitUnmapped}.
 *
 * <pre>java ... org.gpuipc.gpu.GpuBench PREFIX ROUNDS SIZE IDLE_MS fresh|reused</pre>
 */
public final class GpuBench {
    private GpuBench() {
    }

    /**
     * Entry point.
     *
     * @param args PREFIX ROUNDS SIZE IDLE_MS PATTERN
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        if (args.length != 5 || !(args[4].equals("fresh") || args[4].equals("reused"))) {
            System.err.println("usage: GpuBench PREFIX ROUNDS SIZE IDLE_MS fresh|reused");
            System.exit(2);
        }
        String prefix = args[0];
        int rounds = Integer.parseInt(args[1]);
        int size = Integer.parseInt(args[2]);
        long idleMs = Long.parseLong(args[3]);
        boolean fresh = args[4].equals("fresh");
        byte[] data = new byte[size];
        Arrays.fill(data, (byte) 91);
        RegisterFlag[] flags = fresh ? new RegisterFlag[0]
                : new RegisterFlag[] {RegisterFlag.CACHEABLE};
        long dptr = 0, last = 0;
        try (GpuIpcClient c = GpuIpcClient.connect()) {
            for (int i = 0; i < rounds; i++) {
                if (dptr == 0)
                    dptr = CudaTestDriver.alloc(size);
                CudaTestDriver.copyToDevice(dptr, data);   /* synchronous */
                Thread.sleep(idleMs);
                String name = prefix + "/" + i;
                long t0 = System.nanoTime();
                long id = c.registerDevice(name, dptr, size, Map.of(), flags);
                long t1 = System.nanoTime();
                System.out.println("t0 " + i + " " + t0 + " " + (t1 - t0));
                System.out.flush();
                c.awaitRelease(id, Duration.ofSeconds(120));
                c.unregister(name);
                last = id;
                if (fresh) {
                    CudaTestDriver.free(dptr);
                    dptr = 0;
                }
            }
            if (dptr != 0 && !fresh)
                c.awaitUnmapped(last, Duration.ofSeconds(120));
        } finally {
            if (dptr != 0)
                CudaTestDriver.free(dptr);
        }
    }
}
