"""GPU tests of cast_back (FP8) against kernels_py.quant.cast_back_fp8.reference.

Every output dtype x scale layout (g128, token, block128) on generic sizes: tails in both
dimensions, N not a multiple of the vector (element-wise path), 1x1. q holds every finite
e4m3 code, both zeros and subnormals; scales span 2^-140 .. 2^41 so that products round in
bf16 and go subnormal (or to zero). Outputs are poisoned (NaN) before each call and
must be bit-exact (one fp32 multiply, one rounding). Also: NaN codes give NaN, round trips
through tileaot's casts, a call of more than 65535 row tiles is split correctly, and every
cast_back_fp8 variant built for this GPU was exercised.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, selected

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "cast_back_fp8"
SEEN: set[str] = set()
OUT = {"bf16": torch.bfloat16, "fp32": torch.float32}
BITS = {"bf16": torch.int16, "fp32": torch.int32}
SHAPES = {  # layout -> [(M, N)]
    "g128": [(1, 128), (37, 7168), (513, 256), (3, 1152), (300, 4096)],
    "token": [(37, 4096), (19, 1000), (5, 7), (64, 129), (1, 1), (200, 7168)],
    "block128": [(300, 7168), (129, 257), (1, 1), (200, 1000), (1000, 130), (64, 36)],
    # N % 128 != 0: the last CTA's 128 columns reach past N
    "g32": [(37, 7168), (513, 96), (3, 1056), (300, 4064)],
    "g64": [(37, 7168), (129, 320), (1, 192), (64, 4032)],
}
CASES = [(lay, m, n) for lay, shapes in SHAPES.items() for m, n in shapes]


def _module():
    return importlib.import_module("kernels_py.quant.cast_back_fp8")


def _scale_shape(layout: str, m: int, n: int) -> tuple[int, int]:
    if layout[0] == "g":
        return (m, n // int(layout[1:]))
    return {"token": (m, 1), "block128": (-(-m // 128), -(-n // 128))}[layout]


def _inputs(layout: str, m: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(m * 7919 + n)
    codes = torch.randint(0, 256, (m, n), device="cuda", generator=g, dtype=torch.int32)
    codes[(codes & 0x7F) == 0x7F] = 0x80  # no NaN codes here (-0 instead)
    q = codes.to(torch.uint8).view(torch.float8_e4m3fn)
    shape = _scale_shape(layout, m, n)
    exps = torch.randint(-140, 41, shape, device="cuda", generator=g).float()
    scale = (torch.rand(shape, device="cuda", generator=g) + 1) * torch.pow(2.0, exps)
    scale.view(-1)[0] = 1.0  # plain values in the first group
    return q, scale


def _run(q, scale, key: str, layout: str, out_dtype: torch.dtype):
    import tileaot

    m, n = q.shape
    x = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
    name = selected(OP, f"{key},{layout}", [(m, n), tuple(scale.shape), (m, n)])
    SEEN.add(name)
    got = tileaot.cast_back(q, scale, out_dtype=out_dtype, out=x)
    assert got is x
    torch.cuda.synchronize()
    return x, name


@pytest.mark.parametrize("key", OUT)
@pytest.mark.parametrize("layout,m,n", CASES)
def test_cast_back_fp8(key, layout, m, n):
    out_dtype = OUT[key]
    q, scale = _inputs(layout, m, n)
    x, name = _run(q, scale, key, layout, out_dtype)
    ref = _module().reference(q, scale, layout, out_dtype)
    mismatch = (x.view(BITS[key]) != ref.view(BITS[key])).sum().item()
    assert mismatch == 0, f"{name}: {mismatch} elements differ (bits)"


@pytest.mark.parametrize("layout", ["g128", "block128"])
def test_nan_codes_give_nan(layout):
    q, scale = _inputs(layout, 130, 256)
    raw = q.view(torch.uint8)
    raw[0, 0], raw[129, 255] = 0x7F, 0xFF  # e4m3fn NaNs
    x, name = _run(q, scale, "bf16", layout, torch.bfloat16)
    assert torch.isnan(x[0, 0]) and torch.isnan(x[129, 255]), name
    ref = _module().reference(q, scale, layout, torch.bfloat16)
    keep = ~torch.isnan(ref)
    assert torch.equal(x[keep].view(torch.int16), ref[keep].view(torch.int16)), name


def test_round_trips_through_tileaot_casts():
    import tileaot

    x = torch.randn(300, 7168, device="cuda").bfloat16()
    for q, s in (
        tileaot.per_token_cast_fp8(x),
        tileaot.per_token_cast_fp8(x, group_size=None),
        tileaot.per_token_cast_fp8(x, group_size=32),
        tileaot.per_token_cast_fp8(x, group_size=64),
        tileaot.per_block_cast_fp8(x),
    ):
        back = tileaot.cast_back(q, s, out_dtype=torch.float32)  # layout from s.shape
        layouts = {(300, 56): "g128", (300, 1): "token", (3, 56): "block128"}
        layout = {**layouts, (300, 224): "g32", (300, 112): "g64"}[tuple(s.shape)]
        ref = _module().reference(q, s, layout, torch.float32)
        assert torch.equal(back, ref), layout
        assert ((back - x.float()).abs() <= x.float().abs() / 16 + 1e-2).all(), layout


def test_allocating_call_defaults_to_bf16():
    import tileaot

    q, scale = _inputs("token", 37, 4096)
    x = tileaot.cast_back(q, scale)
    assert x.dtype == torch.bfloat16 and x.shape == (37, 4096)
    ref = _module().reference(q, scale, "token", torch.bfloat16)
    assert torch.equal(x.view(torch.int16), ref.view(torch.int16))


@pytest.mark.parametrize("layout", ["token", "block128", "g32"])
def test_tall_input_is_split_over_launches(layout):
    rows = importlib.import_module("tileaot.cast_back")._ROWS_PER_LAUNCH
    # more row tiles than gridDim.y takes: two launches
    m, n = rows + 70, 32 if layout == "g32" else 8
    q, scale = _inputs(layout, m, n)
    x, name = _run(q, scale, "bf16", layout, torch.bfloat16)
    ref = _module().reference(q, scale, layout, torch.bfloat16)
    assert torch.equal(x.view(torch.int16), ref.view(torch.int16)), name


def test_every_cast_back_fp8_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
