"""Benchmark cases for per_channel_cast_fused (the per-channel FP8 cast of rows gathered into
TileKernels' fused MoE layout, FP8 rows cast back first).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The index (pos_to_token: each row's token, -1 for padding) comes from
bench/ops/expand_to_fused.py's mapping, made once outside the timing. Bytes: every routed
row read once (x and, for FP8, its scales), q and the scales written once, the index read.
The torch equivalent is the reference: a gather, then the column cast.
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.quant.per_channel_cast_fused import reference
from ops.expand_to_fused import fused_mapping


def pos_to_token(t: int, k: int, e: int, alignment: int) -> torch.Tensor:
    """The token of each row of the fused layout of top-k routing, -1 for padding rows."""
    idx = torch.rand(t, e, device="cuda").topk(k, dim=-1).indices.int()
    pos, pos_to_expert = fused_mapping(idx, e, alignment)
    tokens = torch.full_like(pos_to_expert, -1)
    live = pos.flatten() >= 0
    src = torch.arange(t * k, device="cuda")[live] // k
    tokens[pos.flatten()[live].long()] = src.int()
    return tokens


def _case(t: int, h: int, k: int, e: int, alignment: int, fp8: bool = False, round_sf=False):
    tokens = pos_to_token(t, k, e, alignment)
    x = torch.randn(t, h, device="cuda").bfloat16()
    x_sf = None
    if fp8:
        x, x_sf = tileaot.per_token_cast_fp8(x, 128)
    rows = tokens.numel()
    q = torch.empty(rows, h, dtype=torch.float8_e4m3fn, device="cuda")
    s = torch.empty(-(-rows // 128), h, device="cuda")
    routed = int((tokens >= 0).sum())
    row = h * x.element_size() + (0 if x_sf is None else x_sf.shape[1] * 4)
    nbytes = routed * row + q.numel() + s.numel() * 4 + rows * 4
    return (
        lambda: tileaot.per_channel_cast_fused(x, tokens, x_sf=x_sf, round_sf=round_sf, out=(q, s)),
        lambda: reference(x, tokens, x_sf, round_sf),
        nbytes,
        None,
    )


CASES = [
    (
        "per_channel_cast_fused bf16 E256 a128",
        "4096x7168 k8",
        lambda: _case(4096, 7168, 8, 256, 128),
    ),
    (
        "per_channel_cast_fused bf16 E256 a128 round_sf",
        "4096x7168 k8",
        lambda: _case(4096, 7168, 8, 256, 128, round_sf=True),
    ),
    (
        "per_channel_cast_fused e4m3 g128 E256 a128",
        "4096x7168 k8",
        lambda: _case(4096, 7168, 8, 256, 128, fp8=True),
    ),
    (
        "per_channel_cast_fused bf16 E256 a128",
        "128x7168 k8",
        lambda: _case(128, 7168, 8, 256, 128),
    ),
]
