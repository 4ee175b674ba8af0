"""Concurrent calls through the real native module (issue 7.4), on the fake driver.

* Eight threads released together (a barrier) call an op whose variant nobody has loaded, the
  fake's module load slowed down so that all of them arrive while it runs: the module is loaded
  exactly once and every call returns its own output.
* Threads calling on tensors of two devices at once: every launch runs in the context of the
  device its tensors are on (the fake refuses a function of another device's module, and each
  launch's stream says which device the Python layer meant).

The fake never runs kernels, so "correct results" here means: each call launched once, on its
device, without error. tests/test_gpu_reliability.py checks the results on a real GPU, and
cpp/tests_native/test_runtime.cpp the same races below the Python layer.
"""

from __future__ import annotations

import pytest
from _fake_driver import fake_driver, run_child

__all__ = ["fake_driver"]  # fixtures, used by name

THREADS = """
fake.fake_cuda_launch_device.restype = ctypes.c_int
fake.fake_cuda_launch_stream.restype = ctypes.c_longlong
start = threading.Barrier(8)
errors, shapes = [], []


def first_load(t):
    x, w = inputs[t]
    start.wait()
    try:
        shapes.append(tuple(tileaot.rms_norm(x, w).shape))
    except Exception as e:
        errors.append(repr(e))


def run(target):
    threads = [threading.Thread(target=target, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


fake.fake_cuda_set(b"load_delay_us", 20000)
inputs = [rms_inputs(512, device=0) for _ in range(8)]
run(first_load)
fake.fake_cuda_set(b"load_delay_us", 0)
report["first_load"] = {"errors": errors, "shapes": shapes, "loads": counter("module_loads"),
                        "launches": counter("n_launches")}

inputs = [rms_inputs(512, device=t % 2) for t in range(8)]
errors, shapes = [], []
before = counter("n_launches")


def two_devices(t):
    x, w = inputs[t]
    start.wait()
    for _ in range(25):
        try:
            tileaot.rms_norm(x, w)
        except Exception as e:
            errors.append(repr(e))


run(two_devices)
after = counter("n_launches")
report["two_devices"] = {
    "errors": errors,
    "launches": after - before,
    "routes": [[fake.fake_cuda_launch_device(i), fake.fake_cuda_launch_stream(i) - 0x1000]
               for i in range(before, after)],
}
"""


@pytest.fixture(scope="module")
def threads(fake_driver):
    return run_child(THREADS, fake_driver, FAKE_CUDA_SM="GOOD,GOOD")


def test_eight_threads_load_a_variant_once(threads):
    first = threads["first_load"]
    assert first["errors"] == []
    assert first["shapes"] == [[8, 512]] * 8
    assert first["loads"] == 1, "the module was loaded more than once"
    assert first["launches"] == 8


def test_calls_on_two_devices_run_on_their_device(threads):
    two = threads["two_devices"]
    assert two["errors"] == [] and two["launches"] == 200
    routes = two["routes"]
    assert all(ctx == meant for ctx, meant in routes), "a launch ran on another device"
    assert sorted({meant for _, meant in routes}) == [0, 1]
