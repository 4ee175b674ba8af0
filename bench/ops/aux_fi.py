"""Benchmark cases for aux_fi (the auxiliary loss' f_i: DeepSeek-V3's 256 experts, k = 8).

CASES = [(label, size, make)]; make() → (tileaot fn, torch fn, bytes moved or None, flops
or None). The torch equivalent is TileKernels' reference: a bincount of the non-negative
indices, scaled. Bytes: the indices read once, the int32 counts written and read back, f_i
written.
"""

from __future__ import annotations

import tileaot
import torch


def _case(t: int, k: int, e: int):
    x = torch.randint(-1, e, (t, k), dtype=torch.int32, device="cuda")
    y = torch.empty(e, dtype=torch.float32, device="cuda")

    def torch_eager():
        return torch.bincount(x[x >= 0].long(), minlength=e).float() * e / (t * k)

    ours = lambda: tileaot.aux_fi(x, e, k, out=y)  # noqa: E731
    return ours, torch_eager, x.numel() * 4 + e * 12, None


CASES = [
    ("aux_fi e256 k8", "32768x8", lambda: _case(32768, 8, 256)),
    ("aux_fi e256 k8", "4096x8", lambda: _case(4096, 8, 256)),
]
