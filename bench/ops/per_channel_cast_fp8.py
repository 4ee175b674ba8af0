"""Benchmark cases for per_channel_cast_fp8.

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None).
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.quant.per_channel_cast_fp8 import reference


def _case(m: int, n: int, round_sf: bool = False):
    x = torch.randn(m, n, device="cuda").bfloat16()
    q = torch.empty(m, n, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(-(-m // 128), n, device="cuda")
    nbytes = x.numel() * 2 + q.numel() + s.numel() * 4
    return (
        (lambda: tileaot.per_channel_cast_fp8(x, round_sf=round_sf, out=(q, s))),
        (lambda: reference(x, round_sf)),
        nbytes,
        None,
    )


CASES = [
    ("per_channel_cast_fp8 bf16", "32768x7168", lambda: _case(32768, 7168)),
    ("per_channel_cast_fp8 bf16", "128x4096", lambda: _case(128, 4096)),
    ("per_channel_cast_fp8 bf16 round_sf", "32768x7168", lambda: _case(32768, 7168, True)),
]
