"""Per-token cast to E5M6 (12-bit codes, packed) with one float32 scale per row (op
"per_token_cast_e5m6"): TileKernels' ``per_token_cast(x, "e5m6", num_per_channels=N)``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _arrays, _lib
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "per_token_cast_e5m6"
PACK = 8  # elements per 12-byte piece of q: N % 8 == 0

SCHEMA = OpSchema(
    _OP,
    "x[M, N]: T -> q[M, N // 8 * 12]: u8, scale[M, 1]: fp32; round_sf: int32",
    dtypes={"T": ("bf16", "fp32")},
    key="{T}",
    example={"M": 4096, "N": 7168},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
_ROUND_SF = {False: (0.0,), True: (1.0,)}  # the kernel's runtime scalar round_sf


def per_token_cast_e5m6(
    x: torch.Tensor,
    *,
    round_sf: bool = False,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each row of `x` to E5M6 (1 sign, 5 exponent, 6 mantissa bits), one float32 scale
    per row, eight 12-bit codes packed in 12 bytes.

    TileKernels 1.0.0's ``per_token_cast(x, "e5m6", num_per_channels=N, round_sf=round_sf)``
    (its reference ``tile_kernels.torch.cast_to_e5m6``), bit for bit. In float32, per row::

        amax  = max(max(|x_row|), 1e-4)
        scale = amax / 65024                (round_sf=True: rounded up to a power of two)
        y     = x_row * (65024 / amax)      (round_sf=True: x_row * (1 / scale), exact)

    (65024 is the E5M6 maximum.) The code of ``y`` is its fp16 value rounded toward zero,
    then rounded half to even on the 17 low float32 mantissa bits into its top 12 bits (see
    kernels_py/quant/per_token_cast_e5m6.py); the codes ``c0..c7`` of 8 consecutive elements
    fill 3 little-endian uint32 words ``c0 c1 c2[11:4] | c2[3:0] c3 c4 c5[11:8] | c5[7:0] c6
    c7`` (most significant bits first). ``x ≈ fp16(code << 4) * scale``. Infinite elements
    give the spec's codes (the row's scale is inf); NaN elements give unspecified results.

    Args:
        x: CUDA tensor ``[M, N]``, ``torch.bfloat16`` or ``torch.float32``, ``N % 8 == 0``;
            contiguous, with a 16-byte-aligned data pointer.
        round_sf: round each scale up to a power of two (``2^ceil(log2(amax / 65024))``);
            default False.
        out: optional ``(q, scale)`` to write into instead of allocating, with exactly the
            shapes and dtypes below, on the device of `x`, contiguous, aligned, not overlapping
            `x` or each other.

    Returns:
        ``(q, scale)``: `q` ``[M, 3 * N // 2]`` ``torch.uint8``; `scale` ``[M, 1]``
        ``torch.float32``. If `x` has no elements nothing is launched; with ``N == 0``
        `scale` is filled with zeros.

    Raises:
        TypeError: `x` or `out` is not a tensor / pair of tensors, or has an unsupported dtype;
            `round_sf` is not a bool.
        ValueError: `x` is not 2-D; ``N % 8 != 0``; a tensor is not on a CUDA device (the same
            one), not contiguous or not 16-byte aligned; a dimension or element count reaches
            2**31; `out` has a wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `x`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(16, 7168, dtype=torch.bfloat16, device="cuda")
        >>> q, scale = tileaot.per_token_cast_e5m6(x)  # q: [16, 10752] uint8, scale: [16, 1]
        >>> q_p2, s_p2 = tileaot.per_token_cast_e5m6(x, round_sf=True)  # powers of two
    """
    if (
        type(x) is _arrays.Tensor
        and type(round_sf) is bool
        and _arrays.plain_pair(out, 2)
        and x.dim() == 2
    ):
        pair = out
        if pair is None:
            m, n = x.shape
            torch = _arrays._torch
            pair = (
                x.new_empty(m, n // PACK * 12, dtype=torch.uint8),
                x.new_empty(m, 1, dtype=torch.float32),
            )
        if _lib.fast((_OP, x.dtype), (x, *pair), _ROUND_SF[round_sf], _WRITES):
            return pair
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(per_token_cast_e5m6, locals())
    bound = SCHEMA.bind({"x": x})
    if type(round_sf) is not bool:
        raise TypeError(f"round_sf must be True or False; got {type(round_sf).__name__}")
    m, n = bound.dims["M"], bound.dims["N"]
    if n % PACK:
        raise ValueError(
            f"x has N = {n} columns; per_token_cast_e5m6 packs 8 codes in 12 bytes and needs "
            "N % 8 == 0: pad the rows to a multiple of 8"
        )
    key = bound.picked["T"]
    q, scale = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, {"x": x})
    if m == 0 or n == 0:
        if m:  # the scales of empty rows: defined, not garbage
            scale.zero_()
        return q, scale
    handle = SCHEMA.launch(key, bound.device, (x, q, scale), _ROUND_SF[round_sf], bound.dims)
    if type(x) is _arrays.Tensor:  # one launch over exactly (x, q, scale): the short path's
        _lib.learn((_OP, x.dtype), handle)
    return q, scale


example_shapes = SCHEMA.example_shapes
