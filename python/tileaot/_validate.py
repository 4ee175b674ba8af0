"""Argument checks shared by the ops: cheap when they pass, specific when they fail.

Everything an op is given is checked here before anything is launched (DESIGN.md, "Must hold" 7):
`TypeError` for a wrong type or dtype, `ValueError` for a wrong shape, device, layout or size.
Each check is one fast condition on the success path; only a failing tensor goes through the
slow path that works out which rule it broke and formats the message.

`device_index` is the one place that insists on CUDA memory. The CPU test-suite replaces it (and
nothing else here) so that CPU tensors pass as "device 0" and reach a fake `_C`.

A "tensor" here is a torch.Tensor or an `_arrays.Array` (a view of another framework's DLPack
array, with the same methods); the checks are the same for both, the hints in the messages
name what each can do.
"""

from __future__ import annotations

import math
import numbers
import operator
import sys
from typing import Any

from ._arrays import DTYPES, Array

# Kernels index with 32-bit integers: every dimension and element count must stay below this.
INT32_LIMIT = 1 << 31
# Kernels load 16 bytes at a time; every base pointer must be a multiple of this.
ALIGN = 16


class _TorchNotLoaded:
    """Stands in for torch.Tensor until torch is seen: nothing is an instance of it."""


_Tensor: type = _TorchNotLoaded
_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# dtype -> dispatch-key short name (kernels_py/spec.py DTYPE_SHORT): DLPack dtypes now, torch's
# once torch is seen.
_SHORT: dict[Any, str] = {DTYPES[name]: short for short, name in _NAMES.items()}


