"""A test-only DLPack producer: capsules over memory the test owns, built with ctypes.

`Producer` exports whatever the test asks for (any dtype code, device type, strides or none,
a byte_offset, versioned or unversioned capsules, flags), records the `stream` each export was
asked for, and counts deleter calls, so tests can check both what tileaot reads and that every
export is handed back exactly once. `_cuda_array.CudaArray` builds its exports here too.

Written from the DLPack 1.x ABI (dlpack.h), independently of tileaot's reader.
"""

from __future__ import annotations

import ctypes
from typing import Any

# name -> (DLPack type code, bits)
CODES = {
    "bool": (6, 8),
    "int8": (0, 8),
    "int16": (0, 16),
    "int32": (0, 32),
    "int64": (0, 64),
    "uint8": (1, 8),
    "uint16": (1, 16),
    "float16": (2, 16),
    "float32": (2, 32),
    "float64": (2, 64),
    "bfloat16": (4, 16),
    "complex64": (5, 64),
    "float8_e4m3fn": (10, 8),
    "float8_e5m2": (12, 8),
    "float4_e2m1fn": (17, 4),
}
CPU, CUDA, CUDA_HOST, CUDA_MANAGED = 1, 2, 3, 13


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# Own prototypes (not ctypes.pythonapi's shared function objects, whose argtypes others set).
_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))
# The destructor gets a capsule whose refcount is 0: pass it as a raw pointer, never as an object.
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_GetName", ctypes.pythonapi)
)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_NAMES = (b"dltensor", b"dltensor_versioned")
_live: dict[int, tuple[Producer, Any]] = {}  # managed struct address -> (producer, keep-alive)


def _on_delete(address: int) -> None:
    producer, _ = _live.pop(address)
    producer.deleted += 1


_delete = _DELETER(_on_delete)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _destroy_capsule(capsule: int) -> None:
    # The protocol: a capsule still carrying its original name was never consumed, so its
    # destructor hands the tensor back (calls the deleter); a renamed one was consumed.
    name = _capsule_name(capsule)
    if name in _NAMES:
        _on_delete(_capsule_pointer(capsule, name))


class Producer:
    """Exports ``shape``/``dtype`` at address `ptr` (memory kept alive by `owner`) via DLPack."""

    def __init__(
        self,
        ptr: int,
        shape: tuple[int, ...],
        dtype: str,
        *,
        owner: Any = None,
        device: tuple[int, int] = (CPU, 0),
        strides: tuple[int, ...] | None = None,
        byte_offset: int = 0,
        versioned: bool = True,
        version: tuple[int, int] = (1, 1),
        flags: int = 0,
        lanes: int = 1,
        namespace: Any = None,
    ) -> None:
        self.ptr, self.shape, self.dtype, self.owner = ptr, tuple(shape), dtype, owner
        self.dl_device, self.strides, self.byte_offset = device, strides, byte_offset
        self.versioned, self.version, self.flags, self.lanes = versioned, version, flags, lanes
        self.namespace = namespace
        self.streams: list[Any] = []  # the stream= of each __dlpack__ call
        self.exported = self.deleted = 0

    @property
    def device(self) -> Any:
        return self.dl_device

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.dl_device

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, **_: Any) -> Any:
        self.streams.append(stream)
        versioned = self.versioned and max_version is not None and max_version[0] >= 1
        return self.capsule(versioned)

    def __array_namespace__(self) -> Any:
        if self.namespace is None:
            raise AttributeError("this producer has no array namespace")
        return self.namespace

    def capsule(self, versioned: bool) -> Any:
        """A new, unconsumed capsule describing this array."""
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        strides = None if self.strides is None else (ctypes.c_int64 * max(ndim, 1))(*self.strides)
        code, bits = CODES[self.dtype]
        tensor = DLTensor(
            data=self.ptr - self.byte_offset,
            device=DLDevice(*self.dl_device),
            ndim=ndim,
            dtype=DLDataType(code, bits, self.lanes),
            shape=ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
            strides=None
            if strides is None
            else ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)),
            byte_offset=self.byte_offset,
        )
        if versioned:
            managed: Any = DLManagedTensorVersioned(
                version=DLPackVersion(*self.version), deleter=_delete, flags=self.flags,
                dl_tensor=tensor,
            )  # fmt: skip
        else:
            managed = DLManagedTensor(dl_tensor=tensor, deleter=_delete)
        address = ctypes.addressof(managed)
        _live[address] = (self, (managed, shape, strides))
        self.exported += 1
        name = _NAMES[1] if versioned else _NAMES[0]
        return _capsule_new(address, name, ctypes.cast(_destroy_capsule, ctypes.c_void_p))


class OldProducer(Producer):
    """A producer from before DLPack 1.0: ``__dlpack__`` takes no ``max_version``."""

    def __dlpack__(self, *, stream: Any = None) -> Any:  # type: ignore[override]
        self.streams.append(stream)
        return self.capsule(False)


# --- host (CPU) arrays for the CPU tests ------------------------------------------------------

_NUMPY_STORAGE = {"bfloat16": "uint16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}


def aligned_empty(shape: tuple[int, ...], dtype: str, align: int = 64) -> Any:
    """A numpy array of `dtype`'s storage whose data starts on an `align`-byte boundary."""
    import numpy as np

    storage = np.dtype(_NUMPY_STORAGE.get(dtype, dtype))
    n = int(np.prod(shape, dtype=np.int64)) * storage.itemsize
    raw = np.empty(n + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start : start + n].view(storage).reshape(shape)


def host(a: Any, dtype: str | None = None, **kwargs: Any) -> Producer:
    """A Producer over numpy array `a` (its strides, in elements), as DLPack `dtype`."""
    strides = None
    if not a.flags.c_contiguous:
        strides = tuple(s // a.itemsize for s in a.strides)
    kwargs.setdefault("strides", strides)
    return Producer(a.ctypes.data, a.shape, dtype or a.dtype.name, owner=a, **kwargs)


class HostNamespace:
    """A fake array namespace: ``empty`` gives `host` arrays and records each call; it has
    exactly the dtypes it is given (as attributes holding their names)."""

    def __init__(self, dtypes: tuple[str, ...] = ("float32", "int32", "uint8", "bfloat16")) -> None:
        for name in dtypes:
            setattr(self, name, name)
        self.calls: list[tuple] = []
        self.made: list[Producer] = []

    def empty(self, shape: tuple[int, ...], *, dtype: str, device: Any = None) -> Producer:
        self.calls.append((tuple(shape), dtype, device))
        out = host(aligned_empty(tuple(shape), dtype), dtype, namespace=self, device=device)
        self.made.append(out)
        return out
