"""Arrays that are not torch tensors: any CUDA array that speaks DLPack (CuPy, ...), no torch.

Every op starts with the same two lines::

    if type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(op, locals())

For torch tensors that is one identity check (`Tensor` is ``torch.Tensor`` once the first
torch tensor is seen), and the op goes on as before. For another framework's array, `call`
wraps every array argument in an `Array` view (the part of the torch.Tensor API that the ops
and `_validate` use, read from the array's DLPack export), runs the same op body on the views
with `namespace` standing in for torch, and hands back the framework's own arrays.

* Outputs are allocated by the input's framework: ``x.__array_namespace__().empty(...)`` (or,
  for CuPy, ``cupy.empty``). A dtype the framework lacks (bfloat16, float8 in CuPy/NumPy)
  raises TypeError: pass ``out=`` arrays that export that DLPack dtype instead.
* Kernels run on the stream set by `use_stream` in this thread, else CuPy's current stream for
  CuPy arrays, else the legacy default stream; each array is exported with that stream, as
  the DLPack protocol asks, so the producer orders its pending work before the kernel.
* DLPack dtypes taken: bool, int8/16/32/64, uint8/16/32/64, float16/32/64, bfloat16
  (kDLBfloat), float8_e4m3fn (kDLFloat8_e4m3fn, code 10, DLPack 1.1) and float8_e5m2 (code
  12); each op then takes its own subset. FP8 data must arrive as an fp8 DLPack dtype: a
  uint8 array is uint8 (for cast_back it means packed FP4), never silently reinterpreted.
* Devices: kDLCUDA, and kDLCUDAManaged (managed memory: kernels can use it on its device).
  Anything else (CPU, pinned host, ROCm) is refused by the op's device check.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from . import _lib


class DType:
    """A DLPack dtype, named as torch names it (``bfloat16``, ``float8_e4m3fn``); one per kind."""

    __slots__ = ("name", "code", "bits", "itemsize")

    def __init__(self, name: str, code: int, bits: int) -> None:
        self.name, self.code, self.bits, self.itemsize = name, code, bits, bits // 8

    def __repr__(self) -> str:
        return self.name


_CODES = {  # name -> (DLPack type code, bits)
    "bool": (6, 8),
    "int8": (0, 8),
    "int16": (0, 16),
    "int32": (0, 32),
    "int64": (0, 64),
    "uint8": (1, 8),
    "uint16": (1, 16),
    "uint32": (1, 32),
    "uint64": (1, 64),
    "float16": (2, 16),
    "float32": (2, 32),
    "float64": (2, 64),
    "bfloat16": (4, 16),
    "float8_e4m3fn": (10, 8),
    "float8_e5m2": (12, 8),
}
DTYPES = {name: DType(name, code, bits) for name, (code, bits) in _CODES.items()}
_BY_CODE = {(d.code, d.bits): d for d in DTYPES.values()}


class Device:
    """Where an `Array` lives, printed like torch's (``cuda:0``, ``cpu``)."""

    __slots__ = ("type", "index")
    _NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 10: "rocm", 13: "cuda_managed"}

    def __init__(self, device_type: int, index: int) -> None:
        self.type = self._NAMES.get(device_type, f"dlpack_device_type_{device_type}")
        self.index = index

    def __repr__(self) -> str:
        return self.type if self.type == "cpu" else f"{self.type}:{self.index}"


