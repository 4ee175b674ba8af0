"""swiglu_per_channel_cast_and_transpose on the CPU: our reference against TileKernels 1.0.0's
(`tile_kernels.torch.swiglu_forward`, rounded to bf16 as its kernel stores the activation, then
`tile_kernels.torch.cast(a, "e4m3", (G, 1))`, codes transposed) byte for byte, for G = 32 and
128, both scale modes, with and without the clamp (zero rows, -0.0, large and tiny values);
the KernelSpec, the wrapper's launch and checks, and lowering (needs tilelang, no GPU)."""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, misaligned, refusals_test, t  # noqa: E402, F401
from _kernel_args import check_launch  # noqa: E402
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402
from test_parity_quant import _inputs, _same  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

OP = "swiglu_per_channel_cast_and_transpose"
m = importlib.import_module(f"kernels_py.act.{OP}")
pct = importlib.import_module("kernels_py.quant.per_channel_cast_and_transpose")
op = getattr(importlib.import_module(f"tileaot.{OP}"), OP)
F8, F32, BF16 = torch.float8_e4m3fn, torch.float32, torch.bfloat16


def _finite(tokens: int, cols: int, seed: int) -> torch.Tensor:
    """test_parity_quant's edge rows with |x| <= 1e15, so that gate * up stays finite (a
    non-finite activation has unspecified results), and every fourth row past the clamp."""
    x = _inputs(tokens, cols, F32, seed=seed).clamp(-1e15, 1e15)
    x[1::4] *= 8
    return x.to(BF16)


@pytest.mark.parametrize("clamp", [None, 7.0])
@pytest.mark.parametrize("round_sf", [False, True], ids=["f32", "pow2"])
@pytest.mark.parametrize("group", [32, 128])
@pytest.mark.parametrize("tokens", [128, 384])
def test_matches_tile_kernels(tokens, group, round_sf, clamp):
    swiglu, cast = tk("swiglu").swiglu_forward, tk("cast").cast
    for h in (64, 1024):
        x = _finite(tokens, 2 * h, seed=tokens + h + group)
        q, s = m.reference(x, group, clamp, round_sf)
        a = swiglu(x, swiglu_clamp_value=clamp).bfloat16()
        q_tk, s_tk = cast(a, "e4m3", (group, 1), round_sf=round_sf)
        _same(q, q_tk.T.contiguous(), f"q, T={tokens} H={h}")
        _same(s, s_tk, f"scale, T={tokens} H={h}")
        assert q.shape == (h, tokens) and s.shape == (tokens // group, h)


def test_reference_is_the_cast_of_swiglus_bf16_activation():
    x = _inputs(64, 80, BF16, seed=3)
    a = importlib.import_module("kernels_py.act.swiglu").reference(x, 2.0)
    assert a.dtype == BF16 and a.shape == (64, 40)
    for got, want in zip(m.reference(x, 32, 2.0, True), pct.reference(a, 32, True), strict=True):
        _same(got, want, "cast")


def test_spec_tables():
    assert [m.SPEC.key_string(k) for k in m.SPEC.keys] == ["bf16,g32", "bf16,g128"]
    assert m.SPEC.constraints({"dtype": "bfloat16", "group": "g128"}, {}) == {"T": 128, "H": 8}
    with pytest.raises(ValueError, match="unsupported dtype"):
        m.factory(arch="sm_90a", dtype="float16", group="g32")
    with pytest.raises(ValueError, match="unsupported group"):
        m.factory(arch="sm_90a", dtype="bfloat16", group="g64")


@pytest.mark.parametrize("group", [32, 128])
@pytest.mark.parametrize("clamp", [None, 7.0])
@pytest.mark.parametrize("round_sf", [False, True])
def test_launch_arguments(fake, cpu_as_cuda, group, clamp, round_sf):
    x = t(256, 144)
    q, s = op(x, group, clamp, round_sf=round_sf)
    assert (q.shape, q.dtype, s.shape, s.dtype) == ((72, 256), F8, (256 // group, 72), F32)
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == (OP, f"bf16,g{group}")
    check_launch(launch, OP, x=x, q=q, scale=s)
    limit = float("inf") if clamp is None else clamp
    assert launch.scalars == (limit, 1.0 if round_sf else 0.0)


def test_no_elements_without_a_launch(fake, cpu_as_cuda):
    q, s = op(t(0, 64), 32)
    assert q.shape == (32, 0) and s.shape == (0, 32)
    q, s = op(t(128, 0))
    assert q.shape == (0, 128) and s.shape == (1, 0)
    assert fake.launches == []


BAD = [
    (lambda: op(t(128, 64, dtype=torch.float16)), TypeError, r"x"),
    (lambda: op(t(128, 63)), ValueError, r"x"),
    (lambda: op(t(128, 64), 64), ValueError, r"num_per_tokens must be 32 or 128"),
    (lambda: op(t(96, 64)), ValueError, r"T = 96 tokens, not a multiple of num_per_tokens=128"),
    (lambda: op(t(128, 60)), ValueError, r"H % 8 == 0"),
    (lambda: op(t(128, 64), clamp="7"), TypeError, r"clamp must be a real number"),
    (lambda: op(t(128, 64), clamp=-1.0), ValueError, r"clamp must be > 0"),
    (lambda: op(t(128, 64), round_sf=1), TypeError, r"round_sf must be True or False"),
    (lambda: op(misaligned(128, 64)), ValueError, r"x"),
    (lambda: op(t(128, 64), out=(t(128, 32, dtype=F8), t(1, 32, dtype=F32))), ValueError, r"out"),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


@needs_tilelang
def test_lowers_for_every_default_arch():
    """Each key on each default arch: gate and up 16-byte loads, the accurate expf, the
    transposed codes' 16-byte stores."""
    for key in m.SPEC.keys:
        for arch, src in default_arch_sources(m.factory, "swpcct", **key):
            assert src.count("uint4*)(x +") == 2 and "expf(" in src and "__expf" not in src, arch
            assert "fp8_e4_16_t*)(q +" in src and "__nv_cvt_float2_to_fp8x2" in src, arch
