"""GPU tests of group_count against kernels_py.moe.group_count.reference and TileKernels' torch
reference (int64 indices there), exactly.

The one generic variant (two kernels) on odd token counts and widths, expert counts from 1 to
20000 (past the 8192 bins of the shared histogram), random indices with -1 padding, all
entries in one group (the shared atomics' worst case), an empty group_idx (zeros still
written) and entries past G (not counted). The output is poisoned (-7) first.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "group_count"
SEEN: set[str] = set()
# (T, K, G)
CASES = [
    (0, 8, 256),
    (1, 8, 256),
    (7, 9, 7),
    (129, 8, 256),
    (4001, 8, 256),
    (70001, 8, 384),
    (4001, 6, 8192),
    (4001, 8, 20000),  # groups past the shared histogram: global atomics
    (129, 1, 1),
]


def _ref():
    return importlib.import_module("kernels_py.moe.group_count").reference


def _select(t: int, k: int, g: int) -> str:
    from tileaot import _lib

    native = _lib.native()
    return native.select(native.lookup(OP, "i32"), 0, (t, k, g))


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("kind", ["randint", "one_group", "past_g"])
def test_group_count(case, kind):
    import tileaot
    from _tile_kernels import tk

    t, k, g = case
    SEEN.add(_select(t, k, g))
    gen = torch.Generator(device="cuda").manual_seed(t + k + g)
    x = torch.randint(-1, g, (t, k), device="cuda", generator=gen, dtype=torch.int32)
    if kind == "one_group":
        x[:] = g - 1
    elif kind == "past_g":
        x[::3] = g + 1
    y = torch.full((g,), -7, dtype=torch.int32, device="cuda")
    got = tileaot.group_count(x, g, out=y)
    torch.cuda.synchronize()
    assert got is y
    want = _ref()(x, g)
    assert torch.equal(y, want), (case, kind, (y - want).abs().max())
    if kind != "past_g":  # TileKernels' reference raises on entries >= G
        assert torch.equal(y, tk("moe").group_count(x.long(), g)), (case, kind)


def test_launch_is_ordered_on_the_callers_stream():
    """Indices written on a side stream after a long sleep: a launch on any other stream would
    count the poisoned indices and fail."""
    import tileaot

    src = torch.randint(-1, 256, (4096, 8), dtype=torch.int32, device="cuda")
    want = _ref()(src, 256)
    assert_ordered_on_callers_stream(
        lambda x: tileaot.group_count(x, 256), lambda y: torch.equal(y, want), src, poison=0
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
