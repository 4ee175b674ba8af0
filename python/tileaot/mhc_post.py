"""mHC post-mix of a sublayer's output into the residual streams (op "mhc_post"),
differentiable."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _grad, _lib
from ._mhc_args import same_lead
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "mhc_post"
SCHEMA = OpSchema(
    _OP,
    "x[*M, H]: bf16, residual[*M, R, H]: bf16, post_layer_mix[*M, R, 1]: fp32,"
    " comb_res_mix[*M, R, R]: fp32 -> out[*M, R, H]: bf16",
    key="bf16",
    example={"M": 32768, "R": 4, "H": 7168},
    backward="mhc_post_backward",
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_FAST_KEY = (_OP, "bf16")  # `_lib.fast`: tensors of a 2-D x


def mhc_post(
    x: torch.Tensor,
    residual: torch.Tensor,
    post_layer_mix: torch.Tensor,
    comb_res_mix: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The new mHC residual streams from a sublayer's output and the old streams.

    ``out[..., n, :] = post_layer_mix[..., n, 0] * x[..., :]
    + sum_m comb_res_mix[..., m, n] * residual[..., m, :]``: TileKernels' ``mhc_post``
    (`tile-kernels` 1.0.0, ``tile_kernels.modeling.mhc.ops``; reference
    ``tile_kernels.torch.mhc.mhc_post_ref``; same name and arguments). Float32 math from the
    ``post * x`` term, adding ``m = 0 .. R - 1`` in order, rounded once to bf16; within
    TileKernels' test bounds (``torch.testing.assert_close`` defaults) of its reference.

    Differentiable in all four inputs: the backward is :func:`tileaot.mhc_post_backward`
    (the inputs are saved; it serves R <= 8). Double backward is not supported.

    Args:
        x: CUDA tensor ``[..., H]``, ``torch.bfloat16`` (the sublayer's output), contiguous,
            with a 16-byte-aligned data pointer (any H; ``H % 8 == 0`` takes 16-byte accesses).
        residual: ``[..., R, H]`` (`x`'s leading dims), bf16: the residual streams.
        post_layer_mix: ``[..., R, 1]``, ``torch.float32``.
        comb_res_mix: ``[..., R, R]``, ``torch.float32`` (row m, column n: stream m's weight
            in new stream n).
        out: optional tensor to write into instead of allocating: ``[..., R, H]``, bf16,
            contiguous, aligned, overlapping no input. Not allowed when the call records a
            gradient.

    All tensors contiguous, 16-byte aligned, on one CUDA device.

    Returns:
        ``[..., R, H]``, ``torch.bfloat16`` (`out` itself if given); returned without launching
        anything when empty.

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype.
        ValueError: shapes that do not fit together (leading dims, R, H, the 1 of
            `post_layer_mix`); a tensor is not on a CUDA device (the same one), not contiguous
            or not 16-byte aligned; a size reaches 2**31; `out` has the wrong shape, overlaps an
            input, or is given while a gradient is recorded.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `x`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(4096, 7168, device="cuda").bfloat16()
        >>> residual = torch.randn(4096, 4, 7168, device="cuda").bfloat16()
        >>> post = torch.rand(4096, 4, 1, device="cuda")
        >>> comb = torch.rand(4096, 4, 4, device="cuda")
        >>> new_residual = tileaot.mhc_post(x, residual, post, comb)  # [4096, 4, 7168]
    """
    inputs = (x, residual, post_layer_mix, comb_res_mix)
    if (
        type(x) is _arrays.Tensor
        and x.dim() == 2
        and all(type(t) is _arrays.Tensor and not t.requires_grad for t in inputs)
    ):
        y = residual.new_empty(residual.shape) if out is None else out
        if _lib.fast(_FAST_KEY, (*inputs, y), (), _WRITES):
            return y
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(mhc_post, locals())
    bound = SCHEMA.bind(dict(zip(_NAMES, inputs, strict=True)))
    for name, t in zip(_NAMES[1:], inputs[1:], strict=True):
        same_lead(name, t, 2, "x", x, 1)
    if any(t.requires_grad for t in inputs) and _arrays.namespace(x).is_grad_enabled():
        if out is not None:
            raise ValueError(
                "out= is not allowed when an input requires grad (the result would not be "
                "differentiable): pass out=None, or call under torch.no_grad()"
            )
        return _grad.function(SCHEMA, _autograd_forward, 4).apply(*inputs)
    return _forward(inputs, out, bound)


_NAMES = ("x", "residual", "post_layer_mix", "comb_res_mix")


def _autograd_forward(*inputs: Any) -> torch.Tensor:
    return _forward(inputs, None)


def _forward(inputs: tuple, out: Any, bound: Any = None) -> torch.Tensor:
    """The launch of a checked call (`bound`: its `SCHEMA.bind`, done again if None)."""
    named = dict(zip(_NAMES, inputs, strict=True))
    if bound is None:
        bound = SCHEMA.bind(named)
    (y,) = SCHEMA.outputs(_arrays.namespace(inputs[0]), inputs[0], bound, out, named)
    if y.numel() == 0:
        return y
    handle = SCHEMA.launch("bf16", bound.device, (*inputs, y), (), bound.dims)
    if all(type(t) is _arrays.Tensor for t in inputs) and inputs[0].dim() == 2:
        _lib.learn(_FAST_KEY, handle)  # the short path's shapes
    return y


example_shapes = SCHEMA.example_shapes
