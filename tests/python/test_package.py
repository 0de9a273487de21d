"""The package itself: ABI declarations, loading, numpy-free import, install."""
import ctypes
import os
import shutil
import subprocess
import sys

import pytest

import gpuipc
from gpuipc import _lib
from conftest import PKGDIR, REPO, run_py

OFFSETS_C = r"""
#include <stddef.h>
#include <stdio.h>
#include "gpuipc.h"
#define F(T, f) printf(#T " " #f " %zu %zu\n", offsetof(T, f), sizeof(((T *)0)->f));
int main(void) {
%s
  printf("gpuipc_info SIZE %zu 0\ngpuipc_stats SIZE %zu 0\ngpuipc_meta SIZE %zu 0\n",
         sizeof(gpuipc_info), sizeof(gpuipc_stats), sizeof(gpuipc_meta));
  printf("gpuipc_event SIZE %zu 0\ngpuipc_cuda_device SIZE %zu 0\n"
         "gpuipc_cuda_status SIZE %zu 0\n", sizeof(gpuipc_event),
         sizeof(gpuipc_cuda_device), sizeof(gpuipc_cuda_status));
  return 0;
}
"""


def test_struct_layouts_match_the_header(tmp_path):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    structs = {"gpuipc_info": _lib.gpuipc_info, "gpuipc_stats": _lib.gpuipc_stats,
               "gpuipc_meta": _lib.gpuipc_meta, "gpuipc_event": _lib.gpuipc_event,
               "gpuipc_cuda_device": _lib.gpuipc_cuda_device,
               "gpuipc_cuda_status": _lib.gpuipc_cuda_status}
    lines = [f"F({n}, {f})" for n, cls in structs.items() for f, _ in cls._fields_]
    src = tmp_path / "offsets.c"
    src.write_text(OFFSETS_C.replace("%s", "\n".join(lines), 1))
    exe = tmp_path / "offsets"
    subprocess.run([cc, "-I", os.path.join(REPO, "client"), "-o", str(exe), str(src)],
                   check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}).stdout
    for line in out.splitlines():
        name, field, off, size = line.split()
        cls = structs[name]
        if field == "SIZE":
            assert ctypes.sizeof(cls) == int(off), name
        else:
            d = getattr(cls, field)
            assert (d.offset, d.size) == (int(off), int(size)), f"{name}.{field}"


def test_every_exported_function_is_declared():
    out = subprocess.run(["nm", "-D", "--defined-only", _lib.library_path],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("nm failed")
    exported = {l.split()[-1].split("@")[0] for l in out.stdout.splitlines()
                if " T " in l and "gpuipc_" in l}
    assert exported and exported <= set(_lib._PROTOTYPES), exported - set(_lib._PROTOTYPES)


def test_versions():
    assert gpuipc.version() == "0.1.0" == gpuipc.__version__
    assert os.path.samefile(gpuipc.library_path, os.environ["GPUIPC_LIBRARY"])


def test_bad_library_path_is_a_clear_import_error():
    p = run_py("import gpuipc", env={"GPUIPC_LIBRARY": "/nonexistent/libgpuipc.so.1"},
               check=False)
    assert p.returncode != 0 and "GPUIPC_LIBRARY" in p.stderr


def test_library_found_in_build_tree(tmp_path):
    if os.environ.get("LD_PRELOAD"):
        pytest.skip("sanitizer run: the plain build tree may not be built")
    build_lib = os.path.join(REPO, "build", "libgpuipc.so.1")
    if not os.path.exists(build_lib):
        pytest.skip("no build/libgpuipc.so.1")
    p = run_py("import gpuipc, os; print(os.path.realpath(gpuipc.library_path))",
               env={"GPUIPC_LIBRARY": None})
    assert p.stdout.strip() == os.path.realpath(build_lib)


def test_works_without_numpy(daemon):
    p = run_py("""
        import sys
        sys.modules["numpy"] = None          # import numpy now raises ImportError
        import gpuipc
        with gpuipc.connect() as c:
            c.register("nonp/a", b"no numpy here")
            c.register("nonp/mv", memoryview(bytearray(b"abcdef")).cast("H"))
            buf = c.alloc_host((4,), "int32")
            buf.buffer[:] = bytes(range(16))
            c.register("nonp/b", buf)
            with c.lookup("nonp/a") as v:
                print(bytes(v.buffer).decode())
            with c.lookup("nonp/b") as v:
                print(v.dtype, v.shape, v.tobytes() == bytes(range(16)))
            print(c.stat("nonp/mv").dtype, c.stat("nonp/mv").shape)
            try:
                c.lookup("nonp/a").array
            except ImportError:
                print("no .array")
    """)
    assert p.stdout.splitlines() == ["no numpy here", "int32 (4,) True", "uint16 (3,)",
                                     "no .array"]


def test_pip_install_offline(tmp_path):
    target = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-index", "--no-deps", "--target", str(target), PKGDIR],
                       capture_output=True, text=True,
                       env={**os.environ, "PIP_NO_CACHE_DIR": "1"}, cwd=str(tmp_path))
    if p.returncode != 0 and "No module named pip" in p.stderr:
        pytest.skip("pip is not installed")
    assert p.returncode == 0, p.stdout + p.stderr
    assert (target / "gpuipc" / "py.typed").exists()
    out = run_py("import gpuipc; print(gpuipc.__file__)",
                 env={"PYTHONPATH": str(target)}).stdout
    assert out.strip().startswith(str(target))
