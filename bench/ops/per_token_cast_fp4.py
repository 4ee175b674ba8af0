"""Benchmark cases for per_token_cast_fp4 and its inverse (the FP4 half of cast_back).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The torch equivalents are the bit-exact references (float32 math, thresholds for
the rounding). Bytes: x read once, codes and scales written once (and the reverse).
Target on an H200: 32768x7168 bf16 cast at >= 80 % of the 4.3 TB/s copy rate (~170 us).
"""

from __future__ import annotations

import importlib

import torch

from kernels_py.quant import cast_back_fp4, per_token_cast_fp4

cast = importlib.import_module("tileaot.per_token_cast_fp4").per_token_cast_fp4
back = importlib.import_module("tileaot._cast_back_fp4").cast_back_fp4
SCALE_DTYPE = {"ue8m0": torch.uint8, "e4m3": torch.float8_e4m3fn}


def _cast_case(m: int, n: int, g: int, fmt: str, dtype=torch.bfloat16):
    x = torch.randn(m, n, device="cuda").to(dtype)
    q = torch.empty(m, n // 2, dtype=torch.uint8, device="cuda")
    s = torch.empty(m, n // g, dtype=SCALE_DTYPE[fmt], device="cuda")
    nbytes = x.numel() * x.element_size() + q.numel() + s.numel()
    return (
        (lambda: cast(x, g, fmt, out=(q, s))),
        (lambda: per_token_cast_fp4.reference(x, g, fmt)),
        nbytes,
        None,
    )


def _back_case(m: int, n: int, g: int, fmt: str, out_dtype=torch.bfloat16):
    x = torch.randn(m, n, device="cuda").bfloat16()
    q, s = per_token_cast_fp4.reference(x, g, fmt)
    y = torch.empty(m, n, dtype=out_dtype, device="cuda")
    nbytes = q.numel() + s.numel() + y.numel() * y.element_size()
    return (
        (lambda: back(q, s, group_size=g, out_dtype=out_dtype, out=y)),
        (lambda: cast_back_fp4.reference(q, s, g, out_dtype)),
        nbytes,
        None,
    )


CASES = [
    (
        "per_token_cast_fp4 bf16 g32 ue8m0",
        "32768x7168",
        lambda: _cast_case(32768, 7168, 32, "ue8m0"),
    ),
    ("per_token_cast_fp4 bf16 g16 e4m3", "32768x7168", lambda: _cast_case(32768, 7168, 16, "e4m3")),
    ("per_token_cast_fp4 bf16 g32 ue8m0", "128x4096", lambda: _cast_case(128, 4096, 32, "ue8m0")),
    ("cast_back_fp4 bf16 g32 ue8m0", "32768x7168", lambda: _back_case(32768, 7168, 32, "ue8m0")),
    ("cast_back_fp4 bf16 g16 e4m3", "128x4096", lambda: _back_case(128, 4096, 16, "e4m3")),
]
