"""Benchmark cases for gemm.

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None).
"""

from __future__ import annotations

import tileaot
import torch


def _case(m: int, n: int, k: int):
    a = torch.randn(m, k, device="cuda").bfloat16()
    b = torch.randn(n, k, device="cuda").bfloat16()
    c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    return (lambda: tileaot.gemm(a, b, out=c)), (lambda: a @ b.T), None, 2 * m * n * k


CASES = [
    ("gemm bf16", "4096x4096x4096", lambda: _case(4096, 4096, 4096)),
    ("gemm bf16", "16x4096x4096", lambda: _case(16, 4096, 4096)),
]
