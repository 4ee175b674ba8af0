"""Benchmark cases for mhc_pre_norm_fn (mHC, bf16 residual, R = 4, N = 24 mixes).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: the residual once, mhc_fn once (every block re-reads it from L2, which is not
counted) and the float32 mixes. Memory-bound on the residual. The torch equivalent is
TileKernels' reference (float32 einsum, sum of squares, rsqrt).
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


CASES = [
    ("mhc_pre_norm_fn r4", "8192x4x7168", lambda: _forward(8192, 7168)),
    ("mhc_pre_norm_fn r4", "128x4x4096", lambda: _forward(128, 4096)),
]
