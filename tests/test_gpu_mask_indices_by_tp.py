"""GPU tests of mask_indices_by_tp against kernels_py.moe.mask_indices_by_tp.reference and
TileKernels' torch reference (int32 and int64 indices there), bit for bit.

The one generic variant on odd token counts and widths, EP/TP splits of DeepSeek-V3's 256
experts and of counts the EP ranks do not divide, every TP rank, on random indices with -1
padding, indices past n and the int32 extremes. The output is poisoned (-7) first.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "mask_indices_by_tp"
SEEN: set[str] = set()
# (T, K, n, num_ep_ranks, num_tp_ranks)
CASES = [
    (1, 8, 256, 8, 2),
    (7, 9, 256, 16, 4),
    (129, 8, 256, 64, 8),
    (4001, 8, 256, 8, 2),
    (70001, 8, 256, 32, 4),
    (4001, 6, 72, 5, 3),
    (129, 1, 7, 7, 7),
    (33, 16, 384, 8, 1),
]


def _ref():
    return importlib.import_module("kernels_py.moe.mask_indices_by_tp").reference


def _select(t: int, k: int) -> str:
    from tileaot import _lib

    native = _lib.native()
    return native.select(native.lookup(OP, "i32"), 0, (t, k, t, k))


def _indices(t: int, k: int, n: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(t * 10 + k)
    x = torch.randint(-1, n + 3, (t, k), device="cuda", generator=g, dtype=torch.int32)
    edges = torch.tensor([-1, 2**31 - 1, -(2**31), n, 0], dtype=torch.int32, device="cuda")
    x.view(-1)[: min(x.numel(), 5)] = edges[: x.numel()]
    return x


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_mask_indices_by_tp(case):
    import tileaot
    from _tile_kernels import tk

    t, k, n, ep, tp = case
    SEEN.add(_select(t, k))
    theirs = tk("moe").mask_indices_by_tp
    x = _indices(t, k, n)
    for tp_rank in range(tp):
        y = torch.full_like(x, -7)
        got = tileaot.mask_indices_by_tp(x, n, ep, tp_rank, tp, out=y)
        torch.cuda.synchronize()
        assert got is y
        want = _ref()(x, n, ep, tp_rank, tp)
        bad = (y != want).nonzero()
        assert bad.shape[0] == 0, (case, tp_rank, bad[:4].tolist())
        assert torch.equal(y, theirs(x, n, ep, tp_rank, tp)), (case, tp_rank)
        safe = x.clamp(min=-1)  # int64: -2**31 would not wrap there; -1 masks the same
        assert torch.equal(y.long(), theirs(safe.long(), n, ep, tp_rank, tp)), (case, tp_rank)


def test_launch_is_ordered_on_the_callers_stream():
    """Indices written on a side stream after a long sleep: a launch on any other stream would
    read the poisoned indices and fail."""
    import tileaot

    src = _indices(4096, 8, 256)
    want = _ref()(src, 256, 8, 1, 2)
    assert_ordered_on_callers_stream(
        lambda x: tileaot.mask_indices_by_tp(x, 256, 8, 1, 2),
        lambda y: torch.equal(y, want),
        src,
        poison=5,
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
