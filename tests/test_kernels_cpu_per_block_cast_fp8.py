"""CPU tests of kernels_py.quant.per_block_cast_fp8: the torch reference against independent
float64 math (both scale modes), the power-of-two scale's bit trick against exact math, the
KernelSpec, and lowering smoke tests (need tilelang, no GPU). Parity with TileKernels:
tests/test_parity_quant.py."""

import inspect
import math

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.quant import per_block_cast_fp8 as pb  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
E4M3_MAX = 448.0


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _pow2_ceil(s: float) -> float:
    """The smallest power of two >= s (s a positive normal float32), by exact float math."""
    p = 2.0 ** math.floor(math.log2(s))
    while p < s:  # log2 may round; fix up exactly
        p *= 2
    while p / 2 >= s:
        p /= 2
    return p


def _independent(x, round_sf=False):
    """Per-block cast in float64 steps, block by block (no padding, no broadcasting tricks)."""
    m, n = x.shape
    bm, bn = -(-m // 128), -(-n // 128)
    q = torch.empty(m, n, dtype=torch.float8_e4m3fn)
    scale = torch.empty(bm, bn, dtype=torch.float32)
    for i in range(bm):
        for j in range(bn):
            blk = x[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128].double()
            amax = max(blk.abs().max().item(), float(torch.tensor(1e-4, dtype=torch.float32)))
            # float64 quotients rounded to float32 are the IEEE float32 quotients, and float64
            # products of two float32 are exact (so one rounding to float32: the fp32 product)
            s = float(torch.tensor(amax / 448.0, dtype=torch.float64).float())
            if round_sf:
                s = _pow2_ceil(s)
                inv = 1.0 / s
            else:
                inv = float(torch.tensor(448.0 / amax, dtype=torch.float64).float())
            scale[i, j] = s
            y = (blk * inv).float().clamp(-E4M3_MAX, E4M3_MAX)
            q[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128] = y.to(torch.float8_e4m3fn)
    return q, scale


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("dtype", DTYPES.values())
@pytest.mark.parametrize("m,n", [(1, 1), (128, 128), (130, 257), (300, 1000), (5, 7168)])
def test_reference_matches_float64_bit_for_bit(dtype, m, n, round_sf):
    rows = torch.logspace(-3, 3, m).unsqueeze(1)  # blocks of very different ranges
    x = (torch.randn(m, n) * rows).to(dtype)
    q, scale = pb.reference(x, round_sf=round_sf)
    assert q.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32
    assert q.shape == (m, n) and scale.shape == (-(-m // 128), -(-n // 128))
    q_want, scale_want = _independent(x, round_sf)
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


# --- the power-of-two scale ------------------------------------------------------------------
# scale = bits((((bits(s) - 1) >> 23) + 1) << 23), inv = bits((254 << 23) - bits(scale))
# (kernels_py/quant/quotient.py), against exact math on every float32 exponent.


def test_pow2_scale_bit_trick_is_the_power_of_two_ceiling():
    from kernels_py.quant.quotient import reference_scale_and_inv

    exps = torch.arange(-14, 128, dtype=torch.float64)  # amax from 1e-4 to beyond 2^127
    mant = torch.tensor([1.0, 1.0 + 2**-23, 1.5, 2 - 2**-23])
    amax = (mant[None, :] * torch.pow(2.0, exps)[:, None]).float().flatten()
    amax = torch.cat([amax[torch.isfinite(amax)], torch.tensor([1e-4, 448.0, 3.3e38])])
    amax = amax.clamp(min=1e-4)
    scale, inv = reference_scale_and_inv(amax, 448.0, True)
    s = amax.double() / 448.0
    for a, sc, iv, exact in zip(
        amax.tolist(), scale.tolist(), inv.tolist(), s.float().tolist(), strict=True
    ):
        assert sc == _pow2_ceil(exact), a
        assert iv == 1.0 / sc, a  # exact: a power of two
    scale_f, inv_f = reference_scale_and_inv(amax, 448.0, False)
    assert torch.equal(scale_f, (amax.double() / 448.0).float())  # IEEE division
    assert torch.equal(inv_f, (448.0 / amax.double()).float())


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
    # per block: amax / 448 in each round_sf branch, and 448 / amax; none per element
    assert "__NV_SATFINITE, __NV_E4M3" in src and src.count("__fdiv_rn") == 3
    assert "__fmul_rn" in src and "tl::warp_reduce_max" in src
    assert "__fdividef" not in src and "(fp8_e4_t)" not in src and "__fmaf_rn" not in src
    # round_sf is a runtime scalar: the power-of-two path is a select per block
    assert ">> (uint)23" in src and "(round_sf != 0)" in src


@needs_tilelang
def test_lower_generic_fp32_sm100a_has_vector_and_scalar_paths():
    src = lower_source(pb.factory(arch="sm_100a", dtype="float32"), "sm_100a", "pb_test2")
    assert "if (((N % 4) == 0))" in src or "if ((N % 4) == 0)" in src
    assert "*(float4*)(x + " in src  # 16-byte, never 32-byte, accesses
    assert "*(fp8_e4_4_t*)(q + " in src and "(fp8_e4_t)" not in src
