"""Gradients of mhc_post (op "mhc_post_backward")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib
from ._mhc_args import same_lead
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "mhc_post_backward"
SCHEMA = OpSchema(
    _OP,
    "grad_out[*M, R, H]: bf16, x[*M, H]: bf16, residual[*M, R, H]: bf16,"
    " post_layer_mix[*M, R, 1]: fp32, comb_res_mix[*M, R, R]: fp32"
    " -> grad_x[*M, H]: bf16, grad_residual[*M, R, H]: bf16,"
    " grad_post_layer_mix[*M, R, 1]: fp32, grad_comb_res_mix[*M, R, R]: fp32",
    key="bf16",
    example={"M": 32768, "R": 4, "H": 7168},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_FAST_KEY = (_OP, "bf16")  # `_lib.fast`: tensors of a 3-D grad_out
_NAMES = ("grad_out", "x", "residual", "post_layer_mix", "comb_res_mix")
MAX_R = 8  # the kernel keeps R + R * R partial sums per thread


def mhc_post_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    residual: torch.Tensor,
    post_layer_mix: torch.Tensor,
    comb_res_mix: torch.Tensor,
    *,
    out: tuple | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`tileaot.mhc_post` for the incoming `grad_out`.

    Per token, with sums over the output streams n from 0 in order, in float32 (what
    TileKernels' backward kernel, ``tile_kernels/mhc/post_kernel.py`` of `tile-kernels` 1.0.0,
    computes; it serves R = 4 only)::

        grad_x[h]              = bf16(sum_n post_layer_mix[n] * grad_out[n, h])
        grad_residual[m, h]    = bf16(sum_n comb_res_mix[m, n] * grad_out[n, h])
        grad_post_layer_mix[n] = sum_h x[h] * grad_out[n, h]
        grad_comb_res_mix[m, n] = sum_h residual[m, h] * grad_out[n, h]

    within TileKernels' test bounds of autograd through its reference (``assert_close``
    defaults for the bf16 gradients, ``atol = rtol = 1e-4`` for the float32 ones).

    Args:
        grad_out: CUDA tensor ``[..., R, H]``, ``torch.bfloat16``, ``1 <= R <= 8``, the
            gradient of a loss with respect to mhc_post's result.
        x, residual, post_layer_mix, comb_res_mix: the forward's inputs (``[..., H]`` bf16,
            ``[..., R, H]`` bf16, ``[..., R, 1]`` and ``[..., R, R]`` float32, `grad_out`'s
            leading dims).
        out: optional ``(grad_x, grad_residual, grad_post_layer_mix, grad_comb_res_mix)`` to
            write into instead of allocating: the inputs' shapes and dtypes.

    All tensors contiguous, 16-byte aligned, on one CUDA device, outputs overlapping nothing.

    Returns:
        ``(grad_x, grad_residual, grad_post_layer_mix, grad_comb_res_mix)`` (`out`'s tensors
        if given). Without a launch when there is nothing to sum (H = 0: zero mix gradients;
        R = 0: a zero ``grad_x``).

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype; `out` is not a
            4-tuple.
        ValueError: shapes that do not fit together; R > 8; a tensor is not on a CUDA device
            (the same one), not contiguous or not 16-byte aligned; a size reaches 2**31; an
            output has the wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `grad_out`'s device (as torch ops
    are); the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(4096, 7168, device="cuda").bfloat16()
        >>> residual = torch.randn(4096, 4, 7168, device="cuda").bfloat16()
        >>> post = torch.rand(4096, 4, 1, device="cuda")
        >>> comb = torch.rand(4096, 4, 4, device="cuda")
        >>> g = torch.randn_like(residual)
        >>> gx, gres, gpost, gcomb = tileaot.mhc_post_backward(g, x, residual, post, comb)
    """
    inputs = (grad_out, x, residual, post_layer_mix, comb_res_mix)
    if (
        type(grad_out) is _arrays.Tensor
        and grad_out.dim() == 3
        and 0 < grad_out.shape[1] <= MAX_R
        and out is None
        and all(type(t) is _arrays.Tensor for t in inputs)
    ):
        outs = tuple(t.new_empty(t.shape) for t in inputs[1:])
        if _lib.fast(_FAST_KEY, (*inputs, *outs), (), _WRITES):
            return outs
    elif type(grad_out) is not _arrays.Tensor and _arrays.foreign(grad_out):
        return _arrays.call(mhc_post_backward, locals())
    named = dict(zip(_NAMES, inputs, strict=True))
    bound = SCHEMA.bind(named)
    same_lead("x", x, 1, "grad_out", grad_out, 2)
    for name, t in zip(_NAMES[2:], inputs[2:], strict=True):
        same_lead(name, t, 2, "grad_out", grad_out, 2)
    r = bound.dims["R"]
    if r > MAX_R:
        raise ValueError(f"grad_out has R = {r} streams; mhc_post_backward supports R <= {MAX_R}")
    outs = SCHEMA.outputs(_arrays.namespace(grad_out), grad_out, bound, out, named)
    if bound.dims["M"] == 0:
        return outs
    if r == 0 or bound.dims["H"] == 0:  # empty sums over n or h: zeros, nothing to launch
        for t in outs:
            t.zero_()
        return outs
    handle = SCHEMA.launch("bf16", bound.device, (*inputs, *outs), (), bound.dims)
    if out is None and all(type(t) is _arrays.Tensor for t in inputs) and grad_out.dim() == 3:
        _lib.learn(_FAST_KEY, handle)  # the short path's shapes
    return outs


example_shapes = SCHEMA.example_shapes
