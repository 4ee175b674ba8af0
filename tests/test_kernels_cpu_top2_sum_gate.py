"""top2_sum_gate on the CPU: our reference against TileKernels 1.0.0's (`tile_kernels.torch.
top2_sum_gate`), the kernel's order keys, the wrapper's checks, and lowering smoke tests.

Parity as TileKernels' own test compares its kernel with that reference (tests/moe/
test_top2_sum_gate.py of deepseek-ai/TileKernels): indices exactly (here in their order too, not
only as sets), weights with ``torch.allclose``.
"""

from __future__ import annotations

import importlib
import math

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, refusals_test, t  # noqa: E402, F401
from _lowering import lower_source, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

g = importlib.import_module("kernels_py.moe.top2_sum_gate")
top2_sum_gate = importlib.import_module("tileaot.top2_sum_gate").top2_sum_gate

# (E, num_groups, num_topk_groups, k, shared, scaling, ep, tp): the zoo's routers, TileKernels'
# test configs (its 72/1/6 and 256/8/8 no-group cases) and EP/TP splits.
CONFIGS = [
    (256, 8, 4, 8, 0, 2.5, 1, 1),  # DeepSeek-V3
    (256, 8, 4, 8, 1, 2.5, 4, 2),
    (256, 8, 8, 8, 2, 1.5, 4, 2),  # groups equal: no group limit
    (384, 1, 1, 8, 0, 2.827, 1, 1),  # Kimi-K2
    (160, 1, 1, 8, 1, 2.5, 8, 2),  # GLM-4.5
    (160, 8, 3, 6, 0, 1.0, 1, 1),  # DeepSeek-V2's group sizes
    (72, 0, 0, 6, 1, 1.5, 4, 2),
    (64, 4, 2, 6, 2, 1.0, 2, 1),
    (7, 0, 0, 3, 0, 1.0, 1, 1),
]
TOKENS = (1, 7, 129, 4001)


def tk_call(logits, bias, e, groups, kept, k, shared, scaling, ep, tp, tp_rank):
    """TileKernels' reference with our options (int64 indices)."""
    return tk("topk").top2_sum_gate(
        logits, bias, k, kept, groups, shared > 0, shared, scaling, 0, ep, tp_rank, tp, "sigmoid"
    )


def logits_for(tokens: int, e: int, kind: str, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, e, generator=gen) * 3
    if kind == "ties":  # few distinct values: ties everywhere, in groups and experts
        x = (x * 2).round() / 2
    elif kind == "specials":
        pick = torch.rand(tokens, e, generator=gen)
        x[pick < 0.05] = -math.inf
        x[(pick >= 0.05) & (pick < 0.08)] = math.inf
        x[(pick >= 0.08) & (pick < 0.09)] = math.nan
        x[(pick >= 0.09) & (pick < 0.12)] = 40.0  # sigmoid saturates to 1.0: ties
    elif kind == "zeros":
        x.zero_()
    return x


def assert_parity(ours, theirs) -> None:
    idx, w = ours
    tidx, tw = theirs
    assert idx.dtype == torch.int32 and w.dtype == torch.float32
    assert torch.equal(idx.long(), tidx), (idx, tidx)
    assert torch.allclose(w, tw, equal_nan=True), (w - tw).abs().max()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c[:5])))
@pytest.mark.parametrize("kind", ["randn", "ties", "specials", "zeros"])
def test_reference_matches_tile_kernels(config, kind):
    e, groups, kept, k, shared, scaling, ep, tp = config
    for i, tokens in enumerate(TOKENS):
        logits = logits_for(tokens, e, kind, seed=i)
        bias = torch.randn(e, generator=torch.Generator().manual_seed(99 + i)) * 0.5
        if kind == "ties":
            bias = (bias * 4).round() / 4
        for tp_rank in range(tp):
            args = (e, groups, kept, k, shared, scaling, ep, tp, tp_rank)
            ours = g.reference(logits, bias, k, groups, kept, scaling, shared, ep, tp_rank, tp)
            assert_parity(ours, tk_call(logits, bias, *args))


def test_reference_ties_go_to_the_smaller_expert_and_groups_to_the_smaller_group():
    """All-zero logits (TileKernels' stability check): experts 0..k-1 of the first groups."""
    logits, bias = torch.zeros(3, 256), torch.zeros(256)
    idx, w = g.reference(logits, bias, 8, 8, 4, 2.5)
    assert torch.equal(idx, torch.arange(8, dtype=torch.int32).expand(3, 8))
    assert torch.allclose(w, torch.full((3, 8), 2.5 / 8))
    # groups 0 and 1 tie; the bias makes group 1 better: its experts come first
    bias[32:34] = 1.0
    idx, _ = g.reference(logits, bias, 8, 8, 4, 1.0)
    assert idx[0, :2].tolist() == [32, 33] and idx[0, 2:].tolist() == [0, 1, 2, 3, 4, 5]


