"""GPU tests of mhc_pre_apply_mix and mhc_pre_apply_mix_backward.

Against float64 (outputs poisoned with NaN before each call): the forward within
``2**-8 |want| + 1e-5 sum_r |mix x|`` (one bf16 rounding of a float32 sum); ``grad_x``
bit-exact against the reference (one float32 product, rounded: the kernel's operation);
``grad_mix`` within ``1e-5 sum_h |grad_out x|`` (a float32 sum over H). Sizes cover the
16-byte path (H % 8 == 0) and the element path, R in {1, 2, 3, 4, 8}, odd token counts. The
last tests compare with TileKernels' reference through autograd on its test's data and
bounds (``atol=1e-2, rtol=1e-3``), and check that every variant built for this GPU was
exercised.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import MHC_CASES, assert_every_variant_exercised, selected

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

BF16, F32 = torch.bfloat16, torch.float32
SEEN: set[str] = set()
CASES = MHC_CASES


def _select(op: str, shapes) -> str:
    return selected(op, "bf16", shapes)


def _inputs(t: int, r: int, h: int):
    x = torch.randn(t, r, h, device="cuda").to(BF16)
    mix = torch.randn(t, r, 1, device="cuda")
    return x, mix


@pytest.mark.parametrize(("t", "r", "h"), CASES)
def test_forward(t, r, h):
    import tileaot

    x, mix = _inputs(t, r, h)
    out = torch.full((t, h), float("nan"), dtype=BF16, device="cuda")
    name = _select("mhc_pre_apply_mix", [(t, r, h), (t, r, 1), (t, h)])
    SEEN.add(name)
    assert tileaot.mhc_pre_apply_mix(x, mix, out=out) is out
    torch.cuda.synchronize()
    terms = x.double() * mix.double()
    want = terms.sum(-2)
    err = (out.double() - want).abs()
    bad = ~(err <= 2**-8 * want.abs() + 1e-5 * terms.abs().sum(-2))  # NaN fails
    assert not bad.any(), f"{name}: {int(bad.sum())} elements off, max error {err.max()}"


@pytest.mark.parametrize(("t", "r", "h"), CASES)
def test_backward(t, r, h):
    import tileaot

    from kernels_py.mhc.mhc_pre_apply_mix_backward import reference

    x, mix = _inputs(t, r, h)
    g = torch.randn(t, h, device="cuda").to(BF16)
    out = (
        torch.full((t, r, h), float("nan"), dtype=BF16, device="cuda"),
        torch.full((t, r, 1), float("nan"), dtype=F32, device="cuda"),
    )
    name = _select(
        "mhc_pre_apply_mix_backward", [(t, h), (t, r, h), (t, r, 1), (t, r, h), (t, r, 1)]
    )
    SEEN.add(name)
    grad_x, grad_mix = tileaot.mhc_pre_apply_mix_backward(g, x, mix, out=out)
    torch.cuda.synchronize()
    assert grad_x is out[0] and grad_mix is out[1]
    want_x, _ = reference(g, x, mix)
    assert torch.equal(grad_x.view(torch.int16), want_x.view(torch.int16)), name
    terms = g.double().unsqueeze(-2) * x.double()
    err = (grad_mix.double() - terms.sum(-1, keepdim=True)).abs()
    bad = ~(err <= 1e-5 * terms.abs().sum(-1, keepdim=True) + 1e-30)  # NaN fails
    assert not bad.any(), f"{name}: {int(bad.sum())} of grad_mix off, max error {err.max()}"


@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("hidden", [2048, 4096, 7168])
def test_autograd_matches_tile_kernels_reference(n, hidden):
    import tileaot
    from _tile_kernels import tk

    ref_fn = tk("mhc").mhc_pre_apply_mix_ref
    x = torch.randn(2, 1023, n, hidden, device="cuda").to(BF16).sigmoid()
    mix = torch.randn(2, 1023, n, 1, device="cuda").softmax(-2)
    grad_out = torch.randn(2, 1023, hidden, device="cuda").to(BF16)
    results = []
    for fn in (tileaot.mhc_pre_apply_mix, ref_fn):
        xl, ml = x.clone().requires_grad_(True), mix.clone().requires_grad_(True)
        y = fn(xl, ml)
        y.backward(grad_out)
        results.append((y.detach(), xl.grad, ml.grad))
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-3)  # TileKernels' test


@pytest.mark.parametrize("op", ["mhc_pre_apply_mix", "mhc_pre_apply_mix_backward"])
def test_every_variant_for_this_gpu_was_exercised(op):
    assert_every_variant_exercised((op,), SEEN)
