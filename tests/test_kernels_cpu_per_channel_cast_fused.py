"""per_channel_cast_fused on the CPU: our reference against TileKernels 1.0.0's
(`tile_kernels.torch.per_channel_cast_fused`) byte for byte, for bf16 and fp32 rows gathered by
an index with -1 (zero) rows and repeats, and for FP8 rows cast back by their 128-column scales
first (both scale modes; 1, 7, 129 and 4001 source rows; zero rows, -0.0, huge and tiny values,
e4m3 ties); against per_channel_cast_fp8's reference of the gathered rows (fp16, indices past
T); the KernelSpec, the wrapper's launch and checks, and lowering (needs tilelang, no GPU)."""

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

m = importlib.import_module("kernels_py.quant.per_channel_cast_fused")
pc = importlib.import_module("kernels_py.quant.per_channel_cast_fp8")
op = importlib.import_module("tileaot.per_channel_cast_fused").per_channel_cast_fused
F8, F32, I32, BF16 = torch.float8_e4m3fn, torch.float32, torch.int32, torch.bfloat16
TOKENS = (1, 7, 129, 4001)


def _index(tokens: int, rows: int, seed: int, past: int = 0) -> torch.Tensor:
    """`rows` source indices into `tokens` rows: repeats, every fourth -1 (a zero row), and
    `past` of them ``>= tokens``."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, tokens, (rows,), generator=g, dtype=I32)
    idx[::4] = -1
    if past:
        idx[1 : 1 + 4 * past : 4] = tokens + torch.arange(past, dtype=I32)
    return idx


def _fp8(tokens: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Finite e4m3 rows (every code but NaN, -0 included) and their float32 scales: powers of
    two, other values and zeros."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 256, (tokens, n), generator=g, dtype=torch.int32)
    codes = torch.where((codes & 0x7F) == 0x7F, codes - 1, codes).to(torch.uint8)
    sf = torch.rand(tokens, n // 128, generator=g) * 10.0 ** torch.randint(-6, 4, (1,)).item()
    sf.view(-1)[::7] = torch.exp2(torch.randint(-20, 10, sf.view(-1)[::7].shape, generator=g))
    sf.view(-1)[3::11] = 0.0
    return codes.view(F8), sf


def _rows(tokens: int) -> tuple[int, ...]:
    return (16, 144, 4096) if tokens == 4001 else (16, 144)


@pytest.mark.parametrize("round_sf", [False, True], ids=["f32", "pow2"])
@pytest.mark.parametrize("dtype", [BF16, F32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("tokens", TOKENS)
def test_gather_matches_tile_kernels(tokens, dtype, round_sf):
    ref = tk("per_channel_cast_fused").per_channel_cast_fused
    for n in (640,) if tokens == 4001 else (640, 2048):
        x = _inputs(tokens, n, dtype, seed=tokens + n)
        for rows in _rows(tokens):
            idx = _index(tokens, rows, seed=rows + n)
            q, s = m.reference(x, idx, round_sf=round_sf)
            q_tk, s_tk = ref(x, 128, None, round_sf, idx)
            _same(q, q_tk, f"q, P={rows} N={n}")
            _same(s, s_tk, f"scale, P={rows} N={n}")


@pytest.mark.parametrize("round_sf", [False, True], ids=["f32", "pow2"])
@pytest.mark.parametrize("tokens", TOKENS)
def test_fp8_cast_back_matches_tile_kernels(tokens, round_sf):
    ref = tk("per_channel_cast_fused").per_channel_cast_fused
    n = 512 if tokens == 4001 else 1024
    x, sf = _fp8(tokens, n, seed=tokens)
    for rows in _rows(tokens):
        idx = _index(tokens, rows, seed=rows)
        q, s = m.reference(x, idx, sf, round_sf=round_sf)
        q_tk, s_tk = ref((x, sf), 128, 128, round_sf, idx)
        _same(q, q_tk, f"q, P={rows}")
        _same(s, s_tk, f"scale, P={rows}")


@pytest.mark.parametrize("round_sf", [False, True])
def test_reference_is_the_channel_cast_of_the_gathered_rows(round_sf):
    """fp16 (TileKernels' reference takes no fp16) and indices past T: zero rows."""
    x = _inputs(9, 40, torch.float16, seed=1)
    idx = _index(9, 200, seed=2, past=3)
    rows = torch.stack([x[i].float() if 0 <= i < 9 else torch.zeros(40) for i in idx.tolist()])
    q, s = m.reference(x, idx, round_sf=round_sf)
    q_pc, s_pc = pc.reference(rows, round_sf=round_sf)
    _same(q, q_pc, "q")
    _same(s, s_pc, "scale")
    x8, sf = _fp8(9, 256, seed=3)
    back = x8.float() * sf.repeat_interleave(128, 1)
    rows = torch.stack([back[i] if 0 <= i < 9 else torch.zeros(256) for i in idx.tolist()])
    ours, theirs = m.reference(x8, idx, sf, round_sf), pc.reference(rows, round_sf)
    for got, want in zip(ours, theirs, strict=True):
        _same(got, want, "fp8")
    q, s = m.reference(x[:0], idx[:5])  # no source rows: every row is zero
    assert q.shape == (5, 40) and not q.float().any() and s.shape == (1, 40)


def test_spec_tables():
    assert [m.SPEC.key_string(k) for k in m.SPEC.keys] == ["bf16", "fp16", "fp32", "e4m3"]
    with pytest.raises(ValueError, match="unsupported dtype"):
        m.factory(arch="sm_90a", dtype="int32")


def i32(*shape):
    return t(*shape, dtype=I32)


@pytest.mark.parametrize("dtype", [BF16, torch.float16, F32, F8])
@pytest.mark.parametrize("round_sf", [False, True])
def test_launch_arguments(fake, cpu_as_cuda, dtype, round_sf):
    x, idx = t(5, 256, dtype=dtype), i32(144)
    sf = t(5, 2, dtype=F32) if dtype == F8 else None
    q, s = op(x, idx, x_sf=sf, round_sf=round_sf)
    assert (q.shape, q.dtype, s.shape, s.dtype) == ((144, 256), F8, (2, 256), F32)
    (launch,) = fake.launches
    key = {BF16: "bf16", torch.float16: "fp16", F32: "fp32", F8: "e4m3"}[dtype]
    assert fake.by_handle[launch.handle] == ("per_channel_cast_fused", key)
    extra = {"x_sf": sf} if sf is not None else {}
    check_launch(launch, "per_channel_cast_fused", x=x, pos_to_token=idx, q=q, scale=s, **extra)
    assert launch.scalars == ((1.0,) if round_sf else (0.0,))


def test_no_output_elements_without_a_launch(fake, cpu_as_cuda):
    q, s = op(t(3, 64), i32(0))
    assert q.shape == (0, 64) and s.shape == (0, 64)
    q, s = op(t(3, 0), i32(16))
    assert q.shape == (16, 0) and s.shape == (1, 0)
    assert fake.launches == []


BAD = [
    (lambda: op(t(3, 64, dtype=torch.int32), i32(16)), TypeError, r"x"),
    (lambda: op(t(3, 64), t(16)), TypeError, r"pos_to_token"),
    (lambda: op(t(3, 64), i32(4, 4)), ValueError, r"pos_to_token"),
    (lambda: op(t(3, 64, dtype=F8), i32(16)), ValueError, r"x_sf"),
    (lambda: op(t(3, 64), i32(16), x_sf=t(3, 1, dtype=F32)), ValueError, r"x_sf"),
    (lambda: op(t(3, 64, dtype=F8), i32(16), x_sf=t(3, 0, dtype=F32)), ValueError, r"N % 128"),
    (lambda: op(t(3, 256, dtype=F8), i32(16), x_sf=t(3, 1, dtype=F32)), ValueError, r"x_sf"),
    (lambda: op(t(3, 256, dtype=F8), i32(16), x_sf=t(3, 2)), TypeError, r"x_sf"),
    (lambda: op(t(3, 64), i32(16), round_sf=1), TypeError, r"round_sf must be True or False"),
    (lambda: op(misaligned(3, 64), i32(16)), ValueError, r"x"),
    (
        lambda: op(t(3, 64), i32(16), out=(t(16, 64, dtype=F8), t(2, 64, dtype=F32))),
        ValueError,
        r"out",
    ),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


def test_too_many_rows(fake, cpu_as_cuda):
    idx = torch.empty(65535 * 128 + 1, dtype=I32, device="meta")
    with pytest.raises(ValueError, match="pos_to_token has 8388481 rows"):
        op(torch.empty(3, 64, dtype=BF16, device="meta"), idx)


@needs_tilelang
def test_lowers_for_every_default_arch():
    """Each key on each default arch: the index read, 16-byte vectors, the fp8 x_sf read."""
    for key in m.SPEC.keys:
        for arch, src in default_arch_sources(m.factory, "pccf", **key):
            assert "pos_to_token[" in src and ("x_sf[" in src) == (key["dtype"] == m.FP8), arch