class Array:
    """A view of a DLPack array through the torch.Tensor subset tileaot's ops use.

    `obj` is the framework's array, kept alive with its DLPack capsule for as long as the view
    lives (the capsule's destructor returns the export to the producer).
    """

    __slots__ = ("obj", "shape", "dtype", "device", "is_cuda", "readonly", "copied", "_capsule")
    __slots__ += ("_ptr", "_strides", "_numel", "_contiguous", "_device_type", "_stream")
    requires_grad = False  # autograd is torch's; these arrays never ask for it

    def __init__(self, obj: Any, stream: int, name: str = "array") -> None:
        from . import _dlpack

        e = _dlpack.read(obj, name, stream)
        dtype = _BY_CODE.get((e.code, e.bits)) if e.lanes == 1 else None
        if dtype is None:
            raise TypeError(
                f"{name} has DLPack dtype (code {e.code}, {e.bits} bits, {e.lanes} lanes), which "
                f"tileaot does not take; DLPack dtypes it reads: {', '.join(DTYPES)}"
            )
        self.obj, self._capsule, self._stream = obj, e.capsule, stream
        self.shape, self.dtype, self._strides, self._ptr = e.shape, dtype, e.strides, e.data_ptr
        self._device_type = e.device_type
        self.device = Device(e.device_type, e.device_id)
        self.is_cuda = e.device_type in _dlpack.STREAM_DEVICES
        self.readonly = bool(e.flags & _dlpack.READ_ONLY)
        self.copied = bool(e.flags & _dlpack.IS_COPIED)
        self._numel = 1
        for size in e.shape:
            self._numel *= size
        self._contiguous = self._numel == 0 or _row_major(e.shape, e.strides)

    def __repr__(self) -> str:
        kind = f"{type(self.obj).__module__}.{type(self.obj).__name__}"
        return f"Array({kind}, shape={self.shape}, dtype={self.dtype}, device={self.device})"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def get_device(self) -> int:
        """The CUDA device index, -1 for memory on no CUDA device (as torch)."""
        return self.device.index if self.is_cuda else -1

    def is_contiguous(self) -> bool:
        return self._contiguous

    def data_ptr(self) -> int:
        return self._ptr

    def numel(self) -> int:
        return self._numel

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self._numel * self.dtype.itemsize

    def stride(self) -> tuple[int, ...]:
        if self._strides is not None:
            return self._strides
        strides, step = [], 1
        for size in reversed(self.shape):
            strides.append(step)
            step *= size
        return tuple(reversed(strides))

    def new_empty(self, *size: Any, dtype: DType | None = None) -> Array:
        """A new array of the same framework and device, allocated by that framework."""
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        dtype = dtype or self.dtype
        out = Array(_allocate(self.obj, shape, dtype), self._stream, "output")
        if out.dtype is not dtype or out.shape != shape:
            raise TypeError(
                f"{type(self.obj).__name__}'s empty() made a {out.dtype} array of shape "
                f"{out.shape} when asked for {dtype} {shape}: pass out= arrays instead"
            )
        return out

    def zero_(self) -> Array:
        """Fill with zeros, ordered on the op's stream (the bytes are zero for every dtype)."""
        if self._numel:
            if self.is_cuda:
                from . import _driver

                _driver.zero(self._ptr, self.nbytes, self.device.index, self._stream)
            elif self._device_type == 1:  # CPU memory: only the test-suite gets here
                import ctypes

                ctypes.memset(self._ptr, 0, self.nbytes)
            else:
                raise ValueError(f"cannot zero memory on device {self.device}")
        return self


