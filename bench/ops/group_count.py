"""Benchmark cases for group_count (tokens per expert: DeepSeek-V3's 256 experts, k = 8).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The torch equivalent is a bincount of the non-negative indices (TileKernels'
reference scatters ones the same way). Bytes: the indices read once, the counts written.
"""

from __future__ import annotations

import tileaot
import torch


def _case(t: int, k: int, g: int):
    x = torch.randint(-1, g, (t, k), dtype=torch.int32, device="cuda")
    y = torch.empty(g, dtype=torch.int32, device="cuda")

    def torch_eager():
        return torch.bincount(x[x >= 0].long(), minlength=g).int()

    ours = lambda: tileaot.group_count(x, g, out=y)  # noqa: E731
    return ours, torch_eager, x.numel() * 4 + g * 4, None


CASES = [
    ("group_count e256 k8", "32768x8", lambda: _case(32768, 8, 256)),
    ("group_count e256 k8", "4096x8", lambda: _case(4096, 8, 256)),
]
