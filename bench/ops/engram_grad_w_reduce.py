"""Benchmark cases for engram_grad_w_reduce (the Engram gate's weight gradients from
per-block float32 partials, TileKernels' grad_w_reduce: P = 132 blocks, one per H200 SM, as
its engram_gate_bwd leaves them; hc_mult 4, H = 7168 and 4096).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The torch equivalent: ``acc + partial.sum(0) * w`` (TileKernels' test reference).
Bytes: the partials, both weights and both accumulators read once, both gradients written once.
"""

from __future__ import annotations

import tileaot
import torch


def _case(p: int, g: int, h: int):
    partial = torch.randn(p, g, h, device="cuda")
    w_h, w_k = (torch.randn(g, h, device="cuda").bfloat16() for _ in "hk")
    acc_h, acc_k = (torch.randn(g, h, device="cuda") for _ in "hk")
    out = (torch.empty(g, h, device="cuda"), torch.empty(g, h, device="cuda"))

    def torch_fn():
        s = partial.sum(0)
        return acc_h + s * w_k.float(), acc_k + s * w_h.float()

    nbytes = partial.numel() * 4 + 2 * g * h * 2 + 4 * g * h * 4
    return (
        (lambda: tileaot.engram_grad_w_reduce(partial, w_h, w_k, acc_h, acc_k, out=out)),
        torch_fn,
        nbytes,
        None,
    )


CASES = [
    ("engram_grad_w_reduce p132 g4", "4x7168", lambda: _case(132, 4, 7168)),
    ("engram_grad_w_reduce p132 g4", "4x4096", lambda: _case(132, 4, 4096)),
]
