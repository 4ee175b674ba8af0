"""Lossless re-cast of FP4 E2M1 codes with power-of-two block scales to FP8 E4M3 with coarser
power-of-two block scales (op "per_block_cast_lossless"): TileKernels'
``per_block_cast_lossless``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _arrays
from ._schema import OpSchema, short_of

if TYPE_CHECKING:
    import torch

_OP = "per_block_cast_lossless"
SCALE_FORMATS = {"fp32": "fp32", "ue8m0": "u8"}  # scale_format -> the scale's dtype
_FORMAT_OF = {v: k for k, v in SCALE_FORMATS.items()}


def _by_key(key: str) -> dict[str, int | str]:
    """A key "fp32,u8" fixes the output scale's dtype (its second field)."""
    return {"SO": key.partition(",")[2]}


def _key_of(args: dict) -> str:
    return f"{short_of(args['x_sf'].dtype)},{SCALE_FORMATS[args['scale_format']]}"


SCHEMA = OpSchema(
    _OP,
    "x[M, K]: u8, x_sf[MI, KI]: SI -> q[M, 2*K]: e4m3, scale[MO, KO]: SO;"
    " in_m: int32, in_k_log2: int32, out_m: int32, out_k_log2: int32",
    dtypes={"SI": ("fp32", "u8"), "SO": ("fp32", "u8")},
    fields={"SI": "sf_in", "SO": "sf_out"},
    key="{SI},{SO}",
    keyed=_by_key,
    key_of=_key_of,
    sizes={"MO": "(M + BM - 1) // BM", "KO": "(2 * K + BK - 1) // BK"},
    public={"BM": "block_m", "BK": "block_k"},
    example={"M": 4096, "K": 3584, "MI": 4096, "KI": 224, "BM": 128, "BK": 128},
)


