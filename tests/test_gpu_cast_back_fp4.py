"""GPU tests of cast_back_fp4 (the FP4 half of tileaot.cast_back) against
kernels_py.quant.cast_back_fp4.reference.

Every output dtype x group size x scale format on random code bytes (all 256 values) with
random scales, including the special ones: UE8M0 0 (0.0, as TileKernels decodes it),
253/254 (products overflow to inf) and 255 (+inf; NaN for zero codes); E4M3 NaNs, negative
scales and subnormal scales. Outputs are poisoned with a value no product can take; results
must equal the reference bit for bit (NaN where the reference is NaN). Round trips through
per_token_cast_fp4 must equal the references chained. The last test checks that every
cast_back_fp4 variant built for this GPU was run.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, selected

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "cast_back_fp4"
SEEN: set[str] = set()
OUT = {"bf16": torch.bfloat16, "fp32": torch.float32}
SHAPES = [(1, 2048), (37, 4096), (129, 7168), (3, 32), (1000, 160), (7, 224), (4097, 96)]
SHAPES_G16 = [(2, 16), (5, 48), (33, 272)]
POISON = 12345.0  # 14 significant bits (12352 in bf16: 8): no E2M1 x scale product


def _ref():
    return importlib.import_module("kernels_py.quant.cast_back_fp4")


def _back(q, scale, g, out_dtype, out=None):
    fn = importlib.import_module("tileaot._cast_back_fp4").cast_back_fp4
    return fn(q, scale, group_size=g, out_dtype=out_dtype, out=out)


def _inputs(m: int, n: int, g: int, fmt: str, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randint(0, 256, (m, n // 2), dtype=torch.uint8, device="cuda", generator=gen)
    if fmt == "ue8m0":
        s = torch.randint(100, 150, (m, n // g), dtype=torch.uint8, device="cuda", generator=gen)
        special = torch.tensor([0, 1, 253, 254, 255], dtype=torch.uint8, device="cuda")
    else:
        s = torch.randint(0, 256, (m, n // g), dtype=torch.uint8, device="cuda", generator=gen)
        special = torch.tensor([0x7F, 0xFF, 0x01, 0x80, 0x7E], dtype=torch.uint8, device="cuda")
        s = s.view(torch.float8_e4m3fn)
        special = special.view(torch.float8_e4m3fn)
    flat = s.view(-1)
    flat[: min(flat.numel(), special.numel())] = special[: flat.numel()]
    return q, s


def _assert_same(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), f"{name}: NaN positions differ"
    bits = torch.int16 if got.dtype is torch.bfloat16 else torch.int32
    diff = (got.view(bits) != want.view(bits)) & ~nan  # bitwise: -0.0 and inf count
    assert diff.sum().item() == 0, f"{name}: {diff.sum().item()} values differ"


@pytest.mark.parametrize("fmt", ["ue8m0", "e4m3"])
@pytest.mark.parametrize("key", ["bf16", "fp32"])
@pytest.mark.parametrize(
    ("m", "n", "g"), [(m, n, 32) for m, n in SHAPES] + [(m, n, 16) for m, n in SHAPES + SHAPES_G16]
)
def test_cast_back_fp4(key, m, n, g, fmt):
    q, s = _inputs(m, n, g, fmt, seed=m * 7919 + n)
    name = selected(OP, f"{key},g{g},{fmt}", [(m, n // 2), (m, n // g), (m, n)])
    SEEN.add(name)
    out = torch.full((m, n), POISON, dtype=OUT[key], device="cuda")
    got = _back(q, s, g, OUT[key], out=out)
    torch.cuda.synchronize()
    assert got is out
    _assert_same(out, _ref().reference(q, s, g, OUT[key]), name)


@pytest.mark.parametrize("fmt", ["ue8m0", "e4m3"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_round_trip(dtype, fmt):
    cast_mod = importlib.import_module("kernels_py.quant.per_token_cast_fp4")
    cast = importlib.import_module("tileaot.per_token_cast_fp4").per_token_cast_fp4
    x = (torch.randn(3, 5, 512, device="cuda") * 3).to(dtype)
    q, s = cast(x, 16, fmt)
    for out_dtype in (torch.bfloat16, torch.float32):
        y = _back(q, s, 16, out_dtype)  # allocated by the call, leading dims kept
        torch.cuda.synchronize()
        assert y.shape == x.shape and y.dtype == out_dtype
        q_ref, s_ref = cast_mod.reference(x.reshape(15, 512), 16, fmt)
        _assert_same(y.reshape(15, 512), _ref().reference(q_ref, s_ref, 16, out_dtype), "trip")
        err = (y.double() - x.double()).abs().reshape(15, 32, 16)
        scale = (
            s_ref.double() if fmt == "e4m3" else ((s_ref.long() + 896) << 52).view(torch.float64)
        )
        assert (err <= scale.reshape(15, 32, 1) + 1e-30).all()  # at most one E2M1 step (2 s)


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
