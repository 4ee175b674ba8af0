"""TileKernels 1.0.0's ``tile_kernels.quant`` casts, served by tileaot's cast ops.

Each function has TileKernels' name, parameters (names, order, defaults) and return values;
options tileaot does not serve raise one NotImplementedError line naming the argument.
"""

from __future__ import annotations

from typing import Any

import torch

import tileaot

from ..per_token_cast_fp8 import GROUPS  # FP8 group widths (cast_back reads the same)
from ._served import (
    exponent_bytes,
    float_to_ue8m0,
    not_served,
    require,
    require_none,
    row_weights,
    ue8m0_to_float,
)

QuantTensor = tuple[torch.Tensor, torch.Tensor]

__all__ = [
    "cast_back",
    "per_block_cast",
    "per_block_cast_lossless",
    "per_channel_cast",
    "per_channel_cast_and_transpose",
    "per_channel_cast_fused",
    "per_token_cast",
    "per_token_cast_back",
    "swiglu_backward_and_per_token_cast",
    "swiglu_forward_and_per_channel_cast_and_transpose",
    "swiglu_forward_and_per_token_cast",
]


def per_token_cast(
    x: torch.Tensor,
    fmt: str,
    num_per_channels: int,
    x_block_size: tuple[int, int] | None = None,
    use_tma_aligned_col_major_sf: bool = False,
    round_sf: bool = False,
    use_packed_ue8m0: bool = False,
) -> QuantTensor:
    """Per-token (row) cast: ``(out, out_sf)`` as TileKernels returns them.

    ``fmt="e4m3"``: `tileaot.per_token_cast_fp8` with ``num_per_channels`` 32, 64, 128 or
    the hidden size (one scale per row); `out` float8_e4m3fn, `out_sf` float32 ``[M, G]``
    (``G = ceil(hidden / num_per_channels)``).
    ``fmt="e2m1"`` (``round_sf=True``, ``num_per_channels`` 16 or 32):
    `tileaot.per_token_cast_fp4` with UE8M0 scales; `out` int8 (two codes a byte, as
    TileKernels packs them), `out_sf` float32 (our exponent bytes decoded exactly).
    ``fmt="e5m6"``: `per_token_cast_to_e5m6` (every scale layout).

    e4m3 and e2m1 `out_sf` layouts (`tma_scales`): row-major; ``use_tma_aligned_col_major_sf``:
    the ``[M, G]`` view, strides ``(1, align(M, 4))``, of a zero-padded ``[G, align(M, 4)]``
    buffer; with ``use_packed_ue8m0`` too: int32 ``[M, ceil(G/4)]``, the same view of
    ``[ceil(G/4), align(M, 4)]`` words, group ``j`` in byte ``j % 4`` of word ``j // 4`` (zero
    bytes past G), each byte the float32 scale's exponent (of the unrounded scale without
    ``round_sf``, as TileKernels' reference). The strides are its kernels'; its reference's
    too, but for a single column (G = 1, or one word), which it leaves at column stride 1
    over the same buffer. ``use_packed_ue8m0`` alone: ValueError.
    """
    func = "per_token_cast"
    require_none(func, x_block_size=x_block_size)
    if fmt == "e5m6":
        sf_options = (use_tma_aligned_col_major_sf, round_sf, use_packed_ue8m0)
        return per_token_cast_to_e5m6(x, num_per_channels, *sf_options)
    require(func, "fmt", fmt, ("e4m3", "e2m1", "e5m6"))
    layout = _sf_layout(func, use_tma_aligned_col_major_sf, use_packed_ue8m0)
    if fmt == "e2m1":
        require(func, "round_sf", round_sf, (True,), "fmt='e2m1'")
        require(func, "num_per_channels", num_per_channels, (16, 32), "fmt='e2m1'")
        q, e = tileaot.per_token_cast_fp4(x, num_per_channels, "ue8m0")
        sf = e if use_packed_ue8m0 else ue8m0_to_float(e)  # packed: our bytes are its bytes
        return q.view(torch.int8), tma_scales(sf, *layout)
    group = _fp8_group(func, x, num_per_channels)
    q, sf = tileaot.per_token_cast_fp8(x, group, round_sf=round_sf)
    return q, _float_scales_as(sf, *layout)


