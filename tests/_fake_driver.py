"""The fake CUDA driver of cpp/tests_native, under the real native module, for Python tests.

`fake_driver` (a session fixture) compiles cpp/tests_native/fake_cuda.cpp into a
libcuda.so.1 (about a second); `run_child` runs a script in a child process that finds it first
on LD_LIBRARY_PATH. The runtime loads the driver once per process, so each driver situation
gets its own process. The fake takes the wheel's real cubins (it reads their arch from the ELF
header and their kernel names from the symbols) but never runs a kernel: it records contexts,
module loads and launches, which the child reads through ctypes (`fake.fake_cuda_get`).

In the child, `PRELUDE` patches the one check that insists on CUDA memory,
`_validate.device_index`, so that CPU tensors count as CUDA device 0, or as device 1 once their
data pointer is in `ON_DEVICE_1`; and `_lib.current_stream(d)` returns 0x1000 + d, so the
stream of a launch tells which device the Python layer meant. The child prints one JSON object
(`report`) as its last line. Tests skip where `tileaot._C` is not built (a source checkout).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _fakes import tileaot

ROOT = Path(__file__).resolve().parents[1]
FAKE_SOURCE = ROOT / "cpp" / "tests_native" / "fake_cuda.cpp"

PRELUDE = """
import ctypes, json, os, resource, sys, threading
import torch, tileaot
from tileaot import _lib, _validate

native = _lib.native()
# GOOD in FAKE_CUDA_SM: a device of the first arch this build has ("sm_90a" -> "9.0").
_sm = native.build_archs().split(",")[0][3:].rstrip("af")
GOOD = f"{_sm[:-1]}.{_sm[-1]}"
os.environ["FAKE_CUDA_SM"] = os.environ.get("FAKE_CUDA_SM", "").replace("GOOD", GOOD)
fake = ctypes.CDLL("libcuda.so.1") if os.environ.get("FAKE_CUDA") else None
ON_DEVICE_1 = set()
_validate.device_index = lambda name, t: 1 if t.data_ptr() in ON_DEVICE_1 else 0
_lib.current_stream = lambda device: 0x1000 + device
report = {"arch": GOOD}


def attempt(fn):
    '''None if fn() returns, else [exception type name, message].'''
    try:
        fn()
    except Exception as e:
        return [type(e).__name__, str(e)]
    return None


def counter(name):
    return fake.fake_cuda_get(name.encode())


def rms_inputs(n, device=0, rows=8):
    '''rms_norm's x [rows, n] and weight [n], counted as CUDA device `device` (0 or 1).'''
    x, w = torch.randn(rows, n, dtype=torch.bfloat16), torch.ones(n, dtype=torch.bfloat16)
    if device == 1:
        ON_DEVICE_1.update((x.data_ptr(), w.data_ptr()))
    return x, w
"""


def native_or_skip() -> None:
    if importlib.util.find_spec("tileaot._C") is None:
        pytest.skip("needs tileaot._C: install the wheel (scripts/test.sh does)")


@pytest.fixture(scope="session")
def fake_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the fake libcuda.so.1, built from cpp/tests_native/fake_cuda.cpp."""
    native_or_skip()
    return build_fake_driver(tmp_path_factory.mktemp("fakecuda"))


def build_fake_driver(out: Path) -> Path:
    """Compile the fake libcuda.so.1 into folder `out` (skips the test without a compiler)."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("needs a C++ compiler to build the fake CUDA driver")
    cmd = [cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-pthread", "-Wl,-soname,libcuda.so.1"]
    subprocess.run([*cmd, "-o", str(out / "libcuda.so.1"), str(FAKE_SOURCE)], check=True)
    return out


def run_child(
    body: str, driver: Path | None, package_parent: Path | None = None, **env: str
) -> dict:
    """Runs PRELUDE + body in a fresh interpreter with the fake driver in `driver` (None: no
    fake) and the extra environment `env`; returns its report. `package_parent`: the folder
    whose tileaot the child imports (default: the one the tests import)."""
    environ = dict(os.environ, **env)
    package_parent = str(package_parent or Path(tileaot.__file__).resolve().parents[1])
    environ["PYTHONPATH"] = os.pathsep.join([package_parent, environ.get("PYTHONPATH", "")])
    if driver is not None:
        environ["FAKE_CUDA"] = "1"
        environ["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str(driver), environ.get("LD_LIBRARY_PATH", "")]
        )
    code = PRELUDE + body + "\nprint(json.dumps(report))\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
