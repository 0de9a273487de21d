package org.gpuipc;

/**
 * What an Arrow C Data Interface format string means for an array's
 * buffers: how many there are, what each holds and so how many bytes it
 * needs for a length. The Java twin of libgpuipc's {@code arrowfmt.c}, so
 * that {@link Batch} can check every host buffer's size before C reads it
 * (a {@link java.nio.ByteBuffer} shorter than its format says would
 * otherwise be read past its end). The same formats are accepted and
 * refused, with the same reasons.
 */
final class ArrowLayout {
    static final int VALIDITY = 1;      /* one bit per element, may be absent */
    static final int BITS = 2;          /* boolean values */
    static final int FIXED = 3;         /* width bytes per element */
    static final int OFFSETS32 = 4;     /* length + 1 int32 offsets */
    static final int OFFSETS64 = 5;
    static final int DATA32 = 6;        /* bytes up to the last int32 offset */
    static final int DATA64 = 7;

    /** The longest format string batches take (the protocol's limit). */
    static final int FORMAT_MAX = 64;

    final int[] buffers;
    final long width;
    /** 0, exactly 1, or -1 for any number (a struct). */
    final int children;

    private ArrowLayout(int children, long width, int... buffers) {
        this.buffers = buffers;
        this.width = width;
        this.children = children;
    }

    private static final String WIDTHS = "cCsSiIlLefg";
    private static final int[] WIDTH_OF = {1, 1, 2, 2, 4, 4, 8, 8, 2, 4, 8};

    /** Thrown inside: an unknown (EINVAL) or unsupported (ENOTSUP) format. */
    private static final class Bad extends Exception {
        private static final long serialVersionUID = 1L;
        final int code;

        Bad(int code, String why) {
            super(why, null, false, false);
            this.code = code;
        }
    }

    private static Bad unknown() {
        return new Bad(GpuIpcException.EINVAL, "an unknown format");
    }

    private static ArrowLayout fixed(long width) {
        return new ArrowLayout(0, width, VALIDITY, FIXED);
    }

    /**
     * The layout of format f.
     *
     * @param f  the format
     * @param op the operation, for the exception
     * @return the layout
     * @throws GpuIpcException {@link GpuIpcException#EINVAL} for a string
     *         that is no format, {@link GpuIpcException#ENOTSUP} for a type
     *         batches cannot carry (unions, run-end encoding, views)
     */
    static ArrowLayout parse(String f, String op) throws GpuIpcException {
        if (f.isEmpty() || f.length() > FORMAT_MAX)
            throw new GpuIpcException(GpuIpcException.EINVAL, op, "format \"" + f
                    + "\": a format is 1 to " + FORMAT_MAX + " characters");
        for (int i = 0; i < f.length(); i++)
            if (f.charAt(i) < 0x20 || f.charAt(i) > 0x7e)
                throw new GpuIpcException(GpuIpcException.EINVAL, op,
                        "format \"" + f + "\" is not printable ASCII");
        try {
            return layout(f);
        } catch (Bad e) {
            throw new GpuIpcException(e.code, op, "format \"" + f + "\" is " + e.getMessage()
                    + (e.code == GpuIpcException.ENOTSUP ? ", which batches do not support" : ""));
        }
    }

    /** The layout of format f, or null when it is none batches take. */
    static ArrowLayout tryParse(String f) {
        try {
            return layout(f);
        } catch (Bad | RuntimeException e) {
            return null;
        }
    }

    private static ArrowLayout layout(String f) throws Bad {
        if (f.isEmpty())
            throw unknown();
        char c = f.charAt(0);
        String rest = f.substring(1);
        if (rest.isEmpty() && WIDTHS.indexOf(c) >= 0)
            return fixed(WIDTH_OF[WIDTHS.indexOf(c)]);
        switch (c) {
        case 'n':
            if (!rest.isEmpty())
                throw unknown();
            return new ArrowLayout(0, 0);
        case 'b':
            if (!rest.isEmpty())
                throw unknown();
            return new ArrowLayout(0, 0, VALIDITY, BITS);
        case 'z': case 'u': case 'Z': case 'U':
            if (!rest.isEmpty())
                throw unknown();
            boolean large = c == 'Z' || c == 'U';
            return new ArrowLayout(0, 0, VALIDITY, large ? OFFSETS64 : OFFSETS32,
                    large ? DATA64 : DATA32);
        case 'd':
            return decimal(f);
        case 'w':
            if (!rest.startsWith(":"))
                throw unknown();
            return fixed(sizeArg(rest.substring(1)));
        case 't':
            return temporal(f);
        case 'v':
            throw new Bad(GpuIpcException.ENOTSUP, "a view type (string or binary view): "
                    + "its buffers are not sized by its offsets");
        case '+':
            return nested(rest);
        default:
            throw unknown();
        }
    }

