"""The C/C++ API as a user of the installed wheel gets it: CMake package, headers, errors.

tests/cpp_api is a CMake project that finds tileaot through
`CMAKE_PREFIX_PATH=$(python -m tileaot --cmake-prefix-path)`, compiles the C header as strict
C99 and a C++ program that checks the C++ layer's validation and exceptions against the real
libtileaot; it needs no GPU and no CUDA toolkit. The GPU example (examples/cpp, which does need
the CUDA toolkit for its own memory) is built and run by scripts/test.sh and
scripts/gpu_check.sh.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def prefix() -> Path:
    """The installed package folder, as `python -m tileaot --cmake-prefix-path` prints it."""
    run = subprocess.run(
        [sys.executable, "-m", "tileaot", "--cmake-prefix-path"],
        capture_output=True,
        text=True,
        cwd=ROOT / "tests",  # not the repository root: its python/ is no installed package
    )
    if run.returncode != 0:
        pytest.skip(f"tileaot is not installed as a wheel: {run.stderr.strip()}")
    return Path(run.stdout.strip())


def test_package_layout(prefix):
    for part in (
        "share/cmake/tileaot/tileaotConfig.cmake",
        "include/tileaot/tileaot.h",
        "include/tileaot/tileaot.hpp",
        "lib/libtileaot.so",
    ):
        assert (prefix / part).is_file(), part


def test_headers_need_no_cuda(prefix):
    """Neither header includes anything beyond the C/C++ standard library (and each other)."""
    for header in ("tileaot.h", "tileaot.hpp"):
        text = (prefix / "include" / "tileaot" / header).read_text()
        includes = {line.split()[1] for line in text.splitlines() if line.startswith("#include")}
        assert includes <= {
            "<stddef.h>",
            "<stdint.h>",
            "<cstddef>",
            "<cstdint>",
            "<initializer_list>",
            "<stdexcept>",
            "<string>",
            "<type_traits>",
            "<utility>",
            '"tileaot/tileaot.h"',
        }, includes


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_cpp_api_through_find_package(prefix, tmp_path):
    build = tmp_path / "build"
    configure = ["cmake", "-S", str(ROOT / "tests" / "cpp_api"), "-B", str(build)]
    configure += [f"-DCMAKE_PREFIX_PATH={prefix}"]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    for command in (configure, ["cmake", "--build", str(build)]):
        run = subprocess.run(command, capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr
    run = subprocess.run([str(build / "api_check")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "OK", run.stdout + run.stderr