def _is_tensor(t: Any) -> bool:
    """isinstance(t, torch.Tensor), or an `Array`. Never imports torch (`import tileaot` and
    calls with other frameworks' arrays must not): if torch is not loaded, `t` is no tensor."""
    global _Tensor
    if type(t) is Array:
        return True
    if _Tensor is _TorchNotLoaded:
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        _SHORT.update({torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"})
        _Tensor = torch.Tensor
    return isinstance(t, _Tensor)


def _not_a_tensor(name: str, t: Any) -> TypeError:
    if hasattr(t, "__dlpack__"):  # an array of another framework next to torch tensors
        return TypeError(
            f"{name} is a {type(t).__module__}.{type(t).__name__}, but the op's first array is "
            "a torch.Tensor: pass arrays of one framework (torch.from_dlpack converts)"
        )
    return TypeError(
        f"{name} must be a torch.Tensor, got {type(t).__name__}; without torch, pass CUDA "
        "arrays that support DLPack (__dlpack__), e.g. CuPy arrays"
    )


def _hint(t: Any, torch_hint: str, array_hint: str) -> str:
    """The fix to suggest for `t`: a torch method, or what to do with another framework's array."""
    return array_hint if type(t) is Array else torch_hint


def require_tensor(name: str, t: Any) -> None:
    if not (isinstance(t, _Tensor) or _is_tensor(t)):
        raise _not_a_tensor(name, t)


def dtype_key(name: str, t: Any, supported: tuple[str, ...]) -> str:
    """The short dtype name of tensor `t` ("bf16"), which must be one of `supported`."""
    if not (isinstance(t, _Tensor) or _is_tensor(t)):
        raise _not_a_tensor(name, t)
    key = _SHORT.get(t.dtype)
    if key not in supported:
        prefix = "" if type(t) is Array else "torch."
        names = ", ".join(prefix + _NAMES[k] for k in supported)
        raise TypeError(f"{name} has dtype {t.dtype}; supported dtypes: {names}")
    return key


def same_dtype(name: str, t: Any, ref_name: str, ref: Any) -> None:
    if not (isinstance(t, _Tensor) or _is_tensor(t)):
        raise _not_a_tensor(name, t)
    if t.dtype is not ref.dtype:
        raise TypeError(f"{name} has dtype {t.dtype}; it must match {ref_name} ({ref.dtype})")


def device_index(name: str, t: Any) -> int:
    """The CUDA device index of `t`; ValueError if `t` is not in CUDA memory."""
    if t.is_cuda:
        return t.get_device()
    move = _hint(t, "move it with .cuda()", "copy it to a CUDA device first")
    raise ValueError(
        f"{name} is on device '{t.device}'; tileaot kernels run on CUDA devices only ({move})"
    )


def check_memory(names: tuple[str, ...], tensors: tuple[Any, ...]) -> int:
    """Check tensors are on one CUDA device, contiguous, aligned and int32-sized.

    Returns the device index. Dtypes and shapes are the op's to check, before this.
    """
    device = device_index(names[0], tensors[0])
    for i, t in enumerate(tensors):
        if (
            device_index(names[i], t) != device
            or not t.is_contiguous()
            or t.data_ptr() % ALIGN
            or not 0 < t.numel() < INT32_LIMIT
        ):
            if device_index(names[i], t) != device:
                raise ValueError(
                    f"all tensors must be on the same CUDA device: {names[0]} is on "
                    f"{tensors[0].device}, {names[i]} on {t.device}"
                )
            _check_layout(names[i], t)  # raises, unless `t` is merely empty
    return device


def check_out(name: str, t: Any, dtype: Any, shape: tuple[int, ...], device: int) -> None:
    """An `out=` tensor: exactly the dtype and shape the op would allocate, on `device`."""
    if not (isinstance(t, _Tensor) or _is_tensor(t)):
        raise _not_a_tensor(name, t)
    if t.dtype is not dtype:
        raise TypeError(f"{name} has dtype {t.dtype}; this call writes {dtype}")
    if t.shape != shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; this call writes {tuple(shape)}")
    if device_index(name, t) != device:
        raise ValueError(f"{name} is on {t.device}, but the inputs are on CUDA device {device}")
    if not t.is_contiguous() or t.data_ptr() % ALIGN or not 0 < t.numel() < INT32_LIMIT:
        _check_layout(name, t)


def _check_layout(name: str, t: Any) -> None:
    """The slow path: raise for the first layout rule `t` breaks (an empty tensor may pass)."""
    if not t.is_contiguous():
        fix = _hint(t, "call .contiguous() on it", "make a contiguous copy (ascontiguousarray)")
        raise ValueError(
            f"{name} is not contiguous (shape {tuple(t.shape)}, strides {t.stride()}); {fix} first"
        )
    check_size(name, tuple(t.shape))
    if t.data_ptr() % ALIGN:
        fix = _hint(t, ".clone() it", "copy it")
        raise ValueError(
            f"{name}'s data pointer {t.data_ptr():#x} is not {ALIGN}-byte aligned (a view at an "
            f"offset?); pass a tensor that starts on an aligned address, e.g. {fix}"
        )


def check_size(name: str, shape: tuple[int, ...]) -> None:
    """ValueError if any dimension or the element count of `shape` reaches 2**31."""
    if max(shape, default=0) >= INT32_LIMIT or math.prod(shape) >= INT32_LIMIT:
        raise ValueError(
            f"{name} has shape {shape} ({math.prod(shape)} elements); tileaot kernels index "
            "with 32-bit integers, so every dimension and the element count must be below "
            "2**31: split the call"
        )


def check_no_overlap(
    out_names: tuple[str, ...],
    outs: tuple[Any, ...],
    in_names: tuple[str, ...],
    ins: tuple[Any, ...],
) -> None:
    """ValueError if an output's memory overlaps an input's or another output's.

    Tensors are contiguous by now, so [data_ptr, data_ptr + nbytes) is all they touch; empty
    ranges overlap nothing.
    """
    tensors = outs + ins
    for i in range(len(outs)):
        lo = tensors[i].data_ptr()
        hi = lo + tensors[i].nbytes
        for j in range(i + 1, len(tensors)):
            start = tensors[j].data_ptr()
            end = start + tensors[j].nbytes
            if start < hi and lo < end and lo < hi and start < end:
                names = out_names + in_names
                raise ValueError(
                    f"{names[i]} overlaps {names[j]} in memory; outputs must not alias inputs "
                    "or each other: pass a separate tensor"
                )


def dense(t: Any) -> Any:
    """`t` contiguous and 16-byte aligned (autograd may hand over expanded or offset views):
    a copy only where it is not."""
    t = t.contiguous()
    return t.clone() if t.data_ptr() % ALIGN else t


def nonneg_float(name: str, value: Any) -> float:
    """`value` as a finite float >= 0 (the slow path behind the ops' `type(v) is float` check)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return value


def integer(name: str, value: Any, kind: str = "an int") -> int:
    """`value` as an int: TypeError (saying it must be `kind`) for bools, floats, None and the
    like."""
    if type(value) is int:
        return value
    if isinstance(value, bool):
        raise TypeError(f"{name} must be {kind}, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__}") from None


def optional_int(name: str, value: Any) -> int | None:
    """`value` as an int (None passes through); TypeError for bools, floats and the like."""
    return None if value is None else integer(name, value, "an int or None")
