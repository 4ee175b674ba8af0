"""Benchmark cases for mhc_pre_apply_mix and mhc_pre_apply_mix_backward (mHC, bf16, R = 4).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: the forward reads x (R rows) and writes one row per token; the backward reads
grad_out and x and writes grad_x (the mixes are small). Memory-bound. The torch equivalents
are TileKernels' reference and its autograd.
"""

from __future__ import annotations

import tileaot
import torch


def _inputs(t: int, h: int, r: int = 4):
    x = torch.randn(t, r, h, device="cuda").to(torch.bfloat16)
    mix = torch.rand(t, r, 1, device="cuda")
    return x, mix


def _forward(t: int, h: int):
    x, mix = _inputs(t, h)
    out = torch.empty(t, h, dtype=torch.bfloat16, device="cuda")
    return (
        (lambda: tileaot.mhc_pre_apply_mix(x, mix, out=out)),
        (lambda: (x * mix).sum(-2).bfloat16()),
        (x.numel() + out.numel()) * 2,
        None,
    )


def _backward(t: int, h: int):
    x, mix = _inputs(t, h)
    g = torch.randn(t, h, device="cuda").to(torch.bfloat16)
    out = (torch.empty_like(x), torch.empty_like(mix))

    def torch_backward():
        xl, ml = x.detach().requires_grad_(True), mix.detach().requires_grad_(True)
        return torch.autograd.grad((xl * ml).sum(-2).bfloat16(), (xl, ml), g)

    return (
        (lambda: tileaot.mhc_pre_apply_mix_backward(g, x, mix, out=out)),
        torch_backward,
        (g.numel() + 2 * x.numel()) * 2,
        None,
    )


CASES = [
    ("mhc_pre_apply_mix r4", "8192x4x7168", lambda: _forward(8192, 7168)),
    ("mhc_pre_apply_mix r4", "128x4x4096", lambda: _forward(128, 4096)),
    ("mhc_pre_apply_mix_backward r4", "8192x4x7168", lambda: _backward(8192, 7168)),
    ("mhc_pre_apply_mix_backward r4", "128x4x4096", lambda: _backward(128, 4096)),
]
