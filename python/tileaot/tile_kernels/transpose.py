"""TileKernels 1.0.0's ``tile_kernels.transpose``, served by `tileaot.transpose` (any shape:
TileKernels needs both dims divisible by 64)."""

from __future__ import annotations

import torch

import tileaot

__all__ = ["batched_transpose", "transpose"]


def transpose(x: torch.Tensor) -> torch.Tensor:
    """``x.T.contiguous()`` of a 2-D tensor, bit-exact."""
    return tileaot.transpose(x)


def batched_transpose(x: torch.Tensor) -> torch.Tensor:
    """``x.transpose(1, 2).contiguous()`` of a 3-D tensor, bit-exact."""
    return tileaot.transpose(x)
