"""GPU tests of moe_reduce: every key (y dtype x out dtype x weighted/sum) on generic odd
sizes against a float64 reference, within the bound of its arithmetic: one rounding to the
output dtype (half an ulp: 2^-9 relative for bf16, 2^-24 for fp32) plus float32 accumulation,
at most K fp32 roundings of partial sums bounded by sum_j |w_j * y_j|.

`out` is poisoned with NaN before each call so an unwritten element fails. token_pos holds
dropped slots (-1), out-of-range rows (>= P, < -1: skipped, never read) and tokens with no live
slot (a zero row). y_sorted rows that no slot points at are NaN: reading one fails the test.
Each test checks which variant served it; the last test checks that the tests together
exercised every moe_reduce variant built for this GPU.

Bit-exactness: the kernel against kernels_py.moe.moe_reduce.reference (one fused multiply-add
per weighted slot, as TileKernels' reduce_fused), and against TileKernels' own torch reference
(compiled for CUDA, where its elementwise_fma is an FMA) where tile-kernels is installed.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import assert_every_variant_exercised

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

SEEN: set[str] = set()
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# Unit roundoff of the output (round to nearest: p = 8 bits for bf16, 24 for fp32).
HALF_ULP = {"bf16": 2.0**-8, "fp32": 2.0**-24}
KEYS = [(y, o, m) for y in DTYPES for o in DTYPES for m in ("weighted", "sum")]
# (tokens, slots, rows of y_sorted, hidden): 16-byte rows (vector path) and odd H (scalar).
SHAPES = [
    (1, 1, 1, 7168),
    (37, 8, 400, 7168),
    (129, 6, 1000, 4096),
    (5, 2, 9, 1000),
    (3000, 8, 24000, 512),
    (7, 3, 20, 13),
    (64, 4, 300, 4100),
]


def _select(key: str, shapes: list[tuple[int, ...]]) -> str:
    from tileaot import _lib

    native = _lib.native()
    flat = tuple(d for s in shapes for d in s)
    return native.select(native.lookup("moe_reduce", key), 0, flat)


def _positions(tokens: int, slots: int, rows: int) -> torch.Tensor:
    pos = torch.randint(0, rows, (tokens, slots), dtype=torch.int32, device="cuda")
    noise = torch.rand(tokens, slots, device="cuda")
    pos[noise < 0.15] = -1
    pos[(noise >= 0.15) & (noise < 0.18)] = rows + 11
    pos[(noise >= 0.18) & (noise < 0.2)] = -9
    if tokens > 2:
        pos[2] = -1  # a token with no live slot
    return pos


def _reference64(y, pos, weights):
    """(sum, sum of |terms|) in float64 over the live slots."""
    rows = y.shape[0]
    live = (pos >= 0) & (pos < rows)
    gathered = y[pos.long().clamp(0, rows - 1)].double()  # [T, K, H]
    w = torch.ones_like(pos, dtype=torch.float64) if weights is None else weights.double()
    terms = torch.where(live[..., None], gathered * w[..., None], 0)
    return terms.sum(1), terms.abs().sum(1)


def _assert_within_bound(name, out, want, magnitude, out_key, slots):
    err = (out.double() - want).abs()
    bound = HALF_ULP[out_key] * 1.01 * want.abs() + slots * 2.0**-23 * magnitude + 1e-30
    bad = ~(err <= bound)  # NaN fails
    assert not bad.any(), (
        f"{name}: {int(bad.sum())} elements off, e.g. at {bad.nonzero()[0].tolist()}: "
        f"got {out[tuple(bad.nonzero()[0])].item()}, want {want[tuple(bad.nonzero()[0])].item()}"
    )


@pytest.mark.parametrize(("y_key", "out_key", "mode"), KEYS)
@pytest.mark.parametrize(("tokens", "slots", "rows", "h"), SHAPES)
def test_moe_reduce(y_key, out_key, mode, tokens, slots, rows, h):
    import tileaot

    pos = _positions(tokens, slots, rows)
    y = torch.randn(rows, h, device="cuda").to(DTYPES[y_key])
    read = torch.zeros(rows, dtype=torch.bool, device="cuda")
    read[pos[(pos >= 0) & (pos < rows)].long()] = True
    y[~read] = float("nan")  # rows nobody points at must never be read
    weights = torch.rand(tokens, slots, device="cuda") if mode == "weighted" else None
    out = torch.full((tokens, h), float("nan"), dtype=DTYPES[out_key], device="cuda")
    key = f"{y_key},{out_key},{mode}"
    shapes = [(rows, h), (tokens, slots)] + ([(tokens, slots)] if weights is not None else [])
    name = _select(key, [*shapes, (tokens, h)])
    SEEN.add(name)
    got = tileaot.moe_reduce(y, pos, weights, DTYPES[out_key], out=out)
    torch.cuda.synchronize()
    assert got is out
    want, magnitude = _reference64(y, pos, weights)
    _assert_within_bound(name, out, want, magnitude, out_key, slots)
    if tokens > 2:
        assert torch.equal(out[2].double(), torch.zeros(h, dtype=torch.float64, device="cuda"))


def _poisoned_call(y, pos, weights, out_dtype):
    import tileaot

    out = torch.full((pos.shape[0], y.shape[1]), float("nan"), dtype=out_dtype, device="cuda")
    assert tileaot.moe_reduce(y, pos, weights, out_dtype, out=out) is out
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize(("y_key", "out_key", "mode"), KEYS)
@pytest.mark.parametrize(("tokens", "slots", "rows", "h"), SHAPES)
def test_moe_reduce_is_bit_exact_with_the_reference(y_key, out_key, mode, tokens, slots, rows, h):
    from kernels_py.moe import moe_reduce as mr

    pos = _positions(tokens, slots, rows)
    y = (torch.randn(rows, h, device="cuda") * 3).to(DTYPES[y_key])
    weights = torch.rand(tokens, slots, device="cuda") if mode == "weighted" else None
    out = _poisoned_call(y, pos, weights, DTYPES[out_key])
    want = mr.reference(y, pos, weights, DTYPES[out_key])
    bad = out.view(torch.uint8) != want.view(torch.uint8)
    assert not bad.any(), f"{y_key},{out_key},{mode} {tokens}x{h}: {int(bad.sum())} bytes differ"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("weighted", [True, False])
def test_moe_reduce_is_tilekernels_reduce_fused(dtype, weighted):
    """Against TileKernels 1.0.0's torch reference as published (torch.compile on CUDA)."""
    from _tile_kernels import tk

    reduce_fused = tk("reduce_fused").reduce_fused
    for tokens, slots, h in ((1, 8, 7168), (129, 8, 7168), (4001, 6, 512)):
        rows = tokens * slots + 5
        pos = torch.randperm(rows, device="cuda")[: tokens * slots].view(tokens, slots)
        pos[torch.rand(tokens, slots, device="cuda") < 0.15] = -1
        y = torch.randn(rows, h, device="cuda").to(dtype)
        weights = torch.rand(tokens, slots, device="cuda") if weighted else None
        out = _poisoned_call(y, pos.int(), weights, dtype)
        want = reduce_fused(y, weights, pos)
        assert torch.equal(out.view(torch.uint8), want.view(torch.uint8)), (tokens, h)


def test_moe_reduce_inverts_moe_expand():
    """expand, identity experts, reduce: out = x * sum of the live weights (fp32 out)."""
    import tileaot

    x = torch.randn(2048, 7168, device="cuda").bfloat16()
    probs, idx = torch.randn(2048, 256, device="cuda").softmax(-1).topk(8)
    idx = idx.int()
    idx[:, 7] = -1  # one slot dropped everywhere
    xs, _, pos, _ = tileaot.moe_expand(x, idx, 256, 128)
    out = tileaot.moe_reduce(xs, pos, probs, torch.float32)
    want = x.double() * probs[:, :7].double().sum(-1, keepdim=True)
    _assert_within_bound("round trip", out, want, want.abs(), "fp32", 7)


def test_every_moe_reduce_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised(("moe_reduce",), SEEN)
