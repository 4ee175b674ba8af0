"""GPU tests of per_channel_cast_and_transpose against
kernels_py.quant.per_channel_cast_and_transpose.reference and TileKernels' reference.

Every key (bf16, fp16; 32- and 128-token scale groups) on odd sizes: T not a multiple of the
kernel's 128-token tile (g32), H not a multiple of its 64-column tile, one column vector,
columns of very different magnitudes, saturating values, -0.0, tiny and subnormal values, a
zero column.
Outputs are poisoned (0xFF bytes, an e4m3 NaN; NaN scales) before each call; q bytes and
scales must be bit-exact, for round_sf False and True. Also: TileKernels' reference
(``tile_kernels.torch.cast(x, "e4m3", (G, 1))``, its codes transposed) at a model size, the
allocating call, stream order, and every variant built for this GPU exercised.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream, selected
from test_gpu_per_channel_cast_fp8 import _input
from test_gpu_per_channel_cast_fused import _assert_same

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "per_channel_cast_and_transpose"
F8 = torch.float8_e4m3fn
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SHAPES = [  # (T, H); g128 keys round T up to a multiple of 128
    (32, 8),
    (96, 72),
    (160, 200),
    (128, 64),
    (416, 1032),
    (4096, 7168),
    (8192, 4104),
]
SEEN: set[str] = set()


def _inputs(t: int, h: int, key: str) -> torch.Tensor:
    return _input(t, h, DTYPES[key])  # per_channel_cast_fp8's: its edge values by column


def _run(x, group: int, key: str, round_sf: bool):
    import tileaot

    t, h = x.shape
    q = torch.full((h, t), 0xFF, dtype=torch.uint8, device="cuda").view(F8)
    scale = torch.full((t // group, h), float("nan"), device="cuda")
    name = selected(OP, f"{key},g{group}", [(t, h), (h, t), tuple(scale.shape)])
    SEEN.add(name)
    got = tileaot.per_channel_cast_and_transpose(x, group, round_sf=round_sf, out=(q, scale))
    assert got[0] is q and got[1] is scale
    torch.cuda.synchronize()
    return q, scale, name


def _reference(x, group, round_sf):
    from kernels_py.quant import per_channel_cast_and_transpose as m

    return m.reference(x, group, round_sf)


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("group", [32, 128])
@pytest.mark.parametrize("key", DTYPES)
@pytest.mark.parametrize("t,h", SHAPES)
def test_per_channel_cast_and_transpose(key, group, t, h, round_sf):
    t = -(-t // group) * group
    x = _inputs(t, h, key)
    q, scale, name = _run(x, group, key, round_sf)
    _assert_same((q, scale), _reference(x, group, round_sf), name)


@pytest.mark.parametrize("group", [32, 128])
def test_matches_tilekernels_reference(group):
    """tile_kernels.torch's cast with (G, 1) blocks, its codes transposed: what TileKernels'
    per_channel_cast_and_transpose kernel computes, at a DeepSeek-V3 size."""
    from _tile_kernels import tk

    cast = tk("cast").cast
    x = _inputs(4096, 7168, "bf16")
    for round_sf in (False, True):
        q, scale, name = _run(x, group, "bf16", round_sf)
        q_tk, s_tk = cast(x, "e4m3", (group, 1), round_sf=round_sf)
        _assert_same((q, scale), (q_tk.T.contiguous(), s_tk), name)


def test_allocating_call_matches_out_call():
    import tileaot

    x = _inputs(384, 7168, "bf16")
    q, scale = tileaot.per_channel_cast_and_transpose(x, 32, round_sf=True)
    assert q.dtype == F8 and scale.dtype == torch.float32
    assert q.shape == (7168, 384) and scale.shape == (12, 7168)
    _assert_same((q, scale), _reference(x, 32, True), "allocating call")


def assert_stream_order(fn, x, want) -> None:
    """x written on a side stream after a long sleep: a launch of ``fn(x)`` on any other
    stream would read the poisoned (NaN) rows and miss `want` (q, scale)."""

    def check(got):
        return all(
            torch.equal(a.view(torch.uint8), b.view(torch.uint8))
            for a, b in zip(got, want, strict=True)
        )

    assert_ordered_on_callers_stream(fn, check, x)


def test_launch_is_ordered_on_the_callers_stream():
    import tileaot

    x = _inputs(4096, 7168, "bf16")
    assert_stream_order(tileaot.per_channel_cast_and_transpose, x, _reference(x, 128, False))


def test_every_per_channel_cast_and_transpose_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
