"""mHC split of a token's raw mixes into its pre, post and residual mixes (op
"mhc_pre_split_mixes")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _grad
from ._mhc_args import check_mhc_mult, float32_arg, mixes_width
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "mhc_pre_split_mixes"
SCHEMA = OpSchema(
    _OP,
    "input_mixes[*M, K]: fp32, mhc_scale[3]: fp32, mhc_base[K]: fp32"
    " -> pre_layer_mix[*M, R, 1]: fp32, post_layer_mix[*M, R, 1]: fp32,"
    " comb_res_mix[*M, R, R]: fp32; mhc_post_mult_value: float32, mhc_pre_eps: float32",
    key="fp32",
    example={"M": 32768, "K": 24, "R": 4},
    public={"R": "mhc_mult"},
    backward="mhc_pre_split_mixes_backward",
)


def mhc_pre_split_mixes(
    input_mixes: torch.Tensor,
    mhc_scale: torch.Tensor,
    mhc_base: torch.Tensor,
    mhc_mult: int,
    mhc_post_mult_value: float,
    mhc_pre_eps: float,
    *,
    out: tuple | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split each token's ``mhc_mult * (mhc_mult + 2)`` raw mixes into its three mHC mixes.

    With ``R = mhc_mult`` and ``z = input_mixes * scale + mhc_base``, where ``scale`` is
    ``mhc_scale[0]`` on the first R columns, ``mhc_scale[1]`` on the next R and
    ``mhc_scale[2]`` on the last ``R * R``::

        pre_layer_mix[..., j, 0]  = sigmoid(z[..., j]) + mhc_pre_eps
        post_layer_mix[..., j, 0] = sigmoid(z[..., R + j]) * mhc_post_mult_value
        comb_res_mix[..., m, n]   = z[..., 2 R + m R + n]

    TileKernels' ``mhc_pre_split_mixes`` (`tile-kernels` 1.0.0, ``tile_kernels.modeling.mhc.
    ops``; reference ``tile_kernels.torch.mhc.mhc_pre_split_mixes_ref``; same name and
    arguments), the step of ``mhc_pre`` between ``mhc_pre_norm_fn`` and ``sinkhorn_normalize``.
    Float32, each operation rounded as torch rounds it (no FMA; ``sigmoid = 1 / (1 +
    expf(-z))``, the division correctly rounded): the reference's values on the GPU.
    TileKernels takes 3-D mixes ``[batch, seq, K]`` only; any leading dims work here.

    Args:
        input_mixes: CUDA tensor ``[..., K]``, ``torch.float32``, ``K = mhc_mult * (mhc_mult
            + 2)``, contiguous, with a 16-byte-aligned data pointer.
        mhc_scale: ``(3,)`` float32, the three segments' scales.
        mhc_base: ``(K,)`` float32, the per-column biases.
        mhc_mult: the number of residual streams R, an int ``>= 1``.
        mhc_post_mult_value: the post mix's factor (TileKernels' models: 2.0), a finite float.
        mhc_pre_eps: added to the pre mix, a finite float.
        out: optional ``(pre_layer_mix, post_layer_mix, comb_res_mix)`` to write into instead
            of allocating: ``[..., R, 1]``, ``[..., R, 1]``, ``[..., R, R]`` float32,
            contiguous, aligned, overlapping nothing.

    All tensors on one CUDA device.

    Returns:
        ``(pre_layer_mix, post_layer_mix, comb_res_mix)`` (`out`'s tensors if given); returned
        without launching anything when there are no tokens.

    Differentiable in the three tensors: the backward is
    :func:`tileaot.mhc_pre_split_mixes_backward` (the inputs are saved; it serves R <= 15).
    Double backward is not supported. `out` only outside autograd.

    Raises:
        TypeError: a tensor argument is not a tensor or not float32; `mhc_mult` is not an int;
            a float argument is not a real number; `out` is not a 3-tuple.
        ValueError: `input_mixes` is 0-d or its K is not ``mhc_mult * (mhc_mult + 2)``;
            `mhc_scale` is not ``(3,)`` or `mhc_base` not ``(K,)``; `mhc_mult` < 1; a float is
            not finite in float32; a tensor is not on a CUDA device (the same one), not
            contiguous or not 16-byte aligned; a size reaches 2**31; an output has the wrong
            shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `input_mixes`' device (as torch ops
    are); the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> mixes = torch.randn(4096, 24, device="cuda")
        >>> scale, base = torch.rand(3, device="cuda"), torch.randn(24, device="cuda")
        >>> pre, post, comb = tileaot.mhc_pre_split_mixes(mixes, scale, base, 4, 2.0, 1e-6)
        >>> comb.shape  # [4096, 4, 4]
    """
    if type(input_mixes) is not _arrays.Tensor and _arrays.foreign(input_mixes):
        return _arrays.call(mhc_pre_split_mixes, locals())
    mhc_mult = check_mhc_mult(mhc_mult)
    scalars = (
        float32_arg("mhc_post_mult_value", mhc_post_mult_value),
        float32_arg("mhc_pre_eps", mhc_pre_eps),
    )
    inputs = {"input_mixes": input_mixes, "mhc_scale": mhc_scale, "mhc_base": mhc_base}
    bound = SCHEMA.bind(inputs, R=mhc_mult)
    mixes_width("input_mixes", bound.dims["K"], mhc_mult)
    tensors = (input_mixes, mhc_scale, mhc_base)
    if any(t.requires_grad for t in tensors) and _arrays.namespace(input_mixes).is_grad_enabled():
        if out is not None:
            raise ValueError(
                "out= is not allowed when an input requires grad (the results would not be "
                "differentiable): pass out=None, or call under torch.no_grad()"
            )
        fn = _grad.function(SCHEMA, _autograd_forward, 3, scalars=(1,))  # the factor
        return fn.apply(*tensors, mhc_mult, *scalars)
    return _forward(tensors, mhc_mult, scalars, out, bound)


def _autograd_forward(*args: Any) -> tuple:
    return _forward(args[:3], args[3], args[4:], None)


def _forward(tensors: tuple, r: int, scalars: tuple, out: Any, bound: Any = None) -> tuple:
    """The launch of a checked call (`bound`: its `SCHEMA.bind`, done again if None)."""
    inputs = dict(zip(("input_mixes", "mhc_scale", "mhc_base"), tensors, strict=True))
    if bound is None:
        bound = SCHEMA.bind(inputs, R=r)
    outs = SCHEMA.outputs(_arrays.namespace(tensors[0]), tensors[0], bound, out, inputs)
    if bound.dims["M"] > 0:
        SCHEMA.launch("fp32", bound.device, (*tensors, *outs), scalars, bound.dims)
    return outs


example_shapes = SCHEMA.example_shapes
