"""Benchmark cases for moe_reduce (MoE combine).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: each routed row of y_sorted read once, token_pos and weights read once, out
written once. The torch equivalent gathers the rows and sums them in float32.
"""

from __future__ import annotations

import tileaot
import torch


def _case(t: int, h: int, k: int, weighted: bool = True, out_dtype=torch.bfloat16):
    p = t * k
    y = torch.randn(p, h, device="cuda").bfloat16()
    pos = torch.randperm(p, device="cuda").int().view(t, k)  # every row read exactly once
    w = torch.rand(t, k, device="cuda") if weighted else None
    out = torch.empty(t, h, dtype=out_dtype, device="cuda")
    nbytes = p * h * 2 + pos.numel() * 4 * (2 if weighted else 1) + out.numel() * out.element_size()

    def torch_eager():
        rows = y[pos.long()].float()  # [T, K, H]
        if w is not None:
            rows = rows * w[..., None]
        return rows.sum(1).to(out_dtype)

    return (lambda: tileaot.moe_reduce(y, pos, w, out=out)), torch_eager, nbytes, None


CASES = [
    ("moe_reduce bf16 weighted", "32768x7168 k8", lambda: _case(32768, 7168, 8)),
    ("moe_reduce bf16 sum", "32768x7168 k8", lambda: _case(32768, 7168, 8, weighted=False)),
    (
        "moe_reduce bf16->fp32 weighted",
        "4096x7168 k8",
        lambda: _case(4096, 7168, 8, True, torch.float32),
    ),
    ("moe_reduce bf16 weighted", "128x7168 k8", lambda: _case(128, 7168, 8)),
]
