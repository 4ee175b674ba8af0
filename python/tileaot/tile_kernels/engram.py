"""TileKernels 1.0.0's ``tile_kernels.engram`` kernels: its ``engram_hash``, served by
`tileaot.engram_hash`."""

from __future__ import annotations

import torch

import tileaot

__all__ = ["engram_hash"]


def engram_hash(
    ngram_token_ids: torch.Tensor,
    multipliers: torch.Tensor,
    vocab_sizes: torch.Tensor,
    offsets: torch.Tensor,
) -> torch.Tensor:
    """Engram's n-gram hash indices ``[L, T, (N - 1) * E]`` int32: `tileaot.engram_hash`
    (TileKernels' result, bit for bit). Dtypes as TileKernels' kernel takes them: int32 ids,
    sizes and offsets, int64 multipliers."""
    return tileaot.engram_hash(ngram_token_ids, multipliers, vocab_sizes, offsets)
