"""GPU tests of per_channel_cast_fused against kernels_py.quant.per_channel_cast_fused.reference
and TileKernels' reference.

Every key (bf16, fp16, fp32 rows; e4m3 rows with their 128-column fp32 scales) on odd sizes:
P not a multiple of 128 (and TileKernels' P % 16 == 0), N not a multiple of the 16-byte vector
(float keys), one source row, zero source rows, indices -1 (zero rows), repeated and past T
(zero rows too), columns of very different magnitudes, saturating values, -0.0 and tiny
values. Outputs are poisoned (0xFF bytes, an e4m3 NaN; NaN scales) before each call; q bytes
and scales must be bit-exact, for round_sf False and True. Also: the MoE path on TileKernels'
get_fused_mapping index at a model size against tile_kernels.torch's reference, the
allocating call, stream order, and every variant built for this GPU exercised.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream, selected

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "per_channel_cast_fused"
F8 = torch.float8_e4m3fn
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "e4m3": F8}
SHAPES = [  # (T, P, N); e4m3 keys round N up to a multiple of 128
    (1, 16, 128),
    (7, 9, 9),
    (129, 144, 384),
    (300, 1000, 257),
    (4001, 4096, 136),
    (256, 128, 7168),
    (0, 16, 256),
    (3, 2, 8200),
]
SEEN: set[str] = set()


def _inputs(t: int, p: int, n: int, key: str):
    """(x, x_sf or None, pos_to_token) for a key: every fourth index -1, two past T."""
    g = torch.Generator(device="cuda").manual_seed(t * 10007 + p * 31 + n)
    mag = torch.pow(10.0, torch.randint(-4, 4, (1, n), device="cuda", generator=g).float())
    x = torch.randn(t, n, device="cuda", generator=g) * mag
    if t > 0 and n > 2:
        x[:, 0] = 0
        x[-1, 2] = 6e4 if key == "fp16" else 1e5
        x[-1, -1] = -0.0
        x[0, 1] = -1e-30 if key != "fp16" else -1e-7
    pos = torch.randint(-1, max(t, 1), (p,), device="cuda", generator=g, dtype=torch.int32)
    pos[::4] = -1
    if p > 6:
        pos[1], pos[5] = t, t + 100  # past T: zero rows
    if key != "e4m3":
        return x.to(DTYPES[key]), None, pos
    x_sf = torch.rand(t, n // 128, device="cuda", generator=g) + 1e-3
    return (x / 16).clamp(-448, 448).to(F8), x_sf, pos


def _run(x, x_sf, pos, key: str, round_sf: bool):
    import tileaot

    p, n = pos.shape[0], x.shape[1]
    q = torch.full((p, n), 0xFF, dtype=torch.uint8, device="cuda").view(F8)
    scale = torch.full((-(-p // 128), n), float("nan"), device="cuda")
    shapes = [tuple(x.shape), *([tuple(x_sf.shape)] if x_sf is not None else []), (p,)]
    name = selected(OP, key, [*shapes, (p, n), tuple(scale.shape)])
    SEEN.add(name)
    got = tileaot.per_channel_cast_fused(x, pos, x_sf=x_sf, round_sf=round_sf, out=(q, scale))
    assert got[0] is q and got[1] is scale
    torch.cuda.synchronize()
    return q, scale, name


def _assert_same(got, want, name: str) -> None:
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        bad = int((a.contiguous().view(torch.uint8) != b.contiguous().view(torch.uint8)).sum())
        assert bad == 0, f"{name}: {bad} bytes differ"


def _reference(x, pos, x_sf, round_sf):
    from kernels_py.quant import per_channel_cast_fused as m

    return m.reference(x, pos, x_sf, round_sf)


@pytest.mark.parametrize("round_sf", [False, True])
@pytest.mark.parametrize("key", DTYPES)
@pytest.mark.parametrize("t,p,n", SHAPES)
def test_per_channel_cast_fused(key, t, p, n, round_sf):
    if key == "e4m3":
        n = -(-n // 128) * 128
    x, x_sf, pos = _inputs(t, p, n, key)
    q, scale, name = _run(x, x_sf, pos, key, round_sf)
    _assert_same((q, scale), _reference(x, pos, x_sf, round_sf), name)


@pytest.mark.parametrize("key", ["bf16", "e4m3"])
def test_moe_layout_matches_tilekernels(key):
    """TileKernels' get_fused_mapping index (its MoE expansion) at a DeepSeek-V3 size, against
    its torch reference (valid indices only: TileKernels' reference cannot take T or more)."""
    from _fused_mapping import fused_mapping
    from _tile_kernels import tk

    ref = tk("per_channel_cast_fused").per_channel_cast_fused
    t, n = 512, 7168
    idx = torch.randint(0, 64, (t, 8), device="cuda")
    pte, pos = fused_mapping(idx.cpu(), 64, 128)
    tokens = torch.full_like(pte, -1)  # pos_to_token: the token of each row, -1 for padding
    flat = pos.view(-1)
    tokens[flat[flat >= 0].long()] = torch.arange(t).repeat_interleave(8)[flat >= 0].int()
    tokens = tokens.cuda()
    x, x_sf, _ = _inputs(t, 16, n, key)
    for round_sf in (False, True):
        q, scale, name = _run(x, x_sf, tokens, key, round_sf)
        src = x if x_sf is None else (x, x_sf)
        _assert_same(
            (q, scale), ref(src, 128, None if x_sf is None else 128, round_sf, tokens), name
        )


def test_allocating_call_matches_out_call():
    import tileaot

    x, _, pos = _inputs(300, 1000, 7168, "bf16")
    q, scale = tileaot.per_channel_cast_fused(x, pos, round_sf=True)
    assert q.dtype == F8 and scale.dtype == torch.float32
    assert q.shape == (1000, 7168) and scale.shape == (8, 7168)
    _assert_same((q, scale), _reference(x, pos, None, True), "allocating call")


def test_launch_is_ordered_on_the_callers_stream():
    """x written on a side stream after a long sleep: a launch on any other stream would read
    the poisoned (NaN) rows."""
    import tileaot

    x, _, pos = _inputs(512, 2048, 7168, "bf16")
    want = _reference(x, pos, None, False)

    def check(got):
        return all(
            torch.equal(a.view(torch.uint8), b.view(torch.uint8))
            for a, b in zip(got, want, strict=True)
        )

    assert_ordered_on_callers_stream(lambda xs: tileaot.per_channel_cast_fused(xs, pos), check, x)


def test_every_per_channel_cast_fused_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
