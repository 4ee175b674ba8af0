"""Gradients of mhc_pre_apply_mix (op "mhc_pre_apply_mix_backward")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib
from ._mhc_args import same_lead
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "mhc_pre_apply_mix_backward"
SCHEMA = OpSchema(
    _OP,
    "grad_out[*M, H]: bf16, x[*M, R, H]: bf16, mix[*M, R, 1]: fp32"
    " -> grad_x[*M, R, H]: bf16, grad_mix[*M, R, 1]: fp32",
    key="bf16",
    example={"M": 32768, "R": 4, "H": 7168},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_FAST_KEY = (_OP, "bf16")  # `_lib.fast`: tensors of a 2-D grad_out


def mhc_pre_apply_mix_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    mix: torch.Tensor,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_x, grad_mix)`` of :func:`tileaot.mhc_pre_apply_mix` for the incoming `grad_out`.

    ``grad_x[..., r, h] = bf16(mix[..., r, 0] * grad_out[..., h])`` (a float32 product rounded
    once) and ``grad_mix[..., r, 0] = sum_h grad_out[..., h] * x[..., r, h]`` (float32), as
    TileKernels' backward kernel (`tile-kernels` 1.0.0, ``tile_kernels/mhc/
    pre_apply_mix_kernel.py``) computes them, within its test bounds (``atol=1e-2,
    rtol=1e-3``) of autograd through its reference. TileKernels' option of adding `grad_x`
    into a gradient ``mhc_post`` left behind has no counterpart: the gradient is returned.

    Args:
        grad_out: CUDA tensor ``[..., H]``, ``torch.bfloat16``, the gradient of a loss with
            respect to the forward's result; contiguous, with a 16-byte-aligned data pointer.
        x: the forward's `x`, ``[..., R, H]`` (`grad_out`'s leading dims), bf16, contiguous,
            aligned, on `grad_out`'s device.
        mix: the forward's `mix`, ``[..., R, 1]``, ``torch.float32``, contiguous, aligned.
        out: optional ``(grad_x, grad_mix)`` to write into instead of allocating: the shapes
            and dtypes of `x` and `mix`, on their device, contiguous, aligned, overlapping
            nothing else.

    Returns:
        ``(grad_x, grad_mix)`` (`out`'s tensors if given). Nothing is launched when both are
        empty; ``grad_mix`` is zeros when H = 0.

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype; `out` is not a
            pair.
        ValueError: shapes that do not fit together (leading dims, R, H, the 1 of `mix`); a
            tensor is not on a CUDA device (the same one), not contiguous or not 16-byte
            aligned; a size reaches 2**31; an output has the wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `grad_out`'s device (as torch ops
    are); the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(4096, 4, 7168, device="cuda").bfloat16()
        >>> mix = torch.rand(4096, 4, 1, device="cuda")
        >>> g = torch.randn(4096, 7168, device="cuda").bfloat16()
        >>> grad_x, grad_mix = tileaot.mhc_pre_apply_mix_backward(g, x, mix)
    """
    if (
        type(grad_out) is _arrays.Tensor
        and type(x) is _arrays.Tensor
        and type(mix) is _arrays.Tensor
        and grad_out.dim() == 2
        and _arrays.plain_pair(out, 3)
    ):
        pair = (x.new_empty(x.shape), mix.new_empty(mix.shape)) if out is None else out
        if _lib.fast(_FAST_KEY, (grad_out, x, mix, *pair), (), _WRITES):
            return pair
    elif type(grad_out) is not _arrays.Tensor and _arrays.foreign(grad_out):
        return _arrays.call(mhc_pre_apply_mix_backward, locals())
    inputs = {"grad_out": grad_out, "x": x, "mix": mix}
    bound = SCHEMA.bind(inputs)
    same_lead("x", x, 2, "grad_out", grad_out, 1)
    same_lead("mix", mix, 2, "grad_out", grad_out, 1)
    grad_x, grad_mix = SCHEMA.outputs(_arrays.namespace(grad_out), grad_out, bound, out, inputs)
    if grad_mix.numel() == 0:  # then grad_x is empty too
        return grad_x, grad_mix
    if bound.dims["H"] == 0:  # empty dot products
        grad_mix.zero_()
        return grad_x, grad_mix
    tensors = (grad_out, x, mix, grad_x, grad_mix)
    handle = SCHEMA.launch("bf16", bound.device, tensors, (), bound.dims)
    if type(grad_out) is _arrays.Tensor and grad_out.dim() == 2:  # the short path's shapes
        _lib.learn(_FAST_KEY, handle)
    return grad_x, grad_mix


example_shapes = SCHEMA.example_shapes
