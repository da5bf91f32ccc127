"""Builds loadscope's extension with CMake (see CMakeLists.txt): `pip install --no-build-isolation .`"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent.resolve()


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        out_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        build_dir = Path(self.build_temp).resolve() / "cmake"
        args = [
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}",  # else CMake may find another Python
            f"-DLOADSCOPE_MODULE_DIR={out_dir}",
            "-DLOADSCOPE_TESTS=OFF",
        ]
        try:
            import pybind11

            args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass  # Debian's pybind11-dev is found by CMake without a hint
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        # Extra paths for codecs outside the system (e.g. a prefix of unpacked packages).
        prefix = os.environ.get("LOADSCOPE_PREFIX_PATH")
        if prefix:
            args.append(f"-DCMAKE_PREFIX_PATH={prefix}")
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build_dir), *args])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "_native", "-j", jobs])


class BuildPy(build_py):
    """Records the git commit the package is built from (loadscope/_build_info.json): an
    install from a clone then names it in every experiment's env.json, as a checkout does."""

    def run(self) -> None:
        super().run()

        def git(*args: str) -> str:
            try:
                out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                return ""
            return out.stdout.strip() if out.returncode == 0 else ""

        commit = git("rev-parse", "HEAD")
        info = {"commit": commit or None, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))
                if commit else None, "source": str(ROOT)}
        out = Path(self.build_lib) / "loadscope" / "_build_info.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(info) + "\n")


# `make build` builds the extension in place with CMake and then installs the package editable
# with LOADSCOPE_SKIP_NATIVE=1: pip writes the metadata, the console script and the pytest11
# entry point, as any install does, without building the extension a second time.
setup(
    ext_modules=[] if os.environ.get("LOADSCOPE_SKIP_NATIVE") == "1" else [CMakeExtension("loadscope._native")],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPy},
)
