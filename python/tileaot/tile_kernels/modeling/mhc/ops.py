"""TileKernels 1.0.0's ``tile_kernels.modeling.mhc.ops``, served by tileaot's mHC ops."""

from __future__ import annotations

import torch

import tileaot

__all__ = ["sinkhorn_normalize"]


def sinkhorn_normalize(x: torch.Tensor, repeat: int = 10, eps: float = 1e-6) -> torch.Tensor:
    """`tileaot.sinkhorn_normalize` of each ``[n, n]`` matrix of float32 `x` (differentiable);
    like TileKernels, a non-contiguous `x` is made contiguous first."""
    if isinstance(x, torch.Tensor):
        x = x.contiguous()
    return tileaot.sinkhorn_normalize(x, repeat, eps)