def per_token_cast_to_e5m6(
    x: torch.Tensor,
    num_per_channels: int,
    use_tma_aligned_col_major_sf: bool = False,
    round_sf: bool = False,
    use_packed_ue8m0: bool = False,
) -> QuantTensor:
    """E5M6 cast, one scale per row, `tileaot.per_token_cast_e5m6` (``num_per_channels`` =
    hidden, as TileKernels requires): `out` uint8 ``[M, 3 * hidden // 2]``; `out_sf`
    ``[M, 1]`` float32, or int32 holding the scale's exponent byte (``use_packed_ue8m0``, also
    without ``use_tma_aligned_col_major_sf``: E5M6's reference packs row-major too; without
    ``round_sf`` the exponent of the unrounded scale, as TileKernels' reference);
    ``use_tma_aligned_col_major_sf``: a column-major view of a zero-padded
    ``[1, align(M, 4)]`` buffer, as TileKernels returns it. Strided rows are copied first."""
    func = "per_token_cast_to_e5m6"
    hidden = x.shape[-1] if isinstance(x, torch.Tensor) and x.dim() > 0 else None
    require(func, "num_per_channels", num_per_channels, (hidden,), "fmt='e5m6'")
    if isinstance(x, torch.Tensor) and x.dim() == 2 and x.stride(-1) == 1:
        x = x.contiguous()  # TileKernels reads rows at any stride: the same values
    q, sf = tileaot.per_token_cast_e5m6(x, round_sf=round_sf)
    if use_packed_ue8m0:  # the byte, zero-padded to an int32: TileKernels' packing of one
        sf = exponent_bytes(sf).to(torch.int32)
    return q, tma_scales(sf, use_tma_aligned_col_major_sf, False)


def per_block_cast(
    x: torch.Tensor,
    fmt: str,
    block_size: tuple[int, int],
    use_tma_aligned_col_major_sf: bool = False,
    round_sf: bool = False,
    use_packed_ue8m0: bool = False,
) -> QuantTensor:
    """Per-block cast, `tileaot.per_block_cast_fp8`: ``fmt="e4m3"``, ``block_size=(128, 128)``;
    ``(out, out_sf)``, float8_e4m3fn and float32 ``[R, G]`` scales, ``R = ceil(M/128)``,
    ``G = ceil(N/128)``: row-major, or in `per_token_cast`'s column-major (and packed UE8M0)
    layouts with R rows of scales in place of M."""
    func = "per_block_cast"
    require(func, "fmt", fmt, ("e4m3",))
    require(func, "block_size", block_size, ((128, 128),))
    layout = _sf_layout(func, use_tma_aligned_col_major_sf, use_packed_ue8m0)
    q, sf = tileaot.per_block_cast_fp8(x, round_sf=round_sf)
    return q, _float_scales_as(sf, *layout)


