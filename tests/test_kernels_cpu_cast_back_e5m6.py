"""CPU tests of the E5M6 cast-back's definition (kernels_py/quant/cast_back_e5m6.py).

* The unpacking against a bit string read 12 bits at a time; the values against numpy's
  float16 decode of ``code << 4`` times the scale in float64, rounded to float32 then to the
  output dtype (what one float32 multiply and one conversion give).
* The whole reference against TileKernels' ``cast_back_from_e5m6`` on token counts 0, 1, 7,
  129, 4001: every code (NaN and inf ones too), row and group scales, bf16 and fp32 out; and
  the round trip through the E5M6 cast.
* KernelSpec tables, and a lowering smoke test (needs tilelang, no GPU).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake  # noqa: E402, F401
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402
from test_kernels_cpu_e5m6 import decode, unpack  # noqa: E402

from kernels_py.quant import cast_back_e5m6 as cb  # noqa: E402
from kernels_py.quant import per_token_cast_e5m6 as e5  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name
OUT = {"bf16": torch.bfloat16, "fp32": torch.float32}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _codes(m: int, n: int) -> torch.Tensor:
    """Random packed codes: every byte value, so NaN, inf, subnormal and zero codes occur."""
    return torch.randint(0, 256, (m, n // 8 * 12), dtype=torch.uint8)


def _scales(m: int, g: int) -> torch.Tensor:
    s = torch.rand(m, g) * 2.0 ** torch.randint(-60, 60, (m, g))
    if m > 1:
        s[1, 0] = 0.0
    return s


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-equal, or NaN in both (NaN payloads are the hardware's)."""
    ints = {torch.bfloat16: torch.int16, torch.float32: torch.int32}[a.dtype]
    return bool(((a.view(ints) == b.view(ints)) | (a.isnan() & b.isnan())).all())


def test_unpacking_is_the_bit_string():
    q = _codes(3, 48)
    assert np.array_equal(cb.unpack_codes(q).numpy(), unpack(q))
    codes = torch.randint(0, 4096, (2, 16))
    assert torch.equal(cb.unpack_codes(e5.pack_codes(codes)), codes)


@pytest.mark.parametrize("out", ["bf16", "fp32"])
@pytest.mark.parametrize("g", [1, 3])
def test_values_against_float64(out, g):
    q, s = _codes(5, 48), _scales(5, g)
    got = cb.reference(q, s, OUT[out])
    v = decode(unpack(q))  # float64, exact
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0, NaN codes
        prod = v * s.double().numpy().repeat(48 // g, axis=1)  # exact: 11 x 24 bits
        want = torch.from_numpy(prod.astype(np.float32)).to(OUT[out])
    assert _same(got, want)


def test_special_codes():
    codes = torch.tensor([[0, 0x800, 0x7C0, 0xFC0, 0x7C1, 0x3C0, 0x7BF, 0x001]])
    got = cb.reference(e5.pack_codes(codes), torch.ones(1, 1), torch.float32)[0].tolist()
    assert got[:4] == [0.0, 0.0, float("inf"), -float("inf")]
    assert np.isnan(got[4]) and got[5:] == [1.0, 65024.0, 2.0**-20]
    assert torch.signbit(cb.reference(e5.pack_codes(codes), torch.ones(1, 1)))[0, 1]


@pytest.mark.parametrize("out", ["bf16", "fp32"])
@pytest.mark.parametrize("m", [0, 1, 7, 129, 4001])
def test_reference_is_tilekernels(m, out):
    ref = tk("cast_e5m6")
    n = 64 if m == 4001 else 256
    q = _codes(m, n)
    for g in (1, 4, n // 8):
        s = _scales(m, g)
        want = ref.cast_back_from_e5m6((q, s), out, (1, n // g))
        got = cb.reference(q, s, OUT[out])
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        assert _same(got, want), (m, g)


@pytest.mark.parametrize("round_sf", [False, True])
def test_round_trip_through_the_cast(round_sf):
    x = torch.randn(129, 512) * torch.logspace(-6, 6, 129).unsqueeze(1)
    q, s = e5.reference(x, round_sf)
    back = cb.reference(q, s, torch.float32)
    assert torch.equal(back, tk("cast_e5m6").cast_back_from_e5m6((q, s), "fp32", (1, 512)))
    rel = ((back - x).abs() / x.abs().amax(-1, keepdim=True)).max()
    assert rel <= 2.0**-7  # half an E5M6 step of the row maximum, and the scale's rounding


def test_spec_tables():
    spec = cb.SPEC
    assert [spec.key_string(k) for k in spec.keys] == ["bf16", "fp32"]
    assert spec.variant_name({"out": "float32"}, {}) == "cast_back_e5m6_fp32_any"
    assert spec.constraints({"out": "bfloat16"}, {}) == {"K": 12}
    with pytest.raises(ValueError, match="unsupported out dtype"):
        cb.factory(arch="sm_90a", out="float16")


@needs_tilelang
@pytest.mark.parametrize("out", ["bfloat16", "float32"])
def test_lower_uses_4_byte_loads_and_16_byte_stores(out):
    for arch, src in default_arch_sources(cb.factory, "cbe_test", out=out):
        assert src.count("= *(uint*)(q + ") == 1, arch  # 12-byte pieces: three 4-byte loads
        assert src.count("tl::store_global_128(") == 1, arch
        assert "__fmul_rn" in src and "half_t" in src, arch
        assert "scale[" in src and src.count("condval") == 0, arch  # no bounds-check select


@pytest.mark.parametrize(
    ("q", "scale", "message"),
    [
        ((4, 20), (4, 1), r"q has 20 bytes per row; .* multiple of 12"),
        ((4, 36), (4, 2), r"scale has 2 columns for N = 24 values per row; .* G dividing 3"),
        ((4, 36), (4, 0), r"scale has 0 columns"),
    ],
)
def test_wrapper_refuses_bad_layouts(fake, cpu_as_cuda, q, scale, message):
    import tileaot

    q = torch.zeros(q, dtype=torch.uint8)
    with pytest.raises(ValueError, match=message):
        tileaot.cast_back_e5m6(q, torch.ones(scale))
    assert not fake.launches


def test_wrapper_launches_once(fake, cpu_as_cuda):
    import tileaot

    x = tileaot.cast_back_e5m6(torch.zeros(5, 36, dtype=torch.uint8), torch.ones(5, 3))
    assert (x.shape, x.dtype) == ((5, 24), torch.bfloat16)
    assert len(fake.launches) == 1 and fake.launches[0].shapes[:6] == (5, 36, 5, 3, 5, 24)
    with pytest.raises(TypeError, match="out_dtype must be"):
        tileaot.cast_back_e5m6(torch.zeros(5, 36, dtype=torch.uint8), torch.ones(5, 3), out_dtype=1)
