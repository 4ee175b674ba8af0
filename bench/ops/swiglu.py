"""Benchmark cases for swiglu.

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None).
"""

from __future__ import annotations

import tileaot
import torch


def _case(m: int, h: int, dtype: torch.dtype = torch.bfloat16):
    x = torch.randn(m, 2 * h, device="cuda").to(dtype)
    y = torch.empty(m, h, dtype=dtype, device="cuda")
    nbytes = (x.numel() + y.numel()) * x.element_size()

    def torch_eager():  # what a model does without a fused kernel
        g, u = x.chunk(2, dim=-1)
        return torch.nn.functional.silu(g) * u

    return (lambda: tileaot.swiglu(x, out=y)), torch_eager, nbytes, None


CASES = [
    ("swiglu bf16", "32768x2*7168", lambda: _case(32768, 7168)),
    ("swiglu bf16", "32768x2*2048", lambda: _case(32768, 2048)),
    ("swiglu bf16", "32768x2*1408", lambda: _case(32768, 1408)),  # static since issue 20
    # bench/targets.py GENERIC_PAIRS: 1400 is no specialised H (against H = 2048).
    ("swiglu bf16 (generic H)", "32768x2*1400", lambda: _case(32768, 1400)),
    ("swiglu fp32", "8192x2*4096", lambda: _case(8192, 4096, torch.float32)),
    ("swiglu bf16", "128x2*2048", lambda: _case(128, 2048)),
]
