package org.gpuipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import org.junit.jupiter.api.Test;

/** connect() without a path uses $GPUIPC_SOCKET (make check-java sets it), as the C library does. */
class DefaultSocketTest {
    @Test
    void connectUsesGpuipcSocket() throws Exception {
        String env = System.getenv("GPUIPC_SOCKET");
        assumeTrue(env != null && !env.isEmpty(), "GPUIPC_SOCKET is not set");
        assertEquals(env, GpuIpcClient.defaultSocket());
        try (TestSupport.Daemon d = new TestSupport.Daemon(env);
             GpuIpcClient c = GpuIpcClient.connect()) {
            assertEquals(env, c.socketPath());
            c.ping();
        }
    }
}
