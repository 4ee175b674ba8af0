"""TileKernels 1.0.0's ``tile_kernels.moe`` routing and combine ops, served by tileaot's.

TileKernels returns expert and group indices as int64; tileaot's kernels write int32 (what
`tileaot.moe_expand` takes), so these functions convert (one small torch copy), and index
inputs given as int64 are converted to int32 first.
"""

from __future__ import annotations

import torch

import tileaot

from ._served import not_served, require, require_none

__all__ = [
    "aux_fi",
    "expand_to_fused",
    "expand_to_fused_with_sf",
    "group_count",
    "inplace_unique_group_indices",
    "mask_indices_by_tp",
    "normalize_weight",
    "reduce_fused",
    "top2_sum_gate",
    "topk_gate",
    "topk_sum_and_topk_group_idx",
]
_INDEX_DTYPES = (torch.int32, torch.int64)
_INT32_MAX = 2**31 - 1


def top2_sum_gate(
    logits: torch.Tensor,
    bias: torch.Tensor,
    num_topk: int,
    num_topk_groups: int,
    num_groups: int,
    use_shared_as_routed: bool,
    num_shared_experts: int,
    routed_scaling_factor: float,
    ep_rank: int,
    num_ep_ranks: int,
    tp_rank: int,
    num_tp_ranks: int,
    scoring_func: str,
    mask: torch.Tensor | None = None,
    fix_routing_mask: torch.Tensor | None = None,
    to_physical_map: torch.Tensor | None = None,
    logical_count: torch.Tensor | None = None,
    unmapped_topk_idx: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3's router, `tileaot.top2_sum_gate`: ``(topk_idx int64, topk_weights float32)``.

    ``scoring_func="sigmoid"``, no physical expert map. Without the map TileKernels uses
    `ep_rank` for nothing (it picks a duplicate through the map), so any value gives the same
    result. `num_shared_experts` counts only with ``use_shared_as_routed``, which appends the
    shared experts ``E .. E + S - 1`` (weight 1.0) as TileKernels' reference does (its kernel
    takes them only together with a physical map)."""
    func = "top2_sum_gate"
    require(func, "scoring_func", scoring_func, ("sigmoid",))
    require_none(
        func,
        mask=mask,
        fix_routing_mask=fix_routing_mask,
        to_physical_map=to_physical_map,
        logical_count=logical_count,
        unmapped_topk_idx=unmapped_topk_idx,
    )
    idx, weights = tileaot.top2_sum_gate(
        logits,
        bias,
        num_topk,
        num_groups,
        num_topk_groups,
        routed_scaling_factor,
        num_shared_experts if use_shared_as_routed else 0,  # as TileKernels: else ignored
        num_ep_ranks,
        tp_rank,
        num_tp_ranks,
        scoring_func,
    )
    return idx.long(), weights


def topk_gate(scores: torch.Tensor, num_topk: int) -> torch.Tensor:
    """The `num_topk` largest scores' expert indices per row, int64 ``[T, num_topk]``, ties to
    the smaller index: `tileaot.topk_gate` (whose softmax ranks the scores themselves); its
    weights are dropped."""
    idx, _ = tileaot.topk_gate(scores, num_topk)
    return idx.long()


def reduce_fused(
    x: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
    topk_weights: torch.Tensor | None,
    token_topk_to_pos: torch.Tensor,
    fp8_format: str = "",
    sf: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``out[t] = sum_k topk_weights[t, k] * x[token_topk_to_pos[t, k]]`` (one FMA a slot),
    `tileaot.moe_reduce`; out in x's dtype, or `out`'s (e.g. bf16 x into a float32 `out`)."""
    func = "reduce_fused"
    if isinstance(x, tuple):
        raise not_served(func, "x", x, "a tensor, without per-row scales")
    require(func, "fp8_format", fp8_format, ("",))
    require_none(func, sf=sf)
    return tileaot.moe_reduce(x, token_topk_to_pos, topk_weights, out=out)


