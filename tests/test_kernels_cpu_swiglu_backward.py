"""swiglu_backward on the CPU: our reference against TileKernels 1.0.0's
(`tile_kernels.torch.swiglu_backward`) on fused mappings built as its get_fused_mapping builds
them (tests/_fused_mapping.py), the wrapper's launch and checks, and lowering.

TileKernels' reference asks ``torch.compile`` for one fused multiply-add (its
``elementwise_fma``); on CUDA that is a true fma (its fused kernel, compared with it exactly in
its tests, contracts the same expression), but on the CPU inductor emits a multiply and an add.
So the comparison runs TileKernels' reference with that helper replaced by a correctly rounded
fma (`moe_reduce.fma_f32`): then out and x_grad agree bit for bit; weight_grad within
TileKernels' test bound (1e-4).
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from _fakes import cpu_as_cuda, fake, misaligned, refusals_test, t  # noqa: E402, F401
from _fused_mapping import fused_mapping  # noqa: E402
from _kernel_args import check_launch  # noqa: E402
from _lowering import default_arch_sources, needs_tilelang  # noqa: E402
from _tile_kernels import tk  # noqa: E402

__all__ = ["cpu_as_cuda", "fake"]  # fixtures, used by name

m = importlib.import_module("kernels_py.act.swiglu_backward")
fma_f32 = importlib.import_module("kernels_py.moe.moe_reduce").fma_f32
op = importlib.import_module("tileaot.swiglu_backward").swiglu_backward
FP8 = torch.float8_e4m3fn


def mapping(tokens: int, k: int, experts: int, align: int, seed: int):
    """(pos_to_token_topk [P], token_topk_to_pos [T, K]) of a get_fused_mapping-style layout."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(-1, experts, (tokens, k), generator=gen)
    _, tk2p = fused_mapping(idx, experts, align)
    rows = int(tk2p.max()) + 1 + align if tk2p.numel() else align
    p2tk = torch.full((rows,), -1, dtype=torch.int32)
    live = tk2p.reshape(-1) >= 0
    p2tk[tk2p.reshape(-1)[live].long()] = torch.arange(tokens * k, dtype=torch.int32)[live]
    return p2tk, tk2p


