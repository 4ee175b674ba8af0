"""CPU parity of our MoE routing / dispatch / combine references with TileKernels 1.0.0's
pure-torch ones (``tile_kernels.torch``, loaded through ``_tile_kernels.tk``), on the same
random inputs: odd token counts (1, 7, 129, 4001), ties, -0.0, -inf, NaN, huge logits.

Exactness follows TileKernels' own tests (tests/moe/ of deepseek-ai/TileKernels):
``test_top2_sum_gate.py`` compares indices with ``assert_equal`` and weights with
``torch.allclose``; ``test_reduce_fused.py`` and ``test_expand_to_fused.py`` compare outputs
with ``assert_equal``.

``reduce_fused``'s reference accumulates through ``elementwise_fma`` (``a * b + c`` under
``torch.compile``, marked there as the FMA pattern to capture "for precision"): compiled
for CUDA it is one fused multiply-add, which is what TileKernels' kernel does and its test
checks bit-exactly. The CPU backend compiles it as a multiply and an add, so on the CPU the
parity test swaps in an exact FMA (``moe_reduce.fma_f32``) for that one helper; the rest of
TileKernels' reference (slot order, masking, scales, output rounding) runs as published.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from _tile_kernels import tk  # noqa: E402

from kernels_py.moe import moe_expand as mx  # noqa: E402
from kernels_py.moe import moe_reduce as mr  # noqa: E402
from kernels_py.moe import topk_gate as tg  # noqa: E402

TOKENS = (1, 7, 129, 4001)
INF = float("inf")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- routing: topk_gate ----------------------------------------------------------------------

KINDS = ("randn", "ties", "special", "huge")


def _logits(t: int, e: int, kind: str, seed: int) -> torch.Tensor:
    g = _gen(seed)
    x = torch.randn(t, e, generator=g) * 2
    if kind == "ties":  # few distinct values, -0.0 and +0.0 among them
        x = torch.randint(-3, 4, (t, e), generator=g).float() * 0.5
        x[x == 0] = torch.where(torch.rand(int((x == 0).sum()), generator=g) < 0.5, -0.0, 0.0)
    elif kind == "special":  # -inf, NaN, +inf, a zero row and an all -inf row
        x[torch.rand(t, e, generator=g) < 0.2] = -INF
        x[torch.rand(t, e, generator=g) < 0.05] = math.nan
        x[torch.rand(t, e, generator=g) < 0.02] = INF
        x[0] = 0.0
        if t > 1:
            x[1] = -INF
    elif kind == "huge":  # sigmoid saturates to 1.0 (and 0.0): wide float32 ties
        x = x * 40
    return x.contiguous()


def _cases():
    for t in TOKENS:
        for e in (8, 60, 64, 256, 384) if t < 4001 else (256,):
            yield t, e


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("kind", KINDS)
def test_topk_gate_indices_are_tilekernels_stable_topk(scoring, kind):
    topk = tk("topk")
    for t, e in _cases():
        x = _logits(t, e, kind, t * 7 + e)
        rank = torch.sigmoid(x) if scoring == "sigmoid" else x
        for k in sorted({1, 6, 8, min(16, e)}):
            idx, _ = tg.reference(x, k, scoring, False)
            want = topk.stable_topk(rank, k)
            assert torch.equal(idx.long(), want), (t, e, k)


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("kind", KINDS)
def test_topk_gate_renormalized_is_tilekernels_top2_sum_gate_without_groups(scoring, kind):
    """top2_sum_gate with zero bias, no groups, scaling 1, no shared experts, one EP/TP rank:
    indices equal, weights as close as TileKernels' test asks (torch.allclose)."""
    topk = tk("topk")
    for t, e in _cases():
        if e % 4:  # top2_sum_gate's kernel needs E % 4 == 0 (its reference does not)
            continue
        x = _logits(t, e, kind, t * 11 + e)
        for k in sorted({1, 6, 8, min(16, e)}):
            idx, w = tg.reference(x, k, scoring, True)
            want_idx, want_w = topk.top2_sum_gate(
                x, torch.zeros(e), k, 0, 0, False, 0, 1.0, 0, 1, 0, 1, scoring
            )
            assert torch.equal(idx.long(), want_idx), (t, e, k)
            torch.testing.assert_close(w, want_w, rtol=1e-5, atol=1e-8, equal_nan=True)


