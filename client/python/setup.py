"""Build hook: the metadata is in pyproject.toml.

When ``gpuipc/libgpuipc.so.1`` is present (``make wheel`` copies it there
into a staging copy of this directory), the wheel carries it and is a
platform wheel, tagged ``py3-none-<platform>``: the library is native code,
but ctypes loads it from any Python 3, so no interpreter or ABI tag applies.
Without it (``pip install client/python``, the Debian package) the wheel is
pure and the package loads the system's ``libgpuipc.so.1``.
"""
import os

from setuptools import setup
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLED = os.path.exists(os.path.join(HERE, "gpuipc", "libgpuipc.so.1"))
cmdclass = {}

if BUNDLED:
    from wheel.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            return ("py3", "none", super().get_tag()[2])

    cmdclass["bdist_wheel"] = PlatformWheel


class GpuipcDistribution(Distribution):
    def has_ext_modules(self):
        return BUNDLED


setup(cmdclass=cmdclass, distclass=GpuipcDistribution,
      package_data={"gpuipc": ["py.typed"] + (["libgpuipc.so.1"] if BUNDLED else [])})
