"""CPU tests of the FP4 kernels' definitions: per_token_cast_fp4 and cast_back_fp4.

* The torch references against independent float64 math (brute-force nearest E2M1 value,
  ``ceil(log2(amax / 6))``, a scan of the E4M3 table) and hand-made cases (ties, signs, zero
  groups, nibble order, special scales).
* The kernels' arithmetic, emulated with exact fused multiply-adds: the rounding by
  saturated pieces and FMAs, the odd-code seed, the E4M3 scale search and the division-free
  E4M3 quotient must give the reference's codes bit for bit (the GPU tests check the real
  thing).
* KernelSpec tables, and lowering smoke tests (need tilelang, no GPU).
"""

import math
from fractions import Fraction

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.quant import cast_back_fp4 as back  # noqa: E402
from kernels_py.quant import per_token_cast_fp4 as fp4  # noqa: E402

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
F32 = np.float32


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def nearest_even_code(v: float) -> int:
    """Index of the E2M1 magnitude nearest to ``v >= 0`` (ties: even index), saturating."""
    if v >= 6:
        return 7
    dist = [abs(v - e) for e in E2M1]
    nearest = [i for i, d in enumerate(dist) if d == min(dist)]
    return nearest[0] if len(nearest) == 1 else next(i for i in nearest if i % 2 == 0)


def unpack(q: torch.Tensor) -> torch.Tensor:
    """uint8 [M, N/2] -> int codes [M, N] (low nibble first)."""
    return torch.stack([q & 0xF, q >> 4], dim=-1).reshape(q.shape[0], -1).int()


def e4m3_table() -> list[float]:
    return [float(v) for v in fp4.e4m3_values()]


# --- the E2M1 rounding ------------------------------------------------------------------------


def test_e2m1_codes_match_brute_force_nearest_even():
    bf16_grid = torch.arange(0, 0x4110, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 7.0, 1e30])
    v = torch.cat([bf16_grid.float(), ties, torch.rand(2000) * 8])
    want = torch.tensor([nearest_even_code(float(a)) for a in v], dtype=torch.int32)
    assert torch.equal(fp4.e2m1_codes(v), want)


def test_ties_go_to_the_even_code():
    #            0.25 0.75 1.25 1.75 2.5 3.5  5   above 6
    v = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 100.0])
    assert fp4.e2m1_codes(v).tolist() == [0, 2, 2, 4, 4, 6, 6, 7]


# --- per_token_cast_fp4 reference ---------------------------------------------------------------


def _independent_cast(x: torch.Tensor, g: int, fmt: str):
    """float64 re-derivation: scale from its definition, codes by brute-force nearest."""
    m, n = x.shape
    xs = x.double().tolist()
    table = e4m3_table()
    codes, scales = [], []
    for row in xs:
        crow, srow = [], []
        for j in range(0, n, g):
            grp = row[j : j + g]
            amax = max(abs(a) for a in grp)
            if fmt == "ue8m0":
                e = 1  # TileKernels' floor: amax >= 6 * 2^-126, scale >= 2^-126
                if amax > 0:
                    fr, ex = math.frexp(amax / 6)  # amax / 6 = fr 2^ex, fr in [0.5, 1)
                    e = max(1, 127 + (ex - 1 if fr == 0.5 else ex))
                s, stored = 2.0 ** (e - 127), e
            else:
                s = next((t for t in table if 6 * t >= amax), table[-1])
                stored = s
            srow.append(stored)
            for a in grp:
                sign = 8 if math.copysign(1.0, a) < 0 else 0
                crow.append(sign | nearest_even_code(abs(a) / s))
        codes.append(crow)
        scales.append(srow)
    return torch.tensor(codes, dtype=torch.int32), torch.tensor(scales, dtype=torch.float64)


@pytest.mark.parametrize("fmt", fp4.SCALES)
@pytest.mark.parametrize("g", [16, 32])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cast_reference_matches_float64(dtype, g, fmt):
    mags = torch.logspace(-6, 3, 7).unsqueeze(1)  # groups from tiny to saturating (e4m3)
    x = (torch.randn(7, 4 * g) * mags).to(dtype)
    x[0, :g] = 0  # a zero group
    x[1, 1] = -0.0
    q, scale = fp4.reference(x, g, fmt)
    assert q.dtype == torch.uint8 and q.shape == (7, 2 * g)
    assert scale.shape == (7, 4)
    assert scale.dtype == (torch.uint8 if fmt == "ue8m0" else torch.float8_e4m3fn)
    want_codes, want_scales = _independent_cast(x, g, fmt)
    assert torch.equal(unpack(q), want_codes)
    assert torch.equal(scale.double(), want_scales)


