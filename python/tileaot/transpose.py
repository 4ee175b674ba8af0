"""Contiguous transpose of the last two dimensions (op "transpose")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "transpose"
# The kernels move bits: each dtype is served by the kernel of its width (the key).
_KEY = {
    "e4m3": "e4m3",
    "e5m2": "e4m3",
    "i8": "e4m3",
    "u8": "e4m3",
    "bool": "e4m3",
    "bf16": "bf16",
    "i16": "bf16",
    "fp16": "fp16",
    "fp32": "fp32",
    "i32": "fp32",
}
SCHEMA = OpSchema(
    _OP,
    "x[*B, R, C]: T -> y[*B, C, R]: T as out",
    dtypes={"T": tuple(_KEY)},
    example={"B": 1, "R": 4096, "C": 7168},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
# gridDim.z (one z per batch matrix) stops at 65535; larger batches go in chunks of this many
# matrices, a multiple of 16 so every chunk's base address stays 16-byte aligned.
_BATCH_CHUNK = 65520


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
        if _lib.fast((_OP, x.dtype), (x, y), (), _WRITES):
            return y
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(transpose, locals())
    bound = SCHEMA.bind({"x": x})
    (y,) = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, {"x": x})
    if x.numel() == 0:
        return y
    short, dims = bound.picked["T"], bound.dims
    key, b = _KEY[short], dims["B"]
    if b <= _BATCH_CHUNK:
        handle = SCHEMA.launch(key, bound.device, (x, y), (), dims)
        if type(x) is _arrays.Tensor and x.dim() == 3 and _KEY[short] == short:
            # One launch over exactly (x, y), whose dtype `_C.call` accepts for this key (an
            # int16 x runs bf16's kernel through `launch`, but `_C.call` checks dtypes exactly).
            _lib.learn((_OP, x.dtype), handle)
        return y
    # Chunks of whole matrices, by pointer offsets (DLPack views cannot be sliced).
    handle, native = _lib.handle(_OP, key), _lib.native()
    stream = _lib.current_stream(bound.device)
    x_ptr, y_ptr = x.data_ptr(), y.data_ptr()
    step = dims["R"] * dims["C"] * x.element_size() * _BATCH_CHUNK
    for i, start in enumerate(range(0, b, _BATCH_CHUNK)):
        shapes = SCHEMA.flat({**dims, "B": min(_BATCH_CHUNK, b - start)})
        native.launch(
            handle, bound.device, stream, (x_ptr + i * step, y_ptr + i * step), shapes, ()
        )
    return y


example_shapes = SCHEMA.example_shapes
