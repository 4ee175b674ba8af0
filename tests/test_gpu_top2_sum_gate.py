"""GPU tests of top2_sum_gate against kernels_py.moe.top2_sum_gate.reference and TileKernels'.

Every variant (E = 160, 256, 384 and generic sizes from 2 to 512) with the routers that use it
(DeepSeek-V3's 8 groups of which 4 stay, no groups, equal group counts, DeepSeek-V2-sized groups;
groups of whole lanes, ranked in one pass, and groups that are not, a pass per group),
shared-expert columns and EP/TP splits, odd token counts, on four kinds of logits: random, tied
(few distinct values: ties among experts and among groups), special (-inf, +inf, NaN, -0) and
saturated (large logits: the float32 sigmoid is 1.0, so the bias decides). Outputs are poisoned
(-7 indices, NaN weights) first. Indices must be bit-exact (in their order), weights as
TileKernels' test compares them (`torch.allclose`, NaN where the reference has NaN). The last
test checks that every top2_sum_gate variant built for this GPU was exercised.
"""

from __future__ import annotations

import importlib
import math

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "top2_sum_gate"
KEY = "fp32,sigmoid"
SEEN: set[str] = set()
KINDS = ("randn", "tied", "special", "saturated")
# (T, E, num_groups, num_topk_groups, k, shared, ep, tp)
CASES = [
    (1, 256, 8, 4, 8, 0, 1, 1),
    (129, 256, 8, 4, 8, 1, 4, 2),
    (70001, 256, 8, 4, 8, 0, 1, 1),
    (4001, 256, 8, 8, 8, 2, 4, 2),
    (7, 256, 32, 2, 16, 0, 1, 1),
    (4001, 384, 1, 1, 8, 1, 8, 1),
    (65, 384, 12, 4, 8, 0, 1, 1),  # a static E whose groups are not whole lanes: a pass each
    (129, 256, 2, 1, 8, 0, 1, 1),  # groups of 16 lanes
    (129, 160, 1, 1, 8, 1, 2, 2),
    (33, 160, 8, 3, 6, 0, 1, 1),
    (7, 64, 4, 2, 6, 2, 2, 1),
    (129, 72, 0, 0, 6, 1, 4, 2),
    (5, 2, 0, 0, 1, 0, 1, 1),
    (17, 7, 0, 0, 7, 0, 1, 1),
    (33, 512, 16, 5, 32, 0, 1, 1),
    (9, 500, 10, 3, 12, 3, 5, 1),
]


def _ref():
    return importlib.import_module("kernels_py.moe.top2_sum_gate").reference


def _select(shapes: list[tuple[int, ...]]) -> str:
    from tileaot import _lib

    native = _lib.native()
    return native.select(native.lookup(OP, KEY), 0, tuple(d for s in shapes for d in s))


def _inputs(t: int, e: int, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(t * 1000 + e)
    x = torch.randn(t, e, device="cuda", generator=g) * 2
    bias = torch.randn(e, device="cuda", generator=g) * 0.1
    if kind == "tied":
        x = torch.randint(-2, 3, (t, e), device="cuda", generator=g).float() * 0.5
        bias = torch.randint(-1, 2, (e,), device="cuda", generator=g).float() * 0.25
    elif kind == "special":
        x[:, ::7] = -math.inf
        x[:, 3::11] = math.inf
        x[:, 5::13] = -0.0
        x[1::3, 2::17] = math.nan
    elif kind == "saturated":
        x = x * 40
    return x.contiguous(), bias


def _check(t, e, groups, kept, k, shared, ep, tp, tp_rank, kind):
    import tileaot

    x, bias = _inputs(t, e, kind)
    width = k + shared
    idx = torch.full((t, width), -7, dtype=torch.int32, device="cuda")
    w = torch.full((t, width), math.nan, device="cuda")
    args = (k, groups, kept, 2.5, shared, ep, tp_rank, tp)
    got = tileaot.top2_sum_gate(x, bias, *args, out=(idx, w))
    torch.cuda.synchronize()
    assert got[0] is idx and got[1] is w
    want_idx, want_w = _ref()(x, bias, *args)
    name = f"E={e} groups={groups}/{kept} k={k} shared={shared} ep={ep} tp={tp_rank}/{tp} {kind}"
    bad = (idx != want_idx).any(dim=-1).nonzero().flatten()
    assert bad.numel() == 0, (
        f"{name}: {bad.numel()} rows differ, first {bad[0].item()}: "
        f"{idx[bad[0]].tolist()} != {want_idx[bad[0]].tolist()}"
    )
    assert torch.allclose(w, want_w, equal_nan=True), (name, (w - want_w).abs().nan_to_num().max())


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_top2_sum_gate(case):
    t, e, groups, kept, k, shared, ep, tp = case
    SEEN.add(_select([(t, e), (e,), (t, k + shared), (t, k + shared)]))
    for tp_rank in range(tp):
        for kind in KINDS:
            _check(t, e, groups, kept, k, shared, ep, tp, tp_rank, kind)


def test_is_tilekernels_routing():
    """Against TileKernels 1.0.0's torch reference on the GPU (int64 indices there)."""
    import tileaot
    from _tile_kernels import tk

    topk = tk("topk")
    for t, e, groups, kept, k, shared, ep, tp in CASES:
        for kind in ("randn", "tied", "saturated"):
            x, bias = _inputs(t, e, kind)
            for tp_rank in range(tp):
                args = (k, groups, kept, 2.5, shared, ep, tp_rank, tp)
                idx, w = tileaot.top2_sum_gate(x, bias, *args)
                want_idx, want_w = topk.top2_sum_gate(
                    x, bias, k, kept, groups, shared > 0, shared, 2.5, 0, ep, tp_rank, tp, "sigmoid"
                )
                assert torch.equal(idx.long(), want_idx), (t, e, kind, tp_rank)
                assert torch.allclose(w, want_w), (t, e, kind, tp_rank)


def test_launch_is_ordered_on_the_callers_stream():
    """Logits written on a side stream after a long sleep: a launch on any other stream would
    read the poisoned logits and fail."""
    import tileaot

    src, bias = _inputs(4096, 256, "randn")
    want_idx, want_w = _ref()(src, bias, 8, 8, 4, 2.5)
    assert_ordered_on_callers_stream(
        lambda x: tileaot.top2_sum_gate(x, bias, 8, 8, 4, 2.5),
        lambda got: torch.equal(got[0], want_idx) and torch.allclose(got[1], want_w),
        src,
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
