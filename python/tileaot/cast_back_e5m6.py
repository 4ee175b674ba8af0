"""Dequantisation of packed E5M6 codes (op "cast_back_e5m6"): TileKernels'
``cast_back(x, fmt, (1, n), x_special_fmt="e5m6")``, the inverse of `per_token_cast_e5m6`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays
from ._schema import OpSchema, short_of

if TYPE_CHECKING:
    import torch

_OP = "cast_back_e5m6"
PIECE = 12  # bytes per 8 packed codes


def _key_of(args: dict) -> str:
    """The key of a call for torch's fake: the out dtype (bf16 by default)."""
    out_dtype = args["out_dtype"]
    return "bf16" if out_dtype is None else short_of(out_dtype)


# The kernel binds K = 3 N / 2 bytes of codes per row from q; the output has N = K / 12 * 8.
SCHEMA = OpSchema(
    _OP,
    "q[M, K]: u8, scale[M, G]: fp32 -> x[M, K // 12 * 8]: Out as out",
    dtypes={"Out": ("bf16", "fp32")},
    key="{Out}",
    keyed=lambda key: {"Out": key},
    key_of=_key_of,
    example={"M": 4096, "K": 10752, "G": 1},
)


def cast_back_e5m6(
    q: torch.Tensor,
    scale: torch.Tensor,
    *,
    out_dtype: torch.dtype | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dequantise packed E5M6 codes: ``x = fp16(code << 4) * scale``, scale broadcast per row
    (and column group).

    TileKernels 1.0.0's ``cast_back((q, scale), fmt, (1, N // G), x_special_fmt="e5m6")``
    (its reference ``tile_kernels.torch.cast_e5m6.cast_back_from_e5m6``), bit for bit. Each
    row of `q` holds ``N`` 12-bit codes, 8 in every 12 bytes (3 little-endian uint32 words
    ``c0 c1 c2[11:4] | c2[3:0] c3 c4 c5[11:8] | c5[7:0] c6 c7``, most significant bits first),
    as `per_token_cast_e5m6` writes them. A code is the top 12 bits of an fp16 (sign, 5
    exponent, 6 mantissa bits); its value, exact in float32, is multiplied by its scale in one
    float32 multiply and rounded once to `out_dtype` (round to nearest even). NaN codes give
    NaN, infinite ones inf (or NaN times a zero scale).

    Args:
        q: CUDA tensor ``[M, K]``, ``torch.uint8``, ``K % 12 == 0`` (``N = K / 12 * 8``
            values per row); contiguous, 16-byte aligned.
        scale: CUDA tensor ``[M, G]``, ``torch.float32``: ``G`` scales per row, each for
            ``N / G`` consecutive columns, a multiple of 8 (``G = 1``: one per row, what
            `per_token_cast_e5m6` returns). On the device of `q`, contiguous, 16-byte aligned.
        out_dtype: ``torch.bfloat16`` (``None``, the default) or ``torch.float32``.
        out: optional tensor to write into instead of allocating: ``[M, N]`` of `out_dtype`
            on the device of `q`, contiguous, 16-byte aligned, not overlapping `q` or `scale`.

    Returns:
        `x` ``[M, N]`` of `out_dtype` (`out` itself if given). If `q` has no elements nothing
        is launched.

    Raises:
        TypeError: `q`/`scale`/`out` is not a tensor or has a wrong dtype; `out_dtype` is not
            ``torch.bfloat16`` / ``torch.float32``.
        ValueError: `q` or `scale` is not 2-D; ``K % 12 != 0``; `scale` has other rows than
            `q`, no columns, or a group width ``N / G`` that is not a whole multiple of 8; a
            tensor is not on a CUDA device (the same one), not contiguous or not 16-byte
            aligned; a dimension or element count reaches 2**31; `out` has a wrong shape or
            overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the out dtype or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `q`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(16, 7168, dtype=torch.bfloat16, device="cuda")
        >>> q, scale = tileaot.per_token_cast_e5m6(x)  # q: [16, 10752] uint8, scale: [16, 1]
        >>> x_hat = tileaot.cast_back_e5m6(q, scale)  # [16, 7168] bfloat16
        >>> x32 = tileaot.cast_back_e5m6(q, scale, out_dtype=torch.float32)
    """
    if type(q) is not _arrays.Tensor and _arrays.foreign(q):
        return _arrays.call(cast_back_e5m6, locals())
    fw = _arrays.namespace(q)
    inputs = {"q": q, "scale": scale}
    bound = SCHEMA.bind(inputs)
    key = _out_key(fw, out_dtype)
    m, k, g = bound.dims["M"], bound.dims["K"], bound.dims["G"]
    if k % PIECE:
        raise ValueError(
            f"q has {k} bytes per row; E5M6 packs 8 codes in 12 bytes, so q.shape[1] must be a "
            "multiple of 12: pass q as per_token_cast_e5m6 returns it"
        )
    pieces = k // PIECE
    if g == 0 or pieces % g:
        raise ValueError(
            f"scale has {g} columns for N = {pieces * 8} values per row; each scale must cover "
            f"a whole multiple of 8 columns: use G dividing {pieces} (G = 1: one scale per row)"
        )
    SCHEMA.fix(bound, key)
    (x,) = SCHEMA.outputs(fw, q, bound, out, inputs)
    if m == 0 or k == 0:
        return x
    SCHEMA.launch(key, bound.device, (q, scale, x), (), bound.dims)
    return x


def _out_key(fw: Any, out_dtype: Any) -> str:
    """The key of the out dtype (bf16 for None); TypeError for any other dtype."""
    if out_dtype is None or out_dtype is fw.bfloat16:
        return "bf16"
    if out_dtype is fw.float32:
        return "fp32"
    raise TypeError(f"out_dtype must be torch.bfloat16 or torch.float32; got {out_dtype!r}")


example_shapes = SCHEMA.example_shapes
