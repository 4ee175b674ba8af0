"""mHC pre-norm projection of the residual streams into the layer's mixes (op
"mhc_pre_norm_fn"); its gradient is mhc_pre_norm_fn_backward."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _grad, _lib, _validate
from ._mhc_args import fn_by_stream, fn_by_stream_checked, norm_fn_dims
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "mhc_pre_norm_fn"
SCHEMA = OpSchema(
    _OP,
    "residual[*M, R, H]: bf16, mhc_fn[N, R, H]: fp32 -> out[*M, N]: fp32,"
    " scratch part[16, M, 33]: fp32; mhc_norm_eps: float32",
    key="bf16",
    example={"M": 32768, "R": 4, "H": 7168, "N": 24},
    backward="mhc_pre_norm_fn_backward",
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_FAST_KEY = (_OP, "bf16")  # `_lib.fast`: (residual, mhc_fn as [N, R, H], out, part), 3-D residual
_INF = float("inf")


def mhc_pre_norm_fn(
    residual: torch.Tensor,
    mhc_fn: torch.Tensor,
    mhc_norm_weight: torch.Tensor | None = None,
    mhc_norm_eps: float = 1e-6,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The layer's mHC mixes: each token's residual streams projected by `mhc_fn`, RMS-normalised.

    With ``x = residual[t]`` flattened to ``K = R * H`` values and ``fn = mhc_fn`` (times
    `mhc_norm_weight` where given)::

        out[t, n] = (sum_k x[k] * fn[n, k]) * rsqrt(sum_k x[k]**2 / K + mhc_norm_eps)

    TileKernels' ``mhc_pre_norm_fn`` forward (`tile-kernels` 1.0.0,
    ``tile_kernels.modeling.mhc.ops``; reference ``tile_kernels.torch.mhc.mhc_pre_norm_fn_ref``;
    same arguments). Float32 sums; within TileKernels' test bound (``atol = rtol = 1e-3``) of
    its reference; as TileKernels' kernel, ours rounds ``fn`` to TF32 and multiplies on tensor
    cores (sm_80 on), with the same result every run.

    Differentiable in `residual`, `mhc_fn` and `mhc_norm_weight`: the backward is
    :func:`tileaot.mhc_pre_norm_fn_backward` (residual and ``fn`` are saved; the weight's
    gradient comes through torch's multiply). Double backward is not supported. `out` only
    outside autograd.

    Args:
        residual: CUDA tensor ``[..., R, H]``, ``torch.bfloat16`` (the residual streams),
            contiguous, with a 16-byte-aligned data pointer (any H; ``H % 8 == 0`` takes
            16-byte accesses).
        mhc_fn: ``[N, R * H]`` (TileKernels' layout) or ``[N, R, H]``, ``torch.float32``, on
            `residual`'s device, contiguous, aligned; ``N <= 32`` (``R * (R + 2)`` in the
            models: 24 at R = 4).
        mhc_norm_weight: optional ``[R * H]`` float32 (torch tensors only): ``fn = mhc_fn *
            mhc_norm_weight`` (one torch multiply before the launch), as TileKernels does.
        mhc_norm_eps: added to the mean square before the square root; a finite float >= 0.
        out: optional tensor to write into instead of allocating: ``[..., N]``, float32,
            contiguous, aligned, overlapping no input.

    Returns:
        ``[..., N]``, ``torch.float32`` (`out` itself if given); returned without launching
        anything when empty (no tokens, or N = 0).

    Raises:
        TypeError: a tensor argument is not a tensor or has the wrong dtype; `mhc_norm_eps` is
            not a real number; `mhc_norm_weight`, or a 2-D `mhc_fn`, with arrays of another
            framework.
        ValueError: `mhc_fn`'s columns are not ``R * H``; N > 32; R or H is 0 (no mean
            square); `mhc_norm_weight` is not
            ``[R * H]``; a tensor is not on a CUDA device (the same one), not contiguous or not
            16-byte aligned; a size reaches 2**31; `out` has the wrong shape or overlaps an
            input (or is given while an input requires grad); `mhc_norm_eps` < 0.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernels (two launches) are enqueued on torch's current stream of `residual`'s device (as
    torch ops are), with a scratch of partial sums (2112 bytes per token); the call returns
    without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> residual = torch.randn(4096, 4, 7168, device="cuda").bfloat16()
        >>> fn = torch.randn(24, 4 * 7168, device="cuda") * 1e-4
        >>> mixes = tileaot.mhc_pre_norm_fn(residual, fn, None, 1e-6)  # [4096, 24] float32
    """
    if (
        type(residual) is _arrays.Tensor
        and type(mhc_fn) is _arrays.Tensor
        and mhc_norm_weight is None
        and type(mhc_norm_eps) is float
        and 0.0 <= mhc_norm_eps < _INF
        and residual.dim() == 3
        and not (residual.requires_grad or mhc_fn.requires_grad)
    ):
        fn = fn_by_stream(mhc_fn, residual)
        if fn is not None:
            m = residual.shape[0]
            y = residual.new_empty((m, fn.shape[0]), dtype=fn.dtype) if out is None else out
            part = residual.new_empty((16, m, 33), dtype=fn.dtype)  # the scratch, as a tensor
            if _lib.fast(_FAST_KEY, (residual, fn, y, part), (mhc_norm_eps,), _WRITES):
                return y
    elif type(residual) is not _arrays.Tensor and _arrays.foreign(residual):
        return _arrays.call(mhc_pre_norm_fn, locals())
    inputs = (residual, mhc_fn) + (() if mhc_norm_weight is None else (mhc_norm_weight,))
    if (
        any(getattr(t, "requires_grad", False) for t in inputs)
        and _arrays.namespace(residual).is_grad_enabled()
    ):
        if out is not None:
            raise ValueError(
                "out= is not allowed when an input requires grad (the result would not be "
                "differentiable): pass out=None, or call under torch.no_grad()"
            )
        eps = _validate.nonneg_float("mhc_norm_eps", mhc_norm_eps)
        fn = _checked_fn(mhc_fn, residual, mhc_norm_weight)  # torch ops: autograd sees them
        return _grad.function(SCHEMA, _autograd_forward, 2).apply(residual, fn, eps)
    fn = _checked_fn(mhc_fn, residual, mhc_norm_weight)
    named = {"residual": residual, "mhc_fn": fn}
    bound = SCHEMA.bind(named)
    norm_fn_dims(_OP, bound.dims, residual)
    if type(mhc_norm_eps) is not float or not 0.0 <= mhc_norm_eps < _INF:
        mhc_norm_eps = _validate.nonneg_float("mhc_norm_eps", mhc_norm_eps)
    (y,) = SCHEMA.outputs(_arrays.namespace(residual), residual, bound, out, named)
    if y.numel() == 0:
        return y
    workspace = SCHEMA.workspace(_arrays.namespace(residual), residual, bound.dims)
    args = (residual, fn, y, workspace)
    handle = SCHEMA.launch("bf16", bound.device, args, (mhc_norm_eps,), bound.dims)
    if type(residual) is _arrays.Tensor and residual.dim() == 3 and mhc_norm_weight is None:
        _lib.learn(_FAST_KEY, handle)  # the short path's shapes
    return y


