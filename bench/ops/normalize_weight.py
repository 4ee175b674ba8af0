"""Benchmark cases for normalize_weight (top-k weights over their per-token sum; k = 8
is the static-K variant, k = 6 the generic one).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The torch equivalent is TileKernels' reference (a column-by-column sum from 1e-20,
one division). Bytes: the weights read once, both outputs written once; TileKernels' figures
to beat are measured beside ours in the GPU issue.
"""

from __future__ import annotations

import importlib

import tileaot
import torch


def _case(t: int, k: int):
    w = torch.rand(t, k, device="cuda")
    den, nw = torch.empty(t, device="cuda"), torch.empty(t, k, device="cuda")
    nbytes = w.numel() * 4 * 2 + den.numel() * 4
    reference = importlib.import_module("kernels_py.moe.normalize_weight").reference
    return (
        (lambda: tileaot.normalize_weight(w, out=(den, nw))),
        (lambda: reference(w)),
        nbytes,
        None,
    )


CASES = [
    ("normalize_weight k8", "32768x8", lambda: _case(32768, 8)),
    ("normalize_weight k8", "4096x8", lambda: _case(4096, 8)),
    ("normalize_weight k6 (generic)", "32768x6", lambda: _case(32768, 6)),
]
