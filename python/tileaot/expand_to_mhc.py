"""Expansion of a hidden state into mHC residual streams (op "expand_to_mhc"), differentiable."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _grad, _lib
from ._mhc_args import check_mhc_mult
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "expand_to_mhc"
SCHEMA = OpSchema(
    _OP,
    "hidden[*M, H]: bf16 -> out[*M, R, H]: bf16",
    key="bf16",
    example={"M": 32768, "R": 4, "H": 7168},
    public={"R": "mhc_mult"},
    backward="expand_to_mhc_backward",
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_FAST_KEY = (_OP, "bf16")  # `_lib.fast`: tensors (hidden, out) of a 2-D hidden


def expand_to_mhc(
    hidden: torch.Tensor,
    mhc_mult: int,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Expand each token's hidden state into `mhc_mult` identical mHC residual streams.

    ``out[..., r, :] = hidden[..., :]`` for ``r < mhc_mult``: TileKernels' ``expand_to_mhc``
    (`tile-kernels` 1.0.0, ``tile_kernels.modeling.mhc.ops``; reference
    ``tile_kernels.torch.mhc.expand_to_mhc_ref``; same name and arguments), the entry of a
    DeepSeek-V4-style mHC model (its ``expand_from_embedding``). A copy: bit-exact.

    Differentiable: if `hidden` requires grad (and grad mode is on), the result carries a
    ``grad_fn`` whose backward is :func:`tileaot.expand_to_mhc_backward` (the float32 sum of
    the copies' gradients, rounded to bf16). Double backward is not supported.

    Args:
        hidden: CUDA tensor ``[..., H]``, ``torch.bfloat16``, contiguous, with a 16-byte-aligned
            data pointer (any H; ``H % 8 == 0`` takes 16-byte accesses).
        mhc_mult: the number of residual streams R, an int ``>= 1`` (TileKernels' models use 4).
        out: optional tensor to write into instead of allocating: ``[..., mhc_mult, H]``
            (`hidden`'s leading dims), bf16, on `hidden`'s device, contiguous, aligned, not
            overlapping it. Not allowed when the call records a gradient.

    Returns:
        ``[..., mhc_mult, H]``, ``torch.bfloat16`` (`out` itself if given). If it has no
        elements, it is returned without launching anything.

    Raises:
        TypeError: `hidden`/`out` is not a tensor or not bf16; `mhc_mult` is not an int.
        ValueError: `hidden` is 0-d; `mhc_mult` < 1; a tensor is not on a CUDA device (the same
            one), not contiguous or not 16-byte aligned; a size reaches 2**31; `out` has the
            wrong shape, overlaps `hidden`, or is given while a gradient is recorded.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `hidden`'s device (as torch ops are);
    the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(4096, 7168, dtype=torch.bfloat16, device="cuda")
        >>> residual = tileaot.expand_to_mhc(x, 4)  # [4096, 4, 7168]
        >>> assert torch.equal(residual[:, 2], x)
    """
    if (
        type(hidden) is _arrays.Tensor
        and type(mhc_mult) is int
        and mhc_mult >= 1
        and hidden.dim() == 2
        and not hidden.requires_grad
    ):
        y = hidden.new_empty(hidden.shape[0], mhc_mult, hidden.shape[1]) if out is None else out
        if _lib.fast(_FAST_KEY, (hidden, y), (), _WRITES):
            return y
    elif type(hidden) is not _arrays.Tensor and _arrays.foreign(hidden):
        return _arrays.call(expand_to_mhc, locals())
    mhc_mult = check_mhc_mult(mhc_mult)
    bound = SCHEMA.bind({"hidden": hidden}, R=mhc_mult)
    if hidden.requires_grad and _arrays.namespace(hidden).is_grad_enabled():
        if out is not None:
            raise ValueError(
                "out= is not allowed when hidden requires grad (the result would not be "
                "differentiable): pass out=None, or call under torch.no_grad()"
            )
        # The gradient is a sum of the copies: the backward takes only grad_out.
        return _grad.function(SCHEMA, _autograd_forward, 1, inputs=False).apply(hidden, mhc_mult)
    return _forward(hidden, mhc_mult, out, bound)


def _autograd_forward(hidden: Any, mhc_mult: int) -> torch.Tensor:
    return _forward(hidden, mhc_mult, None)


def _forward(
    hidden: torch.Tensor, mhc_mult: int, out: torch.Tensor | None, bound: Any = None
) -> torch.Tensor:
    """The launch of a checked call (`bound`: its `SCHEMA.bind`, done again if None)."""
    if bound is None:
        bound = SCHEMA.bind({"hidden": hidden}, R=mhc_mult)
    inputs = {"hidden": hidden}
    (y,) = SCHEMA.outputs(_arrays.namespace(hidden), hidden, bound, out, inputs)
    if y.numel() == 0:
        return y
    handle = SCHEMA.launch("bf16", bound.device, (hidden, y), (), bound.dims)
    if type(hidden) is _arrays.Tensor and hidden.dim() == 2:  # the short path's shapes
        _lib.learn(_FAST_KEY, handle)
    return y


example_shapes = SCHEMA.example_shapes