def test_nibble_order_signs_and_zero_groups():
    x = torch.zeros(2, 32)
    x[0, :4] = torch.tensor([6.0, -0.5, -0.0, 3.0])  # amax 6 -> e = 127, scale 1
    x[0, 4] = -0.1  # rounds to zero, keeps its sign
    q, e = fp4.reference(x, 32, "ue8m0")
    assert e.tolist() == [[127], [1]]  # row 1 is all zero: e = 1 (2^-126, TileKernels'), no NaN
    assert q[0, :3].tolist() == [0x7 | 0x9 << 4, 0x8 | 0x5 << 4, 0x8]
    assert torch.equal(q[1], torch.zeros(16, dtype=torch.uint8))
    _, s = fp4.reference(x, 16, "e4m3")
    assert s.float().tolist() == [[1.0, 2.0**-9], [2.0**-9, 2.0**-9]]


@pytest.mark.parametrize("fmt", fp4.SCALES)
def test_group_amax_maps_inside_six(fmt):
    x = torch.randn(64, 256) * torch.logspace(-4, 2.5, 64).unsqueeze(1)  # no saturation
    q, scale = fp4.reference(x, 32, fmt)
    s = 2.0 ** (scale.double() - 127) if fmt == "ue8m0" else scale.double()
    amax = x.double().reshape(64, 8, 32).abs().amax(-1)
    assert (amax / s <= 6).all()
    if fmt == "ue8m0":  # the smallest such power of two: half of it would overflow 6
        assert (amax / (s / 2) > 6).all()


@pytest.mark.parametrize("fmt", fp4.SCALES)
@pytest.mark.parametrize("g", [16, 32])
def test_exact_values_round_trip(g, fmt):
    """Values already on the grid (e2m1 x scale) quantise and dequantise to themselves."""
    codes = torch.randint(0, 16, (5, 4 * g))
    codes[:, ::g] = 7  # each group reaches 6, so the scale is the one picked below
    vals = torch.tensor(E2M1)[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    if fmt == "ue8m0":
        s = 2.0 ** torch.randint(-20, 20, (5, 4, 1)).float()
    else:
        s = fp4.e4m3_values()[torch.randint(0, 120, (5, 4, 1))]
    x = (vals.reshape(5, 4, g) * s).reshape(5, 4 * g)
    q, scale = fp4.reference(x, g, fmt)
    x_back = back.reference(q, scale, g, torch.float32)
    assert torch.equal(x_back, x)


@pytest.mark.parametrize("fmt", fp4.SCALES)
def test_error_is_within_half_a_step(fmt):
    x = torch.randn(32, 512)
    q, scale = fp4.reference(x, 32, fmt)
    xb = back.reference(q, scale, 32, torch.float32).double()
    s = (2.0 ** (scale.double() - 127)) if fmt == "ue8m0" else scale.double()
    s = s.repeat_interleave(32, dim=1)
    v = x.double().abs() / s  # E2M1 steps: 0.5 below 2, 1 below 4, 2 above
    step = torch.where(v < 2, 0.5, torch.where(v < 4, 1.0, 2.0))
    assert ((xb - x.double()).abs() <= step / 2 * s + 1e-30).all()


# --- cast_back_fp4 reference ----------------------------------------------------------------


def test_cast_back_decodes_the_table_with_signs():
    q = torch.arange(256, dtype=torch.uint8).reshape(1, 256)  # every byte once
    got = back.reference(q, torch.full((1, 16), 127, dtype=torch.uint8), 32, torch.float32)
    lo = [(-1.0 if b & 8 else 1.0) * E2M1[b & 7] for b in range(256)]
    hi = [(-1.0 if b & 0x80 else 1.0) * E2M1[(b >> 4) & 7] for b in range(256)]
    want = torch.tensor([v for pair in zip(lo, hi, strict=True) for v in pair])
    assert torch.equal(got[0], want)
    assert torch.signbit(got[0, 16]).item()  # code 0x8 is -0.0


def test_cast_back_special_ue8m0_scales():
    q = torch.full((1, 16), 0x77, dtype=torch.uint8)  # 6.0 everywhere
    e = torch.tensor([[0, 255]], dtype=torch.uint8)  # TileKernels' decoding: 0.0 and +inf
    got = back.reference(q, e, 16, torch.float32)
    assert torch.equal(got[0, :16], torch.zeros(16))
    assert torch.equal(got[0, 16:], torch.full((16,), torch.inf))
    zero_codes = back.reference(torch.zeros(1, 8, dtype=torch.uint8), e[:, 1:], 16, torch.float32)
    assert torch.isnan(zero_codes).all()  # 0 * inf
    tiny = back.reference(q, torch.tensor([[1, 2]], dtype=torch.uint8), 16, torch.float32)
    assert torch.equal(tiny[0, :16], torch.full((16,), 6.0 * 2.0**-126))
    big = back.reference(q, torch.tensor([[254, 253]], dtype=torch.uint8), 16, torch.bfloat16)
    assert torch.isinf(big[0, :16]).all() and torch.isinf(big[0, 16:]).all()  # 6 * 2^126 > max
    q1 = torch.full((1, 8), 0x11, dtype=torch.uint8)  # 0.5 everywhere
    assert (
        back.reference(q1, torch.tensor([[254]], dtype=torch.uint8), 16, torch.float32)
        .eq(2.0**126)
        .all()
    )


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_cast_back_e4m3_is_exact_in_both_dtypes(out_dtype):
    q = torch.randint(0, 256, (4, 64), dtype=torch.uint8)
    s = fp4.e4m3_values()[torch.randint(0, 126, (4, 8))].to(torch.float8_e4m3fn)
    got = back.reference(q, s, 16, out_dtype)
    assert got.dtype == out_dtype
    codes = unpack(q).long()
    want = torch.tensor(E2M1, dtype=torch.float64)[codes & 7] * torch.where(codes >= 8, -1.0, 1)
    want = want * s.double().repeat_interleave(16, dim=1)
    assert torch.equal(got.double(), want)  # exact: at most 6 significant bits


# --- the kernels' arithmetic, emulated ----------------------------------------------------------


def fma32(a, b, c):
    """float32 fma: a*b + c is exact in float64 for every operand used below, then one rounding."""
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(F32)


def chain(half, base):
    """The kernel's _code_chain: base + e2m1 code of 2*half, via saturated pieces and FMAs."""
    u1 = np.clip(half, 0, 1).astype(F32)
    u2 = np.clip(fma32(half, F32(1), F32(-1)), 0, 1).astype(F32)
    u3 = np.clip(fma32(half, F32(1), F32(-2)), 0, 1).astype(F32)
    t = fma32(u1, F32(4), base)
    t = fma32(u2, F32(2), t)
    return fma32(u3, F32(1), t)


def _values_near_thresholds():
    thr = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6, 0.5, 1, 2, 4, 8], dtype=F32)
    bits = (thr.view(np.int32)[:, None] + np.arange(-300, 300)[None, :]).reshape(-1)
    v = np.concatenate(
        [bits.astype(np.int32).view(F32), np.random.default_rng(0).uniform(0, 9, 50000)]
    )
    return v.astype(F32)


