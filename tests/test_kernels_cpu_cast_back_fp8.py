"""CPU tests of kernels_py.quant.cast_back_fp8: the torch reference against independent
float64 math for every scale layout, round trips with the casts' references, the KernelSpec,
and lowering smoke tests (need tilelang, no GPU)."""

import inspect

import pytest

torch = pytest.importorskip("torch")

from _lowering import lower_source, needs_tilelang  # noqa: E402

from kernels_py.quant import cast_back_fp8 as cb  # noqa: E402
from kernels_py.quant import per_block_cast_fp8 as pb  # noqa: E402
from kernels_py.quant import per_token_cast_fp8 as pt  # noqa: E402

OUT = (torch.bfloat16, torch.float32)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _fp8(m, n):
    """Random e4m3 values over the whole range, NaN bytes (0x7F, 0xFF) excluded."""
    b = torch.randint(0, 256, (m, n), dtype=torch.uint8)
    b[(b & 0x7F) == 0x7F] = 0x42
    return b.view(torch.float8_e4m3fn)


def _scale(layout, m, n):
    shape = {
        "g128": (m, n // 128),
        "g64": (m, n // 64),
        "g32": (m, n // 32),
        "token": (m, 1),
        "block128": (-(-m // 128), -(-n // 128)),
    }[layout]
    # scales over a wide range, including ones whose products round in bf16 and fp32
    return torch.randn(shape) * torch.pow(2.0, torch.randint(-20, 20, shape).float())


def _independent(q, scale, layout, out_dtype):
    """Element by element index arithmetic; float64 products are exact, one float32 rounding."""
    m, n = q.shape
    rows = torch.arange(m).unsqueeze(1).expand(m, n)
    cols = torch.arange(n).unsqueeze(0).expand(m, n)
    if layout[0] == "g":
        s = scale[rows, cols // int(layout[1:])]
    elif layout == "token":
        s = scale[rows, torch.zeros_like(cols)]
    else:
        s = scale[rows // 128, cols // 128]
    return (q.double() * s.double()).float().to(out_dtype)


@pytest.mark.parametrize("out_dtype", OUT)
@pytest.mark.parametrize(
    "layout,m,n",
    [
        ("g128", 3, 128),
        ("g128", 130, 384),
        ("token", 1, 1),
        ("token", 37, 1000),
        ("block128", 1, 7),
        ("block128", 257, 300),
        ("g32", 5, 96),
        ("g64", 33, 320),
    ],
)
def test_reference_matches_float64(layout, m, n, out_dtype):
    q, scale = _fp8(m, n), _scale(layout, m, n)
    got = cb.reference(q, scale, layout, out_dtype)
    assert got.dtype == out_dtype and got.shape == (m, n)
    want = _independent(q, scale, layout, out_dtype)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))  # bits, -0.0 included


def test_reference_default_is_bf16_and_keeps_signed_zero():
    q = torch.tensor([[0x00, 0x80, 0x01, 0x81]], dtype=torch.uint8).view(torch.float8_e4m3fn)
    got = cb.reference(q, torch.tensor([[2.0]]), "token")
    assert got.dtype == torch.bfloat16
    assert got.float().tolist() == [[0.0, -0.0, 2**-8, -(2**-8)]]
    assert torch.signbit(got).tolist() == [[False, True, False, True]]


@pytest.mark.parametrize("group", [128, 64, 32, None])
def test_round_trip_per_token_cast(group):
    x = torch.randn(40, 512) * torch.logspace(-3, 3, 40).unsqueeze(1)
    q, scale = pt.reference(x, group)
    back = cb.reference(q, scale, f"g{group}" if group else "token", torch.float32)
    s = scale.repeat_interleave(group, 1) if group else scale
    assert ((back - x).abs() <= x.abs() * 2**-4 * 1.001 + s * 2**-10).all()


def test_round_trip_per_block_cast():
    x = torch.randn(300, 200) * 5
    q, scale = pb.reference(x)
    back = cb.reference(q, scale, "block128", torch.float32)
    s = cb.expand_scale(scale, 300, 200, "block128")
    assert ((back - x).abs() <= x.abs() * 2**-4 * 1.001 + s * 2**-10).all()
    # dequantising again gives the very same fp8 codes
    q2, scale2 = pb.reference(back)
    assert torch.equal(q2.view(torch.uint8), q.view(torch.uint8)) and torch.equal(scale2, scale)


# --- spec -----------------------------------------------------------------------------------


def test_spec_variants():
    spec = cb.SPEC
    names = [spec.variant_name(k, s) for k in spec.keys for s in spec.specs]
    assert len(names) == len(set(names)) == 10
    assert "cast_back_fp8_bf16_g128_any" in names and "cast_back_fp8_fp32_block128_any" in names
    assert [spec.key_string(k) for k in spec.keys] == [
        "bf16,g128",
        "bf16,token",
        "bf16,block128",
        "bf16,g32",
        "bf16,g64",
        "fp32,g128",
        "fp32,token",
        "fp32,block128",
        "fp32,g32",
        "fp32,g64",
    ]
    params = inspect.signature(spec.factory).parameters
    for key in spec.keys:
        assert set(key) <= set(params)
        assert spec.supports("sm_70", key, {}) and spec.supports("sm_100a", key, {})
        lay = key["layout"]
        want = {"N": int(lay[1:])} if lay[0] == "g" else {}
        assert spec.constraints(key, {}) == want


def test_factory_rejects_unknown_key():
    with pytest.raises(ValueError, match="unsupported key"):
        cb.factory(arch="sm_90a", out="float16", layout="g128")
    with pytest.raises(ValueError, match="unsupported key"):
        cb.factory(arch="sm_90a", out="bfloat16", layout="g16")


# --- lowering smoke tests -------------------------------------------------------------------


@needs_tilelang
def test_lower_g128_bf16_vector_path_only():
    src = lower_source(cb.factory(arch="sm_90a", out="bfloat16", layout="g128"), "sm_90a", "cb1")
    assert "__launch_bounds__(256, 5)" in src
    assert "*(fp8_e4_8_t*)(buf + " in src  # 8-byte loads of q
    assert "blockIdx.y) * 32)" in src  # TILE_ROWS rows per CTA
    assert "__tl_cvt_fp8x2_to_float2" in src and "__float22bfloat162_rn" in src
    assert "__fmul_rn" in src and "N % 8" not in src  # N % 128 == 0: no scalar path


@needs_tilelang
@pytest.mark.parametrize("out,layout,shift", [("bfloat16", "g32", 5), ("float32", "g64", 6)])
def test_lower_narrow_groups_vector_path_reads_the_vectors_group(out, layout, shift):
    """g32/g64: rows stay 16-byte aligned (N % 32 == 0), so only the vector path, with a
    column check (the CTA's 128 columns may pass N) and the scale of the vector's group."""
    src = lower_source(cb.factory(arch="sm_90a", out=out, layout=layout), "sm_90a", "cbg")
    assert src.count("tl::store_global_128(") == 1 and "N % " not in src
    assert f"(((int64_t)N) >> (int64_t){shift})" in src  # the scale row: N / group
    assert ") < N))" in src and "__fmul_rn" in src


@needs_tilelang
def test_lower_block128_fp32_sm100a_has_vector_and_scalar_paths():
    src = lower_source(
        cb.factory(arch="sm_100a", out="float32", layout="block128"), "sm_100a", "cb2"
    )
    assert "if (((N % 4) == 0))" in src or "if ((N % 4) == 0)" in src
    assert "__fmul_rn" in src
    # vector path: 4 fp32 leave in one explicit 16-byte store; scalar path: one fp32 each
    assert src.count("tl::store_global_128(") == 1 and "*(float4*)(x + " not in src
    assert "x[(" in src.split("tl::store_global_128(", 1)[1]


@needs_tilelang
@pytest.mark.parametrize("arch", ["sm_70", "sm_90a", "sm_100a"])
def test_lower_vector_stores_are_one_explicit_16_byte_store(arch):
    """TileLang's vector copy `*(uint4*)(x + ...)` became four 4-byte STGs in the SASS of
    NVRTC 12.9 / nvcc 13 (sm_75..sm_90a); the kernel stores each bf16 vector with one
    explicit st.global.v4 instead, of the 8 rounded bf16 viewed as 4 x uint32."""
    src = lower_source(cb.factory(arch=arch, out="bfloat16", layout="block128"), arch, "cb3")
    stores = src.split("tl::store_global_128(")
    assert len(stores) == 2  # one in the unrolled vector path, none elsewhere
    assert "*(uint4*)(x + " not in src and "*(uint4*)(xo_bits + 0)" in stores[1]
    assert "__float22bfloat162_rn" in stores[0]  # rounded before the store, not after
    # the scalar path (odd N) still writes bf16 one by one, under its own bounds checks
    assert "x[(" in stores[1] and "(bfloat16_t)" in stores[1]
