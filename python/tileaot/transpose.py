"""Contiguous transpose of the last two dimensions (op "transpose")."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from . import _arrays, _lib, _validate

if TYPE_CHECKING:
    import torch

_OP = "transpose"
# The kernels move bits: each torch dtype is served by the kernel of its width (the key).
_KEY_BY_DTYPE_NAME = {
    "float8_e4m3fn": "e4m3",
    "float8_e5m2": "e4m3",
    "int8": "e4m3",
    "uint8": "e4m3",
    "bool": "e4m3",
    "bfloat16": "bf16",
    "int16": "bf16",
    "float16": "fp16",
    "float32": "fp32",
    "int32": "fp32",
}
# dtype -> key: DLPack dtypes now, torch's added on first use (torch is imported lazily)
_KEYS: dict[Any, str] = {_arrays.DTYPES[n]: k for n, k in _KEY_BY_DTYPE_NAME.items()}
# gridDim.z (one z per batch matrix) stops at 65535; larger batches go in chunks of this many
# matrices, a multiple of 16 so every chunk's base address stays 16-byte aligned.
_BATCH_CHUNK = 65520
# The dtype each key's kernel is registered with: `_C.call` checks it exactly, so only tensors
# of these dtypes are taught to `_lib.fast` (an int16 tensor runs bf16's kernel via `launch`).
_NATIVE_DTYPE = {"e4m3": "float8_e4m3fn", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
_WRITES_Y = 0b10  # `_lib.fast`: tensors (x, y) of a 3-D x, y written


def _key(x: Any) -> str:
    key = _KEYS.get(x.dtype)
    if key is None:
        fw = _arrays.namespace(x)
        if fw.bfloat16 not in _KEYS:
            _KEYS.update({getattr(fw, n): k for n, k in _KEY_BY_DTYPE_NAME.items()})
            return _key(x)
        prefix = "" if fw is _arrays.STAND_IN else "torch."
        names = ", ".join(prefix + n for n in _KEY_BY_DTYPE_NAME)
        raise TypeError(f"x has dtype {x.dtype}; supported dtypes: {names}")
    return key


def transpose(x: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """The contiguous transpose of the last two dimensions of `x`, bit-exact.

    ``y[..., c, r] = x[..., r, c]``: the result of ``x.transpose(-1, -2).contiguous()``,
    computed by one kernel pass (each element read once and written once). Elements are moved,
    never converted, so every bit pattern (fp8 NaNs included) is preserved.

    Args:
        x: CUDA tensor ``[..., R, C]`` with at least 2 dims (leading dims are a batch); dtype
            ``torch.float8_e4m3fn``, ``torch.float8_e5m2``, ``torch.int8``, ``torch.uint8``,
            ``torch.bool``, ``torch.bfloat16``, ``torch.float16``, ``torch.int16``,
            ``torch.float32`` or ``torch.int32``; contiguous, with a 16-byte-aligned data
            pointer. Any R and C (multiples of 16 bytes per row take the fastest path).
        out: optional tensor to write into instead of allocating: shape ``[..., C, R]``, the
            dtype and device of `x`, contiguous, aligned, not overlapping `x`.

    Returns:
        `y`, shape ``[..., C, R]``, the dtype of `x` (`out` itself if given). If `x` has no
        elements, `y` is returned without launching anything.

    Raises:
        TypeError: `x` or `out` is not a tensor or has an unsupported or wrong dtype.
        ValueError: `x` has fewer than 2 dims; a tensor is not on a CUDA device (the same
            one), not contiguous or not 16-byte aligned; a dimension or the element count
            reaches 2**31; `out` has the wrong shape or overlaps `x`.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `x`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(32768, 7168, dtype=torch.bfloat16, device="cuda")
        >>> y = tileaot.transpose(x)  # [7168, 32768]
        >>> assert torch.equal(y, x.t().contiguous())
    """
    if type(x) is _arrays.Tensor and x.dim() == 3 and x.shape[0] <= _BATCH_CHUNK:
        # Only a 3-D x is the kernel's [B, R, C] itself; a 2-D one would need a view.
        y = x.new_empty(x.shape[0], x.shape[2], x.shape[1]) if out is None else out
        if _lib.fast((_OP, x.dtype), (x, y), (), _WRITES_Y):
            return y
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(transpose, locals())
    _validate.require_tensor("x", x)
    key = _key(x)
    shape = x.shape
    if len(shape) < 2:
        raise ValueError(f"x must have shape (..., R, C) with at least 2 dims; got {tuple(shape)}")
    r, c = shape[-2], shape[-1]
    out_shape = (*shape[:-2], c, r)
    device = _validate.check_memory(("x",), (x,))
    if out is None:
        y = x.new_empty(out_shape)
    else:
        _validate.check_out("out", out, x.dtype, out_shape, device)
        _validate.check_no_overlap(("out",), (out,), ("x",), (x,))
        y = out
    if x.numel() == 0:
        return y
    b = math.prod(shape[:-2])
    handle = _lib.handle(_OP, key)
    native = _lib.native()
    stream = _lib.current_stream(device)
    x_ptr, y_ptr = x.data_ptr(), y.data_ptr()
    step = r * c * x.element_size() * _BATCH_CHUNK
    for i, start in enumerate(range(0, b, _BATCH_CHUNK)):
        nb = min(_BATCH_CHUNK, b - start)
        native.launch(
            handle, device, stream, (x_ptr + i * step, y_ptr + i * step), (nb, r, c, nb, c, r), ()
        )
    if (
        type(x) is _arrays.Tensor
        and len(shape) == 3
        and b <= _BATCH_CHUNK
        and str(x.dtype) == "torch." + _NATIVE_DTYPE[key]
    ):  # one launch over exactly (x, y), whose dtype `_C.call` accepts for this key
        _lib.learn((_OP, x.dtype), handle)
    return y


def example_shapes(key: str) -> tuple[str, tuple[int, ...]]:
    """A typical call for `python -m tileaot info`: its description and flat shapes."""
    return "x[4096, 7168]", (1, 4096, 7168, 1, 7168, 4096)
