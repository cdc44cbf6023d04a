"""Builds the extension module sophon._sophon with the project's CMake (see pyproject.toml).

The CMake build folder is $SOPHON_BUILD_DIR, or build/ in the source tree: a tree already
built by tools/build.sh only relinks what changed. Configuring a fresh one needs the Debian
packages that tools/install-deps.sh installs.
"""
import glob
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("SOPHON_BUILD_DIR", os.path.join(ROOT, "build"))
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", ROOT, "-B", build_dir,
                            "-DCMAKE_BUILD_TYPE=RelWithDebInfo"], check=True)
        jobs = str(os.cpu_count() or 2)
        subprocess.run(["cmake", "--build", build_dir, "--target", "_sophon", "-j", jobs],
                       check=True)
        built = glob.glob(os.path.join(build_dir, "python", "sophon", "_sophon*.so"))
        if not built:
            raise RuntimeError(f"the CMake build in {build_dir} made no sophon/_sophon*.so "
                               "(is pybind11-dev installed? see tools/install-deps.sh)")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


setup(ext_modules=[Extension("sophon._sophon", sources=[])],
      cmdclass={"build_ext": CMakeBuild})
