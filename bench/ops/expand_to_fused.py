"""Benchmark cases for expand_to_fused (MoE dispatch into TileKernels' fused layout, given the
mapping).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The mapping is made once, outside the timing: moe_expand's layout (expert, then
token, then slot, each expert padded to `alignment`) is one of the layouts TileKernels'
get_fused_mapping gives, so its token_pos serves as token_topk_to_pos and its offsets give
pos_to_expert. Bytes: x read once, every routed and padding row written once, the two int32
maps read. The torch equivalent is TileKernels' reference: zeros, then an indexed row copy.
"""

from __future__ import annotations

import tileaot
import torch


def fused_mapping(idx, e: int, alignment: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(token_topk_to_pos [T, K], pos_to_expert [P])`` from moe_expand's layout, trimmed to
    the rows its experts use (a sync: setup only). Its rows are narrow: only the maps count."""
    narrow = torch.zeros(idx.shape[0], 8, dtype=torch.bfloat16, device=idx.device)
    _, offsets, pos, _ = tileaot.moe_expand(narrow, idx, e, alignment)
    rows = int(offsets[-1])
    pos_to_expert = torch.full((rows,), -1, dtype=torch.int32, device=idx.device)
    live = pos >= 0
    pos_to_expert[pos[live].long()] = idx[live]
    return pos, pos_to_expert


def _case(t: int, h: int, k: int, e: int, alignment: int, fp8: bool = False):
    # Top-k routing: k distinct experts per token, as a router produces.
    idx = torch.rand(t, e, device="cuda").topk(k, dim=-1).indices.int()
    x = torch.randn(t, h, device="cuda").to(torch.float8_e4m3fn if fp8 else torch.bfloat16)
    pos, pos_to_expert = fused_mapping(idx, e, alignment)
    row = h * x.element_size()
    nbytes = t * row + pos_to_expert.numel() * (row + 4) + pos.numel() * 4
    out = torch.empty(pos_to_expert.numel(), h, dtype=x.dtype, device="cuda")

    def torch_eager():
        y = torch.zeros_like(out).view(torch.uint8)  # bytes: fp8 has no index_put on CUDA
        live = pos.flatten() >= 0
        src = torch.arange(t * k, device="cuda")[live] // k
        y[pos.flatten()[live].long()] = x.view(torch.uint8)[src]
        return y

    return (
        lambda: tileaot.expand_to_fused(x, pos, pos_to_expert, out=out),
        torch_eager,
        nbytes,
        None,
    )


CASES = [
    ("expand_to_fused bf16 E256 a128", "32768x7168 k8", lambda: _case(32768, 7168, 8, 256, 128)),
    (
        "expand_to_fused e4m3 E256 a128",
        "32768x7168 k8",
        lambda: _case(32768, 7168, 8, 256, 128, True),
    ),
    ("expand_to_fused bf16 E256 a128", "128x7168 k8", lambda: _case(128, 7168, 8, 256, 128)),
]
