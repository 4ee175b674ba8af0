"""Benchmark cases for engram_gate and engram_gate_backward (bf16, DeepSeek's H = 7168 with 4
hyper-connection branches, and a small size).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: forward reads h, k, v and writes out (+ the fp32 gate and the weights); the
"shared v" case passes v as [T, 1, H] (one value row per token, the layout of TileKernels'
benchmark: (3 G + 1) * T * H * 2 bytes + gate + weights); "weights [G, H]" cases pass one
weight row per branch (TileKernels' weight_hidden / weight_embed layout);
backward reads grad_out, h, k, v and writes grad_h, grad_k, grad_v (+ the weights, their
gradients and the fp32 per-block scratch written and read once). The torch equivalents are the
eager fp32-math forward and torch autograd's backward of it (graph built once, not timed).
"""

from __future__ import annotations

import math

import tileaot
import torch

EPS = 1e-6


def _inputs(t: int, g: int, n: int, v_rows: int | None = None, branches: bool = False):
    h, k = (torch.randn(t, g, n, device="cuda").bfloat16() for _ in range(2))
    v = torch.randn(t, g if v_rows is None else v_rows, n, device="cuda").bfloat16()
    wshape = (g, n) if branches else (n,)
    w_h, w_k = ((1 + 0.1 * torch.randn(wshape, device="cuda")).bfloat16() for _ in range(2))
    return h, k, v, w_h, w_k


def _eager(h, k, v, w_h, w_k):
    hf, kf = h.float(), k.float()
    a = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS) * w_h.float()
    b = kf * torch.rsqrt(kf.pow(2).mean(-1, keepdim=True) + EPS) * w_k.float()
    s = (a * b).sum(-1, keepdim=True) / math.sqrt(h.shape[-1])
    gate = torch.sigmoid(torch.sign(s) * torch.sqrt(s.abs().clamp_min(1e-6)))
    return (hf + gate * v.float()).to(h.dtype)


def _forward(t: int, g: int, n: int, shared_v: bool = False, branches: bool = False):
    h, k, v, w_h, w_k = _inputs(t, g, n, 1 if shared_v else None, branches)
    out = torch.empty_like(h)
    gate = torch.empty(t, g, device="cuda")
    rows = t * g
    nbytes = (3 * h.numel() + v.numel()) * 2 + rows * 4 + 2 * w_h.numel() * 2
    return (
        (lambda: tileaot.engram_gate(h, k, v, w_h, w_k, EPS, return_gate=True, out=(out, gate))),
        (lambda: _eager(h, k, v, w_h, w_k)),
        nbytes,
        None,
    )


def _backward(t: int, g: int, n: int):
    h, k, v, w_h, w_k = _inputs(t, g, n)
    go = torch.randn_like(h)
    grads = (torch.empty_like(h), torch.empty_like(h), torch.empty_like(h),
             torch.empty_like(w_h, dtype=torch.float32),
             torch.empty_like(w_k, dtype=torch.float32))  # fmt: skip
    saved = tileaot.engram_gate(h, k, v, w_h, w_k, EPS, save_for_backward=True)[1:]
    leaves = [x.clone().requires_grad_() for x in (h, k, v, w_h, w_k)]
    out = _eager(*leaves)
    rows = t * g
    blocks = min(rows, torch.cuda.get_device_properties(0).multi_processor_count * 3)
    # go, h, k, v read; grad_h, grad_k, grad_v written; 4 saved fp32 per row; weights (bf16)
    # read and their fp32 grads written; the scratch written and read.
    nbytes = 7 * h.numel() * 2 + rows * 16 + w_h.numel() * (2 * 2 + 2 * 4) + 2 * blocks * n * 4
    return (
        (lambda: tileaot.engram_gate_backward(go, h, k, v, w_h, w_k, saved=saved, out=grads)),
        (lambda: torch.autograd.grad(out, leaves, go, retain_graph=True)),
        nbytes,
        None,
    )


CASES = [
    ("engram_gate bf16", "32768x4x7168", lambda: _forward(32768, 4, 7168)),
    ("engram_gate bf16", "128x4x4096", lambda: _forward(128, 4, 4096)),
    ("engram_gate bf16 shared v", "32768x4x7168", lambda: _forward(32768, 4, 7168, True)),
    (
        "engram_gate bf16 shared v, weights [G, H]",
        "32768x4x7168",
        lambda: _forward(32768, 4, 7168, True, True),
    ),
    ("engram_gate_backward bf16", "8192x4x7168", lambda: _backward(8192, 4, 7168)),
    ("engram_gate_backward bf16", "128x4x4096", lambda: _backward(128, 4, 4096)),
]
