"""Benchmark cases for swiglu_per_token_cast_fp8.

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None).
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.act.swiglu_per_token_cast_fp8 import reference


def _case(
    m: int, h: int, weighted: bool = True, clamp: float | None = None, round_sf: bool = False
):
    x = torch.randn(m, 2 * h, device="cuda").bfloat16()
    w = torch.rand(m, device="cuda") if weighted else None
    q = torch.empty(m, h, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(m, h // 128, device="cuda")
    # bytes read (x, weights) + written (q, scale)
    nbytes = x.numel() * 2 + (m * 4 if weighted else 0) + q.numel() + s.numel() * 4
    return (
        (lambda: tileaot.swiglu_per_token_cast_fp8(x, w, clamp, round_sf=round_sf, out=(q, s))),
        (lambda: reference(x, w, clamp, round_sf)),
        nbytes,
        None,
    )


CASES = [
    ("swiglu_per_token_cast_fp8 bf16 w", "32768x2*7168", lambda: _case(32768, 7168)),
    (
        "swiglu_per_token_cast_fp8 bf16 w clamp",
        "32768x2*7168",
        lambda: _case(32768, 7168, clamp=7.0),
    ),
    (
        "swiglu_per_token_cast_fp8 bf16",
        "32768x2*2048",
        lambda: _case(32768, 2048, weighted=False),
    ),
    ("swiglu_per_token_cast_fp8 bf16 w", "32768x2*2048", lambda: _case(32768, 2048)),
    ("swiglu_per_token_cast_fp8 bf16 w (generic H)", "32768x2*1408", lambda: _case(32768, 1408)),
    ("swiglu_per_token_cast_fp8 bf16 w", "128x2*2048", lambda: _case(128, 2048)),
    (
        "swiglu_per_token_cast_fp8 bf16 w round_sf",
        "32768x2*7168",
        lambda: _case(32768, 7168, round_sf=True),
    ),
    (
        "swiglu_per_token_cast_fp8 bf16 w round_sf",
        "4096x2*7168",
        lambda: _case(4096, 7168, round_sf=True),
    ),
]
