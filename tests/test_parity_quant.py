"""Parity of our cast references with TileKernels 1.0.0's pure-torch ones, on the CPU.

TileKernels' own tests (tests/quant/test_per_token_cast.py, test_per_block_cast.py and
test_swiglu_forward_and_per_token_cast.py in deepseek-ai/TileKernels) compare its kernels'
bytes and scales with ``tile_kernels.torch.cast`` (after ``swiglu_forward`` for the fused op)
by ``assert_equal``: bytes exact, dtype, shape and stride equal. Its tests run ``round_sf=True``
(row-major fp32 scales, or packed UE8M0); ``round_sf=False`` is its functions' default. Here our
references (which our GPU tests hold the kernels to, bit for bit) meet TileKernels' on the same
inputs, both options, exactly: bytes of q and of the fp32 scales.

Inputs are ``randn`` (as TileKernels' tests use) plus rows that probe the edges: all-zero rows
(the 1e-4 amax floor), -0.0, huge values (near the dtype's max, where 448 / amax is tiny) and
tiny ones (subnormals, below the floor), and rounding ties (values that land exactly on an
e4m3 midpoint). Non-finite inputs are left out: TileKernels' kernels and its reference disagree
on them (its kernels' |x| max ignores NaN, torch's propagates it), so it defines no behaviour.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _tile_kernels import tk  # noqa: E402

from kernels_py.act import swiglu_per_token_cast_fp8 as swq  # noqa: E402
from kernels_py.quant import per_block_cast_fp8 as pb  # noqa: E402
from kernels_py.quant import per_token_cast_fp8 as pt  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
TOKENS = (1, 7, 129, 4001)


def _hidden(tokens: int) -> tuple[int, ...]:
    # 4001 rows x 7168 columns is 29M elements: one width there keeps the CPU run short.
    return (640,) if tokens == 4001 else (640, 2048, 7168)


def _inputs(m: int, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """randn rows, then edge rows cycling through the cases below (as many as fit)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=g, dtype=torch.float32)
    huge = torch.finfo(dtype).max
    cases = [
        torch.zeros(n),  # all zero: amax floor
        torch.full((n,), -0.0),  # all -0.0
        (x[0] * huge / 8).clamp(-huge, huge),  # huge
        x[0] * 1e-38,  # tiny: subnormal in fp32, below the 1e-4 floor
        x[0] * 3e-5,  # below the floor, but normal
        # ties: amax 448 (inv 1) and values on e4m3 midpoints (1.0625 = 1 + 1/16, 17 = 16 + 1,
        # 0.0029296875 = 1.5 * 2^-9: between the subnormals 2^-9 and 2^-8)
        torch.tensor([448.0, 1.0625, -1.0625, 17.0, -9.0, 0.0029296875, 1.1875, 272.0]).repeat(
            -(-n // 8)
        )[:n],
    ]
    for i in range(1, m):
        if i % 3 == 0:
            x[i] = cases[(i // 3) % len(cases)]
    # Zero and huge single elements inside ordinary rows, and -0.0 everywhere in row 0's tail.
    if m > 1:
        x[1, : n // 2] = 0.0
        x[-1, 5] = huge / 2
    x[0, n // 2 :] = -0.0
    return x.to(dtype)


def _same(ours: torch.Tensor, theirs: torch.Tensor, what: str) -> None:
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, what
    a = ours.contiguous().view(torch.uint8)
    b = theirs.contiguous().view(torch.uint8)
    bad = (a != b).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} bytes differ, first at {bad[:4].tolist()}"


@pytest.mark.parametrize("round_sf", [False, True], ids=["f32", "pow2"])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("m", TOKENS)
def test_per_token_cast_fp8_matches_tilekernels(m, dtype, round_sf):
    cast = tk("cast").cast
    for n in _hidden(m):
        x = _inputs(m, n, dtype, seed=m * n)
        for group in (32, 64, 128, None):  # the kernels' groups: 32/64/128 columns, a row
            q, s = pt.reference(x, group, round_sf=round_sf)
            q_tk, s_tk = cast(x, "e4m3", (1, group or n), round_sf=round_sf)
            _same(q, q_tk, f"q, N={n}, group={group}")
            _same(s, s_tk, f"scale, N={n}, group={group}")


@pytest.mark.parametrize("round_sf", [False, True], ids=["f32", "pow2"])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("m", TOKENS)
def test_per_block_cast_fp8_matches_tilekernels(m, dtype, round_sf):
    cast = tk("cast").cast
    for n in (*_hidden(m), 300):  # 300: a partial block at the right edge
        x = _inputs(m, n, dtype, seed=m + n)
        q, s = pb.reference(x, round_sf=round_sf)
        q_tk, s_tk = cast(x, "e4m3", (128, 128), round_sf=round_sf)
        _same(q, q_tk, f"q, N={n}")
        _same(s, s_tk, f"scale, N={n}")


@pytest.mark.parametrize("round_sf", [False, True], ids=["f32", "pow2"])
@pytest.mark.parametrize("clamp", [None, 10.0, 0.5])  # TileKernels' tests' clamp values
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("m", TOKENS)
def test_swiglu_per_token_cast_fp8_matches_tilekernels(m, weighted, clamp, round_sf):
    cast, swiglu_forward = tk("cast").cast, tk("swiglu").swiglu_forward
    h = 2048 if m < 4001 else 512
    # Huge rows at 1e18: gate x up stays finite in fp32 (an infinite activation is a
    # non-finite input to the cast, which TileKernels leaves undefined).
    x = _inputs(m, 2 * h, torch.bfloat16, seed=m + h).float().clamp(-1e18, 1e18).bfloat16()
    x[0, :h] = -100.0  # silu's tail: exp(100) is finite, exp(-(-100)) large
    w = torch.randn(m, generator=torch.Generator().manual_seed(m)) if weighted else None
    q, s = swq.reference(x, w, clamp, round_sf=round_sf)
    # TileKernels takes the weight of row i as topk_weights[pos_to_token_topk[i] // k, ... % k]:
    # one top-k slot per row here.
    ptt = torch.arange(m, dtype=torch.int32) if weighted else None
    a = swiglu_forward(x, ptt, None if w is None else w[:, None], clamp)
    q_tk, s_tk = cast(a, "e4m3", (1, 128), round_sf=round_sf)
    _same(q, q_tk, "q")
    _same(s, s_tk, "scale")


@pytest.mark.parametrize("round_sf", [False, True], ids=["f32", "pow2"])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("m", (0, *TOKENS))
def test_per_channel_cast_fp8_matches_tilekernels(m, dtype, round_sf):
    """TileKernels' per_channel_cast is ``cast(x, "e4m3", (128, 1))`` (its torch reference);
    the edge rows transposed become edge columns (all-zero, -0.0, huge, tiny, ties), each one
    a scale group of its own."""
    from kernels_py.quant import per_channel_cast_fp8 as pc

    cast = tk("cast").cast
    for n in (*_hidden(m), 300):
        x = torch.empty(0, n, dtype=dtype)
        if m:
            rows = _inputs(m, n, dtype, seed=3 * m + n)
            cols = _inputs(n, max(m, 8), dtype, seed=m + 5 * n)[:, :m]  # _inputs: 6+ columns
            x = torch.cat([rows, cols.T], dim=1).contiguous()
        q, s = pc.reference(x, round_sf=round_sf)
        q_tk, s_tk = cast(x, "e4m3", (128, 1), round_sf=round_sf)
        _same(q, q_tk, f"q, N={n}")
        _same(s, s_tk, f"scale, N={n}")


def test_edge_inputs_reach_the_edges():
    """The edge rows do what they are there for (so the parity above covers them)."""
    x = _inputs(129, 640, torch.bfloat16, seed=1)
    _, s = pt.reference(x, 128)
    floor = torch.tensor(1e-4) / torch.tensor(448.0)
    assert (s == floor).all(dim=1).sum() >= 3  # zero, -0.0, tiny rows
    assert s.max() > 1e35  # huge rows
    q, _ = pt.reference(x[15:16], None)  # the ties row (15 = 3 * 5): amax 448, inv 1
    assert q[0, :8].float().tolist() == [448.0, 1.0, -1.0, 16.0, -9.0, 0.00390625, 1.25, 256.0]


# --- FP4 E2M1 with UE8M0 scales ---------------------------------------------------------------
# TileKernels' per_token_cast to "e2m1" with round_sf=True: packed codes (element 2i in the low
# nibble) and power-of-two scales; ours stores each scale as its exponent byte (row-major uint8,
# the byte TileKernels' packed-UE8M0 layout holds).


@pytest.mark.parametrize("group", [16, 32])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("m", TOKENS)
def test_per_token_cast_fp4_ue8m0_matches_tilekernels(m, dtype, group):
    from kernels_py.quant import per_token_cast_fp4 as fp4

    cast = tk("cast").cast
    for n in _hidden(m):
        x = _inputs(m, n, dtype, seed=7 * m + n)
        q, s = fp4.reference(x, group, "ue8m0")
        q_tk, s_tk = cast(x, "e2m1", (1, group), round_sf=True)
        _same(q, q_tk.view(torch.uint8), f"q, N={n}")
        assert torch.equal(s_tk.view(torch.int32) & 0x807FFFFF, torch.zeros_like(s_tk.int()))
        _same(s, (s_tk.view(torch.int32) >> 23).to(torch.uint8), f"scale, N={n}")
        assert (s[(x.float().view(m, -1, group) == 0).all(-1)] == 1).all()  # zero groups: 1


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("group", [16, 32])
def test_cast_back_fp4_ue8m0_matches_tilekernels(group, out_dtype):
    from kernels_py.quant import cast_back_fp4 as cb

    cast_back = tk("cast").cast_back
    g = torch.Generator().manual_seed(group)
    m, n = 129, 512
    q = torch.randint(0, 256, (m, n // 2), generator=g, dtype=torch.uint8)
    scale = torch.randint(0, 256, (m, n // group), generator=g, dtype=torch.uint8)
    scale[0, :4] = torch.tensor([0, 1, 254, 255], dtype=torch.uint8)  # TileKernels: 0.0, +inf
    q[0, :8] = torch.tensor([0x00, 0x88, 0x17, 0x7F, 0xF0, 0x12, 0x34, 0x56], dtype=torch.uint8)
    ours = cb.reference(q, scale, group, out_dtype)
    fmt = "bf16" if out_dtype == torch.bfloat16 else "fp32"
    # TileKernels reads UE8M0 scales as int32 words of four bytes (its packed layout).
    theirs = cast_back((q.view(torch.int8), scale.view(torch.int32)), fmt, (1, group))
    _same(ours, theirs, "cast_back")
    assert (ours[0, :group].float() == 0).all()  # byte 0 decodes to 0.0
    top = ours[0, 3 * group : 4 * group].float()  # byte 255: +inf (NaN for zero codes)
    assert (top.isinf() | top.isnan()).all() and top.isinf().any()


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("group", [32, 64, 128, None])
def test_cast_back_fp8_matches_tilekernels(group, out_dtype):
    """The FP8 per-token scale layouts (g32, g64, g128, token) through TileKernels'
    ``cast_back((q, sf), fmt, (1, group))``: the casts' own outputs, so every e4m3 code meets
    the scale it came with; one fp32 multiply, one rounding, bytes equal."""
    from kernels_py.quant import cast_back_fp8 as cb

    cast_back = tk("cast").cast_back
    m, n = 129, 2048
    x = _inputs(m, n, torch.bfloat16, seed=n + (group or 1))
    q, s = pt.reference(x, group, round_sf=group == 64)  # power-of-two scales in one case
    layout = f"g{group}" if group else "token"
    fmt = "bf16" if out_dtype == torch.bfloat16 else "fp32"
    _same(cb.reference(q, s, layout, out_dtype), cast_back((q, s), fmt, (1, group or n)), layout)
