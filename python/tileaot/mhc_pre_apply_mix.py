"""mHC pre-mix of the residual streams into a sublayer's input (op "mhc_pre_apply_mix"),
differentiable."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _grad, _lib
from ._mhc_args import same_lead
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "mhc_pre_apply_mix"
SCHEMA = OpSchema(
    _OP,
    "x[*M, R, H]: bf16, mix[*M, R, 1]: fp32 -> out[*M, H]: bf16",
    key="bf16",
    example={"M": 32768, "R": 4, "H": 7168},
    backward="mhc_pre_apply_mix_backward",
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_FAST_KEY = (_OP, "bf16")  # `_lib.fast`: tensors (x, mix, out) of a 3-D x


def mhc_pre_apply_mix(
    x: torch.Tensor,
    mix: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mix each token's R residual streams into one hidden state with its pre-mix weights.

    ``out[..., :] = sum_r mix[..., r, 0] * x[..., r, :]``: TileKernels' ``mhc_pre_apply_mix``
    (`tile-kernels` 1.0.0, ``tile_kernels.modeling.mhc.ops``; reference
    ``tile_kernels.torch.mhc.mhc_pre_apply_mix_ref``; same name and arguments), the last step
    of ``mhc_pre``. A float32 sum from 0 over ``r = 0 .. R - 1`` in order, rounded once to
    bf16; within TileKernels' test bounds (``atol=1e-2, rtol=1e-3``) of its reference.

    Differentiable (in `x` and `mix`): the backward is
    :func:`tileaot.mhc_pre_apply_mix_backward` (`x` and `mix` are saved). Double backward is
    not supported. TileKernels' backward can add ``grad_x`` into a buffer its ``mhc_post``
    left on `x`'s storage; here autograd adds the two gradients of the residual.

    Args:
        x: CUDA tensor ``[..., R, H]``, ``torch.bfloat16`` (the residual streams), contiguous,
            with a 16-byte-aligned data pointer (any H; ``H % 8 == 0`` takes 16-byte accesses).
        mix: CUDA tensor ``[..., R, 1]`` (`x`'s leading dims), ``torch.float32``, contiguous,
            aligned, on `x`'s device.
        out: optional tensor to write into instead of allocating: ``[..., H]``, bf16, on `x`'s
            device, contiguous, aligned, overlapping no input. Not allowed when the call
            records a gradient.

    Returns:
        ``[..., H]``, ``torch.bfloat16`` (`out` itself if given). Empty: returned without
        launching anything (zeros if R = 0).

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype.
        ValueError: `x` has fewer than 2 dims; `mix` is not ``[..., R, 1]`` with `x`'s leading
            dims; a tensor is not on a CUDA device (the same one), not contiguous or not 16-byte
            aligned; a size reaches 2**31; `out` has the wrong shape, overlaps an input, or is
            given while a gradient is recorded.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `x`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(4096, 4, 7168, device="cuda").bfloat16()
        >>> mix = torch.rand(4096, 4, 1, device="cuda").softmax(-2)
        >>> h = tileaot.mhc_pre_apply_mix(x, mix)  # [4096, 7168]
    """
    if (
        type(x) is _arrays.Tensor
        and type(mix) is _arrays.Tensor
        and x.dim() == 3
        and not (x.requires_grad or mix.requires_grad)
    ):
        y = x.new_empty(x.shape[0], x.shape[2]) if out is None else out
        if _lib.fast(_FAST_KEY, (x, mix, y), (), _WRITES):
            return y
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(mhc_pre_apply_mix, locals())
    bound = SCHEMA.bind({"x": x, "mix": mix})
    same_lead("mix", mix, 2, "x", x, 2)
    fw = _arrays.namespace(x)
    if (x.requires_grad or mix.requires_grad) and fw.is_grad_enabled():
        if out is not None:
            raise ValueError(
                "out= is not allowed when x or mix requires grad (the result would not be "
                "differentiable): pass out=None, or call under torch.no_grad()"
            )
        return _grad.function(SCHEMA, _autograd_forward, 2).apply(x, mix)
    return _forward(x, mix, out, bound)


def _autograd_forward(x: Any, mix: Any) -> torch.Tensor:
    return _forward(x, mix, None)


def _forward(x: torch.Tensor, mix: torch.Tensor, out: Any, bound: Any = None) -> torch.Tensor:
    """The launch of a checked call (`bound`: its `SCHEMA.bind`, done again if None)."""
    inputs = {"x": x, "mix": mix}
    if bound is None:
        bound = SCHEMA.bind(inputs)
    (y,) = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, inputs)
    if y.numel() == 0:
        return y
    if bound.dims["R"] == 0:  # an empty sum
        y.zero_()
        return y
    handle = SCHEMA.launch("bf16", bound.device, (x, mix, y), (), bound.dims)
    if type(x) is _arrays.Tensor and type(mix) is _arrays.Tensor and x.dim() == 3:
        _lib.learn(_FAST_KEY, handle)  # the short path's shapes
    return y


example_shapes = SCHEMA.example_shapes