def test_reference_nan_ranks_first_and_poisons_the_weights():
    logits = torch.zeros(1, 64)
    logits[0, 17] = math.nan
    idx, w = g.reference(logits, torch.zeros(64), 4)
    assert idx[0].tolist() == [17, 0, 1, 2] and torch.isnan(w).all()


def test_reference_group_limit_masks_other_groups():
    """A large score outside the kept groups is not picked: groups rank by top-2 sums."""
    logits = torch.full((1, 16), -5.0)
    logits[0, 0] = 5.0  # group 0: one large score, sum of top two small
    logits[0, 4:6] = 1.0  # group 1: two medium scores, larger sum
    idx, _ = g.reference(logits, torch.zeros(16), 2, 4, 1)
    assert idx[0].tolist() == [4, 5]
    idx, _ = g.reference(logits, torch.zeros(16), 2)  # no groups: the large one first
    assert idx[0].tolist() == [0, 4]


def order_key(x: torch.Tensor) -> torch.Tensor:
    """The kernel's int32 order key (kernels_py/moe/top2_sum_gate.py `key`), on the CPU."""
    b = (x + 0.0).view(torch.int32)
    k = b ^ ((b >> 31) & 0x7FFFFFFF)
    return torch.where(torch.isnan(x), torch.tensor(0x7FFFFFFF, dtype=torch.int32), k)


def test_order_keys_sort_as_the_stable_descending_float_sort():
    """The kernel compares keys (and expert index) where TileKernels sorts floats: the two
    orders agree for every float class, -0 and +0 tie, NaN above +inf, and a key maps back."""
    specials = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan, 1e-45, -1e-45])
    x = torch.cat([torch.randn(2000) * 10, specials, torch.randn(100).round()])
    by_float = torch.sort(x, descending=True, stable=True).indices
    key = order_key(x).long()
    by_key = torch.sort(key * 4096 - torch.arange(len(x)), descending=True).indices
    assert torch.equal(by_float, by_key)
    finite = ~torch.isnan(x)
    k = order_key(x)[finite]
    back = (k ^ ((k >> 31) & 0x7FFFFFFF)).view(torch.float32)
    assert torch.equal(back, x[finite] + 0.0)


def _value(k: torch.Tensor) -> torch.Tensor:
    return (k ^ ((k >> 31) & 0x7FFFFFFF)).view(torch.float32)


def _butterfly(x: torch.Tensor, step, below: int = g.WARP) -> torch.Tensor:
    """An xor butterfly over the lane axis (dim 1), steps below `below`: `step(mine, theirs)`."""
    lanes = torch.arange(g.WARP)
    for s in (16, 8, 4, 2, 1):
        if s < below:
            x = step(x, x[:, lanes ^ s])
    return x


