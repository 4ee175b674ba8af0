"""Benchmark cases for transpose.

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: x read once, y written once. The torch equivalent is
``x.transpose(-1, -2).contiguous()`` (one copy kernel).
"""

from __future__ import annotations

import tileaot
import torch


def _case(shape: tuple[int, ...], dtype=torch.bfloat16):
    x = torch.randn(shape, device="cuda").to(dtype)
    y = torch.empty((*shape[:-2], shape[-1], shape[-2]), dtype=dtype, device="cuda")
    nbytes = 2 * x.numel() * x.element_size()
    return (
        (lambda: tileaot.transpose(x, out=y)),
        (lambda: x.transpose(-1, -2).contiguous()),
        nbytes,
        None,
    )


CASES = [
    ("transpose bf16", "32768x7168", lambda: _case((32768, 7168))),
    ("transpose e4m3", "32768x7168", lambda: _case((32768, 7168), torch.float8_e4m3fn)),
    ("transpose fp32", "8192x7168", lambda: _case((8192, 7168), torch.float32)),
    ("transpose bf16", "8x1024x1030", lambda: _case((8, 1024, 1030))),
    ("transpose bf16", "128x4096", lambda: _case((128, 4096))),
]
