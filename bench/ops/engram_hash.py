"""Benchmark cases for engram_hash (Engram's n-gram hash: 3-grams, 2 layers, 8 tables per
order, TileKernels' defaults; and 4-grams on the generic kernel).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The torch equivalent is our reference (TileKernels' reference computes the same in
torch ops, bit for bit). Bytes: the ids, multipliers, table sizes and offsets read once, the
indices written once.
"""

from __future__ import annotations

import importlib

import tileaot
import torch


def _case(t: int, n: int, layers: int, e: int):
    vocab = 129280  # DeepSeek-V3's tokenizer
    ids = torch.randint(0, vocab, (t, n), dtype=torch.int32, device="cuda")
    mult = torch.randint(0, (2**63 - 1) // vocab // 2, (layers, n), device="cuda") * 2 + 1
    sizes = torch.randint(100_000, 200_000, (layers, n - 1, e), dtype=torch.int32, device="cuda")
    flat = sizes.flatten(1)
    offsets = (flat.cumsum(1, dtype=torch.int32) - flat).contiguous()
    y = torch.empty(layers, t, (n - 1) * e, dtype=torch.int32, device="cuda")
    args = (ids, mult, sizes, offsets)
    reference = importlib.import_module("kernels_py.engram.engram_hash").reference
    nbytes = sum(a.numel() * a.element_size() for a in (*args, y))
    return (lambda: tileaot.engram_hash(*args, out=y)), (lambda: reference(*args)), nbytes, None


CASES = [
    ("engram_hash n3 l2 e8", "32768", lambda: _case(32768, 3, 2, 8)),
    ("engram_hash n3 l2 e8", "4096", lambda: _case(4096, 3, 2, 8)),
    ("engram_hash n4 l2 e8 (generic)", "32768", lambda: _case(32768, 4, 2, 8)),
]
