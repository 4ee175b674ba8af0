"""GPU tests of cast_back_e5m6 against kernels_py.quant.cast_back_e5m6.reference.

Both out dtypes on odd sizes (one 8-value piece, rows shorter and longer than one CTA's 128
pieces, TileKernels' hidden sizes, 4001 rows) with row scales and group scales (one per 8
values, and a few groups per row), from random bytes (every code: zero, subnormal, inf and NaN
codes) and scales over a wide range (a zero scale too). Outputs are poisoned (NaN) before each
call; results must be bit-exact, NaN where the reference is NaN. Also: TileKernels' own
reference (tile_kernels.torch.cast_e5m6.cast_back_from_e5m6) on the GPU, the round trip of
per_token_cast_e5m6, the caller's stream, and every cast_back_e5m6 variant built for this GPU
exercised.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, behind_a_busy_stream, selected
from test_gpu_per_token_cast_e5m6 import SHAPES  # (M, N), N % 8 == 0: the cast's sizes

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "cast_back_e5m6"
SEEN: set[str] = set()
OUT = {"bf16": torch.bfloat16, "fp32": torch.float32}


def _reference(q, scale, out_dtype):
    module = importlib.import_module("kernels_py.quant.cast_back_e5m6")
    return module.reference(q, scale, out_dtype)


def _inputs(m: int, n: int, g: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(m * 10007 + n + g)
    q = torch.randint(0, 256, (m, n // 8 * 12), dtype=torch.uint8, device="cuda", generator=gen)
    exp = torch.randint(-40, 40, (m, g), device="cuda", generator=gen).float()
    scale = torch.rand(m, g, device="cuda", generator=gen) * torch.pow(2.0, exp)
    scale[0, 0] = 0.0  # inf codes times 0: NaN
    return q, scale


def _run(q: torch.Tensor, scale: torch.Tensor, key: str) -> tuple[torch.Tensor, str]:
    import tileaot

    m, k = q.shape
    n = k // 12 * 8
    x = torch.full((m, n), float("nan"), dtype=OUT[key], device="cuda")
    name = selected(OP, key, [(m, k), tuple(scale.shape), (m, n)])
    SEEN.add(name)
    got = tileaot.cast_back_e5m6(q, scale, out_dtype=OUT[key], out=x)
    assert got is x
    torch.cuda.synchronize()
    return x, name


def _mismatch(x: torch.Tensor, want: torch.Tensor) -> int:
    """Elements not bit-equal (NaN matches NaN: payloads are the hardware's)."""
    ints = {2: torch.int16, 4: torch.int32}[x.element_size()]
    same = (x.view(ints) == want.view(ints)) | (x.isnan() & want.isnan())
    return int((~same).sum())


def _groups(n: int) -> list[int]:
    pieces = n // 8
    return sorted({1, pieces, *(g for g in (2, 7, 56) if pieces % g == 0)})


@pytest.mark.parametrize("key", OUT)
@pytest.mark.parametrize("m,n", SHAPES)
def test_cast_back_e5m6(key, m, n):
    for g in _groups(n):
        q, scale = _inputs(m, n, g)
        x, name = _run(q, scale, key)
        mismatch = _mismatch(x, _reference(q, scale, OUT[key]))
        assert mismatch == 0, f"{name} G={g}: {mismatch} values differ"


@pytest.mark.parametrize("key", OUT)
def test_tilekernels_reference_on_the_gpu(key):
    from _tile_kernels import tk

    q, scale = _inputs(129, 7168, 1)
    x, name = _run(q, scale, key)
    want = tk("cast_e5m6").cast_back_from_e5m6((q, scale), key, (1, 7168))
    assert _mismatch(x, want) == 0, name
    q, scale = _inputs(33, 7168, 56)
    x, name = _run(q, scale, key)
    want = tk("cast_e5m6").cast_back_from_e5m6((q, scale), key, (1, 128))
    assert _mismatch(x, want) == 0, name


@pytest.mark.parametrize("round_sf", [False, True])
def test_round_trip_of_the_cast(round_sf):
    import tileaot

    x = torch.randn(300, 7168, device="cuda") * 3
    q, scale = tileaot.per_token_cast_e5m6(x, round_sf=round_sf)
    back = tileaot.cast_back_e5m6(q, scale, out_dtype=torch.float32)
    assert back.shape == x.shape and back.dtype == torch.float32
    assert _mismatch(back, _reference(q, scale, torch.float32)) == 0
    assert ((back - x).abs() <= x.abs().amax(-1, keepdim=True) * 2.0**-7).all()


def test_allocating_call_matches_out_call():
    import tileaot

    q, scale = _inputs(300, 7168, 1)
    x = tileaot.cast_back_e5m6(q, scale)
    assert x.dtype == torch.bfloat16 and x.shape == (300, 7168)
    assert _mismatch(x, _reference(q, scale, torch.bfloat16)) == 0


def test_launch_is_ordered_on_the_callers_stream():
    """q written on a side stream after a long sleep: a launch on any other stream would read
    the poisoned input."""
    import tileaot

    src, scale = _inputs(512, 7168, 1)
    q = torch.zeros_like(src)
    with behind_a_busy_stream():
        q.copy_(src)
        x = tileaot.cast_back_e5m6(q, scale)
    assert _mismatch(x, _reference(src, scale, torch.bfloat16)) == 0


def test_every_cast_back_e5m6_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
