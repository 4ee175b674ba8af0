"""RMSNorm over the last dimension (op "rms_norm")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib, _validate
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "rms_norm"
SCHEMA = OpSchema(
    _OP,
    "x[*M, N]: T, weight[N]: T -> y[*M, N]: T as out; eps: float32",
    dtypes={"T": ("bf16", "fp16", "fp32")},
    example={"M": 4096, "N": 4096},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_INF = float("inf")


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Root-mean-square normalisation of each row of `x`, scaled by `weight`.

    ``y[i, j] = x[i, j] / sqrt(mean_j(x[i, :]**2) + eps) * weight[j]``, accumulated in float32
    and written in the dtype of `x`.

    Args:
        x: CUDA tensor of shape ``(..., N)`` (any number of leading dims, viewed as ``[M, N]``),
            dtype ``torch.bfloat16``, ``torch.float16`` or ``torch.float32``; contiguous, with a
            16-byte-aligned data pointer.
        weight: CUDA tensor of shape ``(N,)``, same dtype and device as `x`, contiguous, aligned.
        eps: added to the mean square before the square root; a finite float >= 0.
        out: optional tensor to write into instead of allocating: same shape, dtype and device
            as `x`, contiguous, aligned, not overlapping `x` or `weight`.

    Returns:
        `y`, a tensor of the shape and dtype of `x` (`out` itself if given). If `x` has no
        elements, `y` is returned without launching anything.

    Raises:
        TypeError: `x`/`weight`/`out` is not a tensor, has an unsupported dtype, or the dtypes
            differ; `eps` is not a real number.
        ValueError: `x` is 0-d; `weight` is not ``(N,)``; a tensor is not on a CUDA device, not on
            the device of `x`, not contiguous or not 16-byte aligned; a dimension or element
            count reaches 2**31; `out` has the wrong shape or overlaps an input; `eps` < 0.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype, shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `x`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(8, 4096, dtype=torch.bfloat16, device="cuda")
        >>> w = torch.ones(4096, dtype=torch.bfloat16, device="cuda")
        >>> y = tileaot.rms_norm(x, w, eps=1e-6)
        >>> ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6))
        >>> torch.testing.assert_close(y, (ref * w.float()).bfloat16())
    """
    if (
        type(x) is _arrays.Tensor
        and isinstance(weight, _arrays.Tensor)  # an nn.Parameter too
        and type(eps) is float
        and 0.0 <= eps < _INF
        and x.dim() == 2
        and weight.dim() == 1  # `_C.call` checks ranks too; y's follows from x's and weight's
    ):
        y = x.new_empty(x.shape) if out is None else out
        if _lib.fast((_OP, x.dtype), (x, weight, y), (eps,), _WRITES):
            return y
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(rms_norm, locals())
    inputs = {"x": x, "weight": weight}
    bound = SCHEMA.bind(inputs)
    if type(eps) is not float or not 0.0 <= eps < _INF:
        eps = _validate.nonneg_float("eps", eps)
    (y,) = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, inputs)
    if x.numel() == 0:
        return y
    handle = SCHEMA.launch(bound.picked["T"], bound.device, (x, weight, y), (eps,), bound.dims)
    if type(x) is _arrays.Tensor:  # the short path passes (x, weight, y) of a 2-D x: these shapes
        _lib.learn((_OP, x.dtype), handle)
    return y


example_shapes = SCHEMA.example_shapes
