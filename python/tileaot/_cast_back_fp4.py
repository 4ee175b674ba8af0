"""FP4 half of `tileaot.cast_back`: dequantise E2M1 codes with UE8M0 / E4M3 group scales
(op "cast_back_fp4")."""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

from . import _arrays
from ._schema import OpSchema

if TYPE_CHECKING:
    import torch

_OP = "cast_back_fp4"
GROUP_SIZES = (16, 32)
_SCALE_DTYPE = {"ue8m0": "u8", "e4m3": "e4m3"}  # how each scale format is stored
_FORMAT = {short: fmt for fmt, short in _SCALE_DTYPE.items()}


def _by_key(key: str) -> dict[str, int | str]:
    """A key "bf16,g32,ue8m0" fixes the out dtype, the scale dtype and its columns (N // g)."""
    out, group, scale_format = key.split(",")
    return {"Out": out, "S": _SCALE_DTYPE[scale_format], "NG": f"2 * K // {group[1:]}"}


# The kernel binds K = N / 2 bytes of codes per row from q; the output has N = 2 K columns.
SCHEMA = OpSchema(
    _OP,
    "q[*M, K]: u8, scale[*M, NG]: S -> out[*M, 2*K]: Out",
    dtypes={"S": tuple(_SCALE_DTYPE.values()), "Out": ("bf16", "fp32")},
    key="{Out},{group},{scale}",
    keyed=_by_key,
    example={"M": 4096, "K": 3584},
)


def cast_back_fp4(
    q: torch.Tensor,
    scale: torch.Tensor,
    *,
    group_size: int,
    out_dtype: torch.dtype | None,
    out: torch.Tensor | None,
) -> torch.Tensor:
    """Dequantise FP4 E2M1 codes: ``x[..., j] = e2m1(code_j) * scale[..., j // group_size]``.

    The inverse of ``tileaot.per_token_cast_fp4`` (same layout): code ``j`` of a row is the low
    nibble of byte ``j // 2`` for even ``j``, the high nibble for odd ``j``; bits 0-2 index
    (0, 0.5, 1, 1.5, 2, 3, 4, 6), bit 3 is the sign. Every product is exact in float32 and
    bfloat16 except where it overflows to inf (UE8M0 ``e = 253`` with ``|value| >= 4``, ``e =
    254`` with ``|value| >= 2``). UE8M0 bytes decode as TileKernels 1.0.0 decodes them (the
    byte as a float32 exponent field): 0 is ``0.0`` and 255 is ``+inf`` (``0 * inf`` is NaN);
    an E4M3 NaN scale (``0x7F``/``0xFF``) gives NaN.

    Args:
        q: CUDA tensor ``(..., N // 2)``, ``torch.uint8``; contiguous, 16-byte-aligned data
            pointer.
        scale: CUDA tensor ``(..., N // group_size)`` with the leading dims of `q`:
            ``torch.uint8`` (UE8M0 exponents, ``scale = 2**(e - 127)`` for 1..254) or
            ``torch.float8_e4m3fn``; contiguous, aligned, on the device of `q`.
        group_size: 16 or 32, dividing N.
        out_dtype: ``torch.bfloat16`` or ``torch.float32``; None means the dtype of `out` if
            given, else ``torch.bfloat16``.
        out: optional tensor ``(..., N)`` of dtype `out_dtype` to write into instead of
            allocating, on the device of `q`, contiguous, aligned, not overlapping the inputs.

    Returns:
        ``x`` ``(..., N)`` in `out_dtype` (`out` itself if given). If `q` has no elements,
        nothing is launched.

    Raises:
        TypeError: an argument is not a tensor, or has an unsupported dtype; `group_size` is
            not an int; `out_dtype` is not a supported torch dtype.
        ValueError: `q` is 0-d; `group_size` is not 16 or 32 or does not divide N; `scale` has
            the wrong shape; a tensor is not on a CUDA device (the same one), not contiguous or
            not 16-byte aligned; a dimension or element count reaches 2**31; `out` has the
            wrong shape or overlaps an input.
        ImportError: the native module is not built (a source checkout).
        tileaot.VariantMissError: this wheel has no variant for the dtypes, mode or GPU.
        tileaot.DriverError: the CUDA driver is missing or a driver call failed.

    The kernel is enqueued on torch's current stream of `q`'s device (as torch ops are); the
    call returns without synchronising.
    Arrays of other frameworks (CuPy, ... via DLPack) work too; see `tileaot.use_stream`.

    Example:
        >>> import torch, tileaot
        >>> x = torch.randn(16, 7168, dtype=torch.bfloat16, device="cuda")
        >>> q, e = tileaot.per_token_cast_fp4(x, 32, "ue8m0")
        >>> from tileaot._cast_back_fp4 import cast_back_fp4
        >>> x_hat = cast_back_fp4(q, e, group_size=32, out_dtype=torch.float32, out=None)
    """
    if type(q) is not _arrays.Tensor and _arrays.foreign(q):
        return _arrays.call(cast_back_fp4, locals())
    fw = _arrays.namespace(q)
    inputs = {"q": q, "scale": scale}
    bound = SCHEMA.bind(inputs)
    if type(group_size) is not int:
        group_size = _int_arg("group_size", group_size)
    if out_dtype is None:  # the dtype of `out`, else bfloat16
        out_dtype = out.dtype if isinstance(out, fw.Tensor) else fw.bfloat16
    if out_dtype is fw.bfloat16:
        short = "bf16"
    elif out_dtype is fw.float32:
        short = "fp32"
    else:
        raise TypeError(
            f"out_dtype must be torch.bfloat16 or torch.float32 for FP4 codes; got {out_dtype!r}"
        )
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group_size must be 16 or 32 for FP4 codes; got {group_size}")
    shape = q.shape
    n = 2 * shape[-1]
    if n % group_size:
        raise ValueError(
            f"group_size={group_size} must divide N = 2 * q.shape[-1] = {n}; was q produced with "
            "this group size?"
        )
    s_shape = (*shape[:-1], n // group_size)
    if scale.shape != s_shape:
        raise ValueError(
            f"scale must have shape {s_shape} for q {tuple(shape)} and group_size={group_size}; "
            f"got {tuple(scale.shape)}"
        )
    key = f"{short},g{group_size},{_FORMAT[bound.picked['S']]}"
    SCHEMA.fix(bound, key)
    (x,) = SCHEMA.outputs(fw, q, bound, out, inputs)
    if q.numel() == 0:
        return x
    SCHEMA.launch(key, bound.device, (q, scale, x), (), bound.dims)
    return x


def _int_arg(name: str, value: Any) -> int:
    """`value` as an int; TypeError for bools, floats and the like."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


example_shapes = SCHEMA.example_shapes