def expand_to_fused(
    x: torch.Tensor, token_topk_to_pos: torch.Tensor, pos_to_expert: torch.Tensor
) -> torch.Tensor:
    """``out[P, H]`` with ``out[token_topk_to_pos[t, k]] = x[t]`` and zero padding rows
    (``pos_to_expert < 0``), `get_fused_mapping`'s int32 maps as they come:
    `tileaot.expand_to_fused` (TileKernels' reference result, bit for bit). bf16 or e4m3 `x`."""
    return tileaot.expand_to_fused(x, token_topk_to_pos, pos_to_expert)


_BYTE_DTYPES = (torch.float8_e4m3fn, torch.uint8, torch.int8)  # moved as e4m3 bytes


def expand_to_fused_with_sf(
    x: tuple[torch.Tensor, torch.Tensor],
    num_per_channels: int,
    token_topk_to_pos: torch.Tensor,
    pos_to_expert: torch.Tensor,
    use_tma_aligned_col_major_sf: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, out_sf)``: `expand_to_fused` of the quantised rows ``x = (data, sf)`` and of
    their scale rows, padding rows zero in both, `tileaot.expand_to_fused_with_sf`
    (TileKernels' reference result, bit for bit). 1-byte data (e4m3, or uint8 / int8, moved
    as bytes); ``num_per_channels`` 32 or 128; float32 scales ``[T, ceil(H / n)]``, or int32
    packed UE8M0 words ``[T, ceil(ceil(H / n) / 4)]`` with ``use_tma_aligned_col_major_sf``
    (as TileKernels requires). ``use_tma_aligned_col_major_sf``: `out_sf` is the ``[P, F]``
    column-major view of a zero-padded ``[F, ceil(P / 4) * 4]`` buffer, as TileKernels
    returns it."""
    func = "expand_to_fused_with_sf"
    if not (isinstance(x, tuple) and len(x) == 2):
        raise TypeError(f"tileaot.tile_kernels.{func}: x must be a (data, sf) pair")
    data, sf = x
    require(func, "num_per_channels", num_per_channels, (32, 128))
    dtype = getattr(data, "dtype", None)
    if dtype not in _BYTE_DTYPES:
        raise not_served(func, "x[0].dtype", dtype, "torch.float8_e4m3fn, torch.uint8, torch.int8")
    if isinstance(data, torch.Tensor) and data.dim() == 2 and isinstance(sf, torch.Tensor):
        packed = sf.dtype == torch.int32
        if packed and not use_tma_aligned_col_major_sf:
            raise ValueError(
                f"tileaot.tile_kernels.{func}: int32 (packed UE8M0) scales need "
                "use_tma_aligned_col_major_sf=True, as TileKernels requires"
            )
        groups = -(-data.shape[1] // num_per_channels)
        want = -(-groups // 4) if packed else groups
        if sf.dim() != 2 or sf.shape[1] != want:
            raise ValueError(
                f"tileaot.tile_kernels.{func}: x[1] has shape {tuple(sf.shape)}; for H = "
                f"{data.shape[1]} and num_per_channels={num_per_channels} it must be "
                f"[{data.shape[0]}, {want}]"
            )
    flag = use_tma_aligned_col_major_sf
    out, out_sf = tileaot.expand_to_fused_with_sf(
        data.view(torch.float8_e4m3fn),
        sf,
        token_topk_to_pos,
        pos_to_expert,
        use_tma_aligned_col_major_sf=flag,
    )
    if flag:  # TileKernels' view of the padded buffer
        out_sf = out_sf[:, : pos_to_expert.shape[0]].T
    return out.view(dtype), out_sf


def topk_sum_and_topk_group_idx(
    scores: torch.Tensor, num_topk_sum: int, num_topk_groups: int
) -> torch.Tensor:
    """Each token's `num_topk_groups` best groups of ``scores [T, G, S]``, a group valued by
    the sum of its `num_topk_sum` largest scores: `tileaot.topk_sum_and_topk_group_idx`,
    int64 ``[T, num_topk_groups]`` as TileKernels."""
    return tileaot.topk_sum_and_topk_group_idx(scores, num_topk_sum, num_topk_groups).long()


def normalize_weight(topk_weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(denominator [T], normalized_weights [T, K])`` of float32 `topk_weights`:
    `tileaot.normalize_weight` (TileKernels' result, bit for bit)."""
    return tileaot.normalize_weight(topk_weights)


