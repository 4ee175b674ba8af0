"""Benchmark cases for engram_fused_weight (the Engram gate's two bf16 RMSNorm weights
multiplied into one float32 weight, TileKernels' fused_weight; [hc_mult, H] = [4, 7168] as its
EngramGateFn runs it once per step, and a larger one).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The torch equivalent is our reference (``w_h.float() * w_k.float()``, exact). Bytes:
both weights read once, the float32 product written once.
"""

from __future__ import annotations

import importlib

import tileaot
import torch


def _case(g: int, h: int):
    w_h, w_k = (torch.randn(g, h, device="cuda").bfloat16() for _ in "hk")
    w = torch.empty(g, h, device="cuda")
    reference = importlib.import_module("kernels_py.engram.engram_fused_weight").reference
    nbytes = 2 * w_h.numel() * 2 + w.numel() * 4
    return (
        (lambda: tileaot.engram_fused_weight(w_h, w_k, out=w)),
        (lambda: reference(w_h, w_k)),
        nbytes,
        None,
    )


CASES = [
    ("engram_fused_weight bf16", "4x7168", lambda: _case(4, 7168)),
    ("engram_fused_weight bf16", "64x7168", lambda: _case(64, 7168)),
]
