"""Benchmark cases for inplace_unique_group_indices (each token's groups without repeats:
DeepSeek-V3's 8 groups, 4 picked per token).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The torch equivalent compares every pair of a row's entries (the reference in
kernels_py). Bytes: the indices read once and written once.
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.moe.inplace_unique_group_indices import reference


def _case(t: int, k: int, g: int):
    x = torch.randint(-1, g, (t, k), dtype=torch.int32, device="cuda")
    y = torch.empty_like(x)
    ours = lambda: tileaot.inplace_unique_group_indices(x, g, out=y)  # noqa: E731
    return ours, lambda: reference(x, g), x.numel() * 8, None


CASES = [
    ("inplace_unique_group_indices g8 k4", "32768x4", lambda: _case(32768, 4, 8)),
    ("inplace_unique_group_indices g8 k4", "4096x4", lambda: _case(4096, 4, 8)),
]
