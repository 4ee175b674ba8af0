"""GPU tests of normalize_weight against kernels_py.moe.normalize_weight.reference and
TileKernels' torch reference, bit for bit (TileKernels' test compares both outputs of its kernel
with its reference by `assert_equal`).

The one generic variant on odd token counts and k from 1 to 32, on uniform (TileKernels' test
data), signed, all-zero (-0.0 too), tiny (subnormal) and special (±inf, NaN, overflowing)
weights. Outputs are poisoned (NaN) first.
"""

from __future__ import annotations

import importlib
import math

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "normalize_weight"
SEEN: set[str] = set()
KINDS = ("rand", "randn", "zeros", "tiny", "special")
CASES = [(1, 8), (7, 6), (129, 1), (4001, 8), (70001, 8), (4001, 9), (129, 32), (65, 2)]


def _ref():
    return importlib.import_module("kernels_py.moe.normalize_weight").reference


def _select(t: int, k: int) -> str:
    from tileaot import _lib

    native = _lib.native()
    return native.select(native.lookup(OP, "fp32"), 0, (t, k, t, t, k))


def _weights(t: int, k: int, kind: str) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(t * 100 + k)
    w = torch.rand(t, k, device="cuda", generator=g)
    if kind == "randn":
        w = torch.randn(t, k, device="cuda", generator=g)
    elif kind == "zeros":
        w.zero_()
        w[::3] = -0.0
    elif kind == "tiny":
        w = w * 1e-38
    elif kind == "special":
        w[:, ::5] = math.inf
        w[1::3, 1::7] = -math.inf
        w[2::5, 2::3] = math.nan
        w[3::4, :] = 3e38
    return w.contiguous()


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_normalize_weight(case):
    import tileaot
    from _tile_kernels import tk

    t, k = case
    SEEN.add(_select(t, k))
    theirs = tk("moe").normalize_weight
    for kind in KINDS:
        w = _weights(t, k, kind)
        den = torch.full((t,), math.nan, device="cuda")
        nw = torch.full((t, k), math.nan, device="cuda")
        got = tileaot.normalize_weight(w, out=(den, nw))
        torch.cuda.synchronize()
        assert got[0] is den and got[1] is nw
        for want in (_ref()(w), theirs(w)):
            assert torch.equal(_bits(den), _bits(want[0])), (case, kind)
            bad = (_bits(nw) != _bits(want[1])).any(dim=-1).nonzero().flatten()
            assert bad.numel() == 0, (
                f"{case} {kind}: {bad.numel()} rows differ, first {bad[0].item()}: "
                f"{nw[bad[0]].tolist()} != {want[1][bad[0]].tolist()}"
            )


def test_launch_is_ordered_on_the_callers_stream():
    """Weights written on a side stream after a long sleep: a launch on any other stream would
    read the poisoned weights and fail."""
    import tileaot

    src = _weights(4096, 8, "rand")
    want = _ref()(src)
    assert_ordered_on_callers_stream(
        tileaot.normalize_weight,
        lambda got: torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]),
        src,
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
