"""GPU tests of topk_sum_and_topk_group_idx against kernels_py.moe.topk_sum_and_topk_group_idx.
reference and TileKernels' torch reference, bit for bit (TileKernels' test compares its kernel
with its reference by `assert_equal`).

The one generic variant on TileKernels' test shapes (72 and 256 experts in 4, 8, 12, 16 groups),
32 groups, single-expert groups, odd token counts, top-1 and top-2 sums, several K, on random,
tied (few distinct values), special (-inf, +inf, NaN, -0.0) and huge (sums overflowing to +inf)
scores. The output is poisoned (-7) first.
"""

from __future__ import annotations

import importlib
import math

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "topk_sum_and_topk_group_idx"
SEEN: set[str] = set()
KINDS = ("randn", "tied", "special", "huge")
# (T, G, S)
CASES = [
    (1, 8, 32),
    (7, 4, 18),
    (129, 12, 6),
    (4001, 8, 32),
    (70001, 8, 32),
    (4001, 16, 16),
    (129, 32, 8),
    (33, 5, 1),
    (65, 3, 2),
]


def _ref():
    return importlib.import_module("kernels_py.moe.topk_sum_and_topk_group_idx").reference


def _select(t: int, g: int, s: int, k: int) -> str:
    from tileaot import _lib

    native = _lib.native()
    return native.select(native.lookup(OP, "fp32"), 0, (t, g, s, t, k))


def _scores(t: int, g: int, s: int, kind: str) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(t * 100 + g * 10 + s)
    x = torch.randn(t, g, s, device="cuda", generator=gen)
    if kind == "tied":
        x = torch.randint(-2, 3, (t, g, s), device="cuda", generator=gen).float() * 0.5
    elif kind == "special":
        x[:, :, ::7] = -math.inf
        x[:, 1::3, 3::11] = math.inf
        x[:, :, 5::13] = -0.0
        x[1::3, 2::5, 2::17] = math.nan
    elif kind == "huge":
        x = x * 3e38
    return x.contiguous()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_topk_sum_and_topk_group_idx(case):
    import tileaot
    from _tile_kernels import tk

    t, g, s = case
    theirs = tk("topk").topk_sum_and_topk_group_idx
    for kind in KINDS:
        x = _scores(t, g, s, kind)
        for n in (1, 2)[: min(2, s)]:
            for k in sorted({1, min(4, g), g}):
                SEEN.add(_select(t, g, s, k))
                y = torch.full((t, k), -7, dtype=torch.int32, device="cuda")
                got = tileaot.topk_sum_and_topk_group_idx(x, n, k, out=y)
                torch.cuda.synchronize()
                assert got is y
                want = _ref()(x, n, k)
                bad = (y != want).any(dim=-1).nonzero().flatten()
                assert bad.numel() == 0, (
                    f"{case} n={n} k={k} {kind}: {bad.numel()} rows differ, first "
                    f"{bad[0].item()}: {y[bad[0]].tolist()} != {want[bad[0]].tolist()}"
                )
                assert torch.equal(y.long(), theirs(x, n, k)), (case, n, k, kind)


def test_launch_is_ordered_on_the_callers_stream():
    """Scores written on a side stream after a long sleep: a launch on any other stream would
    read the poisoned scores and fail."""
    import tileaot

    src = _scores(4096, 8, 32, "randn")
    want = _ref()(src, 2, 4)
    assert_ordered_on_callers_stream(
        lambda x: tileaot.topk_sum_and_topk_group_idx(x, 2, 4), lambda y: torch.equal(y, want), src
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