def _autograd_forward(residual: torch.Tensor, fn: torch.Tensor, eps: float) -> torch.Tensor:
    return mhc_pre_norm_fn(residual, fn, None, eps)  # autograd records nothing in here


def _checked_fn(mhc_fn: Any, residual: Any, weight: Any) -> Any:
    """`mhc_fn` (times `weight` where given) as ``[N, R, H]``; a one-line error where the
    shapes do not fit (dtypes, devices and layout are the schema's checks)."""
    if not hasattr(residual, "shape") or not hasattr(mhc_fn, "shape"):
        return mhc_fn  # SCHEMA.bind names the argument that is not a tensor
    if residual.dim() < 2:
        raise ValueError(
            f"residual must be [..., R, H], got shape {tuple(residual.shape)}: pass the "
            "residual streams"
        )
    r, h = residual.shape[-2:]
    if weight is not None:
        if not isinstance(weight, _arrays.Tensor) or not isinstance(mhc_fn, _arrays.Tensor):
            raise TypeError(
                "mhc_norm_weight needs torch tensors: multiply mhc_fn by it first and pass None"
            )
        if tuple(weight.shape) != (r * h,):
            raise ValueError(
                f"mhc_norm_weight has shape {tuple(weight.shape)}; it must be [R * H] = "
                f"[{r * h}] (residual shape {tuple(residual.shape)})"
            )
        if weight.dtype != mhc_fn.dtype or weight.device != mhc_fn.device:
            raise TypeError(
                f"mhc_norm_weight must be {mhc_fn.dtype} on {mhc_fn.device} like mhc_fn, got "
                f"{weight.dtype} on {weight.device}"
            )
        mhc_fn = (mhc_fn.reshape(mhc_fn.shape[0], -1) * weight).view(mhc_fn.shape)
    return fn_by_stream_checked(mhc_fn, residual)


example_shapes = SCHEMA.example_shapes
