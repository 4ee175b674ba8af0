"""topk_sum_and_topk_group_idx on the CPU: our reference against TileKernels 1.0.0's
(`tile_kernels.torch.topk_sum_and_topk_group_idx`), bit for bit (its own test compares its
kernel with that reference by `assert_equal`), the wrapper's checks, and lowering.
"""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, refusals_test, t  # noqa: E402, F401
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.moe.topk_sum_and_topk_group_idx")
op = importlib.import_module("tileaot.topk_sum_and_topk_group_idx").topk_sum_and_topk_group_idx

TOKENS = (1, 7, 129, 4001)
# (G, S): TileKernels' test shapes (72 and 256 experts in 4, 8, 12, 16 groups), 32 groups,
# and single-expert groups (top-1 sums only).
SHAPES = [(4, 18), (8, 9), (12, 6), (4, 64), (8, 32), (16, 16), (32, 8), (5, 1), (3, 2)]


def scores_for(tokens: int, g: int, s: int, kind: str, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, g, s, generator=gen)
    if kind == "ties":  # few distinct values: equal sums across groups
        x = (x * 2).round() / 2
    elif kind == "specials":
        pick = torch.rand(tokens, g, s, generator=gen)
        x[pick < 0.1] = -math.inf
        x[(pick >= 0.1) & (pick < 0.15)] = math.inf
        x[(pick >= 0.15) & (pick < 0.17)] = math.nan
        x[(pick >= 0.17) & (pick < 0.3)] = -0.0
        x[(pick >= 0.3) & (pick < 0.4)] = 0.0
    elif kind == "zeros":
        x.zero_()
    elif kind == "huge":  # sums overflow to +inf and tie there
        x = x * 3e38
    return x


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("kind", ["randn", "ties", "specials", "zeros", "huge"])
def test_reference_matches_tile_kernels_bit_for_bit(shape, kind):
    g, s = shape
    ref = tk("topk").topk_sum_and_topk_group_idx
    for i, tokens in enumerate(TOKENS):
        x = scores_for(tokens, g, s, kind, seed=i)
        for n in (1, 2)[: min(2, s)]:
            for k in sorted({1, min(2, g), min(4, g), g}):
                ours = m.reference(x, n, k)
                assert ours.dtype == torch.int32 and ours.shape == (tokens, k)
                assert torch.equal(ours.long(), ref(x, n, k)), (shape, kind, tokens, n, k)


def test_reference_nan_groups_first_then_ties_to_the_smaller_group():
    x = torch.zeros(1, 4, 2)
    x[0, 2, 1] = math.nan
    x[0, 3, 0] = 1.0
    assert m.reference(x, 2, 4).tolist() == [[2, 3, 0, 1]]
    x[0, 1] = torch.tensor([math.inf, -math.inf])  # inf + -inf: NaN, before group 2's NaN
    assert m.reference(x, 2, 4).tolist() == [[1, 2, 3, 0]]
    assert m.reference(x, 1, 4).tolist() == [[2, 1, 3, 0]]  # top-1: NaN, +inf, 1, 0


def test_reference_sums_the_top_two_with_multiplicity():
    x = torch.tensor([[[5.0, 5.0, 1.0], [9.0, 0.0, 0.0]]])
    assert m.reference(x, 2, 1).tolist() == [[0]]  # 10 > 9
    assert m.reference(x, 1, 1).tolist() == [[1]]


def test_launch_arguments(fake, cpu_as_cuda):
    y = op(t(3, 8, 4, dtype=torch.float32), 2, 4)
    assert y.shape == (3, 4) and y.dtype == torch.int32
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("topk_sum_and_topk_group_idx", "fp32")
    assert launch.shapes == (3, 8, 4, 3, 4) and launch.scalars == (2.0,)
    assert op(t(0, 8, 4, dtype=torch.float32), 1, 2).shape == (0, 2)
    assert len(fake.launches) == 1  # nothing launched for T = 0


def f(*shape):
    return t(*shape, dtype=torch.float32)


BAD = [
    (lambda: op(f(3, 8, 4), 3, 4), ValueError, r"num_topk_sum must be 1 or 2 and at most the S"),
    (lambda: op(f(3, 8, 1), 2, 4), ValueError, r"at most the S = 1 scores of a group; got 2"),
    (lambda: op(f(3, 8, 4), 2, 9), ValueError, r"num_topk_groups must be in \[1, G = 8\]; got 9"),
    (lambda: op(f(3, 8, 4), 2, 0), ValueError, r"num_topk_groups must be in \[1, G = 8\]"),
    (lambda: op(f(3, 33, 2), 2, 4), ValueError, r"G = 33 groups"),
    (lambda: op(f(3, 8, 4), 2, 4.0), TypeError, r"num_topk_groups must be an int, got float"),
    (lambda: op(f(3, 8, 4), True, 4), TypeError, r"num_topk_sum must be an int, got bool"),
    (lambda: op(t(3, 8, 4), 2, 4), TypeError, r"scores"),
    (lambda: op(f(3, 32), 2, 4), ValueError, r"scores"),
    (lambda: op(f(3, 8, 4), 2, 4, out=t(3, 3, dtype=torch.int32)), ValueError, r"out"),
    (lambda: op(f(3, 8, 4), 2, 4, out=f(3, 4)), TypeError, r"out"),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


@needs_tilelang
def test_lowers_for_every_default_arch():
    """One key, one variant: the generic kernel on each default arch."""
    for arch, src in default_arch_sources(m.factory, "tsg", dtype="float32"):
        assert "__shfl_sync" in src and "group_idx" in src, arch
