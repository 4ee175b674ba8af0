"""A torch builder of TileKernels 1.0.0's fused MoE mapping, for tests (no GPU, no TileKernels).

TileKernels' ``get_fused_mapping`` (tile_kernels/moe/get_fused_mapping_kernel.py) gives each
expert a run of rows of the fused layout, in expert order, its length the expert's entry count
rounded up to `alignment`; ``pos_to_expert[p]`` is the expert of row p or -1 (the padding at
the end of each run and every row past the last run), ``token_topk_to_pos[t, k]`` the row of
entry (t, k) or -1 where ``topk_idx[t, k] == -1``. The order of the entries inside a run is
whatever its warps reach first; here it is (token, slot) order, one of the orders it can give.
"""

from __future__ import annotations

import torch


def fused_mapping(
    topk_idx: torch.Tensor, num_experts: int, alignment: int, rows: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pos_to_expert [P] int32, token_topk_to_pos [T, K] int32)`` for ``topk_idx [T, K]``
    (entries in ``[0, num_experts)`` or -1). P is `rows` (at least the runs' total), or the
    runs' total when None (TileKernels' ``num_expanded_tokens=0`` with its host sync)."""
    t, k = topk_idx.shape
    flat = topk_idx.reshape(-1).long().cpu()
    live = flat >= 0
    counts = torch.bincount(flat[live], minlength=num_experts)
    padded = (counts + alignment - 1) // alignment * alignment
    starts = torch.cumsum(padded, 0) - padded
    total = int(padded.sum())
    rows = total if rows is None else rows
    assert rows >= total, (rows, total)
    order = torch.argsort(torch.where(live, flat, num_experts), stable=True)
    ranks = torch.empty_like(flat)
    first = torch.cumsum(counts, 0) - counts  # first sorted slot of each expert
    sorted_e = flat[order]
    ranks[order] = torch.arange(t * k) - first[sorted_e.clamp(min=0)]
    pos = torch.where(live, starts[flat.clamp(min=0)] + ranks, -1)
    pos_to_expert = torch.full((rows,), -1, dtype=torch.int32)
    pos_to_expert[pos[live]] = flat[live].int()
    dev = topk_idx.device
    return pos_to_expert.to(dev), pos.view(t, k).int().to(dev)
