"""The PTX forward path of a real build, under the fake driver (tests/_fake_driver.py): a GPU no
SASS of the build serves (11.0, Jetson Thor) loads the op's compute_80 PTX, which a real driver
JIT-compiles, and the runtime says so once per op on stderr; TILEAOT_PTX=off makes it a miss,
TILEAOT_PTX=prefer loads the PTX even where SASS fits (9.0). Skips where tileaot._C is not built
or the build has no PTX (a build without sm_80, or TILEAOT_PTX_ARCHS=off).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _fake_driver import PRELUDE, fake_driver, native_or_skip
from _fakes import tileaot

__all__ = ["fake_driver"]  # fixtures, used by name

BODY = """
from tileaot import _lib
rows = [v for v in _lib.native().variants() if v["op"] == "rms_norm" and v["key"] == "bf16"]
report["ptx_rows"] = [v["name"] for v in rows if v["arch"] == "compute_80"]
x, w = rms_inputs(4096)
loads = counter("module_loads")
report["first"] = attempt(lambda: tileaot.rms_norm(x, w))
report["second"] = attempt(lambda: tileaot.rms_norm(x, w))
report["ptx_loads"] = counter("ptx_loads")
report["loads"] = counter("module_loads") - loads
"""


def _run(driver, **env: str) -> tuple[dict, str]:
    environ = dict(os.environ, FAKE_CUDA="1", **env)
    environ["LD_LIBRARY_PATH"] = os.pathsep.join([str(driver), environ.get("LD_LIBRARY_PATH", "")])
    if "TILEAOT_PTX" not in env:
        environ.pop("TILEAOT_PTX", None)
    code = PRELUDE + BODY + "\nprint(json.dumps(report))\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.fixture(scope="module")
def ptx_build():
    native_or_skip()
    from tileaot import _lib

    if not any(v["arch"].startswith("compute_") for v in _lib.native().variants()):
        pytest.skip("this build embeds no PTX")


def test_a_gpu_without_sass_runs_the_ptx_and_says_so_once(ptx_build, fake_driver):
    report, stderr = _run(fake_driver, FAKE_CUDA_SM="11.0")
    assert report["ptx_rows"], "rms_norm[bf16] has no compute_80 row"
    assert report["first"] is None and report["second"] is None
    assert report["ptx_loads"] == 1 and report["loads"] == 1  # loaded once, from PTX
    warnings = [line for line in stderr.splitlines() if "runs PTX (compute_80)" in line]
    assert len(warnings) == 1, stderr
    assert "rms_norm[bf16]" in warnings[0] and "JIT-compiles" in warnings[0]


def test_ptx_off_is_a_miss(ptx_build, fake_driver):
    report, stderr = _run(fake_driver, FAKE_CUDA_SM="11.0", TILEAOT_PTX="off")
    assert report["first"][0] == "VariantMissError", report
    assert "TILEAOT_PTX=off" in report["first"][1]
    assert report["ptx_loads"] == 0 and "runs PTX" not in stderr


def test_ptx_prefer_loads_ptx_where_sass_fits(ptx_build, fake_driver):
    report, stderr = _run(fake_driver, FAKE_CUDA_SM="9.0", TILEAOT_PTX="prefer")
    assert report["first"] is None and report["ptx_loads"] == 1
    assert "TILEAOT_PTX=prefer puts it before SASS" in stderr
    plain, stderr = _run(fake_driver, FAKE_CUDA_SM="9.0")
    assert plain["first"] is None and plain["ptx_loads"] == 0 and "runs PTX" not in stderr


def test_a_bad_ptx_setting_is_one_clear_error(ptx_build, fake_driver):
    report, _ = _run(fake_driver, FAKE_CUDA_SM="9.0", TILEAOT_PTX="always")
    assert (
        report["first"] is not None and "TILEAOT_PTX='always' is not one of" in report["first"][1]
    )


assert tileaot  # the package under test (the native module's Python side)
