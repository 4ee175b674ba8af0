"""Benchmark cases for moe_expand (MoE dispatch).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Bytes: x read once, every routed row and every padding row written once, idx read
and token_pos written (the metadata kernels' int32 traffic is small and not counted twice).
The torch equivalent is the usual eager dispatch: a stable sort of the expert ids and a row
gather (it pads nothing and keeps no scales).
"""

from __future__ import annotations

import tileaot
import torch


def moved_bytes(x, idx, e: int, alignment: int, fp8: bool = False) -> int:
    """Bytes the op moves (the module docstring's count): x read once, every routed and
    padding row written once (with its fp32 scales for fp8), idx read and token_pos written."""
    counts = torch.bincount(idx.flatten().long(), minlength=e)
    rows_used = int(((counts + alignment - 1) // alignment * alignment).sum())  # sync: setup only
    h = x.shape[1]
    row_bytes = h * x.element_size() + (h // 128 * 4 if fp8 else 0)
    return x.shape[0] * row_bytes + rows_used * row_bytes + 2 * idx.numel() * 4


def _case(t: int, h: int, k: int, e: int, alignment: int, fp8: bool = False):
    # Top-k routing: k distinct experts per token, as a router produces.
    idx = torch.rand(t, e, device="cuda").topk(k, dim=-1).indices.int()
    x = torch.randn(t, h, device="cuda")
    x = x.to(torch.float8_e4m3fn) if fp8 else x.bfloat16()
    x_scale = torch.rand(t, h // 128, device="cuda") if fp8 else None
    nbytes = moved_bytes(x, idx, e, alignment, fp8)

    def torch_eager():
        order = torch.sort(idx.flatten(), stable=True).indices
        return x.index_select(0, order // k), torch.bincount(idx.flatten(), minlength=e)

    return (
        lambda: tileaot.moe_expand(x, idx, e, alignment, x_scale=x_scale),
        torch_eager,
        nbytes,
        None,
    )


CASES = [
    ("moe_expand bf16 E256 a16", "32768x7168 k8", lambda: _case(32768, 7168, 8, 256, 16)),
    ("moe_expand bf16 E256 a128", "32768x7168 k8", lambda: _case(32768, 7168, 8, 256, 128)),
    ("moe_expand e4m3 E256 a128", "32768x7168 k8", lambda: _case(32768, 7168, 8, 256, 128, True)),
    ("moe_expand bf16 E256 a16", "128x7168 k8", lambda: _case(128, 7168, 8, 256, 16)),
]
