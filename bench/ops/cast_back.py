"""Benchmark cases for cast_back (FP8: op cast_back_fp8).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None).
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.quant.cast_back_fp8 import reference

_SCALE_SHAPE = {
    "g128": lambda m, n: (m, n // 128),
    "token": lambda m, n: (m, 1),
    "block128": lambda m, n: (-(-m // 128), -(-n // 128)),
}


def _case(m: int, n: int, layout: str, out_dtype: torch.dtype):
    q = torch.randn(m, n, device="cuda").to(torch.float8_e4m3fn)
    s = torch.rand(_SCALE_SHAPE[layout](m, n), device="cuda") + 0.5
    x = torch.empty(m, n, dtype=out_dtype, device="cuda")
    nbytes = q.numel() + s.numel() * 4 + x.numel() * x.element_size()
    return (
        (lambda: tileaot.cast_back(q, s, layout=layout, out_dtype=out_dtype, out=x)),
        (lambda: reference(q, s, layout, out_dtype)),
        nbytes,
        None,
    )


CASES = [
    (
        "cast_back fp8 g128 -> bf16",
        "32768x7168",
        lambda: _case(32768, 7168, "g128", torch.bfloat16),
    ),
    ("cast_back fp8 g128 -> bf16", "128x4096", lambda: _case(128, 4096, "g128", torch.bfloat16)),
    (
        "cast_back fp8 block128 -> bf16",
        "32768x7168",
        lambda: _case(32768, 7168, "block128", torch.bfloat16),
    ),
    (
        "cast_back fp8 token -> fp32",
        "32768x7168",
        lambda: _case(32768, 7168, "token", torch.float32),
    ),
]
