"""Per-token-group cast to FP4 E2M1 with UE8M0 or E4M3 group scales (op "per_token_cast_fp4")."""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

from . import _arrays, _lib
from ._schema import OpSchema, short_of

if TYPE_CHECKING:
    import torch

_OP = "per_token_cast_fp4"
GROUP_SIZES = (16, 32)
SCALE_FORMATS = ("ue8m0", "e4m3")
_SCALE_DTYPE = {"ue8m0": "u8", "e4m3": "e4m3"}  # how each scale format is stored


def _by_key(key: str) -> dict[str, int | str]:
    """A key "bf16,g32,ue8m0" fixes the group size G and the scale dtype S."""
    _, group, scale_format = key.split(",")
    return {"G": int(group[1:]), "S": _SCALE_DTYPE[scale_format]}


def _key_of(args: dict) -> str:
    return f"{short_of(args['x'].dtype)},g{args['group_size']},{args['scale_format']}"


SCHEMA = OpSchema(
    _OP,
    "x[*M, N]: T -> q[*M, N // 2]: u8, scale[*M, N // G]: S",
    dtypes={"T": ("bf16", "fp16", "fp32"), "S": tuple(_SCALE_DTYPE.values())},
    key="{T},{group},{scale}",
    keyed=_by_key,
    key_of=_key_of,
    example={"M": 4096, "N": 7168},
)
_WRITES = SCHEMA.writes  # the short path's output bits, a module constant on the hot path
# Dispatch keys, spelled once so the call path does no string work.
_KEYS = {
    (d, g, s): f"{d},g{g},{s}"
    for d in SCHEMA.dtypes["T"]
    for g in GROUP_SIZES
    for s in SCALE_FORMATS
}


def per_token_cast_fp4(
    x: torch.Tensor,
    group_size: int = 32,
    scale_format: str = "ue8m0",
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each row of `x` to FP4 E2M1, two codes per byte, one scale per group of columns.

    For every group of `group_size` consecutive elements of a row, with ``amax`` its largest
    magnitude:

    * ``scale_format="ue8m0"`` (MXFP4): the scale is the smallest power of two with
      ``amax / scale <= 6`` and at least ``2**-126``, stored as its biased exponent ``e``
      (uint8, ``scale = 2**(e - 127)``; an all-zero group gets ``e = 1``). Codes and
      exponents are TileKernels 1.0.0's ``per_token_cast(x, "e2m1", group_size,
      round_sf=True)``, byte for byte (it stores the same exponent bytes, packed).
    * ``scale_format="e4m3"`` (NVFP4-style): the scale is the smallest positive
      ``torch.float8_e4m3fn`` value with ``6 * scale >= amax`` (all-zero groups: ``2**-9``;
      groups with ``amax > 2688`` get 448 and saturate).

    Each element becomes ``x / scale`` rounded to the nearest E2M1 value (0, 0.5, 1, 1.5, 2, 3,
    4, 6; ties to the even code; saturating at 6), as a 4-bit code: bits 0-2 the magnitude's
    index in that list, bit 3 the sign of `x` (so a small negative value gives -0, ``0x8``).
    Element ``2i`` of a row goes to the low nibble of byte ``i``, element ``2i+1`` to the high
    nibble. ``x ≈ e2m1(q) * scale`` (see ``tileaot.cast_back``); the result is bit-identical to
    ``kernels_py.quant.per_token_cast_fp4.reference``.

    Args:
        x: CUDA tensor of shape ``(..., N)`` (leading dims are rows), dtype ``torch.bfloat16``,
            ``torch.float16`` or ``torch.float32``; contiguous, 16-byte-aligned data pointer;
            ``N % group_size == 0``. Values must be finite (NaN gives unspecified codes).
        group_size: 32 (MXFP4) or 16 (NVFP4): columns per scale.
        scale_format: ``"ue8m0"`` or ``"e4m3"``.
        out: optional ``(q, scale)`` to write into instead of allocating, with exactly the
            shapes and dtypes below, on the device of `x`, contiguous, aligned, not overlapping
            `x` or each other.

    Returns:
        ``(q, scale)``: `q` ``(..., N // 2)`` ``torch.uint8``; `scale` ``(..., N //
        group_size)``, ``torch.uint8`` (UE8M0) or ``torch.float8_e4m3fn``. If `x` has no
        elements, nothing is launched.

    Raises:
        TypeError: `x` or `out` is not a tensor / pair of tensors, or has an unsupported dtype;
            `group_size` is not an int; `scale_format` is not a str.
        ValueError: `x` is 0-d; `group_size` is not 16 or 32, or does not divide N;
            `scale_format` is unknown; a tensor is not on a CUDA device (the same one), not
            contiguous or not 16-byte aligned; a dimension or element count reaches 2**31;
            `out` has a wrong shape or overlaps.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtype, mode or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `x`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(16, 7168, dtype=torch.bfloat16, device="cuda")
        >>> q, e = tileaot.per_token_cast_fp4(x)  # q: [16, 3584] uint8, e: [16, 224] uint8
        >>> x_hat = tileaot.cast_back(q, e, group_size=32)  # bf16 [16, 7168]
        >>> q16, s16 = tileaot.per_token_cast_fp4(x, 16, "e4m3")  # s16: float8_e4m3fn
    """
    if (
        type(x) is _arrays.Tensor
        and type(group_size) is int
        and group_size in GROUP_SIZES
        and type(scale_format) is str
        and x.dim() == 2
        and _arrays.plain_pair(out, 2)
    ):
        pair = out
        if pair is None:
            m, n = x.shape
            torch = _arrays._torch
            pair = (
                x.new_empty(m, n >> 1, dtype=torch.uint8),
                x.new_empty(
                    m,
                    n // group_size,
                    dtype=torch.uint8 if scale_format == "ue8m0" else torch.float8_e4m3fn,
                ),
            )
        key = (_OP, x.dtype, group_size, scale_format)
        if _lib.fast(key, (x, *pair), (), _WRITES):
            return pair
    elif type(x) is not _arrays.Tensor and _arrays.foreign(x):
        return _arrays.call(per_token_cast_fp4, locals())
    bound = SCHEMA.bind({"x": x})
    if type(group_size) is not int:
        group_size = _int_arg("group_size", group_size)
    if type(scale_format) is not str:
        raise TypeError(f"scale_format must be a str, got {type(scale_format).__name__}")
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group_size must be 16 or 32; got {group_size}")
    if scale_format not in SCALE_FORMATS:
        raise ValueError(f"scale_format must be 'ue8m0' or 'e4m3'; got {scale_format!r}")
    n = bound.dims["N"]
    if n % group_size:
        raise ValueError(
            f"group_size={group_size} must divide the last dimension, but x has N = {n}; pad "
            "the rows to a multiple of the group size"
        )
    key = _KEYS[bound.picked["T"], group_size, scale_format]
    SCHEMA.fix(bound, key)
    q, scale = SCHEMA.outputs(_arrays.namespace(x), x, bound, out, {"x": x})
    if x.numel() == 0:
        return q, scale
    handle = SCHEMA.launch(key, bound.device, (x, q, scale), (), bound.dims)
    if type(x) is _arrays.Tensor and x.dim() == 2:  # launched (x, q, scale): these shapes
        _lib.learn((_OP, x.dtype, group_size, scale_format), handle)
    return q, scale


def _int_arg(name: str, value: Any) -> int:
    """`value` as an int; TypeError for bools, floats and the like."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


example_shapes = SCHEMA.example_shapes
