"""GPU tests of inplace_unique_group_indices against
kernels_py.moe.inplace_unique_group_indices.reference and TileKernels' torch reference (int64
indices, in place, there), exactly; and the compat function's in-place update.

The one generic variant (a thread per row) on odd token counts and widths (K up to 33), random
indices with -1 padding and many repeats, every entry the same, all -1, repeated negatives
other than -1 (-5: TileKernels' reference makes the repeats -1) and group values past 128
(TileKernels' kernel refuses them; its reference and ours do not). The output is poisoned
(0x7F7F7F7F) first.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "inplace_unique_group_indices"
SEEN: set[str] = set()
POISON = 0x7F7F7F7F
# (T, K, G)
CASES = [
    (1, 4, 8),
    (7, 9, 4),
    (129, 4, 8),
    (4001, 8, 64),
    (70001, 4, 8),
    (129, 1, 1),
    (33, 33, 16),
    (4001, 8, 1000),
]


def _ref():
    return importlib.import_module("kernels_py.moe.inplace_unique_group_indices").reference


def _select(t: int, k: int) -> str:
    from tileaot import _lib

    native = _lib.native()
    return native.select(native.lookup(OP, "i32"), 0, (t, k, t, k))


def _theirs(x, g):
    from _tile_kernels import tk

    y = x.long().clone()
    tk("moe").inplace_unique_group_indices(y, g)
    return y


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("kind", ["randint", "all_same", "all_padding", "negatives"])
def test_inplace_unique_group_indices(case, kind):
    import tileaot

    t, k, g = case
    SEEN.add(_select(t, k))
    gen = torch.Generator(device="cuda").manual_seed(t + k + g)
    x = torch.randint(-1, g, (t, k), device="cuda", generator=gen, dtype=torch.int32)
    if kind == "all_same":
        x[:] = g - 1
    elif kind == "all_padding":
        x[:] = -1
    elif kind == "negatives":
        x[::2, ::2] = -5
    before = x.clone()
    y = torch.full((t, k), POISON, dtype=torch.int32, device="cuda")
    got = tileaot.inplace_unique_group_indices(x, g, out=y)
    torch.cuda.synchronize()
    assert got is y and torch.equal(x, before)  # the input is left alone
    assert torch.equal(y, _ref()(x, g)), (case, kind)
    assert torch.equal(y.long(), _theirs(x, g)), (case, kind)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_compat_updates_in_place(dtype):
    """tileaot.tile_kernels.moe's function is TileKernels' in-place update, both dtypes."""
    from tileaot.tile_kernels import moe

    x = torch.randint(-1, 8, (4001, 4), device="cuda", dtype=dtype)
    x[::5] = -5
    want = _theirs(x, 8).to(dtype)
    assert moe.inplace_unique_group_indices(x, 8) is None
    assert x.dtype == dtype and torch.equal(x, want)


def test_launch_is_ordered_on_the_callers_stream():
    """Indices written on a side stream after a long sleep: a launch on any other stream would
    read the zeros (all repeats) and fail."""
    import tileaot

    src = torch.randint(-1, 8, (4096, 4), dtype=torch.int32, device="cuda")
    want = _ref()(src, 8)
    assert_ordered_on_callers_stream(
        lambda x: tileaot.inplace_unique_group_indices(x, 8),
        lambda y: torch.equal(y, want),
        src,
        poison=0,
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
