"""Issue 17: who holds what, TTLs, removal by prefix, connect errors."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

import gpuipc


def test_stat_lists_holders(daemon):
    with gpuipc.connect(daemon.sock) as prod, gpuipc.connect(daemon.sock) as cons:
        prod.register("ops/held", np.arange(16, dtype=np.uint8))
        info = prod.stat("ops/held")
        assert info.holders == ()
        with cons.lookup("ops/held") as v:
            info = prod.stat("ops/held")
            assert info.leases == 1
            assert len(info.holders) == 1
            h = info.holders[0]
            assert isinstance(h, gpuipc.Holder)
            assert h.pid == os.getpid() and h.uid == os.getuid()
            assert h.exe == os.path.realpath(f"/proc/{os.getpid()}/exe")
            assert h.lease > 0 and 0 <= h.age_ms < 60000
            # unregistered while held: gone from list, back with all=True
            prod.unregister("ops/held")
            assert [i.name for i in prod.list("ops")] == []
            gone = prod.list("ops", all=True)
            assert [i.name for i in gone] == ["ops/held"]
            assert gone[0].unregistered and gone[0].holders[0].pid == os.getpid()
            assert v.tobytes()[:3] == b"\x00\x01\x02"
        assert prod.list("ops", all=True) == []


def test_register_ttl(daemon):
    with gpuipc.connect(daemon.sock) as c:
        c.register("ops/ttl", b"abc", ttl="2s")
        c.register("ops/keep", b"abc")
        info = c.stat("ops/ttl")
        assert info.expires_ms is not None
        assert info.expires_ms - info.created_ms == 2000
        assert c.stat("ops/keep").expires_ms is None     # the TTL was for one register
        with c.lookup("ops/ttl") as v:
            deadline = time.monotonic() + 10
            while any(i.name == "ops/ttl" for i in c.list("ops")):
                assert time.monotonic() < deadline, "ops/ttl did not expire"
                time.sleep(0.05)
            assert v.tobytes() == b"abc"                    # the reader keeps its mapping
        with pytest.raises(gpuipc.NotFound):
            c.lookup("ops/ttl")


@pytest.mark.parametrize("d,ms", [(2, 2000), (0.5, 500), ("30s", 30000), ("500ms", 500),
                                  ("5m", 300000), ("2h", 7200000), ("10", 10000)])
def test_parse_duration(d, ms):
    assert gpuipc.parse_duration(d) == ms


@pytest.mark.parametrize("d", ["", "s", "5x", "-1s", "1.2.3s", True, None])
def test_parse_duration_rejects(d):
    with pytest.raises((ValueError, TypeError)):
        gpuipc.parse_duration(d)


def test_unregister_prefix(daemon):
    with gpuipc.connect(daemon.sock) as c:
        for n in ("ops/a/1", "ops/a/2", "ops/ab", "other/x"):
            c.register(n, b"x")
        assert c.unregister_prefix("ops/a") == (2, 0)
        assert sorted(i.name for i in c.list()) == ["ops/ab", "other/x"]
        assert c.unregister_prefix("nothing") == (0, 0)
        with pytest.raises(ValueError):
            c.unregister_prefix("")


def test_connect_error_names_socket(tmp_path):
    path = str(tmp_path / "nobody.sock")
    with pytest.raises(gpuipc.Unreachable) as ei:
        gpuipc.connect(path)
    msg = str(ei.value)
    assert path in msg and "is gpuipcd running?" in msg
    assert "registration" not in msg


def test_readme_host_example(daemon):
    """The README's host-only example runs as written (PYTHONPATH and
    GPUIPC_SOCKET come from conftest and the daemon fixture)."""
    from conftest import REPO, run_py
    text = open(os.path.join(REPO, "README.md")).read()
    blocks = text.split("```python\n")[1:]
    code = next(b.split("```")[0] for b in blocks if "alloc_host((1000, 3)" in b)
    p = run_py(code)
    assert "[1498500. 1499500. 1500500.]" in p.stdout, p.stdout
    assert "Holder(lease=" in p.stdout
