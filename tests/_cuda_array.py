"""A minimal CUDA device array for tests: the driver API through ctypes, no torch, no CuPy.

`CudaArray` owns device memory (``cuMemAlloc``) on device 0, exports it through DLPack (a
`_dlpack_producer.Producer`, so it records the stream each export was asked for and any DLPack
dtype can be declared: bfloat16 and float8 live in numpy uint16 / uint8 bit patterns), and
offers ``__array_namespace__()`` with ``empty`` and the dtypes it allocates (deliberately no
float8, so ops writing fp8 must be given ``out=``). ``numpy()`` synchronises the context and
copies back. `Stream` is a driver stream, for ``tileaot.use_stream``.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np
from _dlpack_producer import CUDA, Producer

STORAGE = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}
_SIZE = {"bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
_cuda: Any = None


def _check(status: int, call: str) -> None:
    if status:
        name = ctypes.c_char_p()
        _cuda.cuGetErrorName(status, ctypes.byref(name))
        raise RuntimeError(f"{call} failed: {name.value.decode() if name.value else status}")


def driver() -> Any:
    """libcuda, initialised, with device 0's primary context current in this thread."""
    global _cuda
    if _cuda is None:
        cuda = ctypes.CDLL("libcuda.so.1")
        u64, size, ptr = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p
        cuda.cuMemAlloc_v2.argtypes = (ctypes.POINTER(u64), size)
        cuda.cuMemFree_v2.argtypes = (u64,)
        cuda.cuMemcpyHtoD_v2.argtypes = (u64, ptr, size)
        cuda.cuMemcpyDtoH_v2.argtypes = (ptr, u64, size)
        cuda.cuStreamCreate.argtypes = (ctypes.POINTER(ptr), ctypes.c_uint)
        cuda.cuStreamSynchronize.argtypes = (ptr,)
        cuda.cuStreamDestroy_v2.argtypes = (ptr,)
        _cuda = cuda
        _check(cuda.cuInit(0), "cuInit")
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        _check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        _check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        _check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return _cuda


def synchronize() -> None:
    _check(driver().cuCtxSynchronize(), "cuCtxSynchronize")


class Namespace:
    """``CudaArray.__array_namespace__()``: ``empty`` and the dtypes it can allocate."""

    float32, float16, int32, uint8, bfloat16 = "float32", "float16", "int32", "uint8", "bfloat16"

    def __init__(self) -> None:
        self.allocated: list[tuple[tuple[int, ...], str]] = []

    def empty(self, shape: tuple[int, ...], *, dtype: str, device: Any = None) -> CudaArray:
        self.allocated.append((tuple(shape), dtype))
        return CudaArray(shape, dtype)


NAMESPACE = Namespace()


class CudaArray(Producer):
    """`shape` elements of DLPack dtype `dtype` (a name, e.g. "bfloat16") on CUDA device 0."""

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        cuda, address = driver(), ctypes.c_uint64()
        itemsize = _SIZE.get(dtype) or np.dtype(dtype).itemsize
        nbytes = math.prod(shape) * itemsize
        _check(cuda.cuMemAlloc_v2(ctypes.byref(address), max(nbytes, 1)), "cuMemAlloc")
        super().__init__(address.value, tuple(shape), dtype, device=(CUDA, 0), namespace=NAMESPACE)
        self.nbytes = nbytes

    @classmethod
    def from_numpy(cls, a: np.ndarray, dtype: str | None = None) -> CudaArray:
        """A copy of `a` on the device; `dtype` declares what its bits are (default: a's)."""
        a = np.ascontiguousarray(a)
        out = cls(a.shape, dtype or a.dtype.name)
        assert out.nbytes == a.nbytes, (dtype, a.dtype)
        _check(driver().cuMemcpyHtoD_v2(out.ptr, a.ctypes.data, a.nbytes), "cuMemcpyHtoD")
        return out

    def numpy(self) -> np.ndarray:
        """The contents (after everything queued finished), in numpy storage of the dtype."""
        synchronize()
        out = np.empty(self.shape, STORAGE.get(self.dtype, self.dtype))
        _check(driver().cuMemcpyDtoH_v2(out.ctypes.data, self.ptr, self.nbytes), "cuMemcpyDtoH")
        return out

    def __del__(self) -> None:
        if _cuda is not None:
            _cuda.cuMemFree_v2(self.ptr)  # after a synchronising copy; errors at exit ignored


class Stream:
    """A driver stream (blocking: it orders with the legacy default stream)."""

    def __init__(self) -> None:
        handle = ctypes.c_void_p()
        _check(driver().cuStreamCreate(ctypes.byref(handle), 0), "cuStreamCreate")
        self.handle = handle.value

    def synchronize(self) -> None:
        _check(driver().cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def __del__(self) -> None:
        if _cuda is not None:
            _cuda.cuStreamDestroy_v2(self.handle)