def test_topk_gate_sigmoid_ranks_the_saturated_sigmoid_not_the_logits():
    """The issue's case: large logits, where ranking logits and ranking float32 sigmoid
    disagree on almost every index."""
    x = _logits(129, 256, "huge", 5)
    idx, _ = tg.reference(x, 8, "sigmoid", False)
    by_logit = torch.sort(x, dim=-1, descending=True, stable=True).indices[:, :8]
    assert torch.equal(idx.long(), tk("topk").stable_topk(torch.sigmoid(x), 8))
    assert (idx.long() != by_logit).float().mean() > 0.5


# --- combine: moe_reduce vs reduce_fused -----------------------------------------------------


@pytest.fixture
def reduce_fused(monkeypatch):
    rf = tk("reduce_fused")
    monkeypatch.setattr(rf, "elementwise_fma", mr.fma_f32)  # see the module docstring
    return rf.reduce_fused


def _positions(t: int, k: int, g: torch.Generator) -> tuple[torch.Tensor, int]:
    """token_topk_to_pos: distinct rows of a (t * k + 5)-row buffer, some slots -1."""
    rows = t * k + 5
    pos = torch.randperm(rows, generator=g)[: t * k].view(t, k)
    pos[torch.rand(t, k, generator=g) < 0.15] = -1
    pos[0] = -1  # a token with no live slot
    return pos, rows


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("weighted", [True, False])
def test_moe_reduce_is_tilekernels_reduce_fused(reduce_fused, dtype, weighted):
    for t in TOKENS:
        g = _gen(t)
        k = 8 if t < 4001 else 6
        hidden = 7168 if t == 7 else 256
        pos, rows = _positions(t, k, g)
        y = (torch.randn(rows, hidden, generator=g) * 4).to(dtype)
        y[1, :3] = torch.tensor([-0.0, 1e30, -1e-30])
        w = torch.rand(t, k, generator=g) if weighted else None
        ours = mr.reference(y, pos.int(), w)
        theirs = reduce_fused(y, w, pos)
        assert ours.dtype == theirs.dtype == dtype
        assert torch.equal(ours.view(torch.uint8), theirs.view(torch.uint8)), t


def test_fma_matters_for_reduce_fused_parity(reduce_fused):
    """A multiply-then-add reduction differs from TileKernels' FMA one (the issue's 19-48 %)."""
    g = _gen(3)
    pos, rows = _positions(129, 8, g)
    y = torch.randn(rows, 256, generator=g)
    w = torch.rand(129, 8, generator=g)
    theirs = reduce_fused(y, w, pos)
    naive = torch.zeros(129, 256)
    for j in range(8):
        live = (pos[:, j] >= 0)[:, None]
        naive = torch.where(live, naive + w[:, j, None] * y[pos[:, j].clamp(min=0)], naive)
    assert torch.equal(mr.reference(y, pos.int(), w), theirs)
    assert (naive != theirs).float().mean() > 0.05


# --- dispatch: moe_expand vs expand_to_fused -------------------------------------------------


@pytest.mark.parametrize("alignment", [1, 16, 128])
def test_moe_expand_rows_are_tilekernels_expand_to_fused(alignment):
    """x_sorted (up to the last expert's padded end) is what TileKernels' expand_to_fused
    writes from our token_pos and the matching pos_to_expert (-1 on padding rows)."""
    etf = tk("expand_to_fused")
    for t in TOKENS:
        g = _gen(t + alignment)
        e, k = (64, 8) if t < 4001 else (256, 8)
        idx = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)])
        idx[torch.rand(t, k, generator=g) < 0.1] = -1
        x = torch.randn(t, 96, generator=g).bfloat16()
        xs, offsets, pos, _ = mx.reference(x, idx.int(), e, alignment)
        end = int(offsets[-1])
        pos_to_expert = torch.full((end,), -1, dtype=torch.long)
        counts = torch.bincount(idx[idx >= 0].long(), minlength=e)
        for ex in range(e):
            start = int(offsets[ex])
            pos_to_expert[start : start + int(counts[ex])] = ex
        theirs = etf.expand_to_fused(x, pos.long(), pos_to_expert)
        assert torch.equal(xs[:end].view(torch.uint8), theirs.view(torch.uint8)), t
        assert torch.equal(xs[end:].view(torch.uint8), torch.zeros_like(xs[end:]).view(torch.uint8))
