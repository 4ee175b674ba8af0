"""Benchmark cases for expand_to_fused_with_sf (FP8 rows and their scale rows into TileKernels'
fused layout, given the mapping).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The mapping is bench/ops/expand_to_fused.py's (made once, outside the timing).
Bytes: x and its scales read once, every routed and padding row and scale row written once,
the two int32 maps read. The torch equivalent is TileKernels' reference: zeros, then indexed
row copies of the data and the scales.
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.moe.expand_to_fused_with_sf import reference
from ops.expand_to_fused import fused_mapping


def _case(t: int, h: int, k: int, e: int, alignment: int, col: bool = False):
    idx = torch.rand(t, e, device="cuda").topk(k, dim=-1).indices.int()
    x, sf = tileaot.per_token_cast_fp8(torch.randn(t, h, device="cuda").bfloat16(), 128)
    pos, pos_to_expert = fused_mapping(idx, e, alignment)
    rows = pos_to_expert.numel()
    row = h + sf.shape[1] * 4
    nbytes = t * row + rows * (row + 4) + pos.numel() * 4
    out = torch.empty(rows, h, dtype=x.dtype, device="cuda")
    sf_shape = (sf.shape[1], -(-rows // 4) * 4) if col else (rows, sf.shape[1])
    out_sf = torch.empty(sf_shape, device="cuda")
    layout = "col" if col else "row"
    return (
        lambda: tileaot.expand_to_fused_with_sf(
            x, sf, pos, pos_to_expert, use_tma_aligned_col_major_sf=col, out=(out, out_sf)
        ),
        lambda: reference(x, sf, pos, pos_to_expert, layout),
        nbytes,
        None,
    )


CASES = [
    (
        "expand_to_fused_with_sf e4m3 g128 E256 a128",
        "32768x7168 k8",
        lambda: _case(32768, 7168, 8, 256, 128),
    ),
    (
        "expand_to_fused_with_sf e4m3 g128 col-major E256 a128",
        "32768x7168 k8",
        lambda: _case(32768, 7168, 8, 256, 128, True),
    ),
    (
        "expand_to_fused_with_sf e4m3 g128 E256 a128",
        "128x7168 k8",
        lambda: _case(128, 7168, 8, 256, 128),
    ),
]
