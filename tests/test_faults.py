"""Faults at run time give a clear Python exception, and the library stays usable (issue 7.3).

Each fault runs through the real native module and runtime in a child process: no driver, a
driver that finds no GPU, a GPU whose SM no variant of the wheel runs on, a failed module load
(out of memory, no image for the GPU), a damaged library whose compressed cubins do not
inflate, a failed launch, an out-of-memory on an output allocation. After each, the next valid
call must work. The GPU is the fake driver of cpp/tests_native (see tests/_fake_driver.py);
tests/test_gpu_reliability.py has the out-of-memory case on a real GPU.
"""

from __future__ import annotations

import ctypes.util
import re
import shutil
import zlib
from pathlib import Path

import pytest
from _fake_driver import fake_driver, native_or_skip, run_child
from _fakes import tileaot

__all__ = ["fake_driver"]  # fixtures, used by name

# Device 0 has an SM no build targets; device 1 one this build has.
FAULTS = """
# Module loads that fail, then the same call again (the variant's first use on device 1).
x, w = rms_inputs(512, device=1)
for status in (2, 209):  # CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NO_BINARY_FOR_GPU
    fake.fake_cuda_set(b"fail_module_load", status)
    report[f"load_{status}"] = attempt(lambda: tileaot.rms_norm(x, w))
fake.fake_cuda_set(b"fail_module_load", 0)
loads = counter("module_loads")
report["after_load"] = attempt(lambda: tileaot.rms_norm(x, w))
report["loads_after_load"] = counter("module_loads") - loads

fake.fake_cuda_set(b"fail_launch", 701)  # CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
report["launch"] = attempt(lambda: tileaot.rms_norm(x, w))
fake.fake_cuda_set(b"fail_launch", 0)
launches = counter("n_launches")
report["after_launch"] = attempt(lambda: tileaot.rms_norm(x, w))
report["launches_after_launch"] = counter("n_launches") - launches

x0, w0 = rms_inputs(512, device=0)
report["no_variant"] = attempt(lambda: tileaot.rms_norm(x0, w0))
launches = counter("n_launches")
report["after_no_variant"] = attempt(lambda: tileaot.rms_norm(x, w))
report["launches_after_no_variant"] = counter("n_launches") - launches

# Out of memory on the output: address space capped below the output's 512 MiB.
big, w = torch.empty(65536, 4096, dtype=torch.bfloat16), torch.ones(4096, dtype=torch.bfloat16)
ON_DEVICE_1.update((big.data_ptr(), w.data_ptr()))  # (never touched: the fake runs nothing)
launches = counter("n_launches")
with open("/proc/self/statm") as f:
    mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
limits = resource.getrlimit(resource.RLIMIT_AS)
cap, hard = mapped + (256 << 20), limits[1]
if hard != resource.RLIM_INFINITY:
    cap = min(cap, hard)
resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
try:
    report["output_oom"] = attempt(lambda: tileaot.rms_norm(big, w))
finally:
    resource.setrlimit(resource.RLIMIT_AS, limits)
report["launches_in_oom"] = counter("n_launches") - launches
report["after_oom"] = attempt(lambda: tileaot.rms_norm(*rms_inputs(512, device=1)))
"""

# Without a GPU (or driver): the call fails the same way every time, and what needs no GPU works.
NO_GPU = """
x, w = rms_inputs(512)
report["first"] = attempt(lambda: tileaot.rms_norm(x, w))
report["again"] = attempt(lambda: tileaot.rms_norm(x, w))
report["invalid"] = attempt(lambda: tileaot.rms_norm(x, w.float()))
report["info"] = {k: v for k, v in tileaot.info().items() if k.startswith("device")}
report["lookup"] = attempt(lambda: native.lookup("rms_norm", "bf16"))
"""


@pytest.fixture(scope="module")
def faults(fake_driver):
    return run_child(FAULTS, fake_driver, FAKE_CUDA_SM="5.0,GOOD")


def test_gpu_without_a_compatible_variant(faults):
    kind, message = faults["no_variant"]
    assert kind == "VariantMissError"
    assert "on device 0 (sm_50)" in message and "no arch of this build" in message
    assert "-Ccmake.define.TILEAOT_ARCHS=" in message  # says how to add it
    assert faults["after_no_variant"] is None and faults["launches_after_no_variant"] == 1


