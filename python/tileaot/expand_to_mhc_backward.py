"""Gradient of expand_to_mhc with respect to its input (op "expand_to_mhc_backward")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "expand_to_mhc_backward"
SCHEMA = OpSchema(
    _OP,
    "grad_out[*M, R, H]: bf16 -> grad_x[*M, H]: bf16 as out",
    key="bf16",
    example={"M": 32768, "R": 4, "H": 7168},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_FAST_KEY = (_OP, "bf16")  # `_lib.fast`: tensors (grad_out, grad_x) of a 3-D grad_out


def expand_to_mhc_backward(
    grad_out: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``grad_hidden`` of :func:`tileaot.expand_to_mhc`: the sum of the R copies' gradients.

    ``grad_x[..., :] = sum_r grad_out[..., r, :]``, accumulated in float32 from 0 in the order
    ``r = 0 .. R - 1`` and rounded once to bf16, as TileKernels' backward kernel
    (``tile_kernels/mhc/expand_kernel.py``, `tile-kernels` 1.0.0) computes it; it equals the
    gradient autograd gives TileKernels' ``expand_to_mhc_ref`` (within bf16 rounding of the
    last bit where float32 partial sums would round, i.e. never for R <= 8 values within
    2**16 of each other).

    Args:
        grad_out: CUDA tensor ``[..., R, H]``, ``torch.bfloat16`` (R >= 1 streams), the
            gradient of a loss with respect to expand_to_mhc's result; contiguous, with a
            16-byte-aligned data pointer.
        out: optional tensor to write into instead of allocating: ``[..., H]`` (`grad_out`'s
            leading dims), bf16, on its device, contiguous, aligned, not overlapping it.

    Returns:
        ``grad_x``, ``[..., H]``, ``torch.bfloat16`` (`out` itself if given). If it has no
        elements it is returned without launching anything; R = 0 gives zeros.

    Raises:
        TypeError: `grad_out`/`out` is not a tensor or not bf16.
        ValueError: `grad_out` has fewer than 2 dims; a tensor is not on a CUDA device (the
            same one), not contiguous or not 16-byte aligned; a size reaches 2**31; `out` has
            the wrong shape or overlaps `grad_out`.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `grad_out`'s device (as torch ops
    are); the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> g = torch.randn(4096, 4, 7168, dtype=torch.bfloat16, device="cuda")
        >>> grad_x = tileaot.expand_to_mhc_backward(g)  # [4096, 7168]
    """
    if type(grad_out) is _arrays.Tensor and grad_out.dim() == 3:
        y = grad_out.new_empty(grad_out.shape[0], grad_out.shape[2]) if out is None else out
        if _lib.fast(_FAST_KEY, (grad_out, y), (), _WRITES):
            return y
    elif type(grad_out) is not _arrays.Tensor and _arrays.foreign(grad_out):
        return _arrays.call(expand_to_mhc_backward, locals())
    inputs = {"grad_out": grad_out}
    bound = SCHEMA.bind(inputs)
    (grad,) = SCHEMA.outputs(_arrays.namespace(grad_out), grad_out, bound, out, inputs)
    if grad.numel() == 0:
        return grad
    if bound.dims["R"] == 0:  # an empty sum (the kernel would also write zeros; no launch)
        grad.zero_()
        return grad
    handle = SCHEMA.launch("bf16", bound.device, (grad_out, grad), (), bound.dims)
    if type(grad_out) is _arrays.Tensor and grad_out.dim() == 3:  # the short path's shapes
        _lib.learn(_FAST_KEY, handle)
    return grad


example_shapes = SCHEMA.example_shapes
