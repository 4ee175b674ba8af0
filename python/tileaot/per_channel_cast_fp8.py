"""Per-channel cast to FP8 E4M3 with float32 scales (op "per_channel_cast_fp8"): one scale per
column per 128 rows, TileKernels' ``per_channel_cast`` to ``"e4m3"``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _row_group_cast
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "per_channel_cast_fp8"
ROWS = _row_group_cast.ROWS  # rows of x sharing a scale, in each column
SCHEMA = OpSchema(
    _OP,
    f"x[M, N]: T -> q[M, N]: e4m3, scale[(M + {ROWS - 1}) // {ROWS}, N]: fp32; round_sf: int32",
    dtypes={"T": ("bf16", "fp16", "fp32")},
    example={"M": 4096, "N": 7168},
)


def _scale_cols(n: int) -> int:
    return n  # one scale per column


def per_channel_cast_fp8(
    x: torch.Tensor,
    *,
    round_sf: bool = False,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise `x` to FP8 E4M3 with one float32 scale per column of every 128 rows.

    TileKernels 1.0.0's ``per_channel_cast(x, "e4m3", num_per_tokens=128, round_sf=round_sf)``,
    bit for bit. For each column ``j`` and each group of 128 rows (the last group may be
    smaller), in float32 with ``amax = max(amax(|x[rows, j]|), 1e-4)``: ``scale = amax / 448``
    (448 is the E4M3 maximum; ``round_sf=True``: rounded up to a power of two) and
    ``q = x[rows, j] * (448 / amax)`` (``round_sf=True``: ``* (1 / scale)``, exact), rounded
    to nearest even into ``torch.float8_e4m3fn``, saturating at ±448; so
    ``x ≈ q.float() * scale.repeat_interleave(128, 0)[:M]``. For finite `x` the result equals,
    bit for bit, the torch reference ``kernels_py.quant.per_channel_cast_fp8.reference``;
    non-finite elements give unspecified results.

    Args:
        x: CUDA tensor ``[M, N]`` (any M and N; TileKernels asks ``M % 128 == 0`` and
            ``N % 64 == 0``), dtype ``torch.bfloat16``, ``torch.float16`` or ``torch.float32``;
            contiguous, with a 16-byte-aligned data pointer. The fast path needs
            ``N % 8 == 0`` (``N % 4 == 0`` for float32); other N work, slower.
        round_sf: power-of-two scales (``2^ceil(log2(amax / 448))``); default False.
        out: optional ``(q, scale)`` to write into instead of allocating, with exactly the
            shapes and dtypes below, on the device of `x`, contiguous, 16-byte aligned, not
            overlapping `x` or each other.

    Returns:
        ``(q, scale)``: `q` ``[M, N]`` ``torch.float8_e4m3fn``; `scale`
        ``[ceil(M / 128), N]`` ``torch.float32``. If `x` has no elements nothing is launched
        (and `scale` has no elements either).

    Raises:
        TypeError: `x` is not a tensor or has an unsupported dtype; `round_sf` is not a bool;
            `out` is not a pair of tensors, or has a wrong dtype.
        ValueError: `x` is not 2-D; a tensor is not on a CUDA device (the same one), not
            contiguous or not 16-byte aligned; a dimension or element count reaches 2**31;
            `out` has a wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `x`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> g = torch.randn(4096, 7168, dtype=torch.bfloat16, device="cuda")
        >>> q, scale = tileaot.per_channel_cast_fp8(g)  # scale: [32, 7168]
        >>> g_hat = q.float() * scale.repeat_interleave(128, 0)  # ≈ g, within e4m3 rounding
    """
    return _row_group_cast.cast(per_channel_cast_fp8, SCHEMA, _scale_cols, x, round_sf, out)


example_shapes = SCHEMA.example_shapes
