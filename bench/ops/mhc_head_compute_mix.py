"""Benchmark cases for mhc_head_compute_mix and mhc_head_compute_mix_backward (mHC, float32,
R = 4 mixes per token).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: the forward reads and writes R floats per token; the backward reads the
gradient and the mixes and writes their gradient (the scale and base sums are small).
Memory-bound. The torch equivalents are TileKernels' reference formula and its autograd.
"""

from __future__ import annotations

import tileaot
import torch

R = 4


def _inputs(b: int, t: int):
    x = torch.randn(b, t, R, device="cuda")
    return x, torch.rand(1, device="cuda"), torch.randn(R, device="cuda")


def _torch_mix(x, scale, base):
    return (x * scale + base).sigmoid() + 1e-6


def _forward(b: int, t: int):
    x, scale, base = _inputs(b, t)
    out = torch.empty_like(x)
    return (
        (lambda: tileaot.mhc_head_compute_mix(x, scale, base, 1e-6, out=out)),
        (lambda: _torch_mix(x, scale, base)),
        2 * x.numel() * 4,
        None,
    )


def _backward(b: int, t: int):
    x, scale, base = _inputs(b, t)
    g = torch.randn_like(x)
    out = (torch.empty_like(x), torch.empty_like(scale), torch.empty_like(base))

    def torch_backward():
        leaves = [v.detach().requires_grad_(True) for v in (x, scale, base)]
        return torch.autograd.grad(_torch_mix(*leaves), leaves, g)

    return (
        (lambda: tileaot.mhc_head_compute_mix_backward(g, x, scale, base, out=out)),
        torch_backward,
        3 * x.numel() * 4,
        None,
    )


CASES = [
    ("mhc_head_compute_mix r4", "4x8192x4", lambda: _forward(4, 8192)),
    ("mhc_head_compute_mix_backward r4", "4x8192x4", lambda: _backward(4, 8192)),
]
