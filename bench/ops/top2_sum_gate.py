"""Benchmark cases for top2_sum_gate (DeepSeek-V3's router: 256 experts, 8 groups, 4 kept, k=8).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The torch equivalent is TileKernels' reference (kernels_py/moe/top2_sum_gate.py
`reference`: sigmoid, top-2 group sums, masked stable sort, renormalise). Bytes: logits and
bias read once, indices and weights written once; TileKernels' figures to beat are measured
beside ours in the GPU issue (its ``top2_sum_gate`` with the same arguments).
"""

from __future__ import annotations

import importlib

import tileaot
import torch


def _case(t: int, e: int, groups: int, kept: int, k: int, shared: int = 0):
    x = torch.randn(t, e, device="cuda")
    bias = torch.randn(e, device="cuda") * 0.1
    idx = torch.empty(t, k + shared, dtype=torch.int32, device="cuda")
    w = torch.empty(t, k + shared, device="cuda")
    nbytes = x.numel() * 4 + bias.numel() * 4 + idx.numel() * 4 + w.numel() * 4
    reference = importlib.import_module("kernels_py.moe.top2_sum_gate").reference
    args = (k, groups, kept, 2.5, shared)

    def ours():
        return tileaot.top2_sum_gate(x, bias, *args, out=(idx, w))

    return ours, (lambda: reference(x, bias, *args)), nbytes, None


CASES = [
    ("top2_sum_gate dsv3 k8", "32768x256", lambda: _case(32768, 256, 8, 4, 8)),
    ("top2_sum_gate dsv3 k8", "4096x256", lambda: _case(4096, 256, 8, 4, 8)),
    ("top2_sum_gate dsv3 k8+1 shared", "32768x256", lambda: _case(32768, 256, 8, 4, 8, 1)),
    ("top2_sum_gate kimi-k2 k8", "32768x384", lambda: _case(32768, 384, 1, 1, 8)),
]
