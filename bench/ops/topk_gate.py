"""Benchmark cases for topk_gate (MoE routing: pick k of E experts per token).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The torch equivalent is softmax/sigmoid + torch.topk + renormalise (it does not
break ties by index). Target on an H200: 32768x256, k=8 in <= 25 us.
"""

from __future__ import annotations

import tileaot
import torch


def _case(t: int, e: int, k: int, scoring: str):
    x = torch.randn(t, e, device="cuda")
    idx = torch.empty(t, k, dtype=torch.int32, device="cuda")
    w = torch.empty(t, k, device="cuda")
    nbytes = x.numel() * 4 + idx.numel() * 4 + w.numel() * 4
    act = torch.softmax if scoring == "softmax" else (lambda s, dim: torch.sigmoid(s))

    def torch_eager():
        top, i = torch.topk(act(x, dim=-1), k, dim=-1)
        return i, top / top.sum(-1, keepdim=True)

    return (lambda: tileaot.topk_gate(x, k, scoring, out=(idx, w))), torch_eager, nbytes, None


CASES = [
    ("topk_gate softmax k8", "32768x256", lambda: _case(32768, 256, 8, "softmax")),
    ("topk_gate sigmoid k8", "32768x256", lambda: _case(32768, 256, 8, "sigmoid")),
    ("topk_gate softmax k8", "128x256", lambda: _case(128, 256, 8, "softmax")),
]
