"""Benchmark cases for mhc_pre_split_mixes and mhc_pre_split_mixes_backward (mHC, float32,
R = 4: K = R * (R + 2) = 24 raw mixes per token).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: the forward reads the raw mixes and writes as many split mixes; the backward
reads the three gradients (K per token) and the raw mixes and writes their gradient (the
scale and base sums are small). Memory-bound. The torch equivalents are TileKernels'
reference formula and its autograd.
"""

from __future__ import annotations

import tileaot
import torch

R, K = 4, 4 * 6


def _torch_split(x, scale, base):
    seg = torch.tensor([0] * R + [1] * R + [2] * R * R, device=x.device)
    z = x * scale[seg] + base
    pre = (z[..., :R].sigmoid() + 1e-6).unsqueeze(-1)
    post = (z[..., R : 2 * R].sigmoid() * 2.0).unsqueeze(-1)
    return pre, post, z[..., 2 * R :].unflatten(-1, (R, R))


def _inputs(b: int, t: int):
    x = torch.randn(b, t, K, device="cuda")
    return x, torch.rand(3, device="cuda"), torch.randn(K, device="cuda")


def _forward(b: int, t: int):
    x, scale, base = _inputs(b, t)
    out = tuple(torch.empty(b, t, R, n, device="cuda") for n in (1, 1, R))
    return (
        (lambda: tileaot.mhc_pre_split_mixes(x, scale, base, R, 2.0, 1e-6, out=out)),
        (lambda: _torch_split(x, scale, base)),
        2 * x.numel() * 4,
        None,
    )


def _backward(b: int, t: int):
    x, scale, base = _inputs(b, t)
    grads = tuple(torch.randn(b, t, R, n, device="cuda") for n in (1, 1, R))
    out = (torch.empty_like(x), torch.empty_like(scale), torch.empty_like(base))

    def torch_backward():
        leaves = [v.detach().requires_grad_(True) for v in (x, scale, base)]
        return torch.autograd.grad(_torch_split(*leaves), leaves, grads)

    return (
        (lambda: tileaot.mhc_pre_split_mixes_backward(*grads, x, scale, base, 2.0, out=out)),
        torch_backward,
        3 * x.numel() * 4,
        None,
    )


CASES = [
    ("mhc_pre_split_mixes r4", "4x8192x24", lambda: _forward(4, 8192)),
    ("mhc_pre_split_mixes_backward r4", "4x8192x24", lambda: _backward(4, 8192)),
]
