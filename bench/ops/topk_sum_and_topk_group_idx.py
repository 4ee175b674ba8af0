"""Benchmark cases for topk_sum_and_topk_group_idx (DeepSeek-V3's group stage: 256 experts in
8 groups, top-2 sums, 4 groups kept).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The torch equivalent is TileKernels' reference (topk, sum, stable sort). Bytes: the
scores read once, the indices written once; TileKernels' figures to beat are measured beside
ours in the GPU issue (its ``topk_sum_and_topk_group_idx`` with the same arguments).
"""

from __future__ import annotations

import tileaot
import torch


def _case(t: int, g: int, s: int, n: int, k: int):
    x = torch.randn(t, g, s, device="cuda")
    y = torch.empty(t, k, dtype=torch.int32, device="cuda")
    nbytes = x.numel() * 4 + y.numel() * 4

    def torch_eager():
        value = x.topk(n, dim=-1, sorted=False).values.sum(-1)
        return torch.sort(value, dim=-1, descending=True, stable=True).indices[:, :k]

    ours = lambda: tileaot.topk_sum_and_topk_group_idx(x, n, k, out=y)  # noqa: E731
    return ours, torch_eager, nbytes, None


CASES = [
    ("topk_sum_and_topk_group_idx dsv3", "32768x8x32", lambda: _case(32768, 8, 32, 2, 4)),
    ("topk_sum_and_topk_group_idx dsv3", "4096x8x32", lambda: _case(4096, 8, 32, 2, 4)),
    ("topk_sum_and_topk_group_idx 72/12 top1", "32768x12x6", lambda: _case(32768, 12, 6, 1, 4)),
]
