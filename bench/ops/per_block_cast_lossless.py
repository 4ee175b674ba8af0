"""Benchmark cases for per_block_cast_lossless (FP4 with 1x32 scales -> e4m3 with 128x128 or
1x128 scales), next to TileKernels' kernel of the same name (bench/tk_cases.py).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None).
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.quant.per_block_cast_lossless import reference


def _case(m: int, n: int, out_block: tuple[int, int], sf_in: str = "fp32"):
    x = torch.randn(m, n, device="cuda").bfloat16()
    q4, e = tileaot.per_token_cast_fp4(x, 32, "ue8m0")  # what TileKernels' e2m1 cast writes
    x_sf = e if sf_in == "ue8m0" else (e.int() << 23).view(torch.float32)
    q = torch.empty(m, n, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(-(-m // out_block[0]), -(-n // out_block[1]), device="cuda")
    nbytes = q4.numel() + x_sf.numel() * x_sf.element_size() + q.numel() + s.numel() * 4
    return (
        (lambda: tileaot.per_block_cast_lossless(q4, x_sf, 1, 32, *out_block, out=(q, s))),
        (lambda: reference(q4, x_sf, (1, 32), out_block)),
        nbytes,
        None,
    )


CASES = [
    (
        "per_block_cast_lossless e2m1 1x32 -> 128x128",
        "32768x7168",
        lambda: _case(32768, 7168, (128, 128)),
    ),
    (
        "per_block_cast_lossless e2m1 1x32 -> 128x128",
        "4096x7168",
        lambda: _case(4096, 7168, (128, 128)),
    ),
    (
        "per_block_cast_lossless e2m1 1x32 -> 1x128",
        "32768x7168",
        lambda: _case(32768, 7168, (1, 128)),
    ),
    (
        "per_block_cast_lossless ue8m0 1x32 -> 128x128",
        "4096x7168",
        lambda: _case(4096, 7168, (128, 128), "ue8m0"),
    ),
]
