#!/usr/bin/env python3
"""The Python side of BatchTest's cross-language round trips (make
check-java), through the gpuipc package and without numpy.

    batch_peer.py consume NAME    looks the batch up and prints it as JSON
    batch_peer.py produce NAME    registers a batch (see below) and exits
    batch_peer.py hold NAME       looks the batch up, lets go of the view,
                                  prints "columns=A,B" and "released",
                                  then answers each "ping" line on stdin
                                  with a ping of the daemon and "pinged";
                                  exits at EOF

consume prints KEY=VALUE lines (UTF-8): rows, columns (comma-separated),
meta.KEY, and for each array, PATH being the column's name and its
children's joined by ".": PATH.format, .length, .null_count, .nullable,
.validity (hex, when present), .data (hex of the values' bytes, for
fixed-width types), .values (to_pylist() as JSON, for strings and booleans);
and for each top-level fixed-width column, read again through the Arrow
PyCapsule interface (bv.__arrow_c_array__()): PATH.arrow (hex of its values
as the ArrowArray's buffers give them) and PATH.arrow_zero_copy (whether
that buffer is the view's mapped memory).

produce registers 4 rows: "n" int32 [7, -1, 0, 2^31-1] from a HostBuffer,
"w" strings ["py", "", "thön", "x"] (nulls would need numpy), "p" a struct
of "a" int64 [0, 10, 20, 30] and "b" float64 [0.5, 1.5, 2.5, 3.5];
metadata {"from": "python"}, and prints the registration id."""
import ctypes
import json
import struct
import sys

import gpuipc
from gpuipc import arrow as A

WIDTHS = {"c": 1, "C": 1, "s": 2, "S": 2, "i": 4, "I": 4, "f": 4, "l": 8, "L": 8, "g": 8}


def column(path, c, out):
    out.append(f"{path}.format={c.format}")
    out.append(f"{path}.length={c.length}")
    out.append(f"{path}.null_count={c.null_count}")
    out.append(f"{path}.nullable={str(c.nullable).lower()}")
    v = c.validity
    if v is not None:
        out.append(f"{path}.validity={v.tobytes().hex()}")
    if c.format in ("u", "b"):
        out.append(f"{path}.values={json.dumps(c.to_pylist(), ensure_ascii=False)}")
    elif not c.format.startswith("+"):
        out.append(f"{path}.data={c.tobytes().hex()}")
    for k, ch in c.children.items():
        column(f"{path}.{k}", ch, out)


def consume(client, name):
    out = []
    with client.lookup_batch(name, timeout=5) as bv:
        out.append(f"rows={bv.num_rows}")
        out.append("columns=" + ",".join(bv.columns))
        for k, v in bv.metadata.items():
            out.append(f"meta.{k}={v}")
        for k in bv.columns:
            column(k, bv[k], out)
        through_arrow(bv, out)
    sys.stdout.buffer.write(("\n".join(out) + "\n").encode("utf-8"))


def through_arrow(bv, out):
    sc, ac = bv.__arrow_c_array__()
    s = A.ArrowSchema.from_address(A.capsule_pointer(sc, A.SCHEMA))
    a = A.ArrowArray.from_address(A.capsule_pointer(ac, A.ARRAY))
    for i in range(s.n_children):
        cs, ca = s.children[i].contents, a.children[i].contents
        fmt, name = cs.format.decode(), cs.name.decode("utf-8")
        if fmt not in WIDTHS:
            continue
        w = WIDTHS[fmt]
        ptr = ca.buffers[1]
        out.append(f"{name}.arrow={ctypes.string_at(ptr + ca.offset * w, ca.length * w).hex()}")
        zero_copy = ptr + ca.offset * w == bv[name].ptr
        out.append(f"{name}.arrow_zero_copy={str(zero_copy).lower()}")
    del s, a, sc, ac            # the capsules release their structs, and the lease


def host_column(client, fmt, values):
    buf = client.alloc_host(4 * len(values) if fmt == "i" else 8 * len(values),
                            {"i": "int32", "q": "int64", "d": "float64"}[fmt])
    buf.buffer[:] = struct.pack("<%d%s" % (len(values), fmt), *values)
    return buf


def produce(client, name):
    cols = {"n": host_column(client, "i", [7, -1, 0, 2**31 - 1]),
            "w": ["py", "", "thön", "x"],
            "p": {"a": host_column(client, "q", [0, 10, 20, 30]),
                  "b": host_column(client, "d", [0.5, 1.5, 2.5, 3.5])}}
    print(client.register_batch(name, cols, meta={"from": "python"}))


def hold(client, name):
    """A consumer that keeps a cacheable batch's allocations mapped after its
    view (the library's mapping cache), and reads the daemon's unmap
    requests only when told to ping."""
    with client.lookup_batch(name, timeout=5) as bv:
        out = [f"columns={','.join(bv.columns)}"]
    print("\n".join(out + ["released"]), flush=True)
    for line in sys.stdin:
        if line.strip() == "ping":
            client.ping()
            print("pinged", flush=True)


def main():
    mode, name = sys.argv[1], sys.argv[2]
    modes = {"consume": consume, "produce": produce, "hold": hold}
    with gpuipc.Client() as client:
        modes[mode](client, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
