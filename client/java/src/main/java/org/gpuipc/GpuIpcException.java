package org.gpuipc;

import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * A call to the daemon or to libgpuipc failed.
 *
 * <p>{@link #code()} is the negative errno that the C library returned
 * (see {@code client/gpuipc.h} and the error table of
 * {@code docs/protocol.md}: for example {@link #ENOENT} for {@code not_found},
 * {@link #EEXIST} for {@code exists}, {@link #ETIMEDOUT} for {@code timeout}).
 * {@link #codeName()} is its symbolic name ({@code "ENOENT"}), and
 * {@link #daemonMessage()} is the text that {@code gpuipc_errmsg()} gave for
 * the failure: the daemon's own message when the daemon refused the request,
 * a text of the library's otherwise. {@link #getMessage()} combines the
 * operation, that text and the code name.
 *
 * <p>Programming errors on the Java side (null arguments, negative sizes, a
 * closed object) are reported with the usual unchecked exceptions instead:
 * {@link NullPointerException}, {@link IllegalArgumentException},
 * {@link IllegalStateException}.
 */
public class GpuIpcException extends Exception {
    private static final long serialVersionUID = 1L;

    /** No such registration, lease or id ({@code not_found}); also: no daemon at the socket path. */
    public static final int ENOENT = -2;
    /** Not permitted ({@code permission}). */
    public static final int EPERM = -1;
    /** Unusable file descriptor ({@code bad_fd}). */
    public static final int EBADF = -9;
    /** Out of memory ({@code no_memory}). */
    public static final int ENOMEM = -12;
    /** The name is already registered ({@code exists}). */
    public static final int EEXIST = -17;
    /** Invalid argument, name or request ({@code bad_request}). */
    public static final int EINVAL = -22;
    /** Unknown operation ({@code unknown_op}). */
    public static final int ENOSYS = -38;
    /** Malformed frame ({@code bad_frame}). */
    public static final int EBADMSG = -74;
    /** Protocol error ({@code hello_required}). */
    public static final int EPROTO = -71;
    /** Frame too large ({@code too_large}). */
    public static final int EMSGSIZE = -90;
    /** No protocol version in common ({@code version}). */
    public static final int EPROTONOSUPPORT = -93;
    /** Buffer kind not supported, or no usable CUDA driver ({@code unsupported}). */
    public static final int ENOTSUP = -95;
    /** A daemon resource limit was reached ({@code limit}). */
    public static final int ENOBUFS = -105;
    /** Connection to the daemon lost. */
    public static final int ECONNRESET = -104;
    /** Not connected. */
    public static final int ENOTCONN = -107;
    /** The daemon is shutting down ({@code shutting_down}). */
    public static final int ESHUTDOWN = -108;
    /** A wait ran out of time ({@code timeout}). */
    public static final int ETIMEDOUT = -110;
    /** No daemon listens on the socket. */
    public static final int ECONNREFUSED = -111;
    /** Socket path too long. */
    public static final int ENAMETOOLONG = -36;
    /** Internal error in the daemon ({@code internal}). */
    public static final int EIO = -5;
    /** A batch looked up as a single buffer, or a single buffer as a batch. */
    public static final int EMEDIUMTYPE = -124;
    /** Too many of something: columns, buffers or fds of a batch, metadata entries. */
    public static final int E2BIG = -7;

    private static final Map<Integer, String> NAMES = Map.ofEntries(
            Map.entry(ENOENT, "ENOENT"), Map.entry(EPERM, "EPERM"), Map.entry(EBADF, "EBADF"),
            Map.entry(ENOMEM, "ENOMEM"), Map.entry(EEXIST, "EEXIST"), Map.entry(EINVAL, "EINVAL"),
            Map.entry(ENOSYS, "ENOSYS"), Map.entry(EBADMSG, "EBADMSG"), Map.entry(EPROTO, "EPROTO"),
            Map.entry(EMSGSIZE, "EMSGSIZE"), Map.entry(EPROTONOSUPPORT, "EPROTONOSUPPORT"),
            Map.entry(ENOTSUP, "ENOTSUP"), Map.entry(ENOBUFS, "ENOBUFS"),
            Map.entry(ECONNRESET, "ECONNRESET"), Map.entry(ENOTCONN, "ENOTCONN"),
            Map.entry(ESHUTDOWN, "ESHUTDOWN"), Map.entry(ETIMEDOUT, "ETIMEDOUT"),
            Map.entry(ECONNREFUSED, "ECONNREFUSED"), Map.entry(ENAMETOOLONG, "ENAMETOOLONG"),
            Map.entry(EIO, "EIO"), Map.entry(EMEDIUMTYPE, "EMEDIUMTYPE"),
            Map.entry(E2BIG, "E2BIG"));

    /** The negative errno libgpuipc returned (serialized with the exception). */
    private final int code;
    /** The operation that failed, e.g. {@code "lookup"}. */
    private final String operation;
    /** The daemon's own explanation, or {@code ""}. */
    private final String daemonMessage;

    /**
     * Creates an exception; the binding creates these, applications normally
     * only catch them.
     *
     * @param code          the negative errno
     * @param operation     what was attempted, e.g. {@code "lookup spark/x"}
     * @param daemonMessage the explanation from {@code gpuipc_errmsg()}
     */
    public GpuIpcException(int code, String operation, String daemonMessage) {
        super(operation + ": " + daemonMessage + " [" + nameOf(code) + "]");
        this.code = code;
        this.operation = operation;
        this.daemonMessage = daemonMessage;
    }

    /** Built by the JNI code, whose texts are UTF-8 bytes that need not be valid. */
    static GpuIpcException fromNative(int code, byte[] operation, byte[] message) {
        return new GpuIpcException(code, new String(operation, StandardCharsets.UTF_8),
                new String(message, StandardCharsets.UTF_8));
    }

    /**
     * The symbolic name of a negative errno.
     *
     * @param code a negative errno
     * @return e.g. {@code "ENOENT"}, or {@code "E<n>"} for a value without a name here
     */
    public static String nameOf(int code) {
        String n = NAMES.get(code);
        return n != null ? n : "E" + (-code);
    }

    /**
     * The negative errno of the failure.
     *
     * @return e.g. {@link #ENOENT} (-2)
     */
    public int code() {
        return code;
    }

    /**
     * The symbolic name of {@link #code()}.
     *
     * @return e.g. {@code "ENOENT"}
     */
    public String codeName() {
        return nameOf(code);
    }

    /**
     * What was attempted.
     *
     * @return e.g. {@code "lookup spark/app-1/x"}
     */
    public String operation() {
        return operation;
    }

    /**
     * The daemon's message for the failure (or the library's, when the
     * failure was local), exactly as {@code gpuipc_errmsg()} gave it.
     *
     * @return the text, never null
     */
    public String daemonMessage() {
        return daemonMessage;
    }
}