def per_block_cast_lossless(
    x: QuantTensor,
    fmt: str,
    x_block_size: tuple[int, int],
    out_block_size: tuple[int, int],
    use_tma_aligned_col_major_sf: bool = False,
    round_sf: bool = False,
    use_packed_ue8m0: bool = False,
) -> QuantTensor:
    """FP4 ``x = (data int8 [M, N/2], sf)`` re-cast without loss to e4m3 with one power-of-two
    scale per ``out_block_size`` block, `tileaot.per_block_cast_lossless` (``fmt="e4m3"``).
    `sf` as TileKernels takes it: float32 row- or column-major, or packed UE8M0 int32
    column-major (four exponents a word). ``round_sf`` changes nothing (the scales are powers
    of two), as in TileKernels. `out_sf`: float32 row-major ``[ceil(M/bm), ceil(N/bk)]``;
    with ``use_tma_aligned_col_major_sf`` a column-major view of a buffer padded to 4 rows
    (float32) or, with ``use_packed_ue8m0``, of int32 words of four exponent bytes, padded to
    4 rows of words, as TileKernels returns them (padding words and bytes: 0)."""
    func = "per_block_cast_lossless"
    require(func, "fmt", fmt, ("e4m3",))
    _sf_layout(func, use_tma_aligned_col_major_sf, use_packed_ue8m0)
    if not (isinstance(x, tuple) and len(x) == 2):
        raise TypeError(f"tileaot.tile_kernels.{func}: x must be a (data, sf) pair")
    data, sf = x
    if isinstance(data, torch.Tensor) and data.dtype == torch.int8:
        data = data.view(torch.uint8)  # TileKernels' int8 FP4 bytes, our uint8
    if isinstance(data, torch.Tensor) and isinstance(sf, torch.Tensor) and data.dim() == 2:
        sf = lossless_input_scales(sf, data.shape[0], 2 * data.shape[1], x_block_size)
    (im, ik), (om, ok) = (tuple(b) for b in (x_block_size, out_block_size))
    scale_format = "ue8m0" if use_packed_ue8m0 else "fp32"
    q, scale = tileaot.per_block_cast_lossless(data, sf, im, ik, om, ok, scale_format)
    return q, tma_scales(scale, use_tma_aligned_col_major_sf, use_packed_ue8m0)


