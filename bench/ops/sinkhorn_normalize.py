"""Benchmark cases for sinkhorn_normalize and sinkhorn_normalize_backward (mHC, repeat = 20).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: logits read once and the result written once (the backward also reads
grad_out). These kernels are latency- and arithmetic-bound at these sizes: compare times.
The torch equivalents run the documented sequence (and its autograd) in float32.
"""

from __future__ import annotations

import tileaot
import torch

REPEAT, EPS = 20, 1e-6


def _torch_forward(x):  # TileKernels' sinkhorn_normalize_ref
    p = torch.softmax(x, dim=-1) + EPS
    p = p / (p.sum(dim=-2, keepdim=True) + EPS)
    for _ in range(REPEAT - 1):
        p = p / (p.sum(dim=-1, keepdim=True) + EPS)
        p = p / (p.sum(dim=-2, keepdim=True) + EPS)
    return p


def _forward(t: int, n: int):
    x = torch.randn(t, n, n, device="cuda")
    out = torch.empty_like(x)
    return (
        (lambda: tileaot.sinkhorn_normalize(x, REPEAT, EPS, out=out)),
        (lambda: _torch_forward(x)),
        2 * x.numel() * 4,
        None,
    )


def _backward(t: int, n: int):
    x = torch.randn(t, n, n, device="cuda")
    g = torch.randn_like(x)
    out = torch.empty_like(x)

    def torch_backward():
        xr = x.detach().requires_grad_(True)
        return torch.autograd.grad(_torch_forward(xr), xr, g)

    return (
        (lambda: tileaot.sinkhorn_normalize_backward(g, x, REPEAT, EPS, out=out)),
        torch_backward,
        3 * x.numel() * 4,
        None,
    )


CASES = [
    ("sinkhorn_normalize n4 r20", "32768x4x4", lambda: _forward(32768, 4)),
    ("sinkhorn_normalize n8 r20", "32768x8x8", lambda: _forward(32768, 8)),
    ("sinkhorn_normalize n4 r20", "128x4x4", lambda: _forward(128, 4)),
    ("sinkhorn_normalize_backward n4 r20", "32768x4x4", lambda: _backward(32768, 4)),
    ("sinkhorn_normalize_backward n8 r20", "32768x8x8", lambda: _backward(32768, 8)),
]