def test_emulated_fma_rounding_gives_the_reference_codes():
    v = _values_near_thresholds()
    want = fp4.e2m1_codes(torch.from_numpy(v)).numpy()
    t = chain((v * F32(0.5)).astype(F32), np.full(v.shape, F32(fp4.C)))
    assert np.array_equal(t.view(np.uint32) - np.uint32(fp4.C_BITS), want)
    # The odd element's result (elements v) seeds the even one's: one float holds the byte.
    even = v[np.random.default_rng(1).permutation(v.size)]
    base = fma32(t, F32(16), F32(-15 * fp4.C))
    byte = chain((even * F32(0.5)).astype(F32), base).view(np.uint32) - np.uint32(fp4.C_BITS)
    assert np.array_equal(byte, fp4.e2m1_codes(torch.from_numpy(even)).numpy() | want << 4)


def test_emulated_e4m3_scale_search_matches_the_table_scan():
    vals = fp4.e4m3_values().numpy()
    b6 = (vals * 6).astype(F32).view(np.int32)
    amax = np.concatenate(
        [
            (np.arange(0, 0x7F80, 7, dtype=np.uint32) << 16).view(F32),  # bf16 magnitudes
            (b6[:, None] + np.arange(-20, 21)[None, :]).reshape(-1).view(F32),  # near 6 s
            np.random.default_rng(2).uniform(0, 3000, 20000).astype(F32),
        ]
    )
    approx = (amax * F32(1 / 6)).astype(F32) * F32(2.0**-120)
    lo = (approx.astype(F32).view(np.uint32) >> 20).astype(np.int64)

    def six_v(c):
        return ((c.astype(np.uint32) << 20).view(F32) * F32(6 * 2.0**120)).astype(F32)

    with np.errstate(over="ignore"):
        code = np.clip(lo + (six_v(lo) < amax) + (six_v(lo + 1) < amax), 1, 126)
    want = torch.searchsorted(torch.from_numpy(vals * 6), torch.from_numpy(amax)).clamp(max=125)
    assert np.array_equal(code, want.numpy() + 1)


def _rn32(fr: Fraction) -> Fraction:
    """Round a positive rational to the nearest float32 (ties to even), exactly (integers)."""
    p, q = fr.numerator, fr.denominator
    e = p.bit_length() - q.bit_length()  # 2^e <= p/q < 2^(e+1), after the fix-up
    if (p << max(-e, 0)) < (q << max(e, 0)):
        e -= 1
    shift = 23 - e  # p/q * 2^shift is in [2^23, 2^24)
    num, den = (p << shift, q) if shift >= 0 else (p, q << -shift)
    k, rem = divmod(num, den)
    if 2 * rem > den or (2 * rem == den and k % 2):
        k += 1
    return Fraction(k) / Fraction(2) ** shift