def _row_major(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> bool:
    """Dense row-major strides (torch's rule: dims of size 1 may have any stride)."""
    if strides is None:
        return True
    step = 1
    for size, stride in zip(reversed(shape), reversed(strides), strict=True):
        if size != 1 and stride != step:
            return False
        step *= size
    return True


def _allocate(like: Any, shape: tuple[int, ...], dtype: DType) -> Any:
    """``empty(shape)`` of `dtype` from the framework of array `like`, on its device."""
    xp = _framework(like)
    name = getattr(xp, "__name__", type(xp).__name__)
    xp_dtype = getattr(xp, dtype.name, None)
    if xp_dtype is None and dtype.name == "bool":
        xp_dtype = getattr(xp, "bool_", None)  # NumPy 1.x, CuPy
    if xp_dtype is None:
        raise TypeError(
            f"this call returns a {dtype.name} array, and {name} has no {dtype.name} dtype to "
            f"allocate it with: pass out= with arrays whose DLPack dtype is {dtype.name} "
            "(e.g. from a framework that has it)"
        )
    device = getattr(like, "device", None)
    if hasattr(device, "__enter__"):  # CuPy: no device= argument; allocate on the array's device
        with device:
            return xp.empty(shape, dtype=xp_dtype)
    return xp.empty(shape, dtype=xp_dtype, device=device)


def _framework(obj: Any) -> Any:
    """The array namespace of `obj`: ``obj.__array_namespace__()``, else its top-level module
    (CuPy before array-API support) if that has ``empty``."""
    get = getattr(obj, "__array_namespace__", None)
    if get is not None:
        return get()
    module = sys.modules.get(type(obj).__module__.partition(".")[0])
    if module is None or not hasattr(module, "empty"):
        raise TypeError(
            f"cannot allocate outputs like a {type(obj).__name__}: it has no "
            "__array_namespace__(); pass out= to write into arrays you allocate"
        )
    return module


def _empty_like(t: Array) -> Array:
    return t.new_empty(t.shape)


def _grad_disabled() -> bool:
    return False


# What the op bodies use of `torch` (dtypes, empty_like, grad mode), for `Array` views.
STAND_IN = SimpleNamespace(
    **DTYPES,
    Tensor=Array,
    dtype=DType,
    empty_like=_empty_like,
    is_grad_enabled=_grad_disabled,
)


class _NotLoaded:
    """Stands in for torch.Tensor until torch shows up: nothing has this type."""


Tensor: type = _NotLoaded  # torch.Tensor, once `foreign` first sees a torch tensor
_torch: Any = None


def foreign(x: Any) -> bool:
    """True for an array the op must convert first: it speaks DLPack and is not a torch tensor
    (of any subclass) or an `Array`. Never imports torch: if it is not loaded, `x` is no tensor."""
    global Tensor, _torch
    if type(x) is Array or not hasattr(x, "__dlpack__"):
        return False
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        Tensor, _torch = torch.Tensor, torch  # from now on the ops' first check passes at once
        return False
    return True


def plain_pair(out: Any, ndim: int) -> bool:
    """The ops' short-path guard on ``out=``: None, or a tuple of two whose first item is a
    plain torch tensor with `ndim` dims.

    `_C.call` checks every tensor's rank as well; this cheap check sends a misranked ``out``
    straight to the checked path and its precise message.
    """
    return out is None or (
        type(out) is tuple and len(out) == 2 and type(out[0]) is Tensor and out[0].dim() == ndim
    )


def namespace(x: Any) -> Any:
    """What an op uses as `torch` for its first array `x`: torch itself, or `STAND_IN` for views."""
    if type(x) is Tensor:
        return _torch
    if type(x) is Array:
        return STAND_IN
    torch = sys.modules.get("torch")  # a tensor subclass, or a wrong argument the op refuses
    return STAND_IN if torch is None else torch


def call(op: Callable[..., Any], args: dict[str, Any]) -> Any:
    """Run `op` with its array arguments as `Array` views; return the frameworks' arrays.

    `args` are the op's parameters by name (its ``locals()`` before anything else runs); the
    first is the array that picks the stream and the framework of new outputs.
    """
    first = next(iter(args.values()))
    stream = _stream_for(first)
    views = {name: _view(name, value, stream, name == "out") for name, value in args.items()}
    with _lib.stream_override(stream):
        return _unwrap(op(**views))


def _view(name: str, value: Any, stream: int, written: bool) -> Any:
    """`value` with DLPack arrays (also inside a tuple or list) as views; `written`: out=."""
    if type(value) is Array or value is None:
        return value
    if name == "out_dtype":
        return as_dtype(value)
    if hasattr(value, "__dlpack__"):
        view = Array(value, stream, name)
        if written and (view.readonly or view.copied):
            why = "read-only" if view.readonly else "a copy (IS_COPIED)"
            raise ValueError(
                f"{name}'s DLPack export is {why}, so the results would not reach the array: "
                "pass a writable array"
            )
        return view
    if isinstance(value, (tuple, list)):  # out=(q, scale)
        items = [_view(f"{name}[{i}]", v, stream, written) for i, v in enumerate(value)]
        return type(value)(items)
    return value


def _unwrap(result: Any) -> Any:
    if type(result) is Array:
        return result.obj
    if isinstance(result, tuple):
        items = [_unwrap(r) for r in result]
        return type(result)(*items) if hasattr(result, "_fields") else tuple(items)
    return result


def as_dtype(value: Any) -> Any:
    """`value` (a DType, a name like ``"bfloat16"``, a NumPy dtype or scalar type, torch's
    ``torch.float32``) as a `DType`; anything else unchanged, for the op to refuse."""
    if isinstance(value, DType):
        return value
    name = value if isinstance(value, str) else getattr(value, "name", None)
    if not isinstance(name, str):
        name = getattr(value, "__name__", None) or str(value)
    return DTYPES.get(name.removeprefix("torch."), value)


# --- streams ---------------------------------------------------------------------------------

_local = threading.local()  # .stream: set by `use_stream` in this thread


def use_stream(stream: Any) -> _lib.StreamScope:
    """Run ops on non-torch (DLPack) arrays on `stream`, in this thread, in a with-block.

    Every op also takes CUDA arrays of frameworks other than torch that export DLPack
    (``__dlpack__``, e.g. CuPy), with the same checks. Outputs are allocated by that framework
    (``x.__array_namespace__().empty``, or ``cupy.empty``) and returned as its arrays; for a
    dtype it lacks (bfloat16 or float8 in CuPy) a TypeError asks for ``out=`` arrays whose
    DLPack dtype is that one. Outside this block those calls run on CuPy's current stream
    for CuPy arrays and on the legacy default stream for others. Torch tensors always run on
    torch's current stream (``torch.cuda.stream(s)``): this block does not change that.

    Args:
        stream: a raw ``CUstream``/``cudaStream_t`` handle as an int (0: the legacy default
            stream), an object with ``__cuda_stream__()`` or ``.ptr`` (a CuPy stream), or
            None for the default above.

    Returns:
        A context manager (re-entrant; leaving it restores the previous stream).

    Example:
        >>> s = cupy.cuda.Stream()
        >>> with tileaot.use_stream(s):
        ...     y = tileaot.rms_norm(x, w)  # x, w: CuPy arrays; y: a CuPy array
    """
    return _lib.StreamScope(_local, None if stream is None else _stream_handle(stream))


def _stream_handle(stream: Any) -> int:
    if type(stream) is int or hasattr(type(stream), "__index__"):
        return int(stream)
    if hasattr(stream, "__cuda_stream__"):  # the CUDA stream protocol: (version, handle)
        return int(stream.__cuda_stream__()[1])
    if hasattr(stream, "ptr"):  # CuPy
        return int(stream.ptr)
    raise TypeError(
        f"stream must be an int CUDA stream handle or a stream object (__cuda_stream__ or .ptr); "
        f"got {type(stream).__name__}"
    )


def _stream_for(first: Any) -> int:
    """The launch stream of a call whose first array is `first` (see `use_stream`)."""
    stream = getattr(_local, "stream", None)
    if stream is not None:
        return stream
    if type(first).__module__.partition(".")[0] == "cupy":
        cupy = sys.modules["cupy"]
        with first.device:  # CuPy's current stream is per device
            return int(cupy.cuda.get_current_stream().ptr)
    return 0
