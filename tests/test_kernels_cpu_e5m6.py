"""CPU tests of the E5M6 cast's definition (kernels_py/quant/per_token_cast_e5m6.py).

* The codes against independent float64 math: in the normal fp16 range a code is the value
  rounded half to even to 6 mantissa bits; below it, within one 2^-20 step of the value.
* The packing against a bit string built element by element; the scales and multipliers
  against float64 quotients rounded once to float32.
* The whole reference on token counts 0, 1, 7, 129, 4001 with zero rows, -0.0, huge and
  tiny values, ties and infinities.
* KernelSpec tables, and a lowering smoke test (needs tilelang, no GPU).
TileKernels' own reference is met in tests/test_parity_quant.py.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.quant import per_token_cast_e5m6 as e5  # noqa: E402

MAX = 65024.0
FLOOR = float(torch.tensor(1e-4))  # the float32 floor, as float64


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def decode(codes) -> np.ndarray:
    """12-bit codes -> float64: the top 12 bits of an fp16 (numpy's float16 decodes them)."""
    c = np.asarray(codes, dtype=np.int64)
    return (c << 4).astype(np.uint16).view(np.float16).astype(np.float64)


def rne6(v: float) -> float:
    """|v| in the normal fp16 range rounded half to even to 6 mantissa bits (float64)."""
    a = abs(v)
    step = 2.0 ** (math.floor(math.log2(a)) - 6)
    k = a / step  # exact: a float32 over a power of two
    r = math.floor(k)
    if k - r > 0.5 or (k - r == 0.5 and r % 2):
        r += 1
    return math.copysign(r * step, v)


def unpack(q: torch.Tensor) -> np.ndarray:
    """uint8 [M, 3N/2] -> codes [M, N], through a string of bits (most significant first)."""
    m = q.shape[0]
    words = q.numpy().reshape(m, -1, 4).astype(np.uint64)
    words = words[..., 0] | words[..., 1] << 8 | words[..., 2] << 16 | words[..., 3] << 24
    out = []
    for row in words.reshape(m, -1, 3):
        bits = "".join(format(int(w), "032b") for piece in row for w in piece)
        out.append([int(bits[i : i + 12], 2) for i in range(0, len(bits), 12)])
    return np.array(out, dtype=np.int64).reshape(m, -1)


def test_codes_in_the_normal_range_round_half_to_even():
    exps = torch.randint(-14, 16, (4000,)).double()
    y = (torch.rand(4000).double() + 1) * 2**exps * torch.where(torch.rand(4000) < 0.5, -1, 1)
    # ties: midpoints between neighbouring codes, both parities, and the top of the range
    ties = torch.tensor([1 + 1 / 128, 1 + 3 / 128, -(2 + 5 / 64), 2**-14 * (1 + 1 / 128), MAX])
    y = torch.cat([y, ties]).clamp(-MAX, MAX).float()
    got = decode(e5.reference_codes(y))
    want = np.array([rne6(float(v)) for v in y])
    assert np.array_equal(got, want)


def test_codes_below_the_normal_range_are_within_one_step():
    y = (torch.rand(4000).double() * 2**-14).float()
    y = torch.cat([y, torch.tensor([2**-20, 2**-14 * 63 / 64, 2**-25, 2**-30])])
    got = decode(e5.reference_codes(y))
    err = np.abs(got - y.double().numpy())
    assert (err <= 2**-20).all()
    assert decode(e5.reference_codes(torch.tensor([2**-20, 2**-14 * 63 / 64]))).tolist() == [
        2**-20,
        2**-14 * 63 / 64,
    ]


def test_special_codes():
    y = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 1.0, -1.0, MAX, -MAX])
    got = e5.reference_codes(y).tolist()
    assert got == [0, 0x800, 0x7C0, 0xFC0, 0x3C0, 0xBC0, 0x7BF, 0xFBF]


