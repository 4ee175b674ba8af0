"""Benchmark cases for expand_to_mhc and expand_to_mhc_backward (mHC, bf16).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: the forward reads x once and writes R copies; the backward reads R rows and
writes one. Memory-bound: compare with copy. The torch equivalents are TileKernels' reference
(``expand`` + ``contiguous``) and a float32 sum over the copies.
"""

from __future__ import annotations

import tileaot
import torch


def _forward(t: int, r: int, h: int):
    x = torch.randn(t, h, device="cuda").to(torch.bfloat16)
    out = torch.empty(t, r, h, dtype=torch.bfloat16, device="cuda")
    return (
        (lambda: tileaot.expand_to_mhc(x, r, out=out)),
        (lambda: x.unsqueeze(-2).expand(t, r, h).contiguous()),
        (1 + r) * x.numel() * 2,
        None,
    )


def _backward(t: int, r: int, h: int):
    g = torch.randn(t, r, h, device="cuda").to(torch.bfloat16)
    out = torch.empty(t, h, dtype=torch.bfloat16, device="cuda")
    return (
        (lambda: tileaot.expand_to_mhc_backward(g, out=out)),
        (lambda: g.float().sum(-2).bfloat16()),
        (1 + r) * t * h * 2,
        None,
    )


CASES = [
    ("expand_to_mhc r4", "8192x7168", lambda: _forward(8192, 4, 7168)),
    ("expand_to_mhc r4", "128x4096", lambda: _forward(128, 4, 4096)),
    ("expand_to_mhc_backward r4", "8192x4x7168", lambda: _backward(8192, 4, 7168)),
    ("expand_to_mhc_backward r4", "128x4x4096", lambda: _backward(128, 4, 4096)),
]
