"""What a consumer can make a torch tensor with, after an idle (issue 13).

A handoff's consumer is woken after the producer's idle time and makes its
tensor with cold caches: in the thirteenth H200 run torch.as_tensor(view)
cost 165 us after 50 ms of idle, a quarter of the 1 MiB reused handoff.
This times, in one process on one device allocation, each way of getting a
tensor over memory that is already mapped, after 0, 2 and 50 ms of sleep:

- as_tensor(cai, device): torch.as_tensor of a bare CUDA Array Interface
  object, device="cuda" (what the benchmark's consumers pass);
- as_tensor(cai, dev0): the same with the device's index (torch.device);
- as_tensor(cai): the same without the device argument;
- as_strided: a view of a tensor the process holds over the whole
  allocation (a cached one per mapping), at an offset;
- narrow, slice: the same view made with narrow() and with [a:b];
- set_(storage): torch.empty(0) set to the held tensor's storage;
- detach: a new tensor object over a held tensor of the right layout;
- _from_dlpack(capsule): torch's DLPack import of a capsule made
  beforehand (the device comes with it: no pointer query), and the same
  through the public torch.from_dlpack;
- as_strided+ref: as_strided and a weak reference with a callback to the
  new tensor (what tying a lease to the tensor object costs);
- nothing: the clock and one Python call.

Each round runs every way once, in a rotating order, each after its own
sleep; p50 and p90 in us over the rounds.  Prints a CSV (way, idle_ms,
n, p50_us, p90_us) and a table.
usage: python3 gpu_tensor_cold.py [ROUNDS]      (40 by default)
"""
import sys
import time
import weakref

import torch  # type: ignore[import]


class _CAI:
    __slots__ = ("__cuda_array_interface__",)

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3, "strides": None}


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    dev = torch.device("cuda", 0)
    size, off, n = 64 << 20, 4 << 20, 1 << 20
    x = torch.full((size,), 7, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    ptr = x.data_ptr()
    base = torch.as_tensor(_CAI(ptr, size), device="cuda")
    st = base.untyped_storage()
    exact = base.as_strided((n,), (1,), off)
    u8 = torch.uint8
    gone = []

    def cb(_r):
        gone.append(1)

    caps = [torch.utils.dlpack.to_dlpack(exact) for _ in range(6 * rounds + 2)]

    ways = {
        "nothing": lambda: None,
        "as_tensor(cai, device)": lambda: torch.as_tensor(_CAI(ptr + off, n), device="cuda"),
        "as_tensor(cai, dev0)": lambda: torch.as_tensor(_CAI(ptr + off, n), device=dev),
        "as_tensor(cai)": lambda: torch.as_tensor(_CAI(ptr + off, n)),
        "as_strided": lambda: base.as_strided((n,), (1,), off),
        "narrow": lambda: base.narrow(0, off, n),
        "slice": lambda: base[off:off + n],
        "set_(storage)": lambda: torch.empty(0, dtype=u8, device=dev).set_(st, off, (n,), (1,)),
        "detach": lambda: exact.detach(),
        "_from_dlpack(capsule)": lambda: torch._C._from_dlpack(caps.pop()),
        "from_dlpack(capsule)": lambda: torch.from_dlpack(caps.pop()),
        "as_strided+ref": lambda: (lambda t: (t, weakref.ref(t, cb)))(
            base.as_strided((n,), (1,), off)),
    }
    for name, f in list(ways.items()):     # warm up every path once
        try:
            f()
        except Exception as e:  # a torch without it: say so, time the rest
            print(f"# {name}: {e!r}", file=sys.stderr)
            del ways[name]
    names = list(ways)
    res = {}
    for idle in (0.0, 0.002, 0.050):
        for r in range(rounds):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                f = ways[name]
                if idle:
                    time.sleep(idle)
                t0 = time.perf_counter()
                out = f()
                t1 = time.perf_counter()
                del out
                res.setdefault((name, idle), []).append((t1 - t0) * 1e6)
    print("way,idle_ms,n,p50_us,p90_us")
    for (name, idle), v in res.items():
        print(f"{name},{idle * 1e3:g},{len(v)},{pct(v, 0.5):.1f},{pct(v, 0.9):.1f}")
    print()
    print(f"{'way':24} {'0 ms':>8} {'2 ms':>8} {'50 ms':>8}   (p50 us)")
    for name in names:
        row = [pct(res[(name, i)], 0.5) for i in (0.0, 0.002, 0.050)]
        print(f"{name:24} " + " ".join(f"{v:8.1f}" for v in row))
    torch.cuda.synchronize()
    assert int((exact != 7).sum().item()) == 0


if __name__ == "__main__":
    main()
