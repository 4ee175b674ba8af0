"""GPU tests of engram_grad_w_reduce against kernels_py.engram.engram_grad_w_reduce.reference
and TileKernels' test formula (``acc + partial.sum(0) * w``, bound ``calc_diff < 1e-10``),
and against TileKernels' ``grad_w_reduce`` kernel where its JIT runs here (the same order of
adds and fused multiply-add: the same bits).

The sum over the blocks is bit-exact (w = 1, acc = 0 shows it alone); the whole result equals
the reference's emulated fused multiply-add, a double-rounding tie aside (allowed: 1 ulp, in
fewer than 1 element in 10**5). Sizes: TileKernels' (P = 132 blocks, hc_mult 4, H 2048 to
7168), odd P and P = 0, H not a multiple of 4 (the element path), outputs poisoned (NaN);
the same bits twice; the caller's stream.
"""

from __future__ import annotations

import importlib

import pytest
from _gpu_helpers import assert_every_variant_exercised, assert_ordered_on_callers_stream, selected

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

OP = "engram_grad_w_reduce"
SEEN: set[str] = set()
# (P, GW, H)
CASES = [
    (132, 4, 7168),
    (132, 4, 4096),
    (132, 4, 2048),
    (78, 4, 7168),
    (528, 4, 7168),
    (1, 1, 4),
    (0, 4, 64),
    (13, 3, 1030),
    (7, 2, 1001),
    (9, 5, 260),
]


def _ref():
    return importlib.import_module("kernels_py.engram.engram_grad_w_reduce").reference


def _inputs(p: int, g: int, h: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=gen)

    return randn(p, g, h), randn(g, h).bfloat16(), randn(g, h).bfloat16(), randn(g, h), randn(g, h)


def _assert_matches_reference(got, want, case):
    """Bit-exact but for a double-rounding tie of the reference's emulated fma (1 ulp)."""
    for name, a, b in zip(("grad_w_h", "grad_w_k"), got, want, strict=True):
        ulps = (a.view(torch.int32).long() - b.view(torch.int32).long()).abs()
        assert not a.isnan().any(), f"{case} {name}: NaN (an element never written)"
        assert ulps.max().item() <= 1, f"{case} {name}: {ulps.max().item()} ulps off"
        assert (ulps > 0).sum().item() <= max(1, a.numel() // 10**5), f"{case} {name}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: "p{}_g{}_h{}".format(*c))
def test_engram_grad_w_reduce(case):
    import tileaot
    from _tile_kernels import calc_diff

    p, g, h = case
    args = _inputs(p, g, h, seed=p + g + h)
    SEEN.add(selected(OP, "bf16", [(max(p, 1), g, h), *([(g, h)] * 6)]))
    out = tuple(torch.full((g, h), float("nan"), device="cuda") for _ in "hk")
    got = tileaot.engram_grad_w_reduce(*args, out=out)
    torch.cuda.synchronize()
    assert got == out
    _assert_matches_reference(got, _ref()(*args), case)
    partial, w_h, w_k, acc_h, acc_k = args
    s = partial.sum(0)
    assert calc_diff(got[0], acc_h + s * w_k.float()) < 1e-10
    assert calc_diff(got[1], acc_k + s * w_h.float()) < 1e-10


@pytest.mark.parametrize("case", [(132, 4, 7168), (13, 3, 1030)], ids=str)
def test_sum_over_blocks_is_bit_exact(case):
    """w = 1 and acc = 0: the result is the float32 sum over p = 0, 1, ... itself."""
    import tileaot

    p, g, h = case
    partial = _inputs(p, g, h, seed=7)[0] * 1e3
    ones = torch.ones(g, h, dtype=torch.bfloat16, device="cuda")
    zeros = torch.zeros(g, h, device="cuda")
    got = tileaot.engram_grad_w_reduce(partial, ones, ones, zeros, zeros)
    want = _ref()(partial, ones, ones, zeros, zeros)
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_same_bits_twice_and_compat_in_place():
    """Deterministic; tileaot.tile_kernels.engram.grad_w_reduce (TileKernels' name) adds into
    its gradients in place, as TileKernels' kernel, which (where its JIT runs here) gives the
    same bits."""
    import tileaot
    import tileaot.tile_kernels as compat

    args = _inputs(132, 4, 7168, seed=3)
    first = tileaot.engram_grad_w_reduce(*args)
    second = tileaot.engram_grad_w_reduce(*args)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    partial, w_h, w_k, acc_h, acc_k = args
    gh, gk = acc_h.clone(), acc_k.clone()
    assert compat.engram.grad_w_reduce(partial, w_h, w_k, gh, gk) is None
    assert torch.equal(gh, first[0]) and torch.equal(gk, first[1])
    try:
        from _tile_kernels import tk

        tk()
        theirs = importlib.import_module("tile_kernels.engram").grad_w_reduce
        th, tkk = acc_h.clone(), acc_k.clone()
        theirs(partial, w_h, w_k, th, tkk)
    except Exception as e:  # pragma: no cover - TileKernels' JIT needs nvcc
        pytest.skip(f"TileKernels' grad_w_reduce kernel does not run here: {e}")
    assert torch.equal(th, first[0]) and torch.equal(tkk, first[1])


def test_launch_is_ordered_on_the_callers_stream():
    import tileaot

    partial, w_h, w_k, acc_h, acc_k = _inputs(528, 4, 7168, seed=4)
    want = _ref()(partial, w_h, w_k, acc_h, acc_k)

    def check(got):
        _assert_matches_reference(got, want, "stream")

    assert_ordered_on_callers_stream(
        lambda p: tileaot.engram_grad_w_reduce(p, w_h, w_k, acc_h, acc_k),
        check,
        partial,
        poison=float("nan"),
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised((OP,), SEEN)
