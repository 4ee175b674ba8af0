"""GPU tests of engram_fused_weight against kernels_py.engram.engram_fused_weight.reference
(``w_h.float() * w_k.float()``), bit for bit: the product of two bf16 values is exact in
float32, so TileKernels' ``fused_weight`` kernel gives these bits too (and, where it can run,
is compared directly).

Odd and TileKernels' sizes (hc_mult 1 to 64; H a multiple of 8, the vector path, and not,
the element path), extreme magnitudes, the output poisoned (NaN) first; the caller's stream.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream, selected

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "engram_fused_weight"
SEEN: set[str] = set()
# (GW, H): TileKernels' [hc_mult, H] first; then partial blocks, odd H (element path)
CASES = [(4, 7168), (4, 4096), (4, 2048), (1, 8), (3, 1032), (64, 7168), (5, 7), (2, 1001)]


def _ref():
    return importlib.import_module("kernels_py.engram.engram_fused_weight").reference


def _weights(g: int, h: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w_h, w_k = ((torch.randn(g, h, device="cuda", generator=gen) * 8).bfloat16() for _ in "hk")
    w_h[0, 0], w_k[0, 0] = 2.0**60, -(2.0**60)  # the product's magnitude far from float32's max
    w_h[-1, -1], w_k[-1, -1] = 2.0**-60, 2.0**-60
    return w_h, w_k


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_engram_fused_weight(case):
    import tileaot

    g, h = case
    w_h, w_k = _weights(g, h, seed=g * h)
    SEEN.add(selected(OP, "bf16", [w_h.shape, w_k.shape, (g, h)]))
    out = torch.full((g, h), float("nan"), device="cuda")
    got = tileaot.engram_fused_weight(w_h, w_k, out=out)
    torch.cuda.synchronize()
    assert got is out
    want = _ref()(w_h, w_k)
    bad = (out.view(torch.int32) != want.view(torch.int32)).nonzero()
    assert bad.numel() == 0, f"{case}: {bad.shape[0]} elements differ, first at {bad[0].tolist()}"


def test_allocating_call_and_compat_function():
    """Without out=, and through tileaot.tile_kernels.engram.fused_weight (TileKernels' name);
    equal to TileKernels' own kernel where its JIT can build it here."""
    import tileaot
    import tileaot.tile_kernels as compat

    w_h, w_k = _weights(4, 7168, seed=1)
    want = _ref()(w_h, w_k)
    assert torch.equal(tileaot.engram_fused_weight(w_h, w_k), want)
    assert torch.equal(compat.engram.fused_weight(w_h, w_k), want)
    try:
        from _tile_kernels import tk

        tk()
        theirs = importlib.import_module("tile_kernels.engram").fused_weight(w_h, w_k)
    except Exception as e:  # pragma: no cover - TileKernels' JIT needs nvcc
        pytest.skip(f"TileKernels' fused_weight kernel does not run here: {e}")
    assert torch.equal(theirs, want)


def test_launch_is_ordered_on_the_callers_stream():
    import tileaot

    w_h, w_k = _weights(64, 7168, seed=2)
    want = _ref()(w_h, w_k)
    assert_ordered_on_callers_stream(
        lambda a, b: tileaot.engram_fused_weight(a, b),
        lambda w: torch.equal(w, want),
        w_h,
        w_k,
        poison=0.0,
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
