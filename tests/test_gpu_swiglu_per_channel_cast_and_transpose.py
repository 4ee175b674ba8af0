"""GPU tests of swiglu_per_channel_cast_and_transpose against
kernels_py.act.swiglu_per_channel_cast_and_transpose.reference (on the GPU: torch's CUDA exp is
the kernel's expf) and TileKernels' reference.

Every key (32- and 128-token scale groups) on odd sizes (T not a multiple of the kernel's
128-token tile, H not a multiple of its 64-column tile, one column vector), with and without
the clamp, both scale modes; outputs poisoned (0xFF bytes, an e4m3 NaN; NaN scales), q bytes
and scales bit-exact. Also TileKernels' reference (swiglu_forward in bf16, then its (G, 1)
cast, codes transposed) at a model size; stream order; every variant built for this GPU
exercised.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import assert_every_variant_exercised, selected
from test_gpu_per_channel_cast_and_transpose import _assert_same, assert_stream_order

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "swiglu_per_channel_cast_and_transpose"
F8 = torch.float8_e4m3fn
SHAPES = [(32, 8), (96, 72), (160, 200), (416, 1032), (4096, 2048), (8192, 7168)]  # (T, H)
SEEN: set[str] = set()


def _inputs(t: int, h: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(t * 10007 + h)
    x = torch.randn(t, 2 * h, device="cuda", generator=g) * 3
    x[::5] *= 4  # past a 7.0 clamp
    x[3::7] = 0.0
    x[0, ::3] = -0.0
    return x.bfloat16()


def _run(x, group: int, clamp, round_sf: bool):
    import tileaot

    t, h = x.shape[0], x.shape[1] // 2
    q = torch.full((h, t), 0xFF, dtype=torch.uint8, device="cuda").view(F8)
    scale = torch.full((t // group, h), float("nan"), device="cuda")
    name = selected(OP, f"bf16,g{group}", [tuple(x.shape), (h, t), tuple(scale.shape)])
    SEEN.add(name)
    fn = tileaot.swiglu_per_channel_cast_and_transpose
    got = fn(x, group, clamp, round_sf=round_sf, out=(q, scale))
    assert got[0] is q and got[1] is scale
    torch.cuda.synchronize()
    return q, scale, name


def _reference(x, group, clamp, round_sf):
    from kernels_py.act import swiglu_per_channel_cast_and_transpose as m

    return m.reference(x, group, clamp, round_sf)


@pytest.mark.parametrize("clamp", [None, 7.0])
@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("group", [32, 128])
@pytest.mark.parametrize("t,h", SHAPES)
def test_swiglu_per_channel_cast_and_transpose(group, t, h, round_sf, clamp):
    x = _inputs(-(-t // group) * group, h)
    q, scale, name = _run(x, group, clamp, round_sf)
    _assert_same((q, scale), _reference(x, group, clamp, round_sf), name)


@pytest.mark.parametrize("clamp", [None, 7.0])
@pytest.mark.parametrize("group", [32, 128])
def test_matches_tilekernels(group, clamp):
    from _tile_kernels import tk

    swiglu, cast = tk("swiglu").swiglu_forward, tk("cast").cast
    x = _inputs(4096, 2048)
    for round_sf in (False, True):
        q, scale, name = _run(x, group, clamp, round_sf)
        a = swiglu(x, swiglu_clamp_value=clamp).bfloat16()
        q_tk, s_tk = cast(a, "e4m3", (group, 1), round_sf=round_sf)
        _assert_same((q, scale), (q_tk.T.contiguous(), s_tk), name)


def test_launch_is_ordered_on_the_callers_stream():
    import tileaot

    x = _inputs(4096, 2048)
    want = _reference(x, 128, None, False)
    assert_stream_order(tileaot.swiglu_per_channel_cast_and_transpose, x, want)


def test_every_swiglu_per_channel_cast_and_transpose_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
