"""Per-channel cast to FP8 E4M3 written transposed, one float32 scale per column of every 32
or 128 tokens (op "per_channel_cast_and_transpose"): TileKernels'
``per_channel_cast_and_transpose``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays, _row_group_cast, _validate
from ._schema import OpSchema, short_of

if TYPE_CHECKING:
    import torch

_OP = "per_channel_cast_and_transpose"
GROUPS = (32, 128)  # tokens per scale built (TileKernels' num_per_tokens values)
VEC = 8  # H % 8 == 0: the kernel's 16-byte loads
TOKENS_PER_LAUNCH = 65535 * 128  # gridDim.y (128-token tiles) stops at 65535


def _scale_rows(key: str) -> dict[str, int | str]:
    return {"S": f"T // {key.rpartition(',g')[2]}"}


def _key_of(args: dict) -> str:
    return f"{short_of(args['x'].dtype)},g{args['num_per_tokens']}"


# What the dispatch key (dtype, g32/g128) fixes: the scale's rows S; shared with the
# SwiGLU-fused twin's schema.
KEYED: dict[str, Any] = {
    "fields": {"X": "dtype"},
    "key": "{X},{group}",
    "keyed": _scale_rows,
    "key_of": _key_of,
}
SCHEMA = OpSchema(
    _OP,
    "x[T, H]: X -> q[H, T]: e4m3, scale[S, H]: fp32; round_sf: int32",
    dtypes={"X": ("bf16", "fp16")},
    example={"T": 4096, "H": 7168},
    **KEYED,
)


def per_channel_cast_and_transpose(
    x: torch.Tensor,
    num_per_tokens: int = 128,
    *,
    round_sf: bool = False,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise `x` ``[T, H]`` to FP8 E4M3 written transposed (``q[h, t]`` is ``x[t, h]``'s
    code), one float32 scale per hidden column of every `num_per_tokens` tokens: TileKernels
    1.0.0's ``per_channel_cast_and_transpose(x, "e4m3", num_per_tokens, round_sf)``, bit for bit.

    For each column ``h`` and group of `num_per_tokens` tokens, in float32 with ``amax =
    max(amax(|x[group, h]|), 1e-4)``: ``scale = amax / 448`` (448 is the E4M3 maximum;
    ``round_sf=True``: rounded up to a power of two) and ``q[h, t] = x[t, h] * (448 / amax)``
    (``round_sf=True``: ``* (1 / scale)``, exact), rounded to nearest even into
    ``torch.float8_e4m3fn``, saturating at ±448; so ``x.T ≈ q.float() *
    scale.repeat_interleave(num_per_tokens, 0).T``. This is `tileaot.per_channel_cast_fp8`'s
    cast (with 32-token groups too) with the codes transposed, what TileKernels' reference
    ``tile_kernels.torch.cast(x, "e4m3", (num_per_tokens, 1), round_sf=round_sf)`` computes
    before the transpose. For finite `x` the result equals, bit for bit,
    ``kernels_py.quant.per_channel_cast_and_transpose.reference``; non-finite elements give
    unspecified results.

    Args:
        x: CUDA tensor ``[T, H]``, ``torch.bfloat16`` or ``torch.float16``; contiguous, with
            a 16-byte-aligned data pointer. ``T % num_per_tokens == 0`` (TileKernels asks
            ``T % 128 == 0``), ``T <= 65535 * 128``, ``H % 8 == 0`` (TileKernels: ``% 64``).
        num_per_tokens: tokens per scale, 128 (the default) or 32.
        round_sf: power-of-two scales (``2^ceil(log2(amax / 448))``); default False.
        out: optional ``(q, scale)`` to write into instead of allocating, with exactly the
            shapes and dtypes below, on the device of `x`, contiguous, 16-byte aligned, not
            overlapping `x` or each other.

    Returns:
        ``(q, scale)``: `q` ``[H, T]`` ``torch.float8_e4m3fn``; `scale`
        ``[T // num_per_tokens, H]`` ``torch.float32``. If `x` has no elements nothing is
        launched.

    Raises:
        TypeError: `x` is not a tensor or has an unsupported dtype; `num_per_tokens` is not an
            int; `round_sf` is not a bool; `out` is not a pair of tensors, or has a wrong dtype.
        ValueError: `x` is not 2-D; `num_per_tokens` is not 32 or 128, or does not divide T;
            ``H % 8 != 0``; T past 65535 * 128; a tensor is not on a CUDA device (the same
            one), not contiguous or not 16-byte aligned; a dimension or element count reaches
            2**31; `out` has a wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    One kernel, enqueued on torch's current stream of `x`'s device; the call returns without
    synchronising. Arrays of other frameworks (CuPy, ... via DLPack) work too; see
    `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(4096, 7168, dtype=torch.bfloat16, device="cuda")
        >>> q, scale = tileaot.per_channel_cast_and_transpose(x, 128)  # q: [7168, 4096]
        >>> x_t = q.float() * scale.repeat_interleave(128, 0).T  # ≈ x.T, within e4m3 rounding
    """
    if type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(per_channel_cast_and_transpose, locals())
    bound = SCHEMA.bind({"x": x})
    key = checked_key(SCHEMA, bound, num_per_tokens, round_sf)
    q, scale = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, {"x": x})
    if bound.dims["T"] == 0 or bound.dims["H"] == 0:
        return q, scale
    SCHEMA.launch(key, bound.device, (x, q, scale), _row_group_cast.ROUND_SF[round_sf], bound.dims)
    return q, scale


def checked_key(schema: OpSchema, bound: Any, num_per_tokens: Any, round_sf: Any) -> str:
    """The dispatch key of a checked call of `schema`'s op (this one or its SwiGLU-fused
    twin: tokens T and output columns H bound), its scale rows fixed on `bound`; one-line
    errors for the rules the schema does not state."""
    op = schema.op
    if type(num_per_tokens) is not int:
        num_per_tokens = _validate.integer("num_per_tokens", num_per_tokens)
    if num_per_tokens not in GROUPS:
        raise ValueError(f"num_per_tokens must be 32 or 128; got {num_per_tokens}")
    if type(round_sf) is not bool:
        raise TypeError(f"round_sf must be True or False; got {type(round_sf).__name__}")
    t, h = bound.dims["T"], bound.dims["H"]
    if t % num_per_tokens:
        raise ValueError(
            f"x has T = {t} tokens, not a multiple of num_per_tokens={num_per_tokens}: pad x"
        )
    if h % VEC:
        raise ValueError(f"{op} needs H % 8 == 0 output columns; x gives H = {h}")
    if t > TOKENS_PER_LAUNCH:
        raise ValueError(f"x has T = {t} tokens; {op} takes at most {TOKENS_PER_LAUNCH}: split x")
    key = f"{bound.picked['X']},g{num_per_tokens}"
    schema.fix(bound, key)
    return key


example_shapes = SCHEMA.example_shapes
