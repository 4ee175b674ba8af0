"""CPU tests of kernels_py.act (swiglu, swiglu_per_token_cast_fp8): the torch references
against independent float64 math, the clamp and weight rules, the KernelSpec tables, and
lowering smoke tests (tilelang, no GPU). Parity with TileKernels: tests/test_parity_quant.py."""

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.act import swiglu as sw  # noqa: E402
from kernels_py.act import swiglu_per_token_cast_fp8 as swq  # noqa: E402

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# One rounding of the output (half an ulp: 2^-9 bf16, 2^-12 fp16) plus fp32 slack; fp16
# subnormals (below 2^-14) are spaced 2^-24 apart.
RTOL = {torch.bfloat16: 2**-8, torch.float16: 2**-11, torch.float32: 1e-6}
ATOL = {torch.bfloat16: 1e-30, torch.float16: 2**-24, torch.float32: 1e-30}
E4M3_MAX = 448.0


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _silu_mul64(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    g, u = g.double(), u.double()
    return g * torch.sigmoid(g) * u


# --- swiglu ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES.values())
@pytest.mark.parametrize("shape", [(5, 2), (3, 14), (4, 2000), (2, 3, 256)])
def test_swiglu_reference_matches_float64(dtype, shape):
    x = (torch.randn(shape) * 4).to(dtype)
    h = shape[-1] // 2
    want = _silu_mul64(x[..., :h], x[..., h:])
    got = sw.reference(x)
    assert got.dtype == dtype and got.shape == (*shape[:-1], h)
    torch.testing.assert_close(got.double(), want, rtol=RTOL[dtype], atol=ATOL[dtype])


def test_swiglu_reference_extremes():
    # Gate far negative: exp(-g) overflows, silu -> -0 (not NaN); far positive: silu = g.
    g = torch.tensor([-1e4, -200.0, -88.0, 0.0, -0.0, 30.0, 1e4])
    x = torch.cat([g, torch.full_like(g, 2.0)]).unsqueeze(0)
    y = sw.reference(x)
    assert torch.isfinite(y).all()
    assert y[0, 0].item() == 0.0 and y[0, 6].item() == 2e4
    assert y[0, 5].item() == pytest.approx(60.0, rel=1e-6)
    assert (y[0, :2] == 0).all() and torch.signbit(y[0, :2]).all()  # -0: sign kept


# --- swiglu_per_token_cast_fp8: reference ---------------------------------------------------


def _activation64(x, weights=None, clamp=None):
    h = x.shape[1] // 2
    g, u = x[:, :h].double(), x[:, h:].double()
    if clamp is not None:
        g = torch.minimum(g, torch.tensor(clamp, dtype=torch.float64))
        u = u.clamp(-clamp, clamp)
    a = _silu_mul64(g, u)
    return a if weights is None else a * weights.double()[:, None]


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("clamp", [None, 1.5])
def test_fused_reference_matches_float64(weighted, clamp, round_sf):
    m, h = 6, 512
    x = (torch.randn(m, 2 * h) * torch.logspace(-2, 2, m).unsqueeze(1)).bfloat16()
    w = torch.rand(m) + 0.1 if weighted else None
    q, scale = swq.reference(x, w, clamp, round_sf=round_sf)
    assert (q.shape, q.dtype) == ((m, h), torch.float8_e4m3fn)
    assert (scale.shape, scale.dtype) == ((m, h // 128), torch.float32)
    a = _activation64(x, w, clamp).reshape(m, h // 128, 128)
    amax = a.abs().amax(-1).clamp(min=1e-4)
    if round_sf:  # a power of two in [amax / 448, 2 amax / 448), up to the activation's ulps
        assert torch.equal(scale.log2(), scale.log2().round())
        r = scale.double() / (amax / E4M3_MAX)
        assert ((r >= 1 - 1e-6) & (r < 2 * (1 + 1e-6))).all()
        return  # (a power-of-two scale leaves |q| < 448 at the amax; the bounds below are f32's)
    # fp32 activation vs float64: a few ulps; the scale inherits them.
    torch.testing.assert_close(scale.double(), amax / E4M3_MAX, rtol=1e-6, atol=0)
    # Dequantised: e4m3 keeps 3 mantissa bits (relative error <= 2^-4) and subnormals spaced
    # 2^-9 (absolute error <= 2^-10 in units of the scale).
    deq = q.double().reshape(m, h // 128, 128) * scale.double()[..., None]
    s = scale.double()[..., None]
    assert ((deq - a).abs() <= a.abs() * 2**-4 * 1.001 + s * 2**-10 * 1.001).all()
    # The element holding a group's amax maps to +-448 (unless the 1e-4 floor applies).
    at = a.abs().argmax(-1, keepdim=True)
    q_at = q.float().reshape(m, h // 128, 128).gather(-1, at)[a.abs().amax(-1) > 1e-4]
    assert q_at.numel() > 0 and torch.equal(q_at.abs(), torch.full_like(q_at, E4M3_MAX))


def test_fused_reference_clamp_rule():
    # Gate capped from above only; up clamped on both sides (DeepSeek-V3 swiglu_limit).
    h, limit = 128, 5.0
    x = torch.zeros(1, 2 * h)
    x[0, :5] = torch.tensor([10.0, -10.0, 1.0, 1.0, 4.5])  # gate
    x[0, h : h + 5] = torch.tensor([1.0, 1.0, -10.0, 10.0, 4.5])  # up
    x = x.bfloat16()
    a = _activation64(x, None, limit)[0]
    one = torch.ones((), dtype=torch.float64)
    assert a[0] == _silu_mul64(torch.tensor(limit), one)  # gate 10 -> 5
    assert a[1] == _silu_mul64(torch.tensor(-10.0), one)  # gate -10 untouched
    assert a[2] == _silu_mul64(one, torch.tensor(-limit))  # up -10 -> -5
    assert a[3] == _silu_mul64(one, torch.tensor(limit))  # up 10 -> 5
    q, scale = swq.reference(x, None, limit)
    q_free, scale_free = swq.reference(x, None, None)
    # Element 4 (untouched by the clamp) is the group's amax with and without the clamp.
    assert scale.item() == scale_free.item()
    assert scale.item() == pytest.approx(a[4].item() / E4M3_MAX, rel=1e-6)
    assert q[0, 4].float().item() == E4M3_MAX
    assert (q.float()[0, :4].abs() < q_free.float()[0, :4].abs()).tolist() == [1, 0, 1, 1]
    deq = (q.float() * scale).double()[0, :5]
    torch.testing.assert_close(deq, a[:5], rtol=2**-4, atol=0)


def test_fused_reference_weights_none_equals_ones():
    x = (torch.randn(4, 512) * 3).bfloat16()
    q0, s0 = swq.reference(x)
    q1, s1 = swq.reference(x, torch.ones(4))
    assert torch.equal(q0.view(torch.uint8), q1.view(torch.uint8)) and torch.equal(s0, s1)
    # Scaling a row's weight by 2 doubles its scales and leaves q unchanged (exact in fp32).
    w = torch.tensor([1.0, 2.0, 0.5, 4.0])
    q2, s2 = swq.reference(x, w)
    assert torch.equal(q2.view(torch.uint8), q0.view(torch.uint8))
    assert torch.equal(s2, s0 * w[:, None])


def test_fused_reference_zero_rows_floor_scale():
    x = torch.zeros(2, 512).bfloat16()
    x[1, :10] = 1.0  # up = 0 for the whole row: activation 0
    q, scale = swq.reference(x)
    floor = torch.tensor(1e-4, dtype=torch.float32) / E4M3_MAX
    assert torch.equal(scale, floor.expand_as(scale))
    assert torch.equal(q.float(), torch.zeros(2, 256))


# --- specs ----------------------------------------------------------------------------------


def test_specs_names_and_constraints():
    names = [
        spec.variant_name(key, sp)
        for spec in (sw.SPEC, swq.SPEC)
        for key in spec.keys
        for sp in spec.specs
    ]
    assert len(names) == len(set(names))
    assert "swiglu_bf16_h7168" in names and "swiglu_fp32_any" in names
    assert "swiglu_per_token_cast_fp8_bf16_any" in names
    assert [sw.SPEC.key_string(k) for k in sw.SPEC.keys] == ["bf16", "fp16", "fp32"]
    assert [swq.SPEC.key_string(k) for k in swq.SPEC.keys] == ["bf16"]
    bf16 = {"dtype": "bfloat16"}
    assert swq.SPEC.constraints(bf16, {}) == {"H": 128}
    assert swq.SPEC.constraints(bf16, {"H": 7168}) == {}
    assert sw.SPEC.constraints(bf16, {}) == {}
    for arch in ("sm_70", "sm_90a", "sm_100a"):
        assert sw.SPEC.supports(arch, bf16, {}) and swq.SPEC.supports(arch, bf16, {})


def test_factories_reject_bad_keys():
    with pytest.raises(ValueError, match="unsupported dtype"):
        sw.factory(arch="sm_90a", dtype="int8")
    with pytest.raises(ValueError, match="multiple of 8"):
        sw.factory(arch="sm_90a", dtype="bfloat16", H=1001)
    with pytest.raises(ValueError, match="unsupported dtype"):
        swq.factory(arch="sm_90a", dtype="float16")
    with pytest.raises(ValueError, match="multiple of 128"):
        swq.factory(arch="sm_90a", dtype="bfloat16", H=1000)


# --- lowering smoke tests (need tilelang, no GPU) -------------------------------------------


@needs_tilelang
def test_lower_swiglu_generic_vector_and_scalar_paths_exact_math():
    src = lower_source(sw.factory(arch="sm_100a", dtype="bfloat16"), "sm_100a", "swiglu_test")
    assert "if (((H % 8) == 0))" in src or "if ((H % 8) == 0)" in src
    assert "*(uint4*)(xf + " in src  # 16-byte loads on x's flat view, not 32-byte
    assert "expf(" in src and "__expf" not in src and "__fdiv_rn" in src


@needs_tilelang
@pytest.mark.parametrize(
    ("arch", "dtype", "H"),
    [
        ("sm_90a", "bfloat16", 7168),
        ("sm_90a", "bfloat16", 1408),
        ("sm_90a", "float32", None),
        ("sm_70", "float16", 2048),
    ],
)
def test_lower_swiglu_vector_stores_are_explicit_16_byte(arch, dtype, H):
    # TileLang's own `*(uint4*)(y + ...) = ...` store was split by NVRTC into 4-byte STGs;
    # each output vector must leave in one tl::store_global_128 (st.global.v4), issued once
    # per row in the unrolled row loop, and the vector path must write y no other way.
    func = sw.factory(arch=arch, dtype=dtype, H=H)
    src = lower_source(func, arch, "swiglu_stg_test")
    # Generic H: the vector branch (H % vec == 0) comes first, then the scalar one.
    vector_path, _, scalar_path = src.partition("\n  } else {\n")
    assert (scalar_path != "") == (H is None)
    y = "yf" if H is None or H % (sw.THREADS * 16 // sw.ITEMSIZE[dtype]) else "y"  # flat view
    assert vector_path.count(f"tl::store_global_128((&({y}[") == 1
    assert f"({y} + " not in vector_path  # no plain vector store left
    if H is None:  # the scalar path keeps element stores
        assert "store_global_128" not in scalar_path and f"{y}[" in scalar_path


@needs_tilelang
def test_lower_fused_static_has_exact_silu_and_one_multiply_per_element():
    func = swq.factory(arch="sm_90a", dtype="bfloat16", H=7168)
    src = lower_source(func, "sm_90a", "swiglu_fp8_test")
    assert "__NV_SATFINITE, __NV_E4M3" in src and "*(uint4*)(x + " in src
    # silu's IEEE division, then per group the scale (in both round_sf branches) and 448/amax
    assert src.count("__fdiv_rn") == 4 and "__fmul_rn" in src and "(round_sf != 0)" in src
    assert "expf(" in src and "__expf" not in src and "fast_rcp" not in src


@needs_tilelang
def test_lower_fused_generic_flat_pairs():
    """Generic H: (row, group) pairs on a 1-D grid (a (row, group tile) grid idles threads in
    each row's last tile unless the tile divides H / 128), each pair's row divided once in
    int32 (in an index TileLang widens the division to int64; it vectorises a thread's two into
    one int2), gate and up in 16-byte loads."""
    src = lower_source(swq.factory(arch="sm_90a", dtype="bfloat16"), "sm_90a", "swq_flat_test")
    assert "blockIdx.y" not in src
    pairs_per_thread = swq.FLAT_GROUPS * (swq.GROUP // swq.VEC) // swq.THREADS
    assert src.count(" / (H >> 7))") + src.count("/v__1.") == pairs_per_thread == 2
    assert "/ (((int64_t)" not in src and "% (((int64_t)" not in src
    assert src.count("*(uint4*)(x + ") == 2
