"""Gradients of mhc_pre_norm_fn (op "mhc_pre_norm_fn_backward")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _validate
from ._mhc_args import fn_by_stream_checked, norm_fn_dims, same_lead
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "mhc_pre_norm_fn_backward"
SCHEMA = OpSchema(
    _OP,
    "out_grad[*M, N]: fp32, residual[*M, R, H]: bf16, mhc_fn[N, R, H]: fp32"
    " -> residual_grad[*M, R, H]: bf16, mhc_fn_grad[N, R, H]: fp32,"
    " scratch stats[M, N + 1]: fp32, scratch part[16, M, 33]: fp32; mhc_norm_eps: float32",
    key="bf16",
    example={"M": 32768, "R": 4, "H": 7168, "N": 24},
)


def mhc_pre_norm_fn_backward(
    out_grad: torch.Tensor,
    residual: torch.Tensor,
    mhc_fn: torch.Tensor,
    mhc_norm_eps: float = 1e-6,
    *,
    out: tuple | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(residual_grad, mhc_fn_grad)`` of :func:`tileaot.mhc_pre_norm_fn` for the incoming
    `out_grad` (the forward without a norm weight: pass ``mhc_fn * mhc_norm_weight``).

    Per token, with ``x = residual[t]`` flattened to ``K = R * H`` values, ``d[n] = x .
    mhc_fn[n]``, ``s = sum_k x[k]**2``, ``r = rsqrt(s / K + mhc_norm_eps)`` and ``g =
    out_grad[t]``::

        gd[n] = g[n] * r
        gs    = -(sum_n g[n] * d[n]) * r / (s + mhc_norm_eps * K) / 2
        residual_grad[t, k] = bf16(sum_n gd[n] * mhc_fn[n, k] + 2 * x[k] * gs)
        mhc_fn_grad[n, k]   = sum over tokens of gd[n] * x[k]

    as TileKernels' backward (``tile_kernels.modeling.mhc.ops.mhc_pre_norm_fn`` of
    `tile-kernels` 1.0.0): the products on tensor cores with ``gd`` and ``mhc_fn`` rounded to
    TF32, float32 sums, every sum in a fixed order (no atomics: the same result every run);
    within TileKernels' test bounds of torch's autograd through its reference
    (``tile_kernels.torch.mhc.mhc_pre_norm_fn_ref``).

    Args:
        out_grad: CUDA tensor ``[..., N]``, ``torch.float32`` (the forward output's gradient),
            ``N <= 32``.
        residual: the forward's ``[..., R, H]`` bf16 (`out_grad`'s leading dims), ``R * H >=
            1``.
        mhc_fn: the forward's ``[N, R * H]`` or ``[N, R, H]`` float32.
        mhc_norm_eps: the forward's eps, a finite float >= 0.
        out: optional ``(residual_grad, mhc_fn_grad)`` to write into instead of allocating:
            `residual`'s shape (bf16) and `mhc_fn`'s (float32; ``[N, R, H]`` fits either).

    All tensors contiguous, 16-byte aligned, on one CUDA device, outputs overlapping nothing.

    Returns:
        ``(residual_grad, mhc_fn_grad)``: bf16 in `residual`'s shape, float32 in `mhc_fn`'s
        (`out`'s tensors if given); with no tokens or no mixes, zeros and nothing launched.

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype; `mhc_norm_eps` is
            not a real number; `out` is not a 2-tuple.
        ValueError: shapes that do not fit together (leading dims, N, ``[N, R * H]``); N > 32;
            R or H is 0; `mhc_norm_eps` < 0; a tensor is not on a CUDA device (the same one),
            not contiguous or not 16-byte aligned; a size reaches 2**31; an output has the
            wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernels (three launches) are enqueued on torch's current stream of `out_grad`'s device
    (as torch ops are), with a scratch of per-token sums and gradients (``4 * (N + 1) + 2112``
    bytes per token); the call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack; `mhc_fn` as ``[N, R, H]``) work too; see
    `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> residual = torch.randn(4096, 4, 7168, device="cuda").bfloat16()
        >>> fn = torch.randn(24, 4 * 7168, device="cuda") * 1e-4
        >>> g = torch.randn(4096, 24, device="cuda")
        >>> residual_grad, fn_grad = tileaot.mhc_pre_norm_fn_backward(g, residual, fn, 1e-6)
    """
    if type(out_grad) is not _arrays.Tensor and _arrays.foreign(out_grad):
        return _arrays.call(mhc_pre_norm_fn_backward, locals())
    fn = mhc_fn
    if hasattr(residual, "shape") and hasattr(mhc_fn, "shape") and residual.dim() >= 2:
        fn = fn_by_stream_checked(mhc_fn, residual)
    inputs = {"out_grad": out_grad, "residual": residual, "mhc_fn": fn}
    bound = SCHEMA.bind(inputs)
    same_lead("out_grad", out_grad, 1, "residual", residual, 2)
    norm_fn_dims(_OP, bound.dims, residual)
    eps = _validate.nonneg_float("mhc_norm_eps", mhc_norm_eps)
    fw = _arrays.namespace(residual)
    given = out
    if fn is not mhc_fn and _pair(out) and tuple(out[1].shape) == tuple(mhc_fn.shape):
        given = (out[0], fn_by_stream_checked(out[1], residual))  # [N, R * H]: by stream
    x_grad, fn_grad = SCHEMA.outputs(fw, residual, bound, given, inputs)
    if bound.dims["M"] == 0 or bound.dims["N"] == 0:  # no mixes: a zero gradient
        x_grad.zero_()
        fn_grad.zero_()
    else:
        tensors = (out_grad, residual, fn, x_grad, fn_grad)
        workspace = SCHEMA.workspace(fw, residual, bound.dims)
        SCHEMA.launch("bf16", bound.device, (*tensors, workspace), (eps,), bound.dims)
    if out is not None:
        return tuple(out)
    return x_grad, fn_grad.view(mhc_fn.shape)  # the caller's layout


def _pair(out: Any) -> bool:
    """`out` holds a contiguous second tensor (one to view by stream; the schema checks the
    rest, naming it)."""
    return (
        isinstance(out, tuple)
        and len(out) == 2
        and hasattr(out[1], "shape")
        and isinstance(out[1], _arrays.Tensor)
        and out[1].is_contiguous()
    )


example_shapes = SCHEMA.example_shapes
