"""Benchmark cases for per_channel_cast_and_transpose (the per-channel FP8 cast written
transposed, one scale per column of every 32 or 128 tokens).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: x read once, q and the scales written once. The torch equivalent is the
reference: the column cast, then a transposing copy.
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.quant.per_channel_cast_and_transpose import reference


def _case(t: int, h: int, group: int, round_sf: bool = False):
    x = torch.randn(t, h, device="cuda").bfloat16()
    q = torch.empty(h, t, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(t // group, h, device="cuda")
    nbytes = x.numel() * 2 + q.numel() + s.numel() * 4
    return (
        lambda: tileaot.per_channel_cast_and_transpose(x, group, round_sf=round_sf, out=(q, s)),
        lambda: reference(x, group, round_sf),
        nbytes,
        None,
    )


CASES = [
    ("per_channel_cast_and_transpose bf16 g128", "32768x7168", lambda: _case(32768, 7168, 128)),
    ("per_channel_cast_and_transpose bf16 g128", "4096x7168", lambda: _case(4096, 7168, 128)),
    ("per_channel_cast_and_transpose bf16 g32", "32768x7168", lambda: _case(32768, 7168, 32)),
    (
        "per_channel_cast_and_transpose bf16 g128 round_sf",
        "32768x7168",
        lambda: _case(32768, 7168, 128, True),
    ),
]
