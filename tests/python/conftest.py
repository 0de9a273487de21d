"""Fixtures for the gpuipc Python package tests.

Each test that asks for ``daemon`` gets a real gpuipcd on a temporary socket
($GPUIPC_SOCKET points at it for the test and its subprocesses); it is
stopped with SIGTERM afterwards and must exit 0.  The CUDA driver double
($GPUIPC_BUILDDIR/tests/cuda-double/libcuda.so.1) stands in for libcuda, so device
paths run without a GPU.

Environment:
  GPUIPC_BUILDDIR   the build directory (default: <repo>/build)
  GPUIPC_LIBRARY    libgpuipc.so.1 to load (default: $GPUIPC_BUILDDIR/libgpuipc.so.1)
  GPUIPC_DAEMON_ASAN_OPTIONS  ASAN_OPTIONS for the daemon (make SANITIZE=1 check
                    runs python with detect_leaks=0 but the daemon with leaks on)
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILDDIR = os.path.abspath(os.environ.get("GPUIPC_BUILDDIR") or os.path.join(REPO, "build"))
PKGDIR = os.path.join(REPO, "client", "python")
DAEMON = os.path.join(BUILDDIR, "gpuipcd")
LIBCUDA_DOUBLE = os.path.join(BUILDDIR, "tests", "cuda-double", "libcuda.so.1")

# Everything below is inherited by the subprocesses the tests start.
os.environ.setdefault("GPUIPC_LIBRARY", os.path.join(BUILDDIR, "libgpuipc.so.1"))
os.environ["GPUIPC_LIBCUDA"] = LIBCUDA_DOUBLE
os.environ.pop("CUDA_VISIBLE_DEVICES", None)
os.environ.pop("GPUIPC_CUDA_DOUBLE_DEVICES", None)
_SHM_DIR = tempfile.mkdtemp(prefix="gpuipc-pytest-shm-")
os.environ["GPUIPC_CUDA_DOUBLE_SHM_DIR"] = _SHM_DIR
os.environ["PYTHONPATH"] = PKGDIR + (os.pathsep + os.environ["PYTHONPATH"]
                                     if os.environ.get("PYTHONPATH") else "")
if PKGDIR not in sys.path:
    sys.path.insert(0, PKGDIR)

for p in (os.environ["GPUIPC_LIBRARY"], DAEMON, LIBCUDA_DOUBLE):
    if not os.path.exists(p):
        raise pytest.UsageError(f"{p} does not exist: run `make all "
                                f"{os.path.relpath(LIBCUDA_DOUBLE, REPO)}` first")


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_SHM_DIR, ignore_errors=True)


class Daemon:
    def __init__(self, tmpdir: str, args) -> None:
        self.sock = os.path.join(tmpdir, "gpuipcd.sock")
        env = dict(os.environ)
        # The daemon is a C program: no python preloads; its own ASan options.
        env.pop("LD_PRELOAD", None)
        if "GPUIPC_DAEMON_ASAN_OPTIONS" in env:
            env["ASAN_OPTIONS"] = env["GPUIPC_DAEMON_ASAN_OPTIONS"]
        self.log = open(os.path.join(tmpdir, "gpuipcd.log"), "w+")
        self.proc = subprocess.Popen([DAEMON, "--no-config", "--socket", self.sock, *args], env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gpuipcd exited with {self.proc.returncode}:\n{self.logtext()}")
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.sock)
                s.close()
                break
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    self.proc.kill()
                    raise RuntimeError("gpuipcd did not accept connections in 15 s")
                time.sleep(0.02)

    def logtext(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("gpuipcd did not stop on SIGTERM")
        return self.proc.returncode


@pytest.fixture
def start_daemon(tmp_path, monkeypatch):
    """Factory: start_daemon(*extra_args) -> Daemon, and $GPUIPC_SOCKET set to it."""
    started = []

    def start(*args: str) -> Daemon:
        d = Daemon(str(tmp_path), args)
        started.append(d)
        monkeypatch.setenv("GPUIPC_SOCKET", d.sock)
        return d

    yield start
    for d in started:
        rc = d.stop()
        assert rc == 0, f"gpuipcd exited with {rc}:\n{d.logtext()}"
        d.log.close()


@pytest.fixture
def daemon(start_daemon):
    return start_daemon()


@pytest.fixture
def client(daemon):
    import gpuipc
    c = gpuipc.connect(daemon.sock)
    yield c
    c.close()


def run_py(code: str, *args: str, env=None, check: bool = True, timeout: float = 60,
           input: str = None) -> subprocess.CompletedProcess:
    """Runs a Python snippet in a new interpreter (this one's executable)."""
    e = dict(os.environ)
    if env:
        for k, v in env.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=e,
                       capture_output=True, text=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise AssertionError(f"subprocess exited {p.returncode}\nstdout:\n{p.stdout}\n"
                             f"stderr:\n{p.stderr}")
    return p


def popen_py(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1)


def mapped(addr: int, memfd_only: bool = True) -> bool:
    """Whether addr lies in a mapping of this process (a memfd's, by default)."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi:
                path = parts[5].strip() if len(parts) > 5 else ""
                return not memfd_only or "memfd:" in path or "/dev/shm" in path \
                    or "gpuipc" in path
    return False
