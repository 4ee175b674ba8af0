"""Where the host time of one tileaot call goes (CPU µs per call, median of bursts).

python bench/host_profile.py
"""

from __future__ import annotations

import statistics
import time

import tileaot
import torch
from tileaot import _lib


def per_call_us(fn, calls: int = 200, repeats: int = 25) -> float:
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


class _NoLaunch:
    """The real native module, with launch() a no-op: isolates the Python side."""

    def __init__(self, native):
        self._native = native

    def __getattr__(self, name):
        return getattr(self._native, name)

    def launch(self, *args):
        return None


def main() -> None:
    x = torch.randn(4, 4096, device="cuda").bfloat16()
    w = torch.randn(4096, device="cuda").bfloat16()
    y = torch.empty_like(x)
    native = _lib.native()
    handle = native.lookup("rms_norm", "bf16")
    stream = _lib.current_stream(0)
    ptrs, shapes = (x.data_ptr(), w.data_ptr(), y.data_ptr()), (4, 4096, 4096, 4, 4096)
    cases = {
        "full: tileaot.rms_norm(x, w, out=y) (short path)": lambda: tileaot.rms_norm(
            x, w, 1e-6, out=y
        ),
        "native.launch(...) only": lambda: native.launch(handle, 0, stream, ptrs, shapes, (1e-6,)),
        "native.call((x, w, y)): DLPack C API, checks in C++": lambda: native.call(
            handle, (x, w, y), (1e-6,), 0b100
        ),
        "_lib.fast(...): the short path without the op": lambda: _lib.fast(
            ("rms_norm", torch.bfloat16), (x, w, y), (1e-6,), 0b100
        ),
        "current_stream(0)": lambda: _lib.current_stream(0),
        "3x data_ptr()": lambda: (x.data_ptr(), w.data_ptr(), y.data_ptr()),
        "x.is_cuda + get_device()": lambda: (x.is_cuda, x.get_device()),
        "x.is_contiguous()": lambda: x.is_contiguous(),
        "x.shape / x.dtype / numel": lambda: (x.shape, x.dtype, x.numel()),
        "torch: y.zero_() (one launch)": lambda: y.zero_(),
    }
    tileaot.rms_norm(x, w, 1e-6, out=y)  # a checked call first: it enables the short path
    rows = {name: per_call_us(fn) for name, fn in cases.items()}
    fast, learn = _lib._fast, _lib.learn
    _lib._fast, _lib.learn = {}, lambda key, handle: None  # the checked path alone
    rows["checked path: rms_norm(x, w, out=y)"] = per_call_us(
        lambda: tileaot.rms_norm(x, w, 1e-6, out=y)
    )
    _lib._native = _NoLaunch(native)
    rows["checked path's python side (launch a no-op)"] = per_call_us(
        lambda: tileaot.rms_norm(x, w, 1e-6, out=y)
    )
    _lib._native, _lib._fast, _lib.learn = native, fast, learn
    for name, us in rows.items():
        print(f"{name:45s} {us:6.2f} us")


if __name__ == "__main__":
    main()
