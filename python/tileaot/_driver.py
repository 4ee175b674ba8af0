"""The two CUDA driver calls the ops need outside a kernel launch when torch is not there.

* `sm_count`: engram_gate_backward sizes its scratch by the GPU's multiprocessor count.
* `zero`: an output that must be zero without a launch (a sum over no rows, per-token scales
  of empty rows) is cleared with ``cuMemsetD8Async`` on the op's stream.

Torch tensors never come here (they use torch). The driver (``libcuda.so.1``) is loaded through
ctypes on first use; memory is set in the device's primary context, the one the CUDA runtime
(CuPy, torch) and tileaot's launches use.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

_MULTIPROCESSOR_COUNT = 16  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
_cuda: Any = None
_contexts: dict[int, ctypes.c_void_p] = {}  # device -> its retained primary context
_lock = threading.Lock()


def _error(message: str) -> Exception:
    """tileaot.DriverError when the native module is there, else RuntimeError."""
    from . import _lib

    try:
        return _lib.native().DriverError(message)
    except ImportError:
        return RuntimeError(message)


def _check(status: int, call: str) -> None:
    if status:
        name = ctypes.c_char_p()
        _cuda.cuGetErrorName(status, ctypes.byref(name))
        raise _error(f"{call} failed: {(name.value or b'unknown error').decode()} ({status})")


def _driver() -> Any:
    """libcuda, initialised; DriverError (or RuntimeError) with what to do if it is missing."""
    global _cuda
    with _lock:
        if _cuda is None:
            try:
                cuda = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                raise _error(
                    f"CUDA driver not found ({e}); install the NVIDIA driver to run tileaot ops"
                ) from None
            _cuda = cuda  # `_check` reads error names through it
            try:
                _check(cuda.cuInit(0), "cuInit")
            except Exception:
                _cuda = None  # the next call tries again (and fails as clearly)
                raise
    return _cuda


def sm_count(device: int) -> int:
    """Streaming multiprocessors of CUDA device `device`."""
    cuda, value = _driver(), ctypes.c_int()
    _check(
        cuda.cuDeviceGetAttribute(ctypes.byref(value), _MULTIPROCESSOR_COUNT, device),
        "cuDeviceGetAttribute",
    )
    return value.value


def _context(device: int) -> ctypes.c_void_p:
    ctx = _contexts.get(device)
    if ctx is None:
        cuda, dev, ctx = _driver(), ctypes.c_int(), ctypes.c_void_p()
        _check(cuda.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        _check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        ctx = _contexts.setdefault(device, ctx)  # retained for the process, as the runtime does
    return ctx


def zero(ptr: int, nbytes: int, device: int, stream: int) -> None:
    """Enqueue zeroing `nbytes` at `ptr` (memory of CUDA device `device`) on `stream`."""
    cuda, ctx = _driver(), _context(device)
    _check(cuda.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
    try:
        # Arguments typed at the call (CUdeviceptr, unsigned char, size_t, CUstream).
        args = (ctypes.c_uint64(ptr), ctypes.c_ubyte(0), ctypes.c_size_t(nbytes))
        _check(cuda.cuMemsetD8Async(*args, ctypes.c_void_p(stream)), "cuMemsetD8Async")
    finally:
        cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
