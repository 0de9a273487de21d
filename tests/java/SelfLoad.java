// SelfLoad.java: run by `make check-java-jar` and packaging/smoke-test.sh
// with a jar on the class path and no setting at all (no -Dorg.gpuipc.library,
// no java.library.path): the jar must find libgpuipc_jni.so by itself.
//
//   java -cp gpuipc.jar:DIR SelfLoad SOCKET NAME
//
// Prints which libgpuipc_jni.so the JVM mapped (from /proc/self/maps) and
// "roundtrip ok" once a host buffer registered under NAME read back the
// same through a lookup; exits 1 otherwise.
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.Map;

import org.gpuipc.GpuIpcClient;
import org.gpuipc.HostBuffer;
import org.gpuipc.View;

public final class SelfLoad {
    private SelfLoad() {
    }

    public static void main(String[] args) throws Exception {
        byte[] want = ("hello from " + args[1]).getBytes(StandardCharsets.UTF_8);
        try (GpuIpcClient c = GpuIpcClient.connect(args[0])) {
            for (String l : Files.readAllLines(Paths.get("/proc/self/maps")))
                if (l.contains("libgpuipc_jni") || l.contains("gpuipc_jni-"))
                    System.out.println("mapped " + l.substring(l.indexOf('/')));
            try (HostBuffer b = c.allocateHost(want.length)) {
                b.asByteBuffer().put(want);
                c.registerHost(args[1], b, Map.of());
            }
            byte[] got = new byte[want.length];
            try (View v = c.lookup(args[1], Duration.ofSeconds(5))) {
                ByteBuffer bb = v.asByteBuffer();
                bb.get(got);
            }
            c.unregister(args[1]);
            if (!java.util.Arrays.equals(want, got)) {
                System.out.println("roundtrip: different bytes");
                System.exit(1);
            }
            System.out.println("roundtrip ok");
        }
    }
}
