"""GPU tests of engram_hash against kernels_py.engram.engram_hash.reference and TileKernels'
torch reference (`engram_hash_ref`), bit for bit (integer arithmetic: nothing may differ).

Both variants (TileKernels' default 3-grams with 8 tables, and the generic kernel) on odd
token counts, n-gram orders 2 to 5, 1 to 4 layers and 1 to 16 tables, with the CPU tests'
value ranges (tests/test_kernels_cpu_engram_hash.py): the Engram model's multipliers, full-range
ones whose int64 products wrap, negative hashes and table sizes (the floor remainder's sign),
tiny tables, and offsets that wrap in int32. The output is poisoned (-7) first.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream, selected

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "engram_hash"
SEEN: set[str] = set()
KINDS = ("engram", "wrap", "negative", "small")
# (T, N, L, E); N = 3, E = 8 is the static variant
CASES = [
    (0, 3, 2, 8),
    (1, 3, 2, 8),
    (129, 3, 2, 8),
    (4001, 3, 2, 8),
    (70001, 3, 2, 8),
    (7, 2, 1, 1),
    (129, 4, 2, 8),
    (4001, 5, 3, 4),
    (33, 3, 4, 16),
    (4001, 3, 2, 7),
    (65537, 2, 2, 3),
]


def _ref():
    return importlib.import_module("kernels_py.engram.engram_hash").reference


def _inputs(t: int, n: int, layers: int, e: int, kind: str) -> tuple:
    cpu = importlib.import_module("test_kernels_cpu_engram_hash")
    return tuple(x.cuda() for x in cpu.inputs(t, n, layers, e, kind, seed=t + n + e))


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("kind", KINDS)
def test_engram_hash(case, kind):
    import tileaot
    from _tile_kernels import tk

    t, n, layers, e = case
    args = _inputs(t, n, layers, e, kind)
    if t:
        SEEN.add(selected(OP, "i32", [a.shape for a in args] + [(layers, t, (n - 1) * e)]))
    y = torch.full((layers, t, (n - 1) * e), -7, dtype=torch.int32, device="cuda")
    got = tileaot.engram_hash(*args, out=y)
    torch.cuda.synchronize()
    assert got is y
    for want in (_ref()(*args), tk("engram").engram_hash_ref(*args)):
        bad = (y != want).nonzero()
        assert bad.numel() == 0, (
            f"{case} {kind}: {bad.shape[0]} indices differ, first at {bad[0].tolist()}: "
            f"{y[tuple(bad[0])].item()} != {want[tuple(bad[0])].item()}"
        )


def test_allocating_call_and_compat_function():
    """Without out=, and through tileaot.tile_kernels.engram (TileKernels' name)."""
    import tileaot
    import tileaot.tile_kernels as compat

    args = _inputs(4001, 3, 2, 8, "engram")
    want = _ref()(*args)
    assert torch.equal(tileaot.engram_hash(*args), want)
    assert torch.equal(compat.engram.engram_hash(*args), want)


def test_launch_is_ordered_on_the_callers_stream():
    """Ids written on a side stream after a long sleep: a launch on any other stream would hash
    the poisoned ids and fail."""
    import tileaot

    src, mult, sizes, offsets = _inputs(65537, 3, 2, 8, "engram")
    want = _ref()(src, mult, sizes, offsets)
    assert_ordered_on_callers_stream(
        lambda ids: tileaot.engram_hash(ids, mult, sizes, offsets),
        lambda y: torch.equal(y, want),
        src,
        poison=0,
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
