"""Benchmark cases for rms_norm.

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None).
"""

from __future__ import annotations

import tileaot
import torch


def _case(m: int, n: int):
    x = torch.randn(m, n, device="cuda").bfloat16()
    w = torch.randn(n, device="cuda").bfloat16()
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * 2 + n * 2

    def torch_eager():
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).bfloat16()

    return (lambda: tileaot.rms_norm(x, w, 1e-6, out=y)), torch_eager, nbytes, None


CASES = [
    ("rms_norm bf16", "32768x7168", lambda: _case(32768, 7168)),
    ("rms_norm bf16", "128x4096", lambda: _case(128, 4096)),
    # bench/targets.py GENERIC_PAIRS: the generic variant (3000 is no specialised N) against
    # the specialised N = 4096.
    ("rms_norm bf16", "32768x4096", lambda: _case(32768, 4096)),
    ("rms_norm bf16 (generic N)", "32768x3000", lambda: _case(32768, 3000)),
    ("rms_norm bf16", "32768x2880", lambda: _case(32768, 2880)),  # static, padded row
]
