"""TileKernels 1.0.0's ``tile_kernels.modeling.engram``: its ``engram_gate``, served by
`tileaot.engram_gate`."""

from __future__ import annotations

import torch

import tileaot

from ..._served import not_served

__all__ = ["engram_gate"]


def engram_gate(
    hidden_states: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    weight_hidden: torch.Tensor,
    weight_embed: torch.Tensor,
    clamp_value: float,
    eps: float,
) -> torch.Tensor:
    """``hidden_states + g * v`` with one gate per branch row (TileKernels' fused engram gate
    with per-branch RMSNorm weights): `tileaot.engram_gate`, differentiable.

    Shapes as TileKernels: `hidden_states`, `k` ``[..., hc_mult, H]``, `v` ``[..., H]`` (one
    value row per token, shared by its branches), `weight_hidden`, `weight_embed`
    ``[hc_mult, H]``. TileKernels' function is an ``autograd.Function.apply``; this is a plain
    function with its forward's parameters. Weight gradients are returned, never accumulated
    into a ``main_grad`` attribute (a weight that has one is refused)."""
    for name, w in (("weight_hidden", weight_hidden), ("weight_embed", weight_embed)):
        if getattr(w, "main_grad", None) is not None:
            raise not_served("engram_gate", f"{name}.main_grad", w.main_grad, "no main_grad")
    if isinstance(v, torch.Tensor) and v.dim() >= 1:
        v = v.unsqueeze(-2)  # [..., 1, H]: tileaot's shared value row
    return tileaot.engram_gate(hidden_states, k, v, weight_hidden, weight_embed, eps, clamp_value)
