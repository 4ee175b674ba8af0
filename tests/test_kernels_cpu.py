"""CPU tests of kernels_py: torch references against independent float64 math, and the
KernelSpec tables. No GPU; tilelang only for the lowering smoke tests (skipped without it)."""

import inspect

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py import all_specs  # noqa: E402
from kernels_py.ceildiv import ceildiv  # noqa: E402
from kernels_py.gemm import gemm  # noqa: E402
from kernels_py.norm import rms_norm  # noqa: E402
from kernels_py.quant import per_token_cast_fp8 as fp8  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# Output rounding of each dtype (half an ulp is 2^-9 for bf16, 2^-12 for fp16), with slack.
RTOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-5}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --- rms_norm -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES.values())
@pytest.mark.parametrize("n", [1, 7, 128, 1000])
def test_rms_norm_reference_matches_float64(dtype, n):
    x = torch.randn(5, n).to(dtype)
    w = (1 + 0.1 * torch.randn(n)).to(dtype)
    eps = 1e-6
    x64, w64 = x.double(), w.double()
    want = x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + eps) * w64
    got = rms_norm.reference(x, w, eps)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), want, rtol=RTOL[dtype], atol=1e-5)


def test_rms_norm_row_layout():
    """The sizes that fitted before keep their exact layout (and code); the others are padded
    to whole thread x vector tiles with ~32 values per thread; N % vec != 0 is refused."""
    for n in rms_norm.STATIC_N:
        for itemsize in (2, 4):
            vec = 16 // itemsize
            assert rms_norm.row_layout(n, vec) == (rms_norm._row_threads(n, vec), n)
    assert rms_norm.row_layout(2880, 8) == (128, 3072)
    assert rms_norm.row_layout(5376, 8) == (128, 6144)  # exact would be 32 threads x 168
    assert rms_norm.row_layout(128, 8) == (32, 256)
    assert rms_norm.row_layout(1536, 8) == (64, 1536)
    for n in (*rms_norm.STATIC_N, *rms_norm.ZOO_N, 5376, 4104, 8):
        threads, padded = rms_norm.row_layout(n, 8)
        assert padded >= n and padded % (threads * 8) == 0 and threads & (threads - 1) == 0
        assert 32 <= threads <= 1024 and padded // threads <= rms_norm.MAX_PER_THREAD
        assert threads == 32 or padded - n < padded // 2  # no idle half of the block
    with pytest.raises(ValueError, match="multiple of 8"):
        rms_norm.row_layout(2884, 8)


def test_rms_norm_reference_zero_row_is_zero():
    got = rms_norm.reference(torch.zeros(2, 64), torch.ones(64), 1e-6)
    assert torch.equal(got, torch.zeros(2, 64))


# --- gemm -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gemm_reference_matches_float64(dtype):
    a = torch.randn(33, 72).to(dtype)
    b = torch.randn(40, 72).to(dtype)
    want = a.double() @ b.double().T
    got = gemm.reference(a, b)
    assert got.dtype == dtype and got.shape == (33, 40)
    torch.testing.assert_close(got.double(), want, rtol=RTOL[dtype], atol=1e-2)


# --- per_token_cast_fp8 ---------------------------------------------------------------------

E4M3_MAX = 448.0