def test_packing_order():
    codes = torch.randint(0, 4096, (3, 24))
    q = e5.pack_codes(codes)
    assert q.dtype == torch.uint8 and q.shape == (3, 36)
    assert np.array_equal(unpack(q), codes.numpy())


def _oracle(x: torch.Tensor, round_sf: bool):
    """Scales and float32 values y = x * inv in float64 steps, each rounded once to float32."""
    xd = x.double()
    amax = xd.abs().amax(-1, keepdim=True).clamp(min=FLOOR)
    s = (amax / MAX).float().double()  # a correctly rounded float32 quotient
    if round_sf:
        s = torch.where(torch.isinf(s), s, 2.0 ** torch.ceil(torch.log2(s)))
        inv = torch.where(torch.isinf(s), 0.0, 1 / s)
    else:
        inv = (MAX / amax).float().double()
    return s.float(), (xd * inv).float()  # the float64 product of two float32 is exact


def _rows(m: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(m, n) * torch.logspace(-8, 8, max(m, 1)).unsqueeze(1)[:m]
    huge = torch.finfo(dtype).max
    cases = [
        torch.zeros(n),
        torch.full((n,), -0.0),
        torch.full((n,), huge),
        torch.full((n,), 1e-38),  # tiny: subnormal in fp32, below the floor
        torch.tensor([MAX, 1 + 1 / 128, -(1 + 3 / 128), 2**-20, 2**-14] * n)[:n],  # ties
        torch.full((n,), 2**-14 * 63 / 64),
    ]
    for i in range(m):
        if i % 3 == 1:
            x[i] = cases[(i // 3) % len(cases)]
    if m > 2:
        x[2, 0] = -float("inf")
    return x.to(dtype)


@pytest.mark.parametrize("round_sf", [False, True], ids=["f32", "pow2"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("m", [0, 1, 7, 129, 4001])
def test_reference_against_float64(m, dtype, round_sf):
    n = 16 if m == 4001 else 64
    x = _rows(m, n, dtype)
    q, scale = e5.reference(x, round_sf)
    assert q.shape == (m, n * 3 // 2) and q.dtype == torch.uint8
    assert scale.shape == (m, 1) and scale.dtype == torch.float32
    s_want, y = _oracle(x, round_sf)
    assert torch.equal(scale, s_want)
    if m:
        assert np.array_equal(unpack(q), e5.reference_codes(y).numpy())
        normal = (y.abs() >= 2**-14) & (y.abs() <= MAX)
        want = np.array([rne6(float(v)) for v in y[normal]])
        assert np.array_equal(decode(e5.reference_codes(y[normal])), want)


def test_zero_rows_get_the_floor_scale_and_zero_codes():
    q, scale = e5.reference(torch.zeros(2, 16, dtype=torch.bfloat16))
    assert torch.equal(scale, (torch.tensor([[FLOOR], [FLOOR]]).double() / MAX).float())
    assert not q.any()


def test_spec_tables():
    spec = e5.SPEC
    assert [spec.key_string(k) for k in spec.keys] == ["bf16", "fp32"]
    assert spec.variant_name({"dtype": "bfloat16"}, {}) == "per_token_cast_e5m6_bf16_any"
    assert spec.constraints({"dtype": "float32"}, {}) == {"N": 8}
    with pytest.raises(ValueError, match="unsupported dtype"):
        e5.factory(arch="sm_90a", dtype="float16")


@needs_tilelang
def test_lower_cast_uses_ieee_math_and_4_byte_stores():
    src = lower_source(e5.factory(arch="sm_90a", dtype="bfloat16"), "sm_90a", "e5m6_test")
    assert "__fdiv_rn" in src and "__fmul_rn" in src
    assert "*(uint4*)(xv + 0) = *(uint4*)(x + " in src  # 16-byte loads of x
    assert src.count("*(uint*)(q + ") == 1  # q: 4-byte stores (12-byte pieces, 4-byte aligned)
    assert "NamedBarrier" in src  # the block-wide amax (lowering by generation)
