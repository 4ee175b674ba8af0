"""Benchmark cases for per_token_cast_fp8.

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None).
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.quant.per_token_cast_fp8 import reference


def _case(m: int, n: int, round_sf: bool = False):
    x = torch.randn(m, n, device="cuda").bfloat16()
    q = torch.empty(m, n, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(m, n // 128, device="cuda")
    nbytes = x.numel() * 2 + q.numel() + s.numel() * 4
    return (
        (lambda: tileaot.per_token_cast_fp8(x, 128, round_sf=round_sf, out=(q, s))),
        (lambda: reference(x, 128, round_sf)),
        nbytes,
        None,
    )


CASES = [
    ("per_token_cast_fp8 bf16 g128", "32768x7168", lambda: _case(32768, 7168)),
    ("per_token_cast_fp8 bf16 g128", "128x4096", lambda: _case(128, 4096)),
    # TileKernels' tests' option (power-of-two scales), at its benchmark sizes
    ("per_token_cast_fp8 bf16 g128 round_sf", "32768x7168", lambda: _case(32768, 7168, True)),
    ("per_token_cast_fp8 bf16 g128 round_sf", "4096x7168", lambda: _case(4096, 7168, True)),
]