    private static ArrowLayout nested(String rest) throws Bad {
        if (rest.isEmpty())
            throw unknown();
        char k = rest.charAt(0);
        String tail = rest.substring(1);
        switch (k) {
        case 'l': case 'L': case 'm':
            if (!tail.isEmpty())
                throw unknown();
            return new ArrowLayout(1, 0, VALIDITY, k == 'L' ? OFFSETS64 : OFFSETS32);
        case 's':
            if (!tail.isEmpty())
                throw unknown();
            return new ArrowLayout(-1, 0, VALIDITY);
        case 'w':
            if (!tail.startsWith(":"))
                throw unknown();
            sizeArg(tail.substring(1));
            return new ArrowLayout(1, 0, VALIDITY);
        case 'u':
            throw new Bad(GpuIpcException.ENOTSUP, "a union type");
        case 'r':
            throw new Bad(GpuIpcException.ENOTSUP, "a run-end encoded type");
        case 'v':
            throw new Bad(GpuIpcException.ENOTSUP, "a list view type");
        default:
            throw unknown();
        }
    }

    /** "N" of "w:N" and "+w:N": 1 to 2^31-1, no leading zero or sign. */
    private static long sizeArg(String s) throws Bad {
        if (s.isEmpty() || s.charAt(0) < '1' || s.charAt(0) > '9' || s.length() > 10)
            throw unknown();
        for (int i = 0; i < s.length(); i++)
            if (s.charAt(i) < '0' || s.charAt(i) > '9')
                throw unknown();
        long v = Long.parseLong(s);
        if (v > Integer.MAX_VALUE)
            throw unknown();
        return v;
    }

    /** "d:P,S" or "d:P,S,W", W 32, 64, 128 (the default) or 256 bits. */
    private static ArrowLayout decimal(String f) throws Bad {
        if (!f.startsWith("d:"))
            throw unknown();
        String[] p = f.substring(2).split(",", -1);
        if (p.length < 2 || p.length > 3 || !p[0].matches("[0-9]+") || !p[1].matches("-?[0-9]+")
                || (p.length == 3 && !p[2].matches("[0-9]+")))
            throw unknown();
        long w;
        try {
            w = p.length == 3 ? Long.parseLong(p[2]) : 128;
        } catch (NumberFormatException e) {
            throw unknown();            /* past 2^63: no width it takes either */
        }
        if (w != 32 && w != 64 && w != 128 && w != 256)
            throw unknown();
        return fixed(w / 8);
    }

    /** "td?", "tt?", "ts?:TZ", "tD?", "ti?". */
    private static ArrowLayout temporal(String f) throws Bad {
        if (f.length() < 3)
            throw unknown();
        char kind = f.charAt(1), unit = f.charAt(2);
        boolean plain = f.length() == 3;
        switch (kind) {
        case 'd':
            if (!plain || (unit != 'D' && unit != 'm'))
                throw unknown();
            return fixed(unit == 'D' ? 4 : 8);
        case 't':
            if (!plain || "smun".indexOf(unit) < 0)
                throw unknown();
            return fixed(unit == 's' || unit == 'm' ? 4 : 8);
        case 's':
            if ("smun".indexOf(unit) < 0 || f.length() < 4 || f.charAt(3) != ':')
                throw unknown();
            return fixed(8);
        case 'D':
            if (!plain || "smun".indexOf(unit) < 0)
                throw unknown();
            return fixed(8);
        case 'i':
            if (!plain || "MDn".indexOf(unit) < 0)
                throw unknown();
            return fixed(unit == 'M' ? 4 : unit == 'D' ? 8 : 16);
        default:
            throw unknown();
        }
    }

    /** What buffer i holds, for messages. */
    String role(int i) {
        switch (buffers[i]) {
        case VALIDITY:
            return "validity";
        case OFFSETS32:
        case OFFSETS64:
            return "offsets";
        default:
            return "data";
        }
    }

    /**
     * Bytes buffer i needs at length elements (offset 0); last is the last
     * offset for the data buffers of strings and binaries.
     *
     * @throws ArithmeticException past 2^63
     */
    long bytes(int i, long length, long last) {
        switch (buffers[i]) {
        case VALIDITY:
        case BITS:
            return length / 8 + (length % 8 != 0 ? 1 : 0);
        case FIXED:
            return Math.multiplyExact(length, width);
        case OFFSETS32:
            return Math.multiplyExact(Math.addExact(length, 1), 4);
        case OFFSETS64:
            return Math.multiplyExact(Math.addExact(length, 1), 8);
        default:
            return last;
        }
    }

    boolean isData(int i) {
        return buffers[i] == DATA32 || buffers[i] == DATA64;
    }

    boolean isOffsets(int i) {
        return buffers[i] == OFFSETS32 || buffers[i] == OFFSETS64;
    }
}
