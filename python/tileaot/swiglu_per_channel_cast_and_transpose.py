"""SwiGLU fused with the per-channel FP8 E4M3 cast written transposed (op
"swiglu_per_channel_cast_and_transpose"): TileKernels'
``swiglu_forward_and_per_channel_cast_and_transpose``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _row_group_cast
from ._schema import OpSchema
from .per_channel_cast_and_transpose import KEYED, checked_key
from .swiglu_per_token_cast_fp8 import _INF, _check_clamp

if TYPE_CHECKING:
    import torch

_OP = "swiglu_per_channel_cast_and_transpose"
SCHEMA = OpSchema(
    _OP,
    "x[T, 2*H]: X -> q[H, T]: e4m3, scale[S, H]: fp32; limit: float32, round_sf: int32",
    dtypes={"X": ("bf16",)},
    example={"T": 4096, "H": 2048},
    **KEYED,
)


def swiglu_per_channel_cast_and_transpose(
    x: torch.Tensor,
    num_per_tokens: int = 128,
    clamp: float | None = None,
    *,
    round_sf: bool = False,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SwiGLU of packed gate/up rows, rounded to bf16, quantised to FP8 E4M3 written
    transposed, one float32 scale per column of every `num_per_tokens` tokens: TileKernels
    1.0.0's ``swiglu_forward_and_per_channel_cast_and_transpose(x, "e4m3", num_per_tokens,
    round_sf, swiglu_clamp_value=clamp)``, bit for bit (the activation of the backward pass's
    weight gradient GEMM). With ``H = x.shape[1] // 2``, gate ``g = x[:, :H]``, up ``u = x[:,
    H:]``, in float32::

        if clamp is not None:                          # DeepSeek-V3 swiglu_limit
            g = min(g, clamp);  u = min(max(u, -clamp), clamp)
        a = bfloat16(g / (1 + exp(-g)) * u)            # as TileKernels' kernel stores it
        q, scale = tileaot.per_channel_cast_and_transpose(a, num_per_tokens, round_sf=...)

    so ``q`` is ``[H, T]`` and ``a.T ≈ q.float() * scale.repeat_interleave(num_per_tokens,
    0).T``. ``exp`` is the accurate one torch uses on CUDA (as `tileaot.swiglu`), so torch
    evaluating these formulas on the GPU gives the same bytes; the activation never leaves
    the chip.

    Args:
        x: CUDA tensor ``[T, 2H]``, ``torch.bfloat16``; contiguous, with a 16-byte-aligned
            data pointer. ``T % num_per_tokens == 0`` (TileKernels asks ``T % 128 == 0``),
            ``T <= 65535 * 128``, ``H % 8 == 0`` (TileKernels: ``2H % 128 == 0``).
        num_per_tokens: tokens per scale, 128 (the default) or 32.
        clamp: optional limit, a float in [2**-126, 3.4e38] (used as float32): the gate is
            capped at ``clamp`` and the up projection clamped to ``[-clamp, clamp]`` before
            the activation. None: no clamp.
        round_sf: power-of-two scales (``2^ceil(log2(amax / 448))``); default False.
        out: optional ``(q, scale)`` to write into instead of allocating, with exactly the
            shapes and dtypes below, on the device of `x`, contiguous, 16-byte aligned, not
            overlapping `x` or each other.

    Returns:
        ``(q, scale)``: `q` ``[H, T]`` ``torch.float8_e4m3fn``; `scale`
        ``[T // num_per_tokens, H]`` ``torch.float32``. If `q` has no elements nothing is
        launched.

    Raises:
        TypeError: `x` or `out` is not a tensor / a pair of tensors or has the wrong dtype;
            `num_per_tokens` is not an int; `clamp` is not a real number; `round_sf` is not
            a bool.
        ValueError: `x` is not 2-D or has an odd number of columns; `num_per_tokens` is not
            32 or 128, or does not divide T; ``H % 8 != 0``; T past 65535 * 128; `clamp` is
            not finite or not > 0; a tensor is not on a CUDA device (the same one), not
            contiguous or not 16-byte aligned; a dimension or element count reaches 2**31;
            `out` has a wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    One kernel, enqueued on torch's current stream of `x`'s device; the call returns without
    synchronising. Arrays of other frameworks (CuPy, ... via DLPack) work too; see
    `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(4096, 2 * 2048, dtype=torch.bfloat16, device="cuda")  # gate | up
        >>> q, scale = tileaot.swiglu_per_channel_cast_and_transpose(x, 128, clamp=7.0)
        >>> q.shape, scale.shape  # ((2048, 4096), (32, 2048))
    """
    if type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(swiglu_per_channel_cast_and_transpose, locals())
    bound = SCHEMA.bind({"x": x})
    key = checked_key(SCHEMA, bound, num_per_tokens, round_sf)
    limit = _INF if clamp is None else _check_clamp(clamp)
    q, scale = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, {"x": x})
    if bound.dims["T"] == 0 or bound.dims["H"] == 0:
        return q, scale
    scalars = (limit, *_row_group_cast.ROUND_SF[round_sf])
    SCHEMA.launch(key, bound.device, (x, q, scale), scalars, bound.dims)
    return q, scale


example_shapes = SCHEMA.example_shapes
