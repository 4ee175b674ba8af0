"""CPU tests of kernels_py.quant.per_block_cast_fp8: the torch reference against independent
float64 math, the kernel's division sequence against IEEE division (emulated exactly), the
KernelSpec, and lowering smoke tests (need tilelang, no GPU)."""

import inspect

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.quant import per_block_cast_fp8 as pb  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
E4M3_MAX = 448.0


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _independent(x):
    """Per-block cast in float64 steps, block by block (no padding, no broadcasting tricks)."""
    m, n = x.shape
    bm, bn = -(-m // 128), -(-n // 128)
    q = torch.empty(m, n, dtype=torch.float8_e4m3fn)
    scale = torch.empty(bm, bn, dtype=torch.float32)
    for i in range(bm):
        for j in range(bn):
            blk = x[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128].double()
            amax = max(blk.abs().max().item(), float(torch.tensor(1e-4, dtype=torch.float32)))
            # float64 quotients rounded to float32 are the IEEE float32 quotients
            s = torch.tensor(amax / 448.0, dtype=torch.float64).float()
            scale[i, j] = s
            y = (blk / s.double()).float().clamp(-E4M3_MAX, E4M3_MAX)
            q[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128] = y.to(torch.float8_e4m3fn)
    return q, scale


@pytest.mark.parametrize("dtype", DTYPES.values())
@pytest.mark.parametrize("m,n", [(1, 1), (128, 128), (130, 257), (300, 1000), (5, 7168)])
def test_reference_matches_float64_bit_for_bit(dtype, m, n):
    rows = torch.logspace(-3, 3, m).unsqueeze(1)  # blocks of very different ranges
    x = (torch.randn(m, n) * rows).to(dtype)
    q, scale = pb.reference(x)
    assert q.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32
    assert q.shape == (m, n) and scale.shape == (-(-m // 128), -(-n // 128))
    q_want, scale_want = _independent(x)
    assert torch.equal(scale, scale_want)
    assert torch.equal(q.view(torch.uint8), q_want.view(torch.uint8))


def test_zero_block_gets_floor_scale_and_zero_q():
    x = torch.zeros(200, 300, dtype=torch.bfloat16)
    x[150:, 260:] = torch.randn(50, 40).to(torch.bfloat16)  # only the last block is non-zero
    q, scale = pb.reference(x)
    floor = torch.tensor(1e-4, dtype=torch.float32) / 448.0
    assert torch.equal(scale[0], floor.expand(3)) and torch.equal(scale[1, :2], floor.expand(2))
    assert scale[1, 2] > floor
    assert torch.equal(q[:128].float(), torch.zeros(128, 300))
    assert torch.isfinite(q.float()).all()


def test_amax_maps_to_448_and_dequantised_is_close():
    x = torch.randn(256, 384) * torch.logspace(-2, 2, 256).unsqueeze(1)
    q, scale = pb.reference(x)
    s = scale.repeat_interleave(128, 0).repeat_interleave(128, 1)
    err = (q.float() * s - x).abs()
    # e4m3: relative step 2^-3 (half of it for rounding); subnormals spaced 2^-9 of the scale
    assert (err <= x.abs() * 2**-4 * 1.001 + s * 2**-10).all()
    blocks = x.view(2, 128, 3, 128).abs().amax(dim=(1, 3))
    at_max = (x.abs() == blocks.repeat_interleave(128, 0).repeat_interleave(128, 1)) & (x != 0)
    assert torch.equal(q.float()[at_max].abs(), torch.full((int(at_max.sum()),), E4M3_MAX))


# --- the kernel's division ------------------------------------------------------------------
# The kernel computes x / s (s = scale, the same for a whole block) as
#   r = RN(1/s); y0 = RN(x*r); y1 = fma(fma(-s, y0, x), r, y0); y = fma(fma(-s, y1, x), r, y1)
#   q = copysign(y, x)
# These tests emulate that sequence exactly in float64 and compare it with IEEE division.


def _fma32(a, b, c):
    """RN_float32(a * b + c) exactly, for float32 tensors (float64 products are exact)."""
    p, c64 = a.double() * b.double(), c.double()
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)  # TwoSum: s + err == p + c exactly
    r = s.float()
    d = s - r.double()  # exact
    nb = torch.nextafter(r, torch.where(d > 0, torch.inf, -torch.inf).float())
    # s exactly halfway between two floats and err != 0: the exact sum is past the midpoint
    mid = (d != 0) & (2 * d == nb.double() - r.double()) & (err != 0)
    return torch.where(mid & ((err > 0) == (d > 0)), nb, r)


def _kernel_division(x, s):
    r = (1.0 / s.double()).float()  # __frcp_rn: correctly rounded
    y0 = (x.double() * r.double()).float()  # __fmul_rn
    y1 = _fma32(_fma32(-s, y0, x), r, y0)
    y = _fma32(_fma32(-s, y1, x), r, y1)
    return torch.copysign(y, x)


def _fma32_sanity():
    a = torch.tensor([1 + 2**-12], dtype=torch.float32)
    # (1 + 2^-12)^2 - 1 = 2^-11 + 2^-24: an fma keeps the 2^-24 that a rounded product loses
    assert _fma32(a, a, torch.tensor([-1.0])).item() == 2**-11 + 2**-24
    assert (a * a - 1).item() == 2**-11


def _all_finite(dtype):
    v = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).float()
    return v[torch.isfinite(v)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_kernel_division_equals_ieee_division_on_every_value(dtype):
    _fma32_sanity()
    values = _all_finite(dtype)
    pool = values.abs()[values != 0]
    amaxes = torch.cat([pool[torch.randint(0, len(pool), (6,))], pool.max().reshape(1)])
    amaxes = torch.cat([amaxes, torch.tensor([1e-4, 1.0, 448.0, 1e-6])])
    for amax in amaxes:
        s = (torch.clamp(amax, min=1e-4).double() / 448.0).float()
        x = values[values.abs() <= amax]  # a block's values never exceed its amax
        got = _kernel_division(x, s.expand_as(x))
        want = x / s.expand_as(x)  # IEEE float32 division
        tiny = want.abs() < 2**-100  # e4m3 rounds these to ±0 either way (sign checked below)
        assert torch.equal(got[~tiny], want[~tiny]), float(amax)
        assert torch.equal(torch.signbit(got), torch.signbit(want)), float(amax)
        q_got = got.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
        q_want = want.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
        assert torch.equal(q_got, q_want), float(amax)


def test_kernel_division_equals_ieee_division_float32_and_near_midpoints():
    exps = torch.randint(-60, 120, (24,)).float()
    amaxes = torch.cat([(torch.rand(24) + 1) * torch.pow(2.0, exps), torch.tensor([3e38])])
    for amax in amaxes:
        s = (torch.clamp(amax, min=1e-4).double() / 448.0).float()
        x = (torch.rand(20000) * 2 - 1) * amax
        # values whose quotient lands on, or one ulp either side of, e4m3 rounding midpoints
        mids = torch.arange(-895, 896).float() / 2 * s
        mids = mids[mids.abs() <= amax]
        x = torch.cat([x, mids, torch.nextafter(mids, mids + 1), torch.nextafter(mids, mids - 1)])
        x = torch.cat([x, amax.reshape(1), -amax.reshape(1), torch.tensor([0.0, -0.0, -1e-40])])
        got = _kernel_division(x, s.expand_as(x))
        want = x / s.expand_as(x)
        tiny = want.abs() < 2**-100
        assert torch.equal(got[~tiny], want[~tiny]), float(amax)
        assert torch.equal(torch.signbit(got), torch.signbit(want)), float(amax)


# --- spec -----------------------------------------------------------------------------------


def test_spec_variants():
    spec = pb.SPEC
    names = [spec.variant_name(k, s) for k in spec.keys for s in spec.specs]
    assert len(names) == len(set(names)) == 12
    assert "per_block_cast_fp8_bf16_n7168" in names and "per_block_cast_fp8_fp32_any" in names
    assert [spec.key_string(k) for k in spec.keys] == ["bf16", "fp16", "fp32"]
    assert {} in [dict(s) for s in spec.specs]
    params = inspect.signature(spec.factory).parameters
    for key in spec.keys:
        for sp in spec.specs:
            assert set(key) | set(sp) <= set(params)
            assert spec.supports("sm_70", key, sp) and spec.supports("sm_100a", key, sp)
            assert spec.constraints(key, sp) == {}  # any M, N


def test_factory_rejects_unknown_dtype():
    with pytest.raises(ValueError, match="unsupported dtype"):
        pb.factory(arch="sm_90a", dtype="int8")


# --- lowering smoke tests -------------------------------------------------------------------


@needs_tilelang
def test_lower_static_bf16_is_vectorised_and_exact():
    src = lower_source(pb.factory(arch="sm_90a", dtype="bfloat16", N=7168), "sm_90a", "pb_test")
    assert "__launch_bounds__(256, 3)" in src
    assert "*(uint4*)(x + " in src  # 16-byte loads of x
    assert "*(fp8_e4_8_t*)(q + " in src  # 8-byte stores of q
    assert "__NV_SATFINITE, __NV_E4M3" in src and "__fdiv_rn" in src and "__frcp_rn" in src
    assert "__fmaf_rn" in src and "copysignf" in src and "tl::warp_reduce_max" in src
    assert "__fdividef" not in src and "(fp8_e4_t)" not in src


@needs_tilelang
def test_lower_generic_fp32_sm100a_has_vector_and_scalar_paths():
    src = lower_source(pb.factory(arch="sm_100a", dtype="float32"), "sm_100a", "pb_test2")
    assert "if (((N % 4) == 0))" in src or "if ((N % 4) == 0)" in src
    assert "*(float4*)(x + " in src  # 16-byte, never 32-byte, accesses
    assert "*(fp8_e4_4_t*)(q + " in src and "(fp8_e4_t)" not in src