def inputs(rows: int, h: int, p: int, tokens: int, k: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, 2 * h, generator=gen) * 200).to(FP8)
    x_sf = torch.rand(rows, 2 * h // p, generator=gen) * 0.05
    grad_out = torch.randn(rows, h, generator=gen).bfloat16()
    weight = torch.rand(tokens, k, generator=gen)
    return x, x_sf, grad_out, weight


@pytest.fixture
def tk_reference(monkeypatch):
    ref = tk("swiglu")
    monkeypatch.setattr(
        ref, "elementwise_fma", lambda a, b, c: fma_f32(a, b, torch.full_like(a, c))
    )
    return ref.swiglu_backward


@pytest.mark.parametrize("p", m.GROUPS)
@pytest.mark.parametrize("clamp", [None, 10.0, 0.5])
@pytest.mark.parametrize(("tokens", "k", "experts", "h"), [(37, 8, 16, 256), (5, 2, 3, 128)])
def test_reference_matches_tile_kernels(tk_reference, p, clamp, tokens, k, experts, h):
    p2tk, tk2p = mapping(tokens, k, experts, 16, tokens + h)
    x, x_sf, grad_out, weight = inputs(p2tk.shape[0], h, p, tokens, k, tokens)
    ours = m.reference(x, x_sf, grad_out, weight, p2tk, tk2p, clamp)
    theirs = tk_reference((x, x_sf), grad_out, weight, p2tk, tk2p, p, clamp)
    assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])
    torch.testing.assert_close(ours[2], theirs[2], atol=1e-4, rtol=1e-4)
    assert torch.equal(ours[2] == 0, theirs[2] == 0)  # the same unrouted pairs
    if clamp is not None:  # the clamp is reached (gradients zeroed) in these draws
        assert (ours[1] == 0).sum() > (theirs[1].numel() // 100)
    bf = m.reference(x, x_sf, grad_out, weight, p2tk, tk2p, clamp, torch.bfloat16)
    assert torch.equal(bf[1], theirs[1].bfloat16()) and torch.equal(bf[0], theirs[0].bfloat16())


def i32(*shape):
    return t(*shape, dtype=torch.int32)


def _args(rows=6, h=128, p=128, tokens=4, k=2):
    return (
        t(rows, 2 * h, dtype=FP8),
        t(rows, 2 * h // p, dtype=torch.float32),
        t(rows, h),
        t(tokens, k, dtype=torch.float32),
        i32(rows),
        i32(tokens, k),
    )


def test_launch_arguments(fake, cpu_as_cuda):
    args = _args()
    out, x_grad, w_grad = op(*args, 0.5)
    assert out.shape == (6, 128) and out.dtype == torch.float32
    assert x_grad.shape == (6, 256) and w_grad.shape == (4, 2)
    (launch,) = fake.launches
    assert fake.by_handle[launch.handle] == ("swiglu_backward", "fp32,g128")
    names = ("x", "x_sf", "grad_out", "weight", "pos_to_token_topk", "token_topk_to_pos")
    tensors = dict(zip(names, args, strict=True))
    check_launch(launch, "swiglu_backward", **tensors, out=out, x_grad=x_grad, weight_grad=w_grad)
    assert launch.scalars == (0.5,)
    op(*_args(p=32), out_dtype=torch.bfloat16)
    launch = fake.launches[-1]
    assert fake.by_handle[launch.handle] == ("swiglu_backward", "bf16,g32")
    assert launch.scalars == (float("inf"),)


def test_empty_calls(fake, cpu_as_cuda):
    """No rows: weight_grad zero-filled, no launch. No (token, slot) pair: x stands in for the
    empty weight tensors (the kernel reads none of them)."""
    args = list(_args(rows=0))
    w_grad = op(*args)[2]
    assert w_grad.shape == (4, 2) and not w_grad.any() and fake.launches == []
    args = list(_args(tokens=0))
    args[4] = torch.full((6,), -1, dtype=torch.int32)
    assert op(*args)[2].shape == (0, 2)
    assert len(fake.launches) == 1


def _bad(**change):
    args = dict(zip(("x", "x_sf", "grad_out", "weight", "p2tk", "tk2p"), _args(), strict=True))
    clamp = change.pop("clamp", None)
    out_dtype = change.pop("out_dtype", None)
    args.update(change)
    return lambda: op(*args.values(), clamp, out_dtype=out_dtype)


BAD = [
    (_bad(x=t(6, 256)), TypeError, r"x"),
    (_bad(x_sf=t(6, 2, dtype=torch.bfloat16)), TypeError, r"x_sf"),
    (_bad(x_sf=t(6, 3, dtype=torch.float32)), ValueError, r"x_sf"),
    (_bad(grad_out=t(6, 128, dtype=torch.float32)), TypeError, r"grad_out"),
    (_bad(grad_out=t(6, 64)), ValueError, r"grad_out"),
    (_bad(weight=t(4, 3, dtype=torch.float32)), ValueError, r"token_topk_to_pos|weight"),
    (_bad(p2tk=i32(5)), ValueError, r"pos_to_token_topk"),
    (_bad(p2tk=t(6, dtype=torch.int64)), TypeError, r"pos_to_token_topk"),
    (_bad(x=misaligned(6, 256, dtype=FP8)), ValueError, r"x"),
    (_bad(clamp=-1.0), ValueError, r"swiglu_clamp_value"),
    (_bad(clamp=float("nan")), ValueError, r"swiglu_clamp_value"),
    (_bad(clamp="1"), TypeError, r"swiglu_clamp_value"),
    (_bad(out_dtype=torch.float16), TypeError, r"out_dtype"),
]


test_bad_calls_raise_before_any_launch = refusals_test(BAD)


def test_h_not_a_multiple_of_the_group(fake, cpu_as_cuda):
    args = list(_args(h=48, p=32))  # 2H = 96 = 3 groups of 32: H is no whole group
    args[1] = t(6, 3, dtype=torch.float32)
    with pytest.raises(ValueError, match="x_sf"):
        op(*args)


@needs_tilelang
def test_lowers_for_every_default_arch():
    """The accurate expf, IEEE divisions and the explicit fma on each default arch."""
    for arch, src in default_arch_sources(m.factory, "swb", out_dtype="float32", group="g128"):
        assert "expf(" in src and "__fdiv_rn" in src and "__fmaf_rn" in src, arch