def lossless_input_scales(
    sf: torch.Tensor, rows: int, cols: int, block: tuple[int, int]
) -> torch.Tensor:
    """TileKernels' scale input as our row-major [ceil(M/bm), ceil(N/bk)] scales: float32 as
    they are (copied if column-major), packed UE8M0 int32 ``[ceil(M/bm), ceil(G/4)]`` (column-
    major: TileKernels reads int32 scales only so) as its exponent bytes."""
    if sf.dtype != torch.int32 or sf.dim() != 2:
        return sf.contiguous()
    groups = -(-cols // block[1])
    # dense rows (a column-major [R, 1] view counts as contiguous with any column stride)
    rows_sf = (
        sf.new_empty(sf.shape).copy_(sf).view(torch.uint8)
    )  # group j: byte j % 4 of word j // 4
    return rows_sf[:, :groups].contiguous()


def tma_scales(scale: torch.Tensor, col_major: bool, packed: bool) -> torch.Tensor:
    """Our row-major scales ``[R, C]`` (4-byte values, or uint8 exponents when ``packed``) in
    TileKernels' layout: as they are, or (``col_major``) a column-major view ``[R, C]`` of a
    zero-padded ``[C, align(R, 4)]`` buffer; packed: exponents four to an int32 word (zero
    bytes past C), the view ``[R, ceil(C/4)]`` of ``[ceil(C/4), align(R, 4)]`` words."""
    if not col_major:
        return scale
    rows, cols = scale.shape
    if packed:
        words = -(-cols // 4)
        bytes_ = scale.new_zeros(rows, 4 * words)
        bytes_[:, :cols] = scale
        scale = bytes_.view(torch.int32)
    buf = scale.new_zeros(scale.shape[1], -(-rows // 4) * 4)
    buf[:, :rows] = scale.T
    return buf.T[:rows]


def per_channel_cast(
    x: torch.Tensor, fmt: str, num_per_tokens: int, round_sf: bool = False
) -> QuantTensor:
    """Per-channel cast, `tileaot.per_channel_cast_fp8`: ``fmt="e4m3"``,
    ``num_per_tokens=128`` (TileKernels' only value); ``(out, out_sf)``, float8_e4m3fn and
    float32 row-major ``[ceil(M/128), N]``, one scale per column of every 128 rows."""
    func = "per_channel_cast"
    require(func, "fmt", fmt, ("e4m3",))
    require(func, "num_per_tokens", num_per_tokens, (128,))
    return tileaot.per_channel_cast_fp8(x, round_sf=round_sf)


def per_channel_cast_and_transpose(
    x: torch.Tensor, fmt: str, num_per_tokens: int, round_sf: bool = False
) -> QuantTensor:
    """Per-channel cast written transposed, `tileaot.per_channel_cast_and_transpose`:
    ``fmt="e4m3"``, ``num_per_tokens`` 32 or 128; ``(out, out_sf)``, float8_e4m3fn
    ``[hidden, num_tokens]`` and float32 row-major ``[num_tokens // num_per_tokens, hidden]``.
    bf16 (or fp16) ``x``; ``num_tokens % num_per_tokens == 0`` and ``hidden % 8 == 0``
    (TileKernels asks ``num_tokens % 128 == 0`` and ``hidden % 64 == 0``)."""
    func = "per_channel_cast_and_transpose"
    require(func, "fmt", fmt, ("e4m3",))
    require(func, "num_per_tokens", num_per_tokens, (32, 128))
    return tileaot.per_channel_cast_and_transpose(x, num_per_tokens, round_sf=round_sf)


def per_channel_cast_fused(
    x: torch.Tensor | QuantTensor,
    fmt: str,
    num_per_tokens: int,
    round_sf: bool = False,
    num_per_channels: int | None = None,
    pos_to_token: torch.Tensor | None = None,
) -> QuantTensor:
    """Per-channel cast of rows gathered by ``pos_to_token`` (-1: a zero row), FP8 rows
    ``x = (data, sf_invs)`` cast back first by their float32 ``(1, 128)`` scales
    (``num_per_channels=128``), `tileaot.per_channel_cast_fused`; ``fmt="e4m3"``,
    ``num_per_tokens=128``. ``(out, out_sf)``, float8_e4m3fn and float32 row-major
    ``[ceil(P/128), hidden]``. Plain bf16/fp32 rows without ``pos_to_token``:
    `tileaot.per_channel_cast_fp8` (FP8 rows: the identity index). Any row count (TileKernels
    asks a multiple of 16 with ``pos_to_token``, of 128 without)."""
    func = "per_channel_cast_fused"
    require(func, "fmt", fmt, ("e4m3",))
    require(func, "num_per_tokens", num_per_tokens, (128,))
    if isinstance(x, tuple):
        if len(x) != 2:
            raise TypeError(f"tileaot.tile_kernels.{func}: x must be a tensor or a (data, sf) pair")
        require(func, "num_per_channels", num_per_channels, (128,), "x = (data, sf)")
        data, sf = x
        if isinstance(sf, torch.Tensor) and sf.dtype != torch.float32:
            raise not_served(func, "x[1].dtype", sf.dtype, "torch.float32")
    else:
        require_none(func, num_per_channels=num_per_channels)
        data, sf = x, None
        if pos_to_token is None:
            return tileaot.per_channel_cast_fp8(x, round_sf=round_sf)
    if pos_to_token is None and isinstance(data, torch.Tensor) and data.dim() == 2:
        pos_to_token = torch.arange(data.shape[0], dtype=torch.int32, device=data.device)
    return tileaot.per_channel_cast_fused(data, pos_to_token, x_sf=sf, round_sf=round_sf)


def cast_back(
    x: QuantTensor,
    fmt: str,
    x_block_size: tuple[int, int],
    x_special_fmt: str | None = None,
) -> torch.Tensor:
    """Dequantise ``x = (data, sf)`` to ``fmt`` ``"bf16"`` or ``"fp32"``, `tileaot.cast_back`.

    FP8 data: ``x_block_size`` ``(1, 128)``, ``(1, hidden)`` or ``(128, 128)``, float32 scales
    (row- or column-major). Packed FP4 data (int8): ``(1, 16)`` or ``(1, 32)`` with float32
    power-of-two scales (checked: one device sync). ``x_special_fmt="e5m6"`` (uint8 data as
    `per_token_cast(x, "e5m6", ...)` packs it): ``(1, n)`` with ``n`` a multiple of 8 dividing
    hidden, float32 or packed-UE8M0 int32 scales, `tileaot.cast_back_e5m6`."""
    return _cast_back("cast_back", x, fmt, ("x_block_size", x_block_size), x_special_fmt)


def per_token_cast_back(
    x: QuantTensor,
    fmt: str,
    num_per_channels: int,
    x_special_fmt: str | None = None,
) -> torch.Tensor:
    """`cast_back` with ``x_block_size=(1, num_per_channels)``."""
    block = ("num_per_channels", num_per_channels)
    return _cast_back("per_token_cast_back", x, fmt, block, x_special_fmt)


def swiglu_forward_and_per_channel_cast_and_transpose(
    x: torch.Tensor,
    fmt: str,
    num_per_tokens: int,
    round_sf: bool = False,
    without_transpose: bool = False,
    swiglu_clamp_value: float | None = None,
) -> QuantTensor:
    """SwiGLU then the per-channel FP8 cast written transposed, one kernel:
    `tileaot.swiglu_per_channel_cast_and_transpose` (``fmt="e4m3"``, ``num_per_tokens`` 32 or
    128; the activation rounded to bf16 before the cast, as TileKernels' kernel stores it).
    ``(out, out_sf)``: float8_e4m3fn ``[hidden, num_tokens]`` and float32 row-major
    ``[num_tokens // num_per_tokens, hidden]``. ``without_transpose=True``: the same codes
    ``[num_tokens, hidden]``, copied back from the transposed ones by torch (a second pass,
    not fused as in TileKernels)."""
    func = "swiglu_forward_and_per_channel_cast_and_transpose"
    require(func, "fmt", fmt, ("e4m3",))
    require(func, "num_per_tokens", num_per_tokens, (32, 128))
    fn = tileaot.swiglu_per_channel_cast_and_transpose
    out, out_sf = fn(x, num_per_tokens, swiglu_clamp_value, round_sf=round_sf)
    return (out.T.contiguous() if without_transpose else out), out_sf


def swiglu_forward_and_per_token_cast(
    x: torch.Tensor,
    fmt: str,
    num_per_channels: int,
    pos_to_token_topk: torch.Tensor | None = None,
    topk_weights: torch.Tensor | None = None,
    pos_to_expert: torch.Tensor | None = None,
    use_tma_aligned_col_major_sf: bool = False,
    round_sf: bool = False,
    use_packed_ue8m0: bool = False,
    swiglu_clamp_value: float | None = None,
    clamped_count: torch.Tensor | None = None,
    sf_clamp_min: float | None = None,
) -> QuantTensor:
    """SwiGLU then per-token FP8 cast, `tileaot.swiglu_per_token_cast_fp8` (``fmt="e4m3"``,
    ``num_per_channels=128``). Row ``i`` is weighted by
    ``topk_weights.view(-1)[pos_to_token_topk[i]]`` (0 where it is -1, as TileKernels'
    reference), gathered by one torch indexing op. `out_sf`: float32 ``[M, ceil(N/128)]`` in
    `per_token_cast`'s layouts (row-major, column-major, packed UE8M0)."""
    func = "swiglu_forward_and_per_token_cast"
    require(func, "fmt", fmt, ("e4m3",))
    require(func, "num_per_channels", num_per_channels, (128,))
    layout = _sf_layout(func, use_tma_aligned_col_major_sf, use_packed_ue8m0)
    require_none(
        func, pos_to_expert=pos_to_expert, clamped_count=clamped_count, sf_clamp_min=sf_clamp_min
    )
    weights = None
    if pos_to_token_topk is not None:  # TileKernels ignores topk_weights without it
        weights = row_weights(func, pos_to_token_topk, topk_weights)
    q, sf = tileaot.swiglu_per_token_cast_fp8(x, weights, swiglu_clamp_value, round_sf=round_sf)
    return q, _float_scales_as(sf, *layout)


def swiglu_backward_and_per_token_cast(
    x: QuantTensor,
    grad_out: torch.Tensor,
    weight: torch.Tensor,
    pos_to_token_topk: torch.Tensor,
    token_topk_to_pos: torch.Tensor,
    num_per_channels: int,
    round_sf: bool = False,
    swiglu_clamp_value: float | None = None,
) -> tuple[torch.Tensor, QuantTensor, torch.Tensor, torch.Tensor]:
    """SwiGLU backward from e4m3 ``x = (data, sf)`` (``num_per_channels`` 32 or 128) with the
    input gradient also cast to e4m3 per ``num_per_channels`` columns: ``(out, (x_grad_fp8,
    x_grad_sf), x_grad, weight_grad)``, out and x_grad in grad_out's dtype (bf16), the scales
    float32 row-major, as TileKernels returns them.

    Two tileaot ops, not one fused kernel: `tileaot.swiglu_backward` (float32 out and x_grad,
    TileKernels' reference bit for bit) and `tileaot.per_token_cast_fp8` of that float32 x_grad
    (TileKernels' cast, bit for bit); out and x_grad are then rounded to bf16 by torch, which
    is what TileKernels' kernel stores. weight_grad: a float32 sum (its test's 1e-4 bound)."""
    from .torch.swiglu import backward

    func = "swiglu_backward_and_per_token_cast"
    args = (x, grad_out, weight, pos_to_token_topk, token_topk_to_pos, num_per_channels)
    out, x_grad, weight_grad = backward(func, *args, swiglu_clamp_value)
    cast = tileaot.per_token_cast_fp8(x_grad, num_per_channels, round_sf=round_sf)
    return out.to(grad_out.dtype), cast, x_grad.to(grad_out.dtype), weight_grad


def _sf_layout(
    func: str, use_tma_aligned_col_major_sf: bool, use_packed_ue8m0: bool
) -> tuple[bool, bool]:
    """`tma_scales`' ``(col_major, packed)``; TileKernels' kernels pack UE8M0 scales only into
    the column-major layout (its allocation has no packed row-major shape)."""
    if use_packed_ue8m0 and not use_tma_aligned_col_major_sf:
        raise ValueError(
            f"tileaot.tile_kernels.{func}: use_packed_ue8m0 needs use_tma_aligned_col_major_sf"
            "=True (TileKernels' packed UE8M0 scales are column-major)"
        )
    return bool(use_tma_aligned_col_major_sf), bool(use_packed_ue8m0)


def _float_scales_as(sf: torch.Tensor, col_major: bool, packed: bool) -> torch.Tensor:
    """Our float32 row-major scales in `tma_scales`' layout; packed, as their exponent bytes
    (our scales are TileKernels' bit for bit, so these are the bytes it packs)."""
    return tma_scales(exponent_bytes(sf) if packed else sf, col_major, packed)


def _fp8_group(func: str, x: Any, num_per_channels: int) -> int | None:
    """`per_token_cast_fp8`'s group_size for TileKernels' num_per_channels (None: per row)."""
    hidden = x.shape[-1] if isinstance(x, torch.Tensor) and x.dim() > 0 else None
    if num_per_channels in GROUPS:
        return num_per_channels
    if num_per_channels == hidden:
        return None
    raise not_served(func, "num_per_channels", num_per_channels, f"32, 64, 128, hidden={hidden}")


def _cast_back(
    func: str, x: Any, fmt: str, block: tuple[str, Any], x_special_fmt: str | None
) -> torch.Tensor:
    require(func, "fmt", fmt, ("bf16", "fp32"))
    if x_special_fmt is not None:
        require(func, "x_special_fmt", x_special_fmt, ("e5m6",))
    if not (isinstance(x, tuple) and len(x) == 2):
        raise TypeError(
            f"tileaot.tile_kernels.{func}: x must be a (data, sf) pair, not {type(x).__name__}"
        )
    q, sf = x
    out_dtype = torch.bfloat16 if fmt == "bf16" else torch.float32
    arg, value = block
    size = (1, value) if arg == "num_per_channels" else value
    if x_special_fmt == "e5m6":
        return _cast_back_e5m6(func, q, sf, block, size, out_dtype)
    if isinstance(q, torch.Tensor) and q.dtype == torch.int8:  # packed e2m1
        served = (16, 32) if arg == "num_per_channels" else ((1, 16), (1, 32))
        require(func, arg, value, served, "e2m1 data")
        require(func, "x[1].dtype", getattr(sf, "dtype", None), (torch.float32,), "e2m1 data")
        e = float_to_ue8m0(func, sf)
        return tileaot.cast_back(q.view(torch.uint8), e, group_size=size[1], out_dtype=out_dtype)
    layout = _fp8_layout(func, q, block, size)
    if isinstance(sf, torch.Tensor):
        sf = sf.contiguous()  # TileKernels also takes column-major scales: same values
    return tileaot.cast_back(q, sf, layout=layout, out_dtype=out_dtype)


def _cast_back_e5m6(
    func: str, q: Any, sf: Any, block: tuple[str, Any], size: Any, out_dtype: torch.dtype
) -> torch.Tensor:
    """`tileaot.cast_back_e5m6` for TileKernels' ``(1, n)`` blocks: ``G = hidden // n``
    float32 scales per row (any strides), or packed UE8M0 int32 (the first G exponent bytes
    of each row, decoded as TileKernels does: byte ``e`` is ``2**(e - 127)``)."""
    hidden = q.shape[-1] * 2 // 3 if isinstance(q, torch.Tensor) and q.dim() == 2 else None
    arg, value = block
    ok = isinstance(size, (tuple, list)) and len(size) == 2 and size[0] == 1
    if not ok or not hidden or not isinstance(size[1], int) or size[1] % 8 or hidden % size[1]:
        served = "a multiple of 8 dividing hidden" if arg == "num_per_channels" else "(1, n)"
        raise not_served(func, arg, value, f"{served}, hidden={hidden}", "x_special_fmt='e5m6'")
    if isinstance(sf, torch.Tensor):
        if sf.dtype == torch.int32 and sf.dim() == 2:
            # dense rows (a column-major [M, 1] view is "contiguous" with any column stride)
            rows = sf.contiguous().as_strided(sf.shape, (sf.shape[1], 1))
            sf = ue8m0_to_float(rows.view(torch.uint8)[:, : hidden // size[1]])
        sf = sf.contiguous()  # TileKernels also takes column-major scales: same values
    return tileaot.cast_back_e5m6(q, sf, out_dtype=out_dtype)


def _fp8_layout(func: str, q: Any, block: tuple[str, Any], size: Any) -> str:
    """`tileaot.cast_back`'s layout for TileKernels' FP8 scaling block."""
    hidden = q.shape[-1] if isinstance(q, torch.Tensor) and q.dim() > 0 else None
    layouts = {(1, g): f"g{g}" for g in GROUPS} | {(128, 128): "block128"}
    layouts.setdefault((1, hidden), "token")
    if isinstance(size, (tuple, list)) and tuple(size) in layouts:
        return layouts[tuple(size)]
    arg, value = block
    served = (
        f"32, 64, 128, hidden={hidden}"
        if arg == "num_per_channels"
        else f"(1, 32), (1, 64), (1, 128), (128, 128), (1, hidden={hidden})"
    )
    raise not_served(func, arg, value, served)
