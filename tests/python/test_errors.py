"""Daemon and library errors become gpuipc.Error subclasses."""
import errno

import pytest

import gpuipc
from conftest import run_py


def test_not_found(client):
    with pytest.raises(gpuipc.NotFound) as ei:
        client.lookup("err/missing")
    e = ei.value
    assert e.code == -errno.ENOENT and e.errno == errno.ENOENT
    assert "err/missing" in str(e) and "err/missing" in e.message
    assert isinstance(e, gpuipc.Error)
    with pytest.raises(gpuipc.NotFound):
        client.stat("err/missing")
    with pytest.raises(gpuipc.NotFound):
        client.unregister("err/missing")


def test_exists(client):
    client.register("err/dup", b"1")
    with pytest.raises(gpuipc.Exists) as ei:
        client.register("err/dup", b"2")
    assert ei.value.code == -errno.EEXIST and "err/dup" in str(ei.value)


def test_timeout(client):
    with pytest.raises(gpuipc.Timeout) as ei:
        client.lookup("err/never", timeout=0.05)
    assert ei.value.code == -errno.ETIMEDOUT


def test_unreachable(tmp_path):
    with pytest.raises(gpuipc.Unreachable) as ei:
        gpuipc.connect(str(tmp_path / "nobody.sock"))
    assert "nobody.sock" in str(ei.value)
    with pytest.raises(gpuipc.Unreachable):
        gpuipc.connect(str(tmp_path / ("x" * 200)))     # does not fit sockaddr_un


def test_limit_reached(start_daemon):
    d = start_daemon("--max-registrations", "1")
    with gpuipc.connect(d.sock) as c:
        c.register("err/one", b"1")
        with pytest.raises(gpuipc.LimitReached) as ei:
            c.register("err/two", b"2")
        assert ei.value.code == -errno.ENOBUFS


def test_invalid_name_and_arguments(client):
    with pytest.raises(gpuipc.Error) as ei:
        client.register("bad//name", b"x")
    assert ei.value.code == -errno.EINVAL and type(ei.value) is gpuipc.Error
    with pytest.raises(ValueError):
        client.register("err/empty", b"")
    with pytest.raises(TypeError):
        client.register("err/obj", object())
    with pytest.raises(ValueError):
        client.alloc_host(0)
    with pytest.raises(ValueError):
        client.alloc_host(10, "float32")


def test_unsupported_without_cuda(daemon):
    p = run_py("""
        import gpuipc
        c = gpuipc.connect()
        try:
            c.alloc_device(1024)
        except gpuipc.Unsupported as e:
            print("unsupported", e.code)
    """, env={"GPUIPC_LIBCUDA": "/nonexistent/libcuda.so.1"})
    assert p.stdout.split() == ["unsupported", str(-errno.ENOTSUP)]


def test_error_pickles_its_fields():
    e = gpuipc.NotFound(-2, "no registration named a/b", "lookup")
    assert str(e) == "lookup: no registration named a/b [ENOENT]"
    assert repr(e) == "NotFound(-2, 'no registration named a/b')"
