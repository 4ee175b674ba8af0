"""Benchmark cases for swiglu_per_channel_cast_and_transpose (SwiGLU, then the per-channel FP8
cast written transposed, one scale per column of every 32 or 128 tokens).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: x (gate and up) read once, q and the scales written once. The torch
equivalent is the reference: swiglu, the column cast, a transposing copy.
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.act.swiglu_per_channel_cast_and_transpose import reference


def _case(t: int, h: int, group: int, clamp=None):
    x = torch.randn(t, 2 * h, device="cuda").bfloat16()
    q = torch.empty(h, t, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(t // group, h, device="cuda")
    nbytes = x.numel() * 2 + q.numel() + s.numel() * 4
    fn = tileaot.swiglu_per_channel_cast_and_transpose
    return (
        lambda: fn(x, group, clamp, out=(q, s)),
        lambda: reference(x, group, clamp),
        nbytes,
        None,
    )


CASES = [
    (
        "swiglu_per_channel_cast_and_transpose bf16 g128",
        "32768x2*2048",
        lambda: _case(32768, 2048, 128),
    ),
    (
        "swiglu_per_channel_cast_and_transpose bf16 g128",
        "4096x2*7168",
        lambda: _case(4096, 7168, 128),
    ),
    (
        "swiglu_per_channel_cast_and_transpose bf16 g32",
        "32768x2*2048",
        lambda: _case(32768, 2048, 32),
    ),
    (
        "swiglu_per_channel_cast_and_transpose bf16 g128 clamp",
        "32768x2*2048",
        lambda: _case(32768, 2048, 128, 7.0),
    ),
]