@pytest.mark.parametrize(
    ("status", "text"),
    [(2, "CUDA_ERROR_OUT_OF_MEMORY"), (209, "CUDA_ERROR_NO_BINARY_FOR_GPU")],
)
def test_failed_module_load(faults, status, text):
    kind, message = faults[f"load_{status}"]
    assert kind == "DriverError"
    assert f"cuModuleLoadData failed: {text}" in message
    assert re.search(r"rms_norm variant rms_norm_bf16_\w+ \(sm_70\) on device 1 ", message), message
    assert faults["after_load"] is None and faults["loads_after_load"] == 1  # retried, not cached


def test_failed_launch(faults):
    kind, message = faults["launch"]
    assert kind == "DriverError"
    assert "cuLaunchKernelEx failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" in message
    assert re.search(r"rms_norm variant rms_norm_bf16_\w+ \(sm_70\)", message), message
    assert "grid (" in message
    assert faults["after_launch"] is None and faults["launches_after_launch"] == 1


def test_out_of_memory_on_the_output(faults):
    kind, message = faults["output_oom"]
    assert kind in ("RuntimeError", "OutOfMemoryError") and "allocate" in message, message
    assert faults["launches_in_oom"] == 0
    assert faults["after_oom"] is None


def test_driver_without_a_gpu(fake_driver):
    report = run_child(NO_GPU, fake_driver, FAKE_CUDA_INIT_FAIL="1")
    _check_no_gpu(report, "cuInit failed: CUDA_ERROR_NO_DEVICE: no CUDA-capable device")
    assert "nvidia-smi" in report["first"][1]  # says what to check


def test_no_driver():
    native_or_skip()
    if ctypes.util.find_library("cuda"):
        pytest.skip("a CUDA driver is installed here: its absence cannot be staged")
    report = run_child(NO_GPU, None)
    _check_no_gpu(report, "CUDA driver (libcuda.so.1) not found")


def _damage_compressed_cubins(lib: Path) -> int:
    """Flips a byte in the middle of every zlib-compressed cubin of a libtileaot.so; how many."""
    original = lib.read_bytes()
    view, data = memoryview(original), bytearray(original)
    damaged = 0
    for m in re.finditer(rb"\x78\xda", original):  # level-9 zlib streams (build_tools/blob.py)
        inflater = zlib.decompressobj()
        try:
            image = inflater.decompress(view[m.start() :])
        except zlib.error:
            continue
        if inflater.eof and image.startswith(b"\x7fELF"):
            length = len(original) - m.start() - len(inflater.unused_data)
            data[m.start() + length // 2] ^= 0x5A
            damaged += 1
    lib.write_bytes(data)
    return damaged


DAMAGED = """
x, w = rms_inputs(512)
report["first"] = attempt(lambda: tileaot.rms_norm(x, w))
report["again"] = attempt(lambda: tileaot.rms_norm(x, w))
report["loads"] = counter("module_loads")
"""


def test_damaged_library_fails_like_a_refused_module_load(fake_driver, tmp_path):
    package = tmp_path / "site" / "tileaot"
    shutil.copytree(Path(tileaot.__file__).resolve().parent, package)
    if _damage_compressed_cubins(package / "lib" / "libtileaot.so") == 0:
        pytest.skip("this build embeds its cubins uncompressed (built without zlib)")
    report = run_child(DAMAGED, fake_driver, package_parent=package.parent, FAKE_CUDA_SM="GOOD")
    kind, message = report["first"]
    assert kind == "DriverError", message
    assert "inflating the embedded cubin failed: CUDA_ERROR_INVALID_IMAGE" in message
    # A flipped byte either breaks the stream or makes it inflate to other bytes than recorded
    # (which one depends on where it lands): both are told as damage, with the fix.
    reasons = ("its zlib stream does not inflate", "it inflates to ")
    assert any(r in message for r in reasons), message
    assert "the library is damaged: reinstall tileaot" in message, message
    assert report["again"] == report["first"]  # not cached as loaded: tried again, same error
    assert report["loads"] == 0  # the driver never saw the damaged bytes


def _check_no_gpu(report: dict, text: str) -> None:
    kind, message = report["first"]
    assert kind == "DriverError" and text in message, message
    assert report["again"] == report["first"]  # the same clear error, not a crash
    assert report["invalid"][0] == "TypeError"  # argument checks need no driver
    assert report["info"]["device_arch"] is None and report["info"]["device_error"]
    assert report["lookup"] is None
