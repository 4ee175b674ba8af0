"""Benchmark cases for mhc_pre_norm_fn and mhc_pre_norm_fn_backward (mHC, bf16 residual,
R = 4, N = 24 mixes).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Forward bytes: the residual once, mhc_fn once (every block re-reads it from L2, which
is not counted) and the float32 mixes (the 16 column slices' scratch is not counted). Backward
bytes: the residual twice (its token sums are recomputed, then the gradients), its gradient
written, mhc_fn and its gradient, the mixes' gradient.
Memory-bound on the residual. The torch equivalents are TileKernels' reference (float32
einsum, sum of squares, rsqrt) and its autograd.
"""

from __future__ import annotations

import tileaot
import torch


def _torch_norm_fn(residual, fn, eps):  # TileKernels' mhc_pre_norm_fn_ref, without a weight
    x = residual.flatten(-2).float()
    mixes = x @ fn.t()
    return mixes * (x.square().sum(-1, keepdim=True) / x.shape[-1] + eps).rsqrt()


def _forward(t: int, h: int, r: int = 4):
    residual = torch.randn(t, r, h, device="cuda").to(torch.bfloat16)
    fn = torch.randn(r * (r + 2), r * h, device="cuda") * (r * h) ** -0.5
    out = torch.empty(t, fn.shape[0], device="cuda")
    return (
        (lambda: tileaot.mhc_pre_norm_fn(residual, fn, None, 1e-6, out=out)),
        (lambda: _torch_norm_fn(residual, fn, 1e-6)),
        residual.numel() * 2 + (fn.numel() + out.numel()) * 4,
        None,
    )


def _backward(t: int, h: int, r: int = 4):
    residual = torch.randn(t, r, h, device="cuda").to(torch.bfloat16)
    fn = torch.randn(r * (r + 2), r * h, device="cuda") * (r * h) ** -0.5
    g = torch.randn(t, fn.shape[0], device="cuda")
    out = (torch.empty_like(residual), torch.empty_like(fn))

    def torch_backward():
        leaves = [v.detach().requires_grad_(True) for v in (residual, fn)]
        return torch.autograd.grad(_torch_norm_fn(*leaves, 1e-6), leaves, g)

    return (
        (lambda: tileaot.mhc_pre_norm_fn_backward(g, residual, fn, 1e-6, out=out)),
        torch_backward,
        residual.numel() * 2 * 3 + (fn.numel() * 2 + g.numel()) * 4,
        None,
    )


CASES = [
    ("mhc_pre_norm_fn r4", "8192x4x7168", lambda: _forward(8192, 7168)),
    ("mhc_pre_norm_fn r4", "128x4x4096", lambda: _forward(128, 4096)),
    ("mhc_pre_norm_fn_backward r4", "8192x4x7168", lambda: _backward(8192, 7168)),
    ("mhc_pre_norm_fn_backward r4", "128x4x4096", lambda: _backward(128, 4096)),
]
