"""CPU tests of kernels_py.quant.per_channel_cast_fp8: the torch reference against independent
float64 math column by column (both scale modes; 0, 1, 7, 129 and 4001 rows; zero columns,
-0.0, huge and tiny values, e4m3 ties, ±Inf), the KernelSpec, and lowering smoke tests (need
tilelang, no GPU). Parity with TileKernels' reference: tests/test_parity_quant.py."""

import inspect
import math

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.quant import per_channel_cast_fp8 as pc  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
E4M3_MAX = 448.0
FLOOR = float(torch.tensor(1e-4, dtype=torch.float32))  # the amax floor, as a float32


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _pow2_ceil(s: float) -> float:
    """The smallest power of two >= s (s a positive normal float32), by exact float math."""
    p = 2.0 ** math.floor(math.log2(s))
    while p < s:
        p *= 2
    while p / 2 >= s:
        p /= 2
    return p


def _independent(x, round_sf=False):
    """Per-channel cast in float64 steps, one (128-row group, column) at a time."""
    m, n = x.shape
    groups = -(-m // 128)
    q = torch.empty(m, n, dtype=torch.float8_e4m3fn)
    scale = torch.empty(groups, n, dtype=torch.float32)
    for g in range(groups):
        rows = slice(g * 128, (g + 1) * 128)
        for j in range(n):
            col = x[rows, j].double()
            amax = max(col.abs().max().item(), FLOOR)
            # float64 quotients rounded to float32 are the IEEE float32 quotients; float64
            # products of two float32 are exact (one rounding to float32: the fp32 product)
            s = float(torch.tensor(amax / E4M3_MAX, dtype=torch.float64).float())
            if round_sf:
                s = _pow2_ceil(s) if math.isfinite(s) else s
                inv = 1.0 / s
            else:
                inv = float(torch.tensor(E4M3_MAX / amax, dtype=torch.float64).float())
            scale[g, j] = s
            y = (col * inv).float().clamp(-E4M3_MAX, E4M3_MAX)
            q[rows, j] = y.to(torch.float8_e4m3fn)
    return q, scale


def _edges(m: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Columns of very different ranges, then columns probing the edges."""
    cols = torch.logspace(-3, 3, n)
    x = torch.randn(m, n) * cols
    huge = torch.finfo(dtype).max
    if n > 6:
        x[:, 0] = 0.0  # all zero: the floor scale, q = 0
        x[:, 1] = -0.0  # e4m3 -0
        x[:, 2] = (x[:, 2].sign() * huge / 3).clamp(-huge, huge)  # near the dtype's max
        x[:, 3] = x[:, 3] * 1e-38  # subnormal in fp32, below the floor
        ties = torch.tensor([448.0, 1.0625, -1.0625, 17.0, -9.0, 0.0029296875, 1.1875, 272.0])
        x[:, 4] = ties.repeat(-(-m // 8))[:m]  # amax 448 (inv 1), values on e4m3 midpoints
        x[:, 5] = x[:, 5] * 3e-5  # below the floor, normal
    return x.to(dtype)


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("dtype", DTYPES.values())
@pytest.mark.parametrize("m,n", [(0, 8), (1, 1), (1, 16), (7, 9), (129, 40), (300, 13)])
def test_reference_matches_float64_bit_for_bit(dtype, m, n, round_sf):
    x = _edges(m, n, dtype)
    q, scale = pc.reference(x, round_sf=round_sf)
    assert q.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32
    assert q.shape == (m, n) and scale.shape == (-(-m // 128), n)
    q_want, scale_want = _independent(x, round_sf)
    assert torch.equal(scale, scale_want)
    assert torch.equal(q.view(torch.uint8), q_want.view(torch.uint8))


@pytest.mark.parametrize("round_sf", [False, True])
def test_reference_4001_rows_matches_float64(round_sf):
    x = _edges(4001, 7, torch.bfloat16)  # 32 groups, the last of 33 rows
    q, scale = pc.reference(x, round_sf=round_sf)
    q_want, scale_want = _independent(x, round_sf)
    assert scale.shape == (32, 7) and torch.equal(scale, scale_want)
    assert torch.equal(q.view(torch.uint8), q_want.view(torch.uint8))


def test_groups_are_128_rows_of_one_column():
    x = torch.ones(256, 3)
    x[127, 0] = 448.0 * 4  # group 0 of column 0 only
    x[128, 1] = -2.0  # group 1 of column 1 only
    q, scale = pc.reference(x)
    assert scale[0, 0] == 4.0 and scale[1, 0] == 1 / 448 and scale[0, 1] == 1 / 448
    assert scale[1, 1] == 2 / 448 and torch.equal(scale[:, 2], torch.full((2,), 1 / 448))
    assert q[0, 0].float() == 0.25 and q[127, 0].float() == 448.0 and q[0, 1].float() == 448.0
    assert q[129, 1].float() == 224.0 and q[128, 1].float() == -448.0


def test_zero_column_gets_floor_scale_and_zero_q():
    x = torch.zeros(130, 4, dtype=torch.bfloat16)
    x[:, 3] = torch.randn(130).to(torch.bfloat16)
    q, scale = pc.reference(x)
    floor = torch.tensor(FLOOR, dtype=torch.float32) / E4M3_MAX
    assert torch.equal(scale[:, :3], floor.expand(2, 3)) and (scale[:, 3] > floor).all()
    assert torch.equal(q[:, :3].float(), torch.zeros(130, 3))


def test_infinity_gives_an_inf_scale_and_zero_multiplier():
    """round_sf=False: a group holding +Inf has scale Inf and multiplier 448 / Inf = 0, so NaN
    at the Inf (Inf * 0) and ±0 elsewhere; the kernel does the same (its docstring)."""
    x = torch.randn(200, 2)
    x[5, 1] = float("inf")
    q, scale = pc.reference(x)
    assert scale[0, 1] == float("inf") and math.isfinite(scale[1, 1])
    assert q[5, 1].float().isnan() and (q[:128, 1].float().nan_to_num(0) == 0).all()
    assert torch.equal(q[:, 0].view(torch.uint8), pc.reference(x[:, :1])[0][:, 0].view(torch.uint8))


def test_dequantised_is_close():
    x = torch.randn(384, 256) * torch.logspace(-2, 2, 256)
    q, scale = pc.reference(x)
    s = scale.repeat_interleave(128, 0)
    err = (q.float() * s - x).abs()
    # e4m3: relative step 2^-3 (half of it for rounding); subnormals spaced 2^-9 of the scale
    assert (err <= x.abs() * 2**-4 * 1.001 + s * 2**-10).all()


# --- spec -----------------------------------------------------------------------------------


def test_spec_variants():
    spec = pc.SPEC
    names = [spec.variant_name(k, s) for k in spec.keys for s in spec.specs]
    assert names == [f"per_channel_cast_fp8_{d}_any" for d in ("bf16", "fp16", "fp32")]
    assert [spec.key_string(k) for k in spec.keys] == ["bf16", "fp16", "fp32"]
    params = inspect.signature(spec.factory).parameters
    for key in spec.keys:
        assert set(key) <= set(params)
        assert spec.supports("sm_70", key, {}) and spec.supports("sm_100a", key, {})
        assert spec.constraints(key, {}) == {}  # any M, N


def test_factory_rejects_unknown_dtype():
    with pytest.raises(ValueError, match="unsupported dtype"):
        pc.factory(arch="sm_90a", dtype="int8")


# --- lowering smoke tests -------------------------------------------------------------------


@needs_tilelang
def test_lower_bf16_is_vectorised_and_exact():
    src = lower_source(pc.factory(arch="sm_90a", dtype="bfloat16"), "sm_90a", "pc_test")
    assert "__launch_bounds__(256, 3)" in src
    assert "if ((N % 8) == 0)" in src  # the vector path and the element-wise one
    assert "*(uint4*)(x + " in src and "*(fp8_e4_8_t*)(q + " in src  # 16-byte loads, 8-byte stores
    # per column group: amax / 448 in each round_sf branch, and 448 / amax; none per element
    assert "__NV_SATFINITE, __NV_E4M3" in src and src.count("__fdiv_rn") == 6  # two paths
    assert "__fmul_rn" in src and "__syncthreads()" in src
    assert "__fdividef" not in src and "(fp8_e4_t)" not in src and "__fmaf_rn" not in src
    assert ">> (uint)23" in src and "(round_sf != 0)" in src


@needs_tilelang
def test_lower_fp32_sm100a_uses_16_byte_accesses():
    src = lower_source(pc.factory(arch="sm_100a", dtype="float32"), "sm_100a", "pc_test2")
    assert "__launch_bounds__(256, 2)" in src and "if ((N % 4) == 0)" in src
    assert "*(float4*)(x + " in src  # 16-byte, never 32-byte, accesses
    assert "*(fp8_e4_4_t*)(q + " in src and "(fp8_e4_t)" not in src
