"""GPU tests of topk_gate against kernels_py.moe.topk_gate.reference.

Every scoring x renormalize x variant (E = 64, 128, 256 and generic sizes from 1 to 512, odd
token counts) on five kinds of scores: random, heavily tied (few distinct values), rounded
(ties among the top picks), special (-inf, NaN, +-0, an all -inf row), adversarial (one
lane's experts hold every top score, which drains and refills that lane's cache) and huge
(logits x 40 with +inf and NaN: the float32 sigmoid saturates, NaN ranks above +inf). Outputs are
poisoned (-1 indices, NaN weights) before each call. Indices must be bit-exact, weights within
1e-6 relative (atol 1e-12 for weights that underflow). The last test checks that every
topk_gate variant built for this GPU was exercised.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "topk_gate"
SEEN: set[str] = set()
KINDS = ("randn", "tied", "rounded", "special", "adversarial", "huge")
SHAPES = [  # (T, E)
    (1, 64),
    (37, 64),
    (1000, 128),
    (129, 256),
    (70001, 256),
    (5, 1),
    (3, 8),
    (77, 60),
    (33, 100),
    (65, 160),
    (17, 384),
    (9, 512),
]


def _kernel_module():
    return importlib.import_module("kernels_py.moe.topk_gate")


def _select(key: str, shapes: list[tuple[int, ...]]) -> str:
    """Name of the variant the runtime picks for these shapes on device 0."""
    from tileaot import _lib

    native = _lib.native()
    flat = tuple(d for s in shapes for d in s)
    return native.select(native.lookup(OP, key), 0, flat)


def _scores(t: int, e: int, kind: str) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(t * 1000 + e)
    x = torch.randn(t, e, device="cuda", generator=g) * 2
    if kind == "tied":
        x = torch.randint(-3, 4, (t, e), device="cuda", generator=g).float() * 0.25
    elif kind == "rounded":
        x = (x * 2).round() / 2
    elif kind == "special":
        x = torch.randint(-1, 2, (t, e), device="cuda", generator=g).float()
        x[x == -1] = float("-inf")
        x[:, ::7] = float("nan")
        x[:, 1::5] = -0.0
        x[0] = float("-inf")
    elif kind == "huge":  # sigmoid saturates: float32 ties, NaN above +inf
        x = x * 40
        x[:, ::11] = float("inf")
        x[1::3, 5::13] = float("nan")
    elif kind == "adversarial":
        m = _kernel_module()
        lanes, _, width = m._layout(e if e in m.STATIC_E else None)
        lane0 = torch.tensor([c for c in range(e) if (c // width) % lanes == 0], device="cuda")
        x[:, lane0] = 10.0 + torch.arange(len(lane0), device="cuda", dtype=torch.float32)
    return x.contiguous()


def _check(x, k, scoring, renormalize, name):
    import tileaot

    t = x.shape[0]
    idx = torch.full((t, k), -1, dtype=torch.int32, device="cuda")
    w = torch.full((t, k), float("nan"), device="cuda")
    got = tileaot.topk_gate(x, k, scoring, renormalize, out=(idx, w))
    torch.cuda.synchronize()
    assert got[0] is idx and got[1] is w
    idx_ref, w_ref = _kernel_module().reference(x, k, scoring, renormalize)
    bad = (idx != idx_ref).any(dim=-1).nonzero().flatten()
    assert bad.numel() == 0, (
        f"{name} k={k}: {bad.numel()} rows differ, first {bad[0].item()}: "
        f"{idx[bad[0]].tolist()} != {idx_ref[bad[0]].tolist()}"
    )
    torch.testing.assert_close(
        w, w_ref, rtol=1e-6, atol=1e-12, equal_nan=True, msg=lambda m: f"{name} k={k}: {m}"
    )


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("t,e", SHAPES)
def test_topk_gate(t, e, scoring, renormalize):
    key = f"fp32,{scoring}"
    ks = sorted({k for k in (1, 2, 6, 8, 16, 32) if k <= e} | {min(32, e)})
    for k in ks:
        name = _select(key, [(t, e), (t, k), (t, k)])
        SEEN.add(name)
        for kind in KINDS:
            _check(_scores(t, e, kind), k, scoring, renormalize, f"{name} {kind}")


def test_launch_is_ordered_on_the_callers_stream():
    """Scores written on a side stream after a long sleep: a launch on any other stream would
    read the poisoned scores and fail."""
    import tileaot

    src = _scores(4096, 256, "randn")
    idx_ref, w_ref = _kernel_module().reference(src, 8, "sigmoid", True)

    def check(got):
        assert torch.equal(got[0], idx_ref)
        torch.testing.assert_close(got[1], w_ref, rtol=1e-6, atol=1e-12)

    assert_ordered_on_callers_stream(lambda x: tileaot.topk_gate(x, 8, "sigmoid"), check, src)


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
def test_topk_gate_is_tilekernels_routing(scoring):
    """Against TileKernels 1.0.0's torch references on the GPU: indices as its stable_topk of
    the ranked values, renormalised weights as its top2_sum_gate (no bias, groups, scaling,
    shared experts; one EP/TP rank) within torch.allclose's bounds, as its test asks."""
    import tileaot
    from _tile_kernels import tk

    topk = tk("topk")
    for t, e in ((1, 256), (129, 64), (4001, 256), (77, 60), (17, 384)):
        for kind in ("randn", "tied", "huge"):
            x = _scores(t, e, kind)
            if kind == "huge":
                x = torch.nan_to_num(x, nan=0.0, posinf=50.0)  # top2_sum_gate: finite only
            for k in (1, 8):
                idx = torch.full((t, k), -1, dtype=torch.int32, device="cuda")
                w = torch.full((t, k), float("nan"), device="cuda")
                tileaot.topk_gate(x, k, scoring, True, out=(idx, w))
                torch.cuda.synchronize()
                rank = torch.sigmoid(x) if scoring == "sigmoid" else x
                assert torch.equal(idx.long(), topk.stable_topk(rank, k)), (t, e, kind, k)
                if e % 4 == 0:
                    want_idx, want_w = topk.top2_sum_gate(
                        x,
                        torch.zeros(e, device="cuda"),
                        k,
                        0,
                        0,
                        False,
                        0,
                        1.0,
                        0,
                        1,
                        0,
                        1,
                        scoring,
                    )
                    assert torch.equal(idx.long(), want_idx)
                    assert torch.allclose(w, want_w), (t, e, kind, k)


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