def _ulp32(f: Fraction) -> Fraction:
    """The float32 spacing at a positive (normal) value."""
    p, q = f.numerator, f.denominator
    e = p.bit_length() - q.bit_length()
    if (p << max(-e, 0)) < (q << max(e, 0)):
        e -= 1
    return Fraction(2) ** (e - 23)


def _signed_rn32(f: Fraction) -> Fraction:
    return _rn32(f) if f > 0 else -_rn32(-f) if f < 0 else f


def test_emulated_e4m3_division_is_correctly_rounded():
    """v/2 = fma(|x|, r_hi, RN(|x| r_lo)) == RN(|x| / (2s)) with r_lo = RN(fma(-r_hi, 2s, 1) r_hi),
    for any r_hi within 2 ulp of 1/(2s) (the kernel takes the hardware's approximation).

    Every bf16 mantissa (and some fp32 ones) against every E4M3 mantissa, at quotients across
    the E2M1 range: a scale's exponent only shifts everything.
    """
    mantissas = [Fraction(128 + i, 128) for i in range(128)]  # bf16
    rng = np.random.default_rng(3)
    mantissas += [Fraction(2**23 + int(i), 2**23) for i in rng.integers(0, 2**23, 60)]  # fp32
    bad = []
    for sm in range(8):
        den = Fraction(2 * (8 + sm), 8)  # 2 s, s in [1, 2)
        r0 = _rn32(1 / den)
        for k in (-2, -1, 0, 1, 2):
            r_hi = r0 + k * _ulp32(r0)
            residual = 1 - r_hi * den
            assert _signed_rn32(residual) == residual  # one FMA computes it exactly
            r_lo = _signed_rn32(residual * r_hi)
            for xm in mantissas:
                for ex in (-3, -1, 0, 1, 2):
                    a = xm * Fraction(2) ** ex
                    got = _rn32(a * r_hi + _signed_rn32(a * r_lo))
                    if got != _rn32(a / den):
                        bad.append((sm, k, xm, ex))
    assert not bad


# --- specs ------------------------------------------------------------------------------------


def test_specs_keys_names_and_constraints():
    assert len(fp4.SPEC.keys) == 12 and len(back.SPEC.keys) == 8
    key = {"dtype": "bfloat16", "group": "g32", "scale": "ue8m0"}
    assert fp4.SPEC.key_string(key) == "bf16,g32,ue8m0"
    assert fp4.SPEC.variant_name(key, {}) == "per_token_cast_fp4_bf16_g32_ue8m0_any"
    assert fp4.SPEC.constraints(key, {}) == {"N": 32}
    assert back.SPEC.constraints({**key, "group": "g16"}, {}) == {"K": 8}
    assert back.SPEC.key_string({"dtype": "float32", "group": "g16", "scale": "e4m3"}) == (
        "fp32,g16,e4m3"
    )
    for spec in (fp4.SPEC, back.SPEC):
        assert all(spec.supports(a, k, {}) for a in ("sm_70", "sm_100a") for k in spec.keys)
    with pytest.raises(ValueError, match="unsupported key"):
        fp4.factory(arch="sm_90a", dtype="float64", group="g32", scale="ue8m0")


# --- lowering smoke tests (need tilelang, no GPU) -------------------------------------------


@needs_tilelang
def test_lower_cast_uses_saturated_fmas_and_16_byte_loads():
    func = fp4.factory(arch="sm_100a", dtype="bfloat16", group="g32", scale="ue8m0")
    src = lower_source(func, "sm_100a", "fp4_test")
    assert "__saturatef" in src and "__fmaf_rn" in src and "__byte_perm" in src
    assert "__shfl_xor_sync" in src and "__launch_bounds__(128, 8)" in src
    assert src.count("*(uint4*)(w + ") == 2  # two 16-byte loads per unit, also on sm_100a
    assert "__fdiv" not in src and "__frcp" not in src  # ue8m0: no division at all
    func = fp4.factory(arch="sm_80", dtype="float16", group="g16", scale="e4m3")
    assert src.count("__fdividef") == 0 and "__fdividef" in lower_source(func, "sm_80", "fp4_e4m3")


@needs_tilelang
def test_lower_cast_back_stores_16_bytes():
    func = back.factory(arch="sm_80", dtype="bfloat16", group="g16", scale="ue8m0")
    src = lower_source(func, "sm_80", "fp4_back_test")
    assert "*(uint4*)" in src and "0x1p+126f" in src
