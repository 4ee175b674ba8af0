"""Benchmark cases for mask_indices_by_tp (DeepSeek-V3's 256 experts on 8 EP ranks, TP 2).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The torch equivalent is TileKernels' reference formula (kernels_py/moe/
mask_indices_by_tp.py `reference`). Bytes: the indices read once and written once.
"""

from __future__ import annotations

import importlib

import tileaot
import torch


def _case(t: int, k: int):
    x = torch.randint(0, 256, (t, k), dtype=torch.int32, device="cuda")
    y = torch.empty_like(x)
    reference = importlib.import_module("kernels_py.moe.mask_indices_by_tp").reference
    ours = lambda: tileaot.mask_indices_by_tp(x, 256, 8, 1, 2, out=y)  # noqa: E731
    return ours, (lambda: reference(x, 256, 8, 1, 2)), x.numel() * 8, None


CASES = [
    ("mask_indices_by_tp k8", "32768x8", lambda: _case(32768, 8)),
    ("mask_indices_by_tp k8", "4096x8", lambda: _case(4096, 8)),
]
