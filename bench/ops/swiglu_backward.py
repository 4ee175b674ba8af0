"""Benchmark cases for swiglu_backward (TileKernels' tile_kernels.torch.swiglu_backward).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). Rows are expanded tokens with one (token, slot) each, every eighth row padding (a
fused layout's shape of work; the mapping's order does not change the kernel's cost). Bytes:
x (e4m3) and its scales, grad_out, the weight and the two maps read; out, x_grad and
weight_grad written. The torch equivalent is the reference (TileKernels' formula).
"""

from __future__ import annotations

import tileaot
import torch

from kernels_py.act.swiglu_backward import reference


def _case(t: int, k: int, h: int, p: int = 128, out_dtype=torch.bfloat16, clamp=None):
    m = t * k + t * k // 8  # routed rows plus padding rows
    perm = torch.randperm(m, device="cuda")
    tk2p = perm[: t * k].int().view(t, k)
    p2tk = torch.full((m,), -1, dtype=torch.int32, device="cuda")
    p2tk[tk2p.view(-1).long()] = torch.arange(t * k, dtype=torch.int32, device="cuda")
    x = torch.randn(m, 2 * h, device="cuda").to(torch.float8_e4m3fn)
    x_sf = torch.rand(m, 2 * h // p, device="cuda")
    grad_out = torch.randn(m, h, device="cuda").bfloat16()
    w = torch.rand(t, k, device="cuda")
    args = (x, x_sf, grad_out, w, p2tk, tk2p)
    item = torch.empty((), dtype=out_dtype).element_size()
    out = (
        torch.empty(m, h, dtype=out_dtype, device="cuda"),
        torch.empty(m, 2 * h, dtype=out_dtype, device="cuda"),
        torch.empty(t, k, device="cuda"),
    )
    nbytes = x.numel() + x_sf.numel() * 4 + grad_out.numel() * 2 + t * k * 4 * 3 + m * 4
    nbytes += (out[0].numel() + out[1].numel()) * item
    return (
        lambda: tileaot.swiglu_backward(*args, clamp, out_dtype=out_dtype, out=out),
        lambda: reference(*args, clamp, out_dtype),
        nbytes,
        None,
    )


CASES = [
    ("swiglu_backward e4m3 g128 -> bf16", "4096x8x2*2048", lambda: _case(4096, 8, 2048)),
    (
        "swiglu_backward e4m3 g128 -> bf16 clamp",
        "4096x8x2*2048",
        lambda: _case(4096, 8, 2048, clamp=10.0),
    ),
    (
        "swiglu_backward e4m3 g32 -> fp32",
        "4096x8x2*2048",
        lambda: _case(4096, 8, 2048, 32, torch.float32),
    ),
    ("swiglu_backward e4m3 g128 -> bf16", "16x8x2*2048", lambda: _case(16, 8, 2048)),
]
