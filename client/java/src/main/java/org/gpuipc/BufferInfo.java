package org.gpuipc;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A registration as the daemon described it (the protocol's registration
 * record), from {@link GpuIpcClient#list(String)} or {@link View#info()}.
 * An immutable snapshot: it does not change when the registration does.
 *
 * @param id           the registration id, unique for the daemon's lifetime
 * @param name         the registered name, e.g. {@code spark/app-1/batch-7/col-0}
 * @param kind         host or device memory
 * @param size         bytes of the buffer
 * @param offset       where the buffer starts in its shared object or allocation
 * @param device       the device UUID ({@code GPU-...}); empty for host buffers
 * @param dtype        the element type given at registration; empty when unset
 * @param shape        the shape given at registration (unmodifiable, possibly empty)
 * @param strides      the strides in bytes (unmodifiable), or empty for C order / none
 * @param metadata     the free-form user pairs given at registration (unmodifiable, in order)
 * @param ownerPid     process id of the registering peer
 * @param ownerUid     user id of the registering peer
 * @param ownerGid     group id of the registering peer
 * @param leases       leases held on it by all clients when the snapshot was taken
 * @param ephemeral    whether it ends with its owner's connection
 * @param unregistered whether it has left the namespace but is still leased
 * @param ownerGone    whether the registering connection has ended
 * @param createdMs    Unix time of registration, milliseconds
 */
public record BufferInfo(long id, String name, BufferKind kind, long size, long offset,
                         String device, String dtype, List<Long> shape, List<Long> strides,
                         Map<String, String> metadata, int ownerPid, int ownerUid, int ownerGid,
                         int leases, boolean ephemeral, boolean unregistered, boolean ownerGone,
                         long createdMs) {

    /** Built by the JNI code; strings arrive as UTF-8 bytes (the daemon does not validate UTF-8). */
    static BufferInfo fromNative(long id, byte[] name, int kind, long size, long offset,
                                 byte[] device, byte[] dtype, long[] shape, long[] strides,
                                 byte[][] keys, byte[][] values, int pid, int uid, int gid,
                                 int leases, int flags, long createdMs) {
        Map<String, String> meta = new LinkedHashMap<>();
        for (int i = 0; i < keys.length; i++)
            meta.put(str(keys[i]), str(values[i]));
        return new BufferInfo(id, str(name), BufferKind.fromNative(kind), size, offset,
                str(device), str(dtype), longs(shape), longs(strides),
                Collections.unmodifiableMap(meta), pid, uid, gid, leases,
                (flags & 0x1) != 0, (flags & 0x2) != 0, (flags & 0x4) != 0, createdMs);
    }

    private static String str(byte[] b) {
        return b == null ? "" : new String(b, StandardCharsets.UTF_8);
    }

    private static List<Long> longs(long[] a) {
        if (a == null)
            return List.of();
        List<Long> l = new ArrayList<>(a.length);
        for (long v : a)
            l.add(v);
        return Collections.unmodifiableList(l);
    }
}
