"""SwiGLU + optional routing weight + per-128-group FP8 E4M3 cast in one kernel
(op "swiglu_per_token_cast_fp8"): TileKernels' ``swiglu_forward_and_per_token_cast`` to
``"e4m3"`` with 128-column groups, per-row weights and row-major float32 scales."""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

from . import _arrays, _lib
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "swiglu_per_token_cast_fp8"
GROUP = 128  # columns of q per scale
SCHEMA = OpSchema(
    _OP,
    f"x[M, 2*H]: T, weights?[M]: fp32 -> q[M, H]: e4m3, scale[M, H // {GROUP}]: fp32;"
    " limit: float32, weighted: int32, round_sf: int32",
    dtypes={"T": ("bf16",)},
    example={"M": 4096, "H": 7168},
)
_INF = float("inf")  # the kernel's "no clamp" limit
_FLT_MAX = 3.4028234663852886e38
_CLAMP_MIN = 2.0**-126  # smallest normal float32: the limit must not round to 0
# `_lib.fast`: tensors (x, weights, q, scale). Only calls with weights take it: without, the
# kernel's weights slot gets x's pointer as an [M] tensor (not a view the short path can pass).
_FAST_KEY = (_OP, "weights")
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path


def swiglu_per_token_cast_fp8(
    x: torch.Tensor,
    weights: torch.Tensor | None = None,
    clamp: float | None = None,
    *,
    round_sf: bool = False,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SwiGLU of packed gate/up rows, times a per-row weight, quantised to FP8 E4M3.

    The MoE expert activation feeding an FP8 down projection: TileKernels 1.0.0's
    ``swiglu_forward_and_per_token_cast(x, "e4m3", 128, swiglu_clamp_value=clamp,
    round_sf=round_sf)`` with one weight per row, bit for bit. With ``H = x.shape[1] // 2``,
    gate ``g = x[:, :H]``, up ``u = x[:, H:]`` (float32 math throughout, every operation
    rounded to nearest even)::

        if clamp is not None:                          # DeepSeek-V3 swiglu_limit
            g = min(g, clamp);  u = min(max(u, -clamp), clamp)
        a     = g / (1 + exp(-g)) * u * weights[:, None]
        amax  = max(max |a| over each group of 128 columns, 1e-4)
        scale = amax / 448                  # one float32 per group (round_sf: rounded up
                                            # to a power of two)
        q     = float8_e4m3fn(a * (448 / amax))   # round_sf: a * (1 / scale); saturating

    so that ``a ≈ q.float() * scale`` broadcast over each group; the activation is never
    rounded to bf16. ``exp`` is the accurate one torch uses on CUDA, so torch evaluating these
    formulas on the GPU gives the same bytes. x is read once, q and scale written once.

    Args:
        x: CUDA tensor ``[M, 2H]``, dtype ``torch.bfloat16``, ``H % 128 == 0``; contiguous,
            with a 16-byte-aligned data pointer.
        weights: optional CUDA tensor ``[M]`` float32 (the top-k routing weight of each row),
            contiguous and aligned, on the device of `x`. None: no weighting.
        clamp: optional limit, a float in [2**-126, 3.4e38] (used as float32): the gate is
            capped at ``clamp`` and the up projection clamped to ``[-clamp, clamp]`` before
            the activation. None: no clamp.
        round_sf: power-of-two scales (``2^ceil(log2(amax / 448))``); default False.
        out: optional ``(q, scale)`` to write into instead of allocating, with exactly the
            shapes and dtypes below, on the device of `x`, contiguous, aligned, not
            overlapping `x`, `weights` or each other.

    Returns:
        ``(q, scale)``: `q` ``[M, H]`` ``torch.float8_e4m3fn``, `scale` ``[M, H // 128]``
        ``torch.float32``. If `q` has no elements nothing is launched.

    Raises:
        TypeError: `x`, `weights` or `out` is not a tensor / a pair of tensors or has the
            wrong dtype; `clamp` is not a real number; `round_sf` is not a bool.
        ValueError: `x` is not 2-D, has an odd number of columns or ``H % 128 != 0``;
            `weights` is not ``[M]``; `clamp` is not finite or not > 0; a tensor is not on a
            CUDA device (the same one), not contiguous or not 16-byte aligned; a dimension or
            element count reaches 2**31; `out` has a wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the shape or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `x`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(64, 2 * 2048, dtype=torch.bfloat16, device="cuda")  # gate | up
        >>> w = torch.rand(64, device="cuda")  # routing weights
        >>> q, scale = tileaot.swiglu_per_token_cast_fp8(x, w, clamp=7.0)  # scale: [64, 16]
        >>> a_hat = (q.float().view(64, 16, 128) * scale[:, :, None]).view(64, 2048)
    """
    if (
        type(x) is _arrays.Tensor
        and type(weights) is _arrays.Tensor
        and (clamp is None or type(clamp) is float and _CLAMP_MIN <= clamp <= _FLT_MAX)
        and type(round_sf) is bool
        and x.dim() == 2
        and weights.dim() == 1
        and _arrays.plain_pair(out, 2)
    ):
        pair = out
        if pair is None:
            m, h = x.shape[0], x.shape[1] >> 1
            torch = _arrays._torch
            pair = (
                x.new_empty(m, h, dtype=torch.float8_e4m3fn),
                x.new_empty(m, h // GROUP, dtype=torch.float32),
            )
        limit = _INF if clamp is None else clamp
        scalars = (limit, 1.0, 1.0 if round_sf else 0.0)
        if _lib.fast(_FAST_KEY, (x, weights, *pair), scalars, _WRITES):
            return pair
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(swiglu_per_token_cast_fp8, locals())
    inputs = {"x": x, "weights": weights}
    bound = SCHEMA.bind(inputs)
    if type(round_sf) is not bool:
        raise TypeError(f"round_sf must be True or False; got {type(round_sf).__name__}")
    h = bound.dims["H"]
    if h % GROUP:
        raise ValueError(
            f"x must be [M, 2H] with H % {GROUP} == 0 (one scale per {GROUP} columns); it has "
            f"{2 * h} columns (H = {h}): pad the projections to a multiple of {GROUP}"
        )
    limit = _INF if clamp is None else _check_clamp(clamp)
    q, scale = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, inputs)
    if bound.dims["M"] == 0 or h == 0:
        return q, scale
    # Without weights the kernel never reads its weights slot (weighted = 0): x fills it.
    tensors = (x, x if weights is None else weights, q, scale)
    scalars = (limit, 0.0 if weights is None else 1.0, 1.0 if round_sf else 0.0)
    handle = SCHEMA.launch(bound.picked["T"], bound.device, tensors, scalars, bound.dims)
    if type(x) is _arrays.Tensor and weights is not None:  # launched (x, weights, q, scale)
        _lib.learn(_FAST_KEY, handle)
    return q, scale


def _check_clamp(value: Any) -> float:
    """`clamp` as a float the kernel receives unchanged as a normal float32."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"clamp must be a real number or None, got {type(value).__name__}")
    value = float(value)
    if not _CLAMP_MIN <= value <= _FLT_MAX:
        raise ValueError(
            f"clamp must be > 0 and finite in float32 (between 2**-126 and 3.4e38), or None "
            f"for no clamp; got {value}"
        )
    return value


example_shapes = SCHEMA.example_shapes
