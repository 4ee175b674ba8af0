"""GPU tests of aux_fi against kernels_py.moe.aux_fi.reference and TileKernels' torch reference
(int64 indices there), bit for bit.

The one generic variant (three kernels: zero, count, divide) on odd token counts and widths,
expert counts from 1 to 20000 (past the 8192 bins of the shared histogram), num_aux_topk from 1
to 2**31 - 1 (T * A past 2**24: a rounded denominator), random indices with -1 padding, all
entries on one expert (count * E past 2**24 on the largest cases: a rounded numerator), an
empty topk_idx (zeros still written) and entries past E (not counted). The output is poisoned
(NaN) first.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "aux_fi"
SEEN: set[str] = set()
# (T, K, E, num_aux_topk)
CASES = [
    (0, 8, 256, 8),
    (1, 8, 256, 8),
    (7, 9, 7, 3),
    (129, 8, 256, 8),
    (4001, 8, 256, 6),
    (70001, 8, 384, 8),
    (4001, 6, 8192, 2**31 - 1),
    (4001, 8, 20000, 8),  # experts past the shared histogram: global atomics
    (129, 1, 1, 1),
]


def _ref():
    return importlib.import_module("kernels_py.moe.aux_fi").reference


def _select(t: int, k: int, e: int) -> str:
    from tileaot import _lib

    native = _lib.native()
    return native.select(native.lookup(OP, "i32"), 0, (t, k, e, e))


def _bits(x):
    return x.view(torch.int32)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("kind", ["randint", "one_expert", "past_e"])
def test_aux_fi(case, kind):
    import tileaot
    from _tile_kernels import tk

    t, k, e, a = case
    SEEN.add(_select(t, k, e))
    gen = torch.Generator(device="cuda").manual_seed(t + k + e)
    x = torch.randint(-1, e, (t, k), device="cuda", generator=gen, dtype=torch.int32)
    if kind == "one_expert":
        x[:] = e - 1
    elif kind == "past_e":
        x[::3] = e + 1
    y = torch.full((e,), float("nan"), dtype=torch.float32, device="cuda")
    got = tileaot.aux_fi(x, e, a, out=y)
    torch.cuda.synchronize()
    assert got is y
    want = _ref()(x.cpu(), e, a).cuda()  # the CPU's IEEE division (torch on CUDA multiplies
    assert torch.equal(_bits(y), _bits(want)), (case, kind)  # by the reciprocal)
    if kind != "past_e":  # TileKernels' reference raises on entries >= E
        theirs = tk("moe").aux_fi(x.long().cpu(), e, a).cuda()
        assert torch.equal(_bits(y), _bits(theirs)), (case, kind)


def test_launch_is_ordered_on_the_callers_stream():
    """Indices written on a side stream after a long sleep: a launch on any other stream would
    count the poisoned indices and fail."""
    import tileaot

    src = torch.randint(-1, 256, (4096, 8), dtype=torch.int32, device="cuda")
    want = _bits(_ref()(src.cpu(), 256, 8).cuda())
    assert_ordered_on_callers_stream(
        lambda x: tileaot.aux_fi(x, 256, 8), lambda y: torch.equal(_bits(y), want), src, poison=0
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
