"""Builds the extension module sophon._sophon with the project's CMake (see pyproject.toml),
for the Python that runs this (pip's interpreter: 3.9 or later).

The CMake build folder is $SOPHON_BUILD_DIR; else build/ in the source tree when it is
configured for an interpreter of the same ABI (a tree already built by tools/build.sh only
relinks what changed), else build-python-<ABI>/ (made on first use). Configuring a fresh one
needs the Debian packages that tools/install-deps.sh installs; pybind11 is Debian's
pybind11-dev or the pybind11 package installed for this interpreter (2.x or 3.x).
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"  # .cpython-313-x86_64-linux-gnu.so


def cached_python(build_dir):
    """SOPHON_PYTHON of a configured build folder, or None."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            m = re.search(r"^SOPHON_PYTHON:FILEPATH=(.*)$", f.read(), re.M)
    except OSError:
        return None
    return m.group(1).strip() if m else None


def same_abi(python):
    """Whether `python` builds extension modules this interpreter can import."""
    if not python or not os.path.exists(python):
        return False
    out = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                         capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.strip() == EXT_SUFFIX


def build_folder():
    if os.environ.get("SOPHON_BUILD_DIR"):
        return os.environ["SOPHON_BUILD_DIR"]
    default = os.path.join(ROOT, "build")
    if same_abi(cached_python(default)):
        return default
    return os.path.join(ROOT, "build-python-" + EXT_SUFFIX.strip(".").rsplit(".", 1)[0])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = build_folder()
        if not same_abi(cached_python(build_dir)):  # a new folder, or one for another Python
            configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                         f"-DSOPHON_PYTHON={sys.executable}"]
            try:
                import pybind11  # pip's pybind11 for this interpreter, if any
                configure.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
            except ImportError:
                pass  # Debian's pybind11-dev
            print(f"sophon: configuring {build_dir} for {sys.executable}", file=sys.stderr)
            subprocess.run(configure, check=True)
        jobs = str(os.cpu_count() or 2)
        subprocess.run(["cmake", "--build", build_dir, "--target", "_sophon", "-j", jobs],
                       check=True)
        built = os.path.join(build_dir, "python", "sophon", "_sophon" + EXT_SUFFIX)
        if not os.path.exists(built):
            found = glob.glob(os.path.join(build_dir, "python", "sophon", "_sophon*.so"))
            raise RuntimeError(f"the CMake build in {build_dir} made no {built} for "
                               f"{sys.executable} (found: {found or 'none'}; is pybind11-dev or "
                               "pip's pybind11 installed, and python3-dev? see tools/install-deps.sh)")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


setup(ext_modules=[Extension("sophon._sophon", sources=[])],
      cmdclass={"build_ext": CMakeBuild})
