"""Gradients of mhc_pre_split_mixes (op "mhc_pre_split_mixes_backward")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays
from ._mhc_args import float32_arg, mixes_width, same_lead
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "mhc_pre_split_mixes_backward"
TOKENS = 256  # tokens per block of the first kernel (kernels_py/mhc/...backward.py)
MAX_K = 256  # the block reduction gives each column a thread
SCHEMA = OpSchema(
    _OP,
    "pre_layer_mix_grad[*M, R, 1]: fp32, post_layer_mix_grad[*M, R, 1]: fp32,"
    " comb_res_mix_grad[*M, R, R]: fp32, input_mixes[*M, K]: fp32, mhc_scale[3]: fp32,"
    " mhc_base[K]: fp32 -> input_mixes_grad[*M, K]: fp32, mhc_scale_grad[3]: fp32,"
    " mhc_base_grad[K]: fp32, scratch partial[P, 2 * K]: fp32; mhc_post_mult_value: float32",
    key="fp32",
    sizes={"P": f"(M + {TOKENS - 1}) // {TOKENS}"},
    example={"M": 32768, "K": 24, "R": 4},
)
_GRADS = ("pre_layer_mix_grad", "post_layer_mix_grad", "comb_res_mix_grad")


def mhc_pre_split_mixes_backward(
    pre_layer_mix_grad: torch.Tensor,
    post_layer_mix_grad: torch.Tensor,
    comb_res_mix_grad: torch.Tensor,
    input_mixes: torch.Tensor,
    mhc_scale: torch.Tensor,
    mhc_base: torch.Tensor,
    mhc_post_mult_value: float,
    *,
    out: tuple | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_mixes_grad, mhc_scale_grad, mhc_base_grad)`` of
    :func:`tileaot.mhc_pre_split_mixes` for the incoming gradients of its three outputs.

    With ``z`` and ``s = sigmoid(z)`` recomputed as the forward rounds them (R = mhc_mult,
    ``scale[j]`` the scale of column j's segment)::

        gz[..., j] = pre_layer_mix_grad[..., j, 0] * (1 - s) * s                   j < R
        gz[..., j] = (post_layer_mix_grad[..., j - R, 0] * mhc_post_mult_value) * (1 - s) * s
        gz[..., j] = comb_res_mix_grad[..., m, n]               j = 2 R + m R + n
        input_mixes_grad = gz * scale
        mhc_base_grad[j] = sum over tokens of gz[..., j]
        mhc_scale_grad[k] = sum over segment k's columns and the tokens of gz * input_mixes

    in float32, the products rounded as torch's autograd through the reference rounds them
    (``input_mixes_grad`` is its value on the GPU); the sums run in a fixed order (block by
    block of 256 tokens, no atomics: the same result every run), within float32 rounding of
    autograd's. TileKernels' backward (``tile_kernels/mhc/pre_split_mixes_kernel.py`` of
    `tile-kernels` 1.0.0) computes the same; it takes ``post_layer_mix / mhc_post_mult_value``
    for ``s`` (NaN when the factor is 0; here the gradient, 0).

    Args:
        pre_layer_mix_grad, post_layer_mix_grad: CUDA tensors ``[..., R, 1]``,
            ``torch.float32``, ``1 <= R <= 15``.
        comb_res_mix_grad: ``[..., R, R]`` float32.
        input_mixes: the forward's ``[..., K]`` float32 (the grads' leading dims), ``K = R (R +
            2)``.
        mhc_scale, mhc_base: the forward's ``(3,)`` and ``(K,)`` float32.
        mhc_post_mult_value: the forward's factor, a finite float.
        out: optional ``(input_mixes_grad, mhc_scale_grad, mhc_base_grad)`` to write into
            instead of allocating: the shapes of `input_mixes`, `mhc_scale`, `mhc_base`.

    All tensors float32, contiguous, 16-byte aligned, on one CUDA device, outputs overlapping
    nothing.

    Returns:
        ``(input_mixes_grad, mhc_scale_grad, mhc_base_grad)`` (`out`'s tensors if given); with
        no tokens, zero sums and nothing launched.

    Raises:
        TypeError: a tensor argument is not a tensor or not float32; the factor is not a real
            number; `out` is not a 3-tuple.
        ValueError: shapes that do not fit together (leading dims, R, K = R (R + 2), the 1s,
            3); R > 15; the factor is not finite in float32; a tensor is not on a CUDA device
            (the same one), not contiguous or not 16-byte aligned; a size reaches 2**31; an
            output has the wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernels are enqueued on torch's current stream of the grads' device (as torch ops
    are), with a small scratch of per-block sums; the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> mixes = torch.randn(4096, 24, device="cuda")
        >>> scale, base = torch.rand(3, device="cuda"), torch.randn(24, device="cuda")
        >>> g_pre, g_post = torch.randn(2, 4096, 4, 1, device="cuda")
        >>> g_comb = torch.randn(4096, 4, 4, device="cuda")
        >>> gx, gscale, gbase = tileaot.mhc_pre_split_mixes_backward(
        ...     g_pre, g_post, g_comb, mixes, scale, base, 2.0)
    """
    if type(pre_layer_mix_grad) is not _arrays.Tensor and _arrays.foreign(pre_layer_mix_grad):
        return _arrays.call(mhc_pre_split_mixes_backward, locals())
    c = float32_arg("mhc_post_mult_value", mhc_post_mult_value)
    grads = (pre_layer_mix_grad, post_layer_mix_grad, comb_res_mix_grad)
    inputs = dict(zip(_GRADS, grads, strict=True))
    inputs |= {"input_mixes": input_mixes, "mhc_scale": mhc_scale, "mhc_base": mhc_base}
    bound = SCHEMA.bind(inputs)
    for name, t in zip(_GRADS[1:], grads[1:], strict=True):
        same_lead(name, t, 2, _GRADS[0], pre_layer_mix_grad, 2)
    same_lead("input_mixes", input_mixes, 1, _GRADS[0], pre_layer_mix_grad, 2)
    r, k = bound.dims["R"], bound.dims["K"]
    mixes_width("input_mixes", k, r)
    if k > MAX_K:
        raise ValueError(f"{_GRADS[0]} has R = {r}; mhc_pre_split_mixes_backward supports R <= 15")
    fw = _arrays.namespace(input_mixes)
    outs = SCHEMA.outputs(fw, input_mixes, bound, out, inputs)
    if bound.dims["M"] == 0:
        for t in outs[1:]:
            t.zero_()
        return outs
    tensors = (*grads, input_mixes, mhc_scale, mhc_base, *outs)
    workspace = SCHEMA.workspace(fw, input_mixes, bound.dims)
    SCHEMA.launch("fp32", bound.device, (*tensors, workspace), (c,), bound.dims)
    return outs


example_shapes = SCHEMA.example_shapes