def emulate(logits, bias, k, groups=0, kept=0, scaling=1.0, static_e=None):
    """The kernel's steps (kernels_py/moe/top2_sum_gate.py) with the warp's lanes as tensor dim 1:
    a CPU check of its algorithm (slot layout, padding keys, group top-2 merges per group or
    spanned, group ranks, kept-group bits, argmax rounds, butterfly sum). The GPU test checks
    the generated code."""
    i32 = torch.int32
    t, e = logits.shape
    slots, _ = g._layout(static_e)
    lane = torch.arange(g.WARP).view(g.WARP, 1)
    j = torch.arange(slots).view(1, slots)
    expert = j * g.WARP + lane if static_e is None else lane * slots + j  # [32, V]
    valid = expert < e
    col = expert.clamp(max=e - 1)
    x = torch.where(valid, logits[:, col], -math.inf)  # [T, 32, V]
    b = torch.where(valid, bias[col], 0.0)
    kk = torch.where(valid, order_key(torch.sigmoid(x) + b), g.PAD)
    low = torch.tensor(g.INT_MIN, dtype=i32)
    if groups != kept:
        size = e // groups
        gid = torch.where(valid, expert // size, -1)
        gkey = torch.full((t, g.WARP), g.INT_MIN, dtype=i32)
        span = size // slots
        spanned = static_e is not None and size % slots == 0 and span & (span - 1) == 0
        for group in [None] if spanned else range(groups):
            pair = torch.stack([torch.full((t, g.WARP), g.INT_MIN, dtype=i32)] * 2, dim=-1)
            for slot in range(slots):
                xk = (
                    kk[:, :, slot]
                    if spanned
                    else torch.where(gid[:, slot] == group, kk[:, :, slot], low)
                )
                second = torch.maximum(pair[..., 1], torch.minimum(pair[..., 0], xk))
                pair = torch.stack([torch.maximum(pair[..., 0], xk), second], dim=-1)

            def merge(p, q):
                top = torch.maximum(p[..., 0], q[..., 0])
                second = torch.maximum(
                    torch.maximum(p[..., 1], q[..., 1]), torch.minimum(p[..., 0], q[..., 0])
                )
                return torch.stack([top, second], dim=-1)

            pair = _butterfly(pair, merge, span if spanned else g.WARP)
            total = order_key(_value(pair[..., 0].contiguous()) + _value(pair[..., 1].contiguous()))
            if spanned:  # lane g reads group g's first lane
                gkey = total[:, (torch.arange(g.WARP) * span).clamp(max=g.WARP - 1)]
            else:
                gkey = torch.where(lane.view(1, -1) == group, total, gkey)
        above = torch.zeros(t, g.WARP, dtype=torch.int64)
        for h in range(groups):
            o = gkey[:, h : h + 1]
            above += (o > gkey) | ((o == gkey) & (h < lane.view(1, -1)))
        mine = (lane.view(1, -1) < groups) & (above < kept)
        bits = torch.where(mine, 1 << lane.view(1, -1).long(), 0)
        bits = _butterfly(bits, torch.bitwise_or)[:, :1, None]
        stays = (gid >= 0) & (((bits >> gid.clamp(min=0)) & 1) != 0)
        kk = torch.where(stays, kk, order_key(torch.tensor(-math.inf)))
    picks = []
    for _ in range(k):
        best, at = kk.max(dim=-1)  # the first largest slot of each lane
        who = torch.where(
            best > g.INT_MIN, expert.expand(t, -1, -1).gather(2, at[..., None])[..., 0], g.NO_INDEX
        )

        def argmax(p, q):
            take = (q[..., 0] > p[..., 0]) | ((q[..., 0] == p[..., 0]) & (q[..., 1] < p[..., 1]))
            return torch.where(take[..., None], q, p)

        win = _butterfly(torch.stack([best, who.to(i32)], dim=-1), argmax)[:, 0, 1]
        picks.append(win)
        kk = torch.where(expert == win.view(t, 1, 1), low, kk)
    idx = torch.stack(picks, dim=1)
    w = torch.zeros(t, g.WARP)
    w[:, :k] = torch.sigmoid(logits.gather(1, idx.long()))
    total = _butterfly(w, torch.add)[:, :1].clamp(min=1e-20)
    return idx, (w[:, :k] / total * scaling)


@pytest.mark.parametrize(
    "e, groups, kept, k, static",
    [(256, 8, 4, 8, True), (256, 8, 8, 8, True), (160, 8, 3, 6, True), (384, 1, 1, 8, True)]
    + [(256, 8, 4, 8, False), (64, 4, 2, 6, False), (72, 0, 0, 6, False), (7, 0, 0, 7, False)]
    + [(500, 10, 3, 12, False), (60, 0, 0, 4, True), (60, 6, 2, 8, True), (256, 32, 3, 8, True)]
    + [(256, 4, 1, 8, True), (256, 2, 1, 8, True), (192, 4, 2, 8, True), (384, 12, 4, 8, True)],
)
@pytest.mark.parametrize("kind", ["randn", "ties", "specials", "zeros"])
def test_the_kernels_algorithm_on_the_cpu(e, groups, kept, k, static, kind):
    logits = logits_for(129, e, kind, seed=e)
    bias = torch.randn(e, generator=torch.Generator().manual_seed(e)) * 0.5
    if kind == "ties":
        bias = (bias * 4).round() / 4
    idx, w = emulate(logits, bias, k, groups, kept, 2.5, e if static else None)
    want_idx, want_w = g.reference(logits, bias, k, groups, kept, 2.5)
    assert torch.equal(idx, want_idx)
    assert torch.allclose(w, want_w, equal_nan=True)


def test_layout_covers_every_expert_once():
    for e in (*g.STATIC_E, 2, 7, 60, 64, 512, None):
        slots, width = g._layout(e)
        n = g.MAX_E if e is None else e
        if e is None:
            experts = sorted(j * g.WARP + lane for lane in range(g.WARP) for j in range(slots))
        else:
            experts = sorted(lane * slots + j for lane in range(g.WARP) for j in range(slots))
            assert slots % width == 0 and e % width == 0
        assert [x for x in experts if x < n] == list(range(n))


def test_spec_error_and_factory_refuse_unbuildable_sizes():
    assert g.spec_error({}, {"E": 256}) is None
    assert "2 <= E <= 512" in g.spec_error({}, {"E": 513})
    with pytest.raises(ValueError, match="unsupported key"):
        g.factory(arch="sm_90a", dtype="float32", scoring="softmax")


# ---- the wrapper's checks (recording fake driver: no GPU) ---------------------------------------
def f(*shape):
    return t(*shape, dtype=torch.float32)


BAD = [
    (lambda: top2_sum_gate(t(4, 64), f(64), 2), TypeError, r"logits has dtype torch\.bfloat16"),
    (lambda: top2_sum_gate(f(4, 64), f(63), 2), ValueError, r"bias must have shape \(64,\)"),
    (lambda: top2_sum_gate(f(64), f(64), 2), ValueError, r"logits must have shape \[M, E\]"),
    (lambda: top2_sum_gate(f(4, 64), f(64), 2.0), TypeError, r"k must be an int, got float"),
    (lambda: top2_sum_gate(f(4, 64), f(64), 0), ValueError, r"k must be in \[1, E = 64\]"),
    (lambda: top2_sum_gate(f(4, 8), f(8), 9), ValueError, r"got k = 9"),
    (lambda: top2_sum_gate(f(4, 64), f(64), 8, 0, 0, 1.0, 25), ValueError, r"k \+ num_shared"),
    (lambda: top2_sum_gate(f(4, 64), f(64), 2, 8, 0), ValueError, r"both be 0"),
    (lambda: top2_sum_gate(f(4, 64), f(64), 2, 4, 5), ValueError, r"num_topk_groups <= num_g"),
    (lambda: top2_sum_gate(f(4, 60), f(60), 2, 8, 4), ValueError, r"must divide the E = 60"),
    (lambda: top2_sum_gate(f(4, 64), f(64), 2, 64, 4), ValueError, r"at least 2 experts"),
    (lambda: top2_sum_gate(f(4, 64), f(64), 9, 8, 1), ValueError, r"exceeds the 8 experts"),
    (lambda: top2_sum_gate(f(4, 64), f(64), 2, 0, 0, math.inf), ValueError, r"finite"),
    (lambda: top2_sum_gate(f(4, 64), f(64), 2, 0, 0, "1"), TypeError, r"real number"),
    (lambda: top2_sum_gate(f(4, 64), f(64), 2, num_ep_ranks=65), ValueError, r"num_ep_ranks"),
    (lambda: top2_sum_gate(f(4, 64), f(64), 2, tp_rank=2, num_tp_ranks=2), ValueError, "tp_r"),
    (
        lambda: top2_sum_gate(f(4, 64), f(64), 2, scoring_func="softmax"),
        ValueError,
        r"builds no 'softmax' top2_sum_gate",
    ),
    (lambda: top2_sum_gate(f(4, 600), f(600), 2), ValueError, r"E = 600 experts"),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


def test_launch_arguments(fake, cpu_as_cuda):
    logits, bias = f(5, 256), f(256)
    idx, w = top2_sum_gate(logits, bias, 8, 8, 4, 2.5, 1, 4, 1, 2)
    assert idx.shape == (5, 9) and idx.dtype == torch.int32 and w.shape == (5, 9)
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("top2_sum_gate", "fp32,sigmoid")
    assert launch.shapes == (5, 256, 256, 5, 9, 5, 9)
    assert launch.scalars == (8.0, 8.0, 4.0, 64.0, 1.0, 2.0, 2.5)
    top2_sum_gate(logits, bias, 8, 8, 8)  # equal group counts: no group limit (n_group 0)
    assert fake.launches[-1].scalars[:3] == (8.0, 0.0, 8.0)


def test_empty_input_launches_nothing(fake, cpu_as_cuda):
    idx, w = top2_sum_gate(f(0, 256), f(256), 8, num_shared_experts=1)
    assert idx.shape == (0, 9) and w.shape == (0, 9) and fake.launches == []


# ---- lowering (tilelang, no GPU) ----------------------------------------------------------------
@needs_tilelang
def test_lower_static_e_loads_vectors_and_shuffles():
    kernel = g.factory(arch="sm_90a", dtype="float32", scoring="sigmoid", E=256)
    src = lower_source(kernel, "sm_90a", "t")
    assert "float4" in src and "__shfl_xor_sync" in src and "__fdiv_rn" in src


@needs_tilelang
def test_lower_generic_e_on_sm80():
    src = lower_source(g.factory(arch="sm_80", dtype="float32", scoring="sigmoid"), "sm_80", "t")
    assert "__shfl_sync" in src and "int E" in src