def per_block_cast_lossless(
    x: torch.Tensor,
    x_sf: torch.Tensor,
    x_block_m: int = 1,
    x_block_k: int = 32,
    block_m: int = 128,
    block_k: int = 128,
    scale_format: str = "fp32",
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Re-quantise packed FP4 E2M1 codes with power-of-two block scales to FP8 E4M3 with one
    power-of-two scale per ``block_m x block_k`` block, without loss (TileKernels 1.0.0's
    ``per_block_cast_lossless(x, "e4m3", (x_block_m, x_block_k), (block_m, block_k))``), bit
    for bit.

    Scales are used by their exponent only, as TileKernels' kernel does: ``e = bits >> 23`` of
    a float32 scale (its mantissa is ignored), or the byte of a UE8M0 one. Per output block,
    ``E = max(e over its input blocks) - 6`` (at least 0; an input block counts when its first
    element is inside the matrix); the output scale is ``2^(E - 127)`` (float32 with exponent
    field ``E``: ``E = 0`` gives 0.0) or the byte ``E``; each element is ``e2m1(code) *
    2^(e - E)`` cast to e4m3. That is exact (lossless) when every input exponent of the block is
    at least ``E - 5``, i.e. the block's scales span at most 2^11; TileKernels' kernel stops with
    a device assert otherwise, this one writes the same formula's value rounded to nearest even,
    saturated at ±448. ``x ≈ float(q) * scale`` as before: ``tileaot.cast_back`` reads ``q``
    and a float32 ``(128, 128)`` scale. The result equals, bit for bit,
    ``kernels_py.quant.per_block_cast_lossless.reference``.

    Args:
        x: CUDA ``torch.uint8`` tensor ``[M, N / 2]``: packed E2M1 codes, element ``2i`` in the
            low nibble of byte ``i`` (what `tileaot.per_token_cast_fp4` writes; TileKernels'
            int8 data viewed as uint8); ``N % 32 == 0``; contiguous, 16-byte aligned.
        x_sf: ``[ceil(M / x_block_m), ceil(N / x_block_k)]`` scales of `x`, ``torch.float32``
            (positive, powers of two for a lossless cast) or ``torch.uint8`` UE8M0 exponents;
            contiguous row-major.
        x_block_m, x_block_k: the input scale block (default ``(1, 32)``, the FP4 casts');
            ``x_block_k`` a power of two.
        block_m, block_k: the output scale block (default ``(128, 128)``); multiples of
            ``x_block_m`` and ``x_block_k``, ``block_k`` a power of two.
        scale_format: ``"fp32"`` (float32 scales) or ``"ue8m0"`` (uint8 exponents).
        out: optional ``(q, scale)`` to write into instead of allocating, with exactly the
            shapes and dtypes below, on the device of `x`, contiguous, aligned, not overlapping
            the inputs or each other.

    Returns:
        ``(q, scale)``: `q` ``[M, N]`` ``torch.float8_e4m3fn``; `scale` ``[ceil(M / block_m),
        ceil(N / block_k)]``, ``torch.float32`` or ``torch.uint8``. If `q` has no elements
        nothing is launched.

    Raises:
        TypeError: a tensor argument is not a tensor or has an unsupported dtype; a block size
            is not an int; `scale_format` is not a str; `out` is not a pair of tensors, or has
            a wrong dtype.
        ValueError: a tensor has the wrong rank; ``N % 32 != 0``; a block size is not positive,
            a k size not a power of two, an output size not a multiple of the input's; `x_sf`
            has the wrong shape; `scale_format` is unknown; a tensor is not on a CUDA device
            (the same one), not contiguous or not 16-byte aligned; a dimension or element count
            reaches 2**31; `out` has a wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the scale dtypes or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    Two kernels (the output scales, then the cast), enqueued on torch's current stream of
    `x`'s device; the call returns without synchronising. Arrays of other frameworks (CuPy,
    ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(4096, 7168, dtype=torch.bfloat16, device="cuda")
        >>> q4, e = tileaot.per_token_cast_fp4(x)  # FP4, UE8M0 exponent per 1 x 32
        >>> q8, s = tileaot.per_block_cast_lossless(q4, e)  # e4m3, fp32 per 128 x 128
    """
    if type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(per_block_cast_lossless, locals())
    inputs = {"x": x, "x_sf": x_sf}
    bound = SCHEMA.bind(inputs)
    blocks = {"x_block_m": x_block_m, "x_block_k": x_block_k, "block_m": block_m}
    blocks["block_k"] = block_k
    for name, value in blocks.items():
        _check_block(name, value)
    for name in ("x_block_k", "block_k"):
        if blocks[name] & (blocks[name] - 1):
            raise ValueError(f"{name} must be a power of two; got {blocks[name]}")
    for inner, outer in (("x_block_m", "block_m"), ("x_block_k", "block_k")):
        if blocks[outer] % blocks[inner]:
            raise ValueError(
                f"{outer}={blocks[outer]} must be a multiple of {inner}={blocks[inner]}"
            )
    if type(scale_format) is not str:
        raise TypeError(f"scale_format must be a str, got {type(scale_format).__name__}")
    if scale_format not in SCALE_FORMATS:
        raise ValueError(f"scale_format must be 'fp32' or 'ue8m0'; got {scale_format!r}")
    dims = bound.dims
    m, n = dims["M"], 2 * dims["K"]
    if n % 32:
        raise ValueError(f"x must hold N % 32 == 0 codes a row (TileKernels' rule); N = {n}")
    want = (-(-m // x_block_m), -(-n // x_block_k))
    if (dims["MI"], dims["KI"]) != want:
        raise ValueError(
            f"x_sf has shape {(dims['MI'], dims['KI'])}; x of {m} rows and {n} codes with "
            f"x_block_m={x_block_m}, x_block_k={x_block_k} needs {want} (ceil(M / x_block_m), "
            "ceil(N / x_block_k))"
        )
    dims.update(BM=block_m, BK=block_k)
    SCHEMA.complete(dims)
    key = f"{bound.picked['SI']},{SCALE_FORMATS[scale_format]}"
    SCHEMA.fix(bound, key)
    q, scale = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, inputs)
    if m == 0 or n == 0:
        return q, scale
    scalars = (x_block_m, x_block_k.bit_length() - 1, block_m, block_k.bit_length() - 1)
    SCHEMA.launch(key, bound.device, (x, x_sf, q, scale), scalars, dims)
    return q, scale


def _check_block(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 < value < 2**30:
        raise ValueError(f"{name} must be positive (below 2**30); got {value}")


example_shapes = SCHEMA.example_shapes
