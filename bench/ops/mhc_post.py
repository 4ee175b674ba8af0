"""Benchmark cases for mhc_post and mhc_post_backward (mHC, bf16, R = 4).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: the forward reads x and residual and writes R rows per token; the backward
reads grad_out, x and residual and writes grad_x and grad_residual (the mixes are small).
Memory-bound. The torch equivalents are TileKernels' reference and its autograd.
"""

from __future__ import annotations

import tileaot
import torch


def _torch_post(x, residual, post, comb):  # TileKernels' mhc_post_ref
    term2 = torch.einsum("tmn,tmh->tnh", comb, residual.float())
    return (x.float().unsqueeze(-2) * post + term2).bfloat16()


def _inputs(t: int, h: int, r: int = 4):
    x = torch.randn(t, h, device="cuda").to(torch.bfloat16)
    residual = torch.randn(t, r, h, device="cuda").to(torch.bfloat16)
    return x, residual, torch.rand(t, r, 1, device="cuda"), torch.rand(t, r, r, device="cuda")


def _forward(t: int, h: int):
    inputs = _inputs(t, h)
    out = torch.empty_like(inputs[1])
    return (
        (lambda: tileaot.mhc_post(*inputs, out=out)),
        (lambda: _torch_post(*inputs)),
        (inputs[0].numel() + 2 * out.numel()) * 2,
        None,
    )


def _backward(t: int, h: int):
    inputs = _inputs(t, h)
    g = torch.randn_like(inputs[1])
    out = tuple(torch.empty_like(v) for v in inputs)

    def torch_backward():
        leaves = [v.detach().requires_grad_(True) for v in inputs]
        return torch.autograd.grad(_torch_post(*leaves), leaves, g)

    return (
        (lambda: tileaot.mhc_post_backward(g, *inputs, out=out)),
        torch_backward,
        (3 * g.numel() + 2 * inputs[0].numel()) * 2,
        None,
    )


CASES = [
    ("mhc_post r4", "8192x4x7168", lambda: _forward(8192, 7168)),
    ("mhc_post r4", "128x4x4096", lambda: _forward(128, 4096)),
    ("mhc_post_backward r4", "8192x4x7168", lambda: _backward(8192, 7168)),
    ("mhc_post_backward r4", "128x4x4096", lambda: _backward(128, 4096)),
]
