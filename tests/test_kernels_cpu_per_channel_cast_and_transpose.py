"""per_channel_cast_and_transpose on the CPU: our reference against TileKernels 1.0.0's
(`tile_kernels.torch.cast(x, "e4m3", (G, 1), round_sf)`, its codes transposed: what its kernel
computes) byte for byte, for G = 32 and 128, both scale modes and bf16 tokens (zero rows, -0.0,
huge and tiny values, e4m3 ties); against an independent float64 computation (fp16); the
KernelSpec, the wrapper's launch and checks, and lowering (needs tilelang, no GPU)."""

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

m = importlib.import_module("kernels_py.quant.per_channel_cast_and_transpose")
op = importlib.import_module("tileaot.per_channel_cast_and_transpose")
op = op.per_channel_cast_and_transpose
F8, F32, BF16, F16 = torch.float8_e4m3fn, torch.float32, torch.bfloat16, torch.float16
TOKENS = (128, 256, 4096)  # TileKernels asks T % 128 == 0


@pytest.mark.parametrize("round_sf", [False, True], ids=["f32", "pow2"])
@pytest.mark.parametrize("group", [32, 128])
@pytest.mark.parametrize("tokens", TOKENS)
def test_matches_tile_kernels(tokens, group, round_sf):
    cast = tk("cast").cast
    for h in (64, 576) if tokens == 4096 else (64, 576, 2048):
        x = _inputs(tokens, h, BF16, seed=tokens + h + group)
        q, s = m.reference(x, group, round_sf=round_sf)
        q_tk, s_tk = cast(x, "e4m3", (group, 1), round_sf=round_sf)
        _same(q, q_tk.T.contiguous(), f"q, T={tokens} H={h}")
        _same(s, s_tk, f"scale, T={tokens} H={h}")
        assert q.shape == (h, tokens) and s.shape == (tokens // group, h)


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("group", [32, 128])
def test_reference_against_float64(group, round_sf):
    """fp16 tokens (TileKernels' reference takes none), 32-token multiples below 128."""
    x = _inputs(96 if group == 32 else 128, 40, F16, seed=group)
    q, s = m.reference(x, group, round_sf)
    x64 = x.double().view(-1, group, 40)
    amax = x64.abs().amax(dim=1).clamp(min=torch.tensor(1e-4, dtype=F32).double())
    want_s = (amax.float() / 448.0).double()
    if round_sf:
        want_s = torch.exp2(torch.ceil(torch.log2(want_s)))
        inv = 1.0 / want_s
    else:
        inv = (torch.full_like(amax.float(), 448.0) / amax.float()).double()
    y = (x64.float() * inv.float()[:, None, :]).clamp(-448, 448).view(-1, 40)
    _same(s, want_s.float(), "scale")
    _same(q, y.to(F8).T.contiguous(), "q")
    with pytest.raises(ValueError, match="not a multiple of group"):
        m.reference(x[:16], group)


def test_spec_tables():
    keys = [m.SPEC.key_string(k) for k in m.SPEC.keys]
    assert keys == ["bf16,g32", "bf16,g128", "fp16,g32", "fp16,g128"]
    assert m.SPEC.constraints({"dtype": "bfloat16", "group": "g32"}, {}) == {"T": 32, "H": 8}
    with pytest.raises(ValueError, match="unsupported dtype"):
        m.factory(arch="sm_90a", dtype="float32", group="g32")
    with pytest.raises(ValueError, match="unsupported group"):
        m.factory(arch="sm_90a", dtype="bfloat16", group="g64")


@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("group", [32, 128])
@pytest.mark.parametrize("round_sf", [False, True])
def test_launch_arguments(fake, cpu_as_cuda, dtype, group, round_sf):
    x = t(256, 72, dtype=dtype)
    q, s = op(x, group, round_sf=round_sf)
    assert (q.shape, q.dtype, s.shape, s.dtype) == ((72, 256), F8, (256 // group, 72), F32)
    (launch,) = fake.launches
    key = {BF16: "bf16", F16: "fp16"}[dtype] + f",g{group}"
    assert fake.by_handle[launch.handle] == ("per_channel_cast_and_transpose", key)
    check_launch(launch, "per_channel_cast_and_transpose", x=x, q=q, scale=s)
    assert launch.scalars == ((1.0,) if round_sf else (0.0,))


def test_no_elements_without_a_launch(fake, cpu_as_cuda):
    q, s = op(t(0, 64), 32)
    assert q.shape == (64, 0) and s.shape == (0, 64)
    q, s = op(t(128, 0))
    assert q.shape == (0, 128) and s.shape == (1, 0)
    assert fake.launches == []


BAD = [
    (lambda: op(t(128, 64, dtype=F32)), TypeError, r"x"),
    (lambda: op(t(128, 64, 2)), ValueError, r"x"),
    (lambda: op(t(128, 64), 64), ValueError, r"num_per_tokens must be 32 or 128"),
    (lambda: op(t(128, 64), 128.0), TypeError, r"num_per_tokens"),
    (lambda: op(t(96, 64)), ValueError, r"T = 96 tokens, not a multiple of num_per_tokens=128"),
    (lambda: op(t(128, 60)), ValueError, r"H % 8 == 0"),
    (lambda: op(t(128, 64), round_sf=1), TypeError, r"round_sf must be True or False"),
    (lambda: op(misaligned(128, 64)), ValueError, r"x"),
    (lambda: op(t(128, 64), out=(t(128, 64, dtype=F8), t(1, 64, dtype=F32))), ValueError, r"out"),
    (lambda: op(t(128, 64), out=(t(64, 128, dtype=F8), t(4, 64, dtype=F32))), ValueError, r"out"),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


def test_too_many_tokens(fake, cpu_as_cuda):
    x = torch.empty(65535 * 128 + 128, 64, dtype=BF16, device="meta")
    with pytest.raises(ValueError, match="T = 8388608 tokens"):
        op(x)


@needs_tilelang
def test_lowers_for_every_default_arch():
    """Each key on each default arch: 16-byte loads, the transposed codes' 16-byte stores."""
    for key in m.SPEC.keys:
        for arch, src in default_arch_sources(m.factory, "pcct", **key):
            assert "uint4*)(x +" in src and "fp8_e4_16_t*)(q +" in src, arch
            assert "__fdiv_rn" in src and "__nv_cvt_float2_to_fp8x2" in src, arch