def mask_indices_by_tp(
    indices: torch.Tensor, n: int, num_ep_ranks: int, tp_rank: int, num_tp_ranks: int
) -> torch.Tensor:
    """`indices` with the experts of other tensor-parallel ranks set to -1 and this rank's
    renumbered locally: `tileaot.mask_indices_by_tp`, returned in the dtype of `indices`
    (int32 or int64, as TileKernels). int64 indices run as int32 (clamped to
    ``[-1, 2**31 - 1]``: expert indices are below ``n < 2**31``)."""
    dtype = _index_dtype("mask_indices_by_tp", "indices", indices)
    masked = tileaot.mask_indices_by_tp(_as_int32(indices), n, num_ep_ranks, tp_rank, num_tp_ranks)
    return masked if dtype in (None, torch.int32) else masked.to(dtype)


def group_count(group_idx: torch.Tensor, num_groups: int) -> torch.Tensor:
    """int32 ``[num_groups]`` counts of each group in ``group_idx [T, K]`` (negative entries
    not counted): `tileaot.group_count`. int64 `group_idx` (TileKernels' dtype) runs as int32,
    clamped to ``[-1, 2**31 - 1]`` (an entry ``>= num_groups`` is not counted either way)."""
    _index_dtype("group_count", "group_idx", group_idx)
    return tileaot.group_count(_as_int32(group_idx), num_groups)


def aux_fi(topk_idx: torch.Tensor, num_experts: int, num_aux_topk: int) -> torch.Tensor:
    """float32 ``[num_experts]`` frequency indicators ``count * num_experts / (T *
    num_aux_topk)`` of ``topk_idx [T, K]`` (negative entries not counted): `tileaot.aux_fi`
    (TileKernels' reference result, bit for bit). int64 `topk_idx` (TileKernels' dtype) runs as
    int32, clamped to ``[-1, 2**31 - 1]`` (an entry ``>= num_experts`` is not counted)."""
    _index_dtype("aux_fi", "topk_idx", topk_idx)
    return tileaot.aux_fi(_as_int32(topk_idx), num_experts, num_aux_topk)


def inplace_unique_group_indices(group_indices: torch.Tensor, num_groups: int) -> None:
    """Set each repeat of a value within a row of ``group_indices [T, K]`` to -1, in place
    (the leftmost occurrence stays): `tileaot.inplace_unique_group_indices`, whose result is
    written back (TileKernels' reference result, bit for bit). int64 indices run as int32
    (values outside the int32 range clamped to it, so two such values may count as equal);
    only the entries the op turned into -1 are written."""
    dtype = _index_dtype("inplace_unique_group_indices", "group_indices", group_indices)
    if dtype != torch.int64:  # int32, or not a tensor (the op's TypeError names it)
        group_indices.copy_(tileaot.inplace_unique_group_indices(group_indices, num_groups))
        return
    narrow = group_indices.clamp(-_INT32_MAX - 1, _INT32_MAX).int()
    unique = tileaot.inplace_unique_group_indices(narrow, num_groups)
    group_indices.masked_fill_(unique != narrow, -1)


def _index_dtype(func: str, arg: str, x: object) -> torch.dtype | None:
    """The dtype of index tensor `x` (None for a non-tensor: the op's TypeError names it)."""
    if not isinstance(x, torch.Tensor):
        return None
    require(func, f"{arg}.dtype", x.dtype, _INDEX_DTYPES)
    return x.dtype


def _as_int32(x: object) -> object:
    # clamping first keeps an out-of-range int64 index from wrapping onto a valid one
    if isinstance(x, torch.Tensor) and x.dtype == torch.int64:
        return x.clamp(-1, _INT32_MAX).int()
    return x
