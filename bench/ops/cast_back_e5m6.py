"""Benchmark cases for cast_back_e5m6.

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None).
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.quant.cast_back_e5m6 import reference


def _case(m: int, n: int, out_dtype: torch.dtype = torch.bfloat16):
    q, s = tileaot.per_token_cast_e5m6(torch.randn(m, n, device="cuda").bfloat16())
    x = torch.empty(m, n, dtype=out_dtype, device="cuda")
    nbytes = q.numel() + s.numel() * 4 + x.numel() * x.element_size()
    return (
        (lambda: tileaot.cast_back_e5m6(q, s, out_dtype=out_dtype, out=x)),
        (lambda: reference(q, s, out_dtype)),
        nbytes,
        None,
    )


CASES = [
    ("cast_back_e5m6 -> bf16", "32768x7168", lambda: _case(32768, 7168)),
    ("cast_back_e5m6 -> bf16", "128x4096", lambda: _case(128, 4096)),
    ("cast_back_e5m6 -> fp32", "32768x7168", lambda: _case(32768, 7168, torch.float32)),
]
