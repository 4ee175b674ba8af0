"""TileKernels 1.0.0's ``tile_kernels.engram`` kernels: its ``engram_hash``, ``fused_weight``
and ``grad_w_reduce``, served by `tileaot.engram_hash`, `tileaot.engram_fused_weight` and
`tileaot.engram_grad_w_reduce`."""

from __future__ import annotations

import torch

import tileaot

__all__ = ["engram_hash", "fused_weight", "grad_w_reduce"]


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


def fused_weight(weight_hidden: torch.Tensor, weight_embed: torch.Tensor) -> torch.Tensor:
    """``float32(weight_hidden) * float32(weight_embed)``, ``[hc_mult, H]`` bf16 each ->
    float32: `tileaot.engram_fused_weight` (exact, so TileKernels' bits)."""
    return tileaot.engram_fused_weight(weight_hidden, weight_embed)


def grad_w_reduce(
    grad_w_partial: torch.Tensor,
    weight_hidden: torch.Tensor,
    weight_embed: torch.Tensor,
    grad_weight_hidden: torch.Tensor,
    grad_weight_embed: torch.Tensor,
) -> None:
    """Adds ``s * weight_embed`` to `grad_weight_hidden` and ``s * weight_hidden`` to
    `grad_weight_embed` in place (float32 ``[hc_mult, H]``), ``s`` the sum of `grad_w_partial`
    ``[P, hc_mult, H]`` float32 over its blocks, as TileKernels: `tileaot.engram_grad_w_reduce`
    (the same order of adds and fused multiply-add), its results copied back into the two
    gradients (on the current stream). Returns None, as TileKernels."""
    grads = tileaot.engram_grad_w_reduce(
        grad_w_partial, weight_hidden, weight_embed, grad_weight_hidden, grad_weight_embed
    )
    grad_weight_hidden.copy_(grads[0])
    grad_weight_embed.copy_(grads[1])
