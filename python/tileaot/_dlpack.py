"""Reading an array's DLPack export (``__dlpack__`` / ``__dlpack_device__``) with ctypes.

`read` asks the producer for a capsule and copies out what the ops need: the data pointer
(plus ``byte_offset``), device, shape, strides and dtype. Nothing is copied on the device.

Ownership follows the protocol's "unconsumed capsule" rule: the capsule keeps its name
(``dltensor`` or ``dltensor_versioned``), so when the last reference to it goes its own
destructor calls the producer's deleter. The caller (`tileaot._arrays.Array`) keeps the capsule
referenced for as long as the pointer may be used.

Imported on the first call with a non-torch array only: ``import tileaot`` stays free of ctypes.
"""

from __future__ import annotations

import ctypes
from typing import Any, NamedTuple

# The DLPack version this reader speaks: the 1.x structs (unchanged through 1.3); 1.1 added the
# float8 dtype codes. Producers export at most this version, or an unversioned capsule.
MAX_VERSION = (1, 1)
CPU, CUDA, CUDA_HOST, ROCM, CUDA_MANAGED = 1, 2, 3, 10, 13
# Device types whose producers take a CUDA stream in __dlpack__(stream=...).
STREAM_DEVICES = (CUDA, CUDA_MANAGED)
READ_ONLY, IS_COPIED = 1 << 0, 1 << 1  # DLManagedTensorVersioned.flags bits

_VERSIONED = b"dltensor_versioned"
_UNVERSIONED = b"dltensor"


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):  # DLManagedTensor (unversioned, before DLPack 1.0)
    _fields_ = [
        ("dl_tensor", _Tensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):  # DLManagedTensorVersioned (DLPack >= 1.0)
    _fields_ = [
        ("version", _Version),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _Tensor),
    ]


# Prototypes of our own: `ctypes.pythonapi.X` is one function object per process, whose argtypes
# any other library may set differently.
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


class Export(NamedTuple):
    """One DLPack export, read. `capsule` owns the memory description: keep it alive."""

    capsule: Any
    data_ptr: int  # data + byte_offset
    device_type: int
    device_id: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in elements; None: compact row-major
    code: int
    bits: int
    lanes: int
    flags: int  # READ_ONLY / IS_COPIED bits (0 for unversioned capsules)
    version: tuple[int, int] | None  # None: an unversioned capsule


def protocol_stream(device_type: int, stream: int) -> int | None:
    """The ``stream=`` value for `__dlpack__`: CUDA's NULL stream is spelled 1 by the protocol
    (0 is reserved); other device types take None."""
    if device_type not in STREAM_DEVICES:
        return None
    return 1 if stream == 0 else stream


def read(obj: Any, name: str, stream: int) -> Export:
    """Export `obj` through DLPack, ready for use on `stream`, and read the tensor it describes.

    TypeError if `obj` is no DLPack producer or exports no DLPack capsule; BufferError if the
    capsule's major version is not 1 (its layout is unknown to this reader).
    """
    try:
        device_type, device_id = obj.__dlpack_device__()
    except AttributeError:
        raise TypeError(
            f"{name} ({type(obj).__name__}) has __dlpack__ but no __dlpack_device__: it is not "
            "a DLPack array"
        ) from None
    kwargs = {"stream": protocol_stream(device_type, stream)}
    try:
        capsule = obj.__dlpack__(**kwargs, max_version=MAX_VERSION)
    except TypeError:  # a producer older than DLPack 1.0 (no max_version): unversioned capsule
        capsule = obj.__dlpack__(**kwargs)
    if _is_valid(capsule, _VERSIONED):
        managed = _ManagedVersioned.from_address(_get_pointer(capsule, _VERSIONED))
        version = (managed.version.major, managed.version.minor)
        if version[0] != 1:
            raise BufferError(
                f"{name} was exported as DLPack {version[0]}.{version[1]}; tileaot reads "
                f"DLPack 1.x: upgrade tileaot or export {name} with an older DLPack"
            )
        tensor, flags = managed.dl_tensor, managed.flags
    elif _is_valid(capsule, _UNVERSIONED):
        tensor, flags, version = (
            _Managed.from_address(_get_pointer(capsule, _UNVERSIONED)).dl_tensor,
            0,
            None,
        )
    else:
        raise TypeError(
            f"{name}.__dlpack__() returned {type(capsule).__name__}, not an unused DLPack capsule"
        )
    ndim = tensor.ndim
    shape = tuple(tensor.shape[i] for i in range(ndim))
    strides = tuple(tensor.strides[i] for i in range(ndim)) if tensor.strides else None
    return Export(
        capsule=capsule,
        data_ptr=(tensor.data or 0) + tensor.byte_offset,
        device_type=tensor.device.device_type,
        device_id=tensor.device.device_id,
        shape=shape,
        strides=strides,
        code=tensor.dtype.code,
        bits=tensor.dtype.bits,
        lanes=tensor.dtype.lanes,
        flags=flags,
        version=version,
    )
