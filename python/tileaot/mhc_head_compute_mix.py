"""mHC head mix (op "mhc_head_compute_mix")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _grad
from ._mhc_args import float32_arg
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "mhc_head_compute_mix"
SCHEMA = OpSchema(
    _OP,
    "input_mix[*M, R]: fp32, mhc_scale[1]: fp32, mhc_base[R]: fp32"
    " -> output_mix[*M, R]: fp32 as out; mhc_pre_eps: float32",
    key="fp32",
    example={"M": 32768, "R": 4},
    backward="mhc_head_compute_mix_backward",
)


def mhc_head_compute_mix(
    input_mix: torch.Tensor,
    mhc_scale: torch.Tensor,
    mhc_base: torch.Tensor,
    mhc_pre_eps: float,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The head's pre mix: ``sigmoid(input_mix * mhc_scale[0] + mhc_base) + mhc_pre_eps``.

    TileKernels' ``mhc_head_compute_mix`` (`tile-kernels` 1.0.0, ``tile_kernels.modeling.mhc.
    ops``; reference ``tile_kernels.torch.mhc.mhc_head_compute_mix_ref``; same name and
    arguments), the step of ``mhc_head`` between ``mhc_pre_norm_fn`` and
    ``mhc_pre_apply_mix``. Float32, each operation rounded as torch rounds it (no FMA; ``sigmoid
    = 1 / (1 + expf(-z))``, the division correctly rounded): the reference's values on the
    GPU. TileKernels takes 3-D mixes ``[batch, seq, R]`` only; any leading dims work here.

    Args:
        input_mix: CUDA tensor ``[..., R]``, ``torch.float32`` (R = mhc_mult raw mixes per
            token), contiguous, with a 16-byte-aligned data pointer.
        mhc_scale: ``(1,)`` float32.
        mhc_base: ``(R,)`` float32, the per-column biases.
        mhc_pre_eps: added to the mix, a finite float.
        out: optional tensor to write into instead of allocating: `input_mix`'s shape, float32,
            contiguous, aligned, overlapping no input.

    All tensors on one CUDA device.

    Returns:
        ``[..., R]``, ``torch.float32`` (`out` itself if given); returned without launching
        anything when empty.

    Differentiable in the three tensors: the backward is
    :func:`tileaot.mhc_head_compute_mix_backward` (the inputs are saved; it serves R <= 256).
    Double backward is not supported. `out` only outside autograd.

    Raises:
        TypeError: a tensor argument is not a tensor or not float32; `mhc_pre_eps` is not a
            real number.
        ValueError: `input_mix` is 0-d; `mhc_scale` is not ``(1,)`` or `mhc_base` not
            ``(R,)``; `mhc_pre_eps` is not finite in float32; a tensor is not on a CUDA device
            (the same one), not contiguous or not 16-byte aligned; a size reaches 2**31; `out`
            has the wrong shape or overlaps an input.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `input_mix`'s device (as torch ops
    are); the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> mix = torch.randn(4096, 4, device="cuda")
        >>> scale, base = torch.rand(1, device="cuda"), torch.randn(4, device="cuda")
        >>> pre = tileaot.mhc_head_compute_mix(mix, scale, base, 1e-6)  # [4096, 4]
    """
    if type(input_mix) is not _arrays.Tensor and _arrays.foreign(input_mix):
        return _arrays.call(mhc_head_compute_mix, locals())
    eps = float32_arg("mhc_pre_eps", mhc_pre_eps)
    tensors = (input_mix, mhc_scale, mhc_base)
    bound = SCHEMA.bind(dict(zip(_NAMES, tensors, strict=True)))
    if any(t.requires_grad for t in tensors) and _arrays.namespace(input_mix).is_grad_enabled():
        if out is not None:
            raise ValueError(
                "out= is not allowed when an input requires grad (the result would not be "
                "differentiable): pass out=None, or call under torch.no_grad()"
            )
        return _grad.function(SCHEMA, _autograd_forward, 3, scalars=()).apply(*tensors, eps)
    return _forward(tensors, eps, out, bound)


_NAMES = ("input_mix", "mhc_scale", "mhc_base")


def _autograd_forward(*args: Any) -> torch.Tensor:
    return _forward(args[:3], args[3], None)


def _forward(tensors: tuple, eps: float, out: Any, bound: Any = None) -> torch.Tensor:
    """The launch of a checked call (`bound`: its `SCHEMA.bind`, done again if None)."""
    inputs = dict(zip(_NAMES, tensors, strict=True))
    if bound is None:
        bound = SCHEMA.bind(inputs)
    (y,) = SCHEMA.outputs(_arrays.namespace(tensors[0]), tensors[0], bound, out, inputs)
    if y.numel() > 0:
        SCHEMA.launch("fp32", bound.device, (*tensors, y), (eps,), bound.dims)
    return y


example_shapes = SCHEMA.example_shapes