def _groups(x, group_size):
    m, n = x.shape
    gs = n if group_size is None else group_size
    return x.float().reshape(m, n // gs, gs)


@pytest.mark.parametrize("group_size", [128, None])
def test_fp8_zero_rows_give_floor_scale_and_zero_q(group_size):
    x = torch.zeros(3, 256, dtype=torch.bfloat16)
    x[1] = torch.randn(256).to(torch.bfloat16)
    q, scale = fp8.reference(x, group_size)
    floor = torch.tensor(1e-4, dtype=torch.float32) / 448.0
    assert q.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32
    assert torch.equal(scale[0], floor.expand_as(scale[0]))
    assert torch.equal(scale[2], floor.expand_as(scale[2]))
    assert torch.equal(q[0].float(), torch.zeros(256))
    assert torch.equal(q[2].float(), torch.zeros(256))
    assert torch.isfinite(q.float()).all() and torch.isfinite(scale).all()


@pytest.mark.parametrize("dtype", DTYPES.values())
@pytest.mark.parametrize("group_size", [128, None])
def test_fp8_dequantised_is_close_and_amax_maps_to_448(dtype, group_size):
    x = (torch.randn(6, 512) * torch.logspace(-3, 3, 6).unsqueeze(1)).to(dtype)
    q, scale = fp8.reference(x, group_size)
    groups = 4 if group_size else 1
    assert q.shape == x.shape and scale.shape == (6, groups)

    xg, qg, s = _groups(x, group_size), _groups(q, group_size), scale.unsqueeze(-1)
    # e4m3: 3 mantissa bits (relative step 2^-3, half of it for rounding) and subnormals
    # spaced 2^-9 (absolute error up to 2^-10 in units of the scale).
    err = (qg * s - xg).abs()
    assert (err <= xg.abs() * 2**-4 * 1.001 + s * 2**-10).all()

    amax_at = xg.abs().argmax(dim=-1, keepdim=True)
    q_at_amax = qg.gather(-1, amax_at)
    assert torch.equal(q_at_amax.abs(), torch.full_like(q_at_amax, E4M3_MAX))
    assert torch.equal(q_at_amax.sign(), xg.gather(-1, amax_at).sign())
    # IEEE fp32 division, independently: a float64 quotient rounded once more to float32 is
    # the correctly rounded float32 quotient (53 >= 2 * 24 + 2 bits).
    want = (xg.abs().amax(-1, keepdim=True).double() / E4M3_MAX).float()
    assert torch.equal(s, want)


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("group_size", [32, 64, 128, None])
def test_fp8_reference_is_tilekernels_multiplier_math(group_size, round_sf):
    """q = RN(x * inv) with inv = RN(448 / amax) (or 1 / scale, scale = the power-of-two
    ceiling of amax / 448), in independent float64 steps (products of two float32 are exact
    in float64, so one rounding to float32 is the float32 product)."""
    x = (torch.randn(6, 512) * torch.logspace(-6, 6, 6).unsqueeze(1)).bfloat16()
    q, scale = fp8.reference(x, group_size, round_sf=round_sf)
    xg = _groups(x, group_size).double()
    amax = xg.abs().amax(-1, keepdim=True).clamp(min=float(torch.tensor(1e-4)))
    s = (amax / E4M3_MAX).float().double()
    if round_sf:
        s = torch.pow(2.0, torch.ceil(torch.log2(s)))  # s >= 2^-23: log2 exact at powers
        inv = 1.0 / s
    else:
        inv = (E4M3_MAX / amax).float().double()
    assert torch.equal(scale.unsqueeze(-1).double(), s)
    want = (xg * inv).float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    assert torch.equal(_groups(q.view(torch.uint8), group_size), want.view(torch.uint8).float())


def test_fp8_reference_rounds_to_nearest_even():
    # 1.0625 lies halfway between the e4m3 values 1.0 and 1.125: ties go to the even 1.0;
    # 1.1875 lies between 1.125 and 1.25: ties go to the even 1.25.
    x = torch.zeros(1, 128)
    x[0, :3] = torch.tensor([448.0, 1.0625, 1.1875])
    q, scale = fp8.reference(x, 128)
    assert scale.item() == 1.0
    assert q[0, :3].float().tolist() == [448.0, 1.0, 1.25]


# --- specs ----------------------------------------------------------------------------------


def _variants(spec):
    return [(key, sp) for key in spec.keys for sp in spec.specs]


def test_specs_have_generic_variant_and_unique_names():
    specs = all_specs()
    ops = [s.op for s in specs]
    assert ops[:3] == ["rms_norm", "per_token_cast_fp8", "gemm"] and len(set(ops)) == len(ops)
    names = [s.variant_name(key, sp) for s in specs for key, sp in _variants(s)]
    assert len(names) == len(set(names))
    for spec in specs:
        assert {} in [dict(sp) for sp in spec.specs], spec.op
        assert len({spec.key_string(k) for k in spec.keys}) == len(spec.keys)


def test_factories_accept_every_key_and_spec_name():
    for spec in all_specs():
        params = inspect.signature(spec.factory).parameters
        assert "arch" in params
        for key, sp in _variants(spec):
            assert set(key) | set(sp) <= set(params), (spec.op, key, sp)


def test_supports_and_constraints():
    key_bf16, key_fp16 = {"dtype": "bfloat16"}, {"dtype": "float16"}
    assert not gemm.SPEC.supports("sm_75", key_bf16, {})
    assert gemm.SPEC.supports("sm_70", key_fp16, {})
    assert gemm.SPEC.supports("sm_90a", key_bf16, {"N": 4096, "K": 4096})
    assert gemm.SPEC.constraints(key_bf16, {}) == {"N": 8, "K": 8}
    assert gemm.SPEC.constraints(key_bf16, {"N": 4096, "K": 4096}) == {}
    g128, token = {"dtype": "bfloat16", "group": "g128"}, {"dtype": "bfloat16", "group": "token"}
    assert fp8.SPEC.constraints(g128, {}) == {"N": 128}
    assert fp8.SPEC.supports("sm_90a", g128, {"N": 7168})
    assert not fp8.SPEC.supports("sm_90a", token, {"N": 7168})
    g32, g64 = ({"dtype": "bfloat16", "group": g} for g in ("g32", "g64"))
    assert fp8.SPEC.constraints(g32, {}) == {"N": 32} and fp8.SPEC.constraints(g64, {}) == {"N": 64}
    assert not fp8.SPEC.supports("sm_90a", g32, {"N": 7168})  # generic only


# --- lowering smoke tests (need tilelang, no GPU) -------------------------------------------


@needs_tilelang
def test_lower_gemm_sm90a_uses_wgmma():
    src = lower_source(gemm.factory(arch="sm_90a", dtype="bfloat16"), "sm_90a", "gemm_test")
    assert "wgmma" in src and "tma_load" in src


@needs_tilelang
def test_lower_fp8_uses_saturating_rn_cast_and_ieee_division():
    func = fp8.factory(arch="sm_90a", dtype="bfloat16", group="g128", N=4096)
    src = lower_source(func, "sm_90a", "fp8_test")
    # per group: amax / 448 in each round_sf branch, and 448 / amax; none per element
    assert "__NV_SATFINITE, __NV_E4M3" in src and src.count("__fdiv_rn") == 3
    assert "__fmul_rn" in src and "__fdividef" not in src and "__fmaf_rn" not in src
    assert ">> (uint)23" in src and "(round_sf != 0)" in src  # round_sf: a runtime select
    func = fp8.factory(arch="sm_80", dtype="float32", group="token")
    src = lower_source(func, "sm_80", "fp8_test2")
    # the per-row divisions (3) in each of the vector and scalar paths
    assert src.count("__fdiv_rn") == 6 and ">> (uint)23" in src and "__fmul_rn" in src


@needs_tilelang
@pytest.mark.parametrize("dtype,group,lanes", [("bfloat16", "g32", 4), ("float32", "g64", 16)])
def test_lower_fp8_narrow_groups_shuffle_inside_the_group(dtype, group, lanes):
    """g32/g64: the |x| max stays inside a group's lanes (the first xor offset is half of
    them), the scale column is the group's, and the divisions are per group as for g128."""
    src = lower_source(fp8.factory(arch="sm_80", dtype=dtype, group=group), "sm_80", "fp8_g")
    assert f"({lanes} >> (k + 1))" in src and src.count("__fdiv_rn") == 3
    assert f"(((int64_t)N) >> (int64_t){_log2(int(group[1:]))})" in src  # G = N / group
    assert "__NV_SATFINITE, __NV_E4M3" in src and "__fmul_rn" in src


def _log2(v: int) -> int:
    return v.bit_length() - 1


@needs_tilelang
def test_lower_rms_norm_generic_has_vector_and_scalar_paths():
    src = lower_source(rms_norm.factory(arch="sm_80", dtype="float16"), "sm_80", "rms_test")
    assert "if (((N % 8) == 0))" in src or "if ((N % 8) == 0)" in src
    assert "uint4" in src


# --- ceildiv (launch and loop extents) ------------------------------------------------------


def test_ceildiv_of_ints():
    assert [ceildiv(None, n, 4) for n in (0, 1, 3, 4, 5, 8, 9)] == [0, 1, 1, 1, 2, 2, 3]


@needs_tilelang
def test_ceildiv_is_a_truncating_division_with_tilelangs_value():
    """A TIR Div (LowerIntrin leaves it a division; T.ceildiv's FloorDiv becomes a shift that
    makes the pre-codegen Simplify slow), equal to T.ceildiv for every size >= 0."""
    import tilelang.language as T
    from tilelang import tvm

    tirx = tvm.tirx
    n = tirx.Var("n", "int32")
    ours, theirs = ceildiv(T, n, 128), T.ceildiv(n, 128)
    assert isinstance(ours, tirx.Div) and isinstance(theirs, tirx.FloorDiv)
    analyzer = tvm.arith.Analyzer()
    for size in (0, 1, 127, 128, 129, 4096, 2**31 - 128):
        values = [
            analyzer.simplify(tirx.stmt_functor.substitute(e, {n: size})) for e in (ours, theirs)
        ]
        assert [int(v) for v in values] == [-(-size // 128)] * 2
