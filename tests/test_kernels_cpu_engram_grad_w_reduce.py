"""engram_grad_w_reduce on the CPU: the reference against TileKernels 1.0.0's test formula
(``acc + grad_w_partial.sum(0) * w``, bound ``calc_diff < 1e-10``, its test data: randn
partials over one block per SM, hc_mult 4) and against float64, its fixed summation order, the
wrapper's launches and checks, and lowering.
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, misaligned, t  # noqa: E402, F401
from _kernel_args import check_launch  # noqa: E402
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import calc_diff  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.engram.engram_grad_w_reduce")
op = importlib.import_module("tileaot.engram_grad_w_reduce").engram_grad_w_reduce
BF16, F32, F64 = torch.bfloat16, torch.float32, torch.float64
# (P, GW, H): TileKernels' test (P = SMs of an H800 / H200; hidden sizes), odd ones
SHAPES = ((132, 4, 7168), (132, 4, 2048), (78, 4, 4096), (1, 1, 7), (5, 3, 130), (0, 4, 64))


def data(p: int, gw: int, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    partial = torch.randn(p, gw, n, generator=g)
    w_h, w_k = (torch.randn(gw, n, generator=g).to(BF16) for _ in "hk")
    acc_h, acc_k = (torch.randn(gw, n, generator=g) for _ in "hk")
    return partial, w_h, w_k, acc_h, acc_k


def tk_formula(partial, w_h, w_k, acc_h, acc_k):
    """TileKernels' test reference (tests/engram/test_engram_grad_w_reduce.py), in place on
    copies of the accumulators."""
    s = partial.sum(0)
    return acc_h.clone().add_(s * w_k.float()), acc_k.clone().add_(s * w_h.float())


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "p{}_g{}_h{}".format(*s))
def test_reference_within_tile_kernels_bound(shape):
    args = data(*shape, seed=shape[2])
    ours = m.reference(*args)
    theirs = tk_formula(*args)
    exact = tk_formula(*(a.to(F64) for a in args))
    for o, th, ex in zip(ours, theirs, exact, strict=True):
        assert o.dtype == F32 and o.shape == shape[1:]
        assert calc_diff(o, th) < 1e-10
        torch.testing.assert_close(o.to(F64), ex, rtol=1e-5, atol=1e-4)


def test_sum_order_is_block_by_block_from_zero():
    """With w = 1 and acc = 0 the result is the sum itself: float32 adds in block order from
    +0.0, which (big + small) - big shows (any other order would keep the small terms)."""
    n = 8
    partial = torch.zeros(5, 1, n)
    partial[0], partial[1:4], partial[4] = 2.0**24, 1.0, -(2.0**24)
    ones, zeros = torch.ones(1, n, dtype=BF16), torch.zeros(1, n)
    grad_w_h, grad_w_k = m.reference(partial, ones, ones, zeros, zeros)
    assert torch.equal(grad_w_h, torch.zeros(1, n)) and torch.equal(grad_w_k, grad_w_h)
    # -0.0 partials: the sum starts at +0.0 and stays +0.0
    neg = m.reference(torch.full((3, 1, n), -0.0), ones, ones, zeros, zeros)[0]
    assert not torch.signbit(neg).any()


def test_last_step_rounds_once():
    """acc + s * w with one rounding (the kernel's fused multiply-add): s * w = 1 + 2**-23
    + 2**-46 is not a float32, acc = -1 leaves its low bits, which two roundings lose."""
    s = torch.tensor([[[1.0 + 2.0**-23]]])
    w = torch.tensor([[1.0 + 2.0**-7]], dtype=BF16)  # 8 significant bits
    acc = torch.tensor([[-1.0]])
    fused, _ = m.reference(s, w, w, acc, acc)
    exact = -1.0 + (1.0 + 2.0**-23) * (1.0 + 2.0**-7)
    assert fused.item() == torch.tensor(exact, dtype=F32).item()
    assert fused.item() != (acc + s[0] * w.float()).item()


def test_launch_arguments(fake, cpu_as_cuda):
    partial, w_h, w_k = t(6, 4, 72, dtype=F32), t(4, 72), t(4, 72)
    acc_h, acc_k = t(4, 72, dtype=F32), t(4, 72, dtype=F32)
    grad_w_h, grad_w_k = op(partial, w_h, w_k, acc_h, acc_k)
    assert grad_w_h.shape == grad_w_k.shape == (4, 72) and grad_w_h.dtype == F32
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("engram_grad_w_reduce", "bf16")
    check_launch(
        launch,
        "engram_grad_w_reduce",
        grad_w_partial=partial,
        w_h=w_h,
        w_k=w_k,
        acc_h=acc_h,
        acc_k=acc_k,
        grad_w_h=grad_w_h,
        grad_w_k=grad_w_k,
    )
    out = (torch.empty(4, 72), torch.empty(4, 72))
    assert op(partial, w_h, w_k, acc_h, acc_k, out=out) == out


def test_no_blocks_launches_one_zero_block(fake, cpu_as_cuda):
    """P == 0: the kernel gets a zero [1, GW, H] stand-in (acc + 0 * w)."""
    op(t(0, 4, 72, dtype=F32), t(4, 72), t(4, 72), t(4, 72, dtype=F32), t(4, 72, dtype=F32))
    (launch,) = fake.launches
    assert launch.ptrs[0] != 0


@pytest.mark.parametrize("shape", [(3, 0, 72), (3, 4, 0)])
def test_empty_launches_nothing(fake, cpu_as_cuda, shape):
    p, gw, n = shape
    w, acc = t(gw, n), t(gw, n, dtype=F32)
    grads = op(t(p, gw, n, dtype=F32), w, w, acc, acc)
    assert all(g.shape == (gw, n) for g in grads)
    assert fake.launches == []


def _args(**change):
    args = {"grad_w_partial": t(6, 4, 72, dtype=F32), "w_h": t(4, 72), "w_k": t(4, 72)}
    args |= {"acc_h": t(4, 72, dtype=F32), "acc_k": t(4, 72, dtype=F32)}
    return args | change


BAD = [
    (_args(grad_w_partial=t(6, 4, 72)), TypeError, r"grad_w_partial"),
    (_args(w_h=t(4, 72, dtype=F32)), TypeError, r"w_h"),
    (_args(acc_k=t(4, 72)), TypeError, r"acc_k"),
    (_args(grad_w_partial=t(4, 72, dtype=F32)), ValueError, r"grad_w_partial must have shape"),
    (_args(w_k=t(4, 64)), ValueError, r"w_k must have shape"),
    (_args(acc_h=t(2, 72, dtype=F32)), ValueError, r"acc_h must have shape"),
    (_args(w_h=misaligned(4, 72)), ValueError, r"w_h"),
    (_args(out=(t(4, 72, dtype=F32),)), TypeError, r"out"),
    (_args(out=(t(4, 72, dtype=F32), t(4, 64, dtype=F32))), ValueError, r"out"),
    (_args(acc_h="acc"), TypeError, r"acc_h"),
]


@pytest.mark.parametrize("args, exc, message", BAD)
def test_bad_calls_raise_one_line_before_any_launch(args, exc, message, fake, cpu_as_cuda):
    with pytest.raises(exc, match=message) as info:
        op(**args)
    assert "\n" not in str(info.value)
    assert fake.launches == []


def test_out_aliasing_an_accumulator_is_refused(fake, cpu_as_cuda):
    args = _args()
    with pytest.raises(ValueError, match="overlaps") as info:
        op(**args, out=(args["acc_h"], torch.empty(4, 72)))
    assert "\n" not in str(info.value)
    assert fake.launches == []


@needs_tilelang
def test_lowers_for_every_default_arch():
    """16-byte partial loads; the last step a fused multiply-add (packed from sm_100, else
    ``acc + s * w``, which NVRTC contracts)."""
    for arch, src in default_arch_sources(m.factory, "egwr", dtype="bfloat16"):
        assert "*(float4*)(buf + " in src and "*(float4*)(grad_w_partial + " in src, arch
        assert "float8" not in src and "longlong4" not in src, arch
        assert ("tl::fma2(" in src) == arch.startswith(("sm_100", "sm_120")), arch
