"""Benchmark cases for per_token_cast_e5m6.

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None).
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.quant.per_token_cast_e5m6 import reference


def _case(m: int, n: int, round_sf: bool = False):
    x = torch.randn(m, n, device="cuda").bfloat16()
    q = torch.empty(m, n // 8 * 12, dtype=torch.uint8, device="cuda")
    s = torch.empty(m, 1, device="cuda")
    nbytes = x.numel() * 2 + q.numel() + s.numel() * 4
    return (
        (lambda: tileaot.per_token_cast_e5m6(x, round_sf=round_sf, out=(q, s))),
        (lambda: reference(x, round_sf)),
        nbytes,
        None,
    )


CASES = [
    ("per_token_cast_e5m6 bf16", "32768x7168", lambda: _case(32768, 7168)),
    ("per_token_cast_e5m6 bf16", "128x4096", lambda: _case(128, 4096)),
    ("per_token_cast_e5m6 bf16 round_sf", "32768x7168", lambda: _case(32768, 7168, True)),
]
