"""GPU tests of swiglu and swiglu_per_token_cast_fp8: every key x specialisation x generic
odd size against the torch references, outputs poisoned (NaN / 0xFF) before each call.

* swiglu: bit-exact against ``reference`` on the same CUDA tensors (the kernel performs
  torch's operations: libdevice ``expf``, IEEE division, one rounding). A first, looser check
  (one output ulp) separates a wrong kernel from a torch build whose ``exp`` differs.
* swiglu_per_token_cast_fp8: bit-exact against ``reference`` on the same CUDA tensors, for
  round_sf False and True (TileKernels' swiglu_forward_and_per_token_cast: libdevice ``expf``,
  IEEE division, x * RN(448 / amax); tests/test_parity_quant.py holds the reference to
  TileKernels'). As for swiglu, a looser first check (scales within 2^-16, codes within one
  e4m3 step) separates a wrong kernel from a torch build whose ``exp`` differs. Also bit for
  bit: weights=None equals weights=ones, a clamp above every |value| equals no clamp,
  doubling a row's weight doubles its scales and leaves its codes unchanged, zero groups give
  the 1e-4/448 scale and zero codes.

Each test checks which variant served it; the last one checks that together they exercised
every variant of these two ops built for this GPU.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

SEEN: set[str] = set()
OPS = ("swiglu", "swiglu_per_token_cast_fp8")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
F8 = torch.float8_e4m3fn
_SWIGLU = importlib.import_module("kernels_py.act.swiglu")
STATIC_H, ZOO_H = _SWIGLU.STATIC_H, _SWIGLU.ZOO_H


def _ops():
    sw = importlib.import_module("tileaot.swiglu").swiglu
    fq = importlib.import_module("tileaot.swiglu_per_token_cast_fp8")
    return sw, fq.swiglu_per_token_cast_fp8


def _reference(module: str):
    return importlib.import_module(f"kernels_py.act.{module}").reference


def _select(op: str, key: str, shapes: list[tuple[int, ...]]) -> str:
    """Name of the variant the runtime picks for these shapes on device 0."""
    from tileaot import _lib

    native = _lib.native()
    flat = tuple(d for s in shapes for d in s)
    return native.select(native.lookup(op, key), 0, flat)


def _randn(shape, dtype, scale=1.0):
    return (torch.randn(shape, device="cuda") * scale).to(dtype)


def _nan(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


# ---------------------------------------------------------------- swiglu
# (M, H): the static H (2048, 4096, 7168; bf16 also the zoo's 1408, 2816, 18432), generic H with
# 16-byte access (1400, 96; 1408 for fp16/fp32), generic H with scalar access (1001 always, 4100
# for 2-byte dtypes), tiles that don't divide M or H.
SW_SHAPES = [(1, 2048), (37, 4096), (129, 7168), (3, 1408), (5, 1001), (7, 4100), (300, 96)]
SW_SHAPES += [(3, 1400), (6, 2816), (2, 18432)]
# Every specialised size gets a case, so a size added to the kernel's lists is tested here too.
SW_SHAPES += [(3, h) for h in STATIC_H + ZOO_H if h not in {h_ for _, h_ in SW_SHAPES}]
# More row tiles than gridDim.y allows (65535 x 4 rows): rows must ride gridDim.x.
SW_SHAPES.append((262_147, 128))


@pytest.mark.parametrize("key", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("m,h", SW_SHAPES)
def test_swiglu(key, m, h):
    swiglu, _ = _ops()
    dtype = DTYPES[key]
    x = _randn((m, 2 * h), dtype, 4.0)
    x[0, :4] = torch.tensor([-100.0, 100.0, 0.0, -20.0])  # exp overflow / underflow, silu(0)
    y = _nan((m, h), dtype)
    name = _select("swiglu", key, [(m, 2 * h), (m, h)])
    SEEN.add(name)
    assert swiglu(x, out=y) is y
    torch.cuda.synchronize()
    ref = _reference("swiglu")(x)
    info = torch.finfo(dtype)
    torch.testing.assert_close(
        y, ref, rtol=info.eps, atol=info.tiny * info.eps, msg=lambda s: f"{name}: {s}"
    )
    bad = (_bits(y) != _bits(ref)).sum().item()
    assert bad == 0, (
        f"{name}: {bad} elements differ from torch's bit pattern by at most one ulp: the kernel "
        "is right, but this torch's exp is not libdevice expf (or its division not IEEE)"
    )


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def test_swiglu_leading_dims_and_allocation():
    swiglu, _ = _ops()
    x = _randn((2, 3, 2 * 2048), torch.bfloat16)
    y = swiglu(x)
    torch.cuda.synchronize()
    assert y.shape == (2, 3, 2048)
    assert torch.equal(y, _reference("swiglu")(x))


# ---------------------------------------------------------------- swiglu_per_token_cast_fp8
# (M, H): static H (2048, 4096, 7168), generic H (1408 = 11 groups, a partial block of 8
# groups; 256; 18432), M not a multiple of the 4-row tile.
FQ_SHAPES = [(1, 2048), (37, 7168), (130, 4096), (5, 1408), (300, 256), (3, 18432), (262_147, 128)]
SCALE_RTOL = 2**-16
MAX_OFF_FRACTION = 1e-3


def _ordinal(q: torch.Tensor) -> torch.Tensor:
    """e4m3 codes as integers ordered like their values (+0 and -0 both 0)."""
    b = q.view(torch.uint8).int()
    mag = b & 0x7F
    return torch.where(b >= 0x80, -mag, mag)


def _check_fp8(name, q, scale, q_ref, scale_ref):
    assert not torch.isnan(scale).any() and not torch.isnan(q.float()).any(), f"{name}: unwritten"
    torch.testing.assert_close(
        scale, scale_ref, rtol=SCALE_RTOL, atol=0, msg=lambda s: f"{name} scales: {s}"
    )
    off = (_ordinal(q) - _ordinal(q_ref)).abs()
    assert off.max().item() <= 1, f"{name}: an e4m3 code is {off.max().item()} steps off"
    n_off = (off > 0).sum().item()
    assert n_off <= MAX_OFF_FRACTION * q.numel() + 4, f"{name}: {n_off} codes one step off"
    # Then exactly: the kernel performs the reference's operations on the GPU.
    assert torch.equal(scale, scale_ref), f"{name}: scales differ in the last bits"
    assert n_off == 0 and torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), name


def _fused_inputs(m, h):
    x = _randn((m, 2 * h), torch.bfloat16, 3.0)
    x[0, :128] = 0  # a zero gate group: activation 0, the 1e-4 floor
    x[-1, h - 1] = 60.0  # a large activation saturating nothing (it is the amax)
    x[-1, -1] = 1e3
    return x


def _fused_out(m, h):
    q = torch.full((m, h), 0xFF, dtype=torch.uint8, device="cuda").view(F8)
    return q, _nan((m, h // 128), torch.float32)


@pytest.mark.parametrize("round_sf", [False, True], ids=["f32", "pow2"])
@pytest.mark.parametrize("weighted", [False, True], ids=["nw", "w"])
@pytest.mark.parametrize("clamp", [None, 7.0, 0.5], ids=["noclamp", "clamp7", "clamp0.5"])
@pytest.mark.parametrize("m,h", FQ_SHAPES)
def test_swiglu_per_token_cast_fp8(m, h, weighted, clamp, round_sf):
    _, fused = _ops()
    x = _fused_inputs(m, h)
    w = torch.rand(m, device="cuda") + 0.01 if weighted else None
    q, scale = _fused_out(m, h)
    name = _select("swiglu_per_token_cast_fp8", "bf16", [(m, 2 * h), (m,), (m, h), (m, h // 128)])
    SEEN.add(name)
    out = fused(x, w, clamp, round_sf=round_sf, out=(q, scale))
    torch.cuda.synchronize()
    assert out[0] is q and out[1] is scale
    q_ref, scale_ref = _reference("swiglu_per_token_cast_fp8")(x, w, clamp, round_sf)
    _check_fp8(name, q, scale, q_ref, scale_ref)
    floor = torch.tensor(1e-4, device="cuda") / torch.tensor(448.0, device="cuda")
    if round_sf:
        floor = torch.tensor(2.0**-22, device="cuda")  # 2.23e-7 rounded up to a power of two
    assert scale[0, 0] == floor and (q[0, :128].float() == 0).all(), f"{name}: zero group"


@pytest.mark.parametrize("h", [7168, 1408])
def test_swiglu_per_token_cast_fp8_exact_self_consistency(h):
    _, fused = _ops()
    m = 64
    x = _randn((m, 2 * h), torch.bfloat16, 3.0)  # no group near the 1e-4 floor
    q0, s0 = fused(x)
    q1, s1 = fused(x, torch.ones(m, device="cuda"))
    q2, s2 = fused(x, None, 1e30)  # a clamp nothing reaches
    w = torch.where(torch.arange(m, device="cuda") % 2 == 0, 2.0, 1.0)
    q3, s3 = fused(x, w)
    torch.cuda.synchronize()
    u8 = torch.uint8
    for q, s in ((q1, s1), (q2, s2)):
        assert torch.equal(q.view(u8), q0.view(u8)) and torch.equal(s, s0)
    assert torch.equal(q3.view(u8), q0.view(u8)) and torch.equal(s3, s0 * w[:, None])


def test_swiglu_per_token_cast_fp8_runs_on_the_callers_stream():
    _, fused = _ops()
    x_src = _fused_inputs(256, 2048)
    x = torch.full_like(x_src, float("nan"))
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # a launch on another stream would read the NaNs
        x.copy_(x_src)
        q, scale = fused(x)
    side.synchronize()
    _check_fp8("stream", q, scale, *_reference("swiglu_per_token_cast_fp8")(x_src))


# ---------------------------------------------------------------- coverage
def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised(OPS, SEEN)
