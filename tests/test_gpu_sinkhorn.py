"""GPU tests of sinkhorn_normalize and sinkhorn_normalize_backward against float64 torch.

The algorithm is TileKernels' (``tile_kernels.torch.sinkhorn_normalize_ref``); the last tests
also compare with that reference itself, run in float32 on the GPU, within the tolerances of
TileKernels' own test (``torch.testing.assert_close`` defaults, forward and autograd backward).

Forward: every element within ``2e-6 + 1e-5 * |P_ref|`` of the float64 evaluation of the
documented sequence (float32 arithmetic with ``expf`` and a correctly rounded reciprocal per
sum: a float32 replay of the kernels' operations on CPU stays within 3e-7 absolute and
4e-6 relative). Backward: ``max |g - g_ref| <= 1e-5 * max |g_ref|`` against float64 autograd
(the replay: <= 7e-7). Outputs are poisoned with NaN before each call. N = 4 and 8 hit the
specialised variants, other N <= 16 the generic one; repeat values straddle the backward's
checkpoint segments (16, 8 and 4 pairs). Each test checks which variant served it; the last
tests check that every variant built for this GPU was exercised.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import assert_every_variant_exercised

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

SEEN: set[str] = set()
CASES = [  # (T, N, repeat, eps, logit scale)
    (1, 4, 1, 1e-6, 1.0),
    (37, 4, 1, 1e-6, 4.0),
    (32768, 4, 20, 1e-6, 1.0),
    (1000, 4, 17, 0.0, 4.0),
    (999, 4, 33, 0.1, 2.0),
    (5, 8, 1, 1e-6, 1.0),
    (333, 8, 9, 1e-6, 4.0),
    (4096, 8, 20, 0.0, 1.0),
    (17, 8, 8, 1e-3, 2.0),
    (7, 1, 3, 1e-6, 1.0),
    (64, 2, 5, 1e-6, 1.0),
    (129, 3, 4, 1e-6, 4.0),
    (1000, 5, 20, 1e-6, 1.0),
    (31, 7, 1, 0.0, 2.0),
    (257, 16, 9, 1e-6, 1.0),
    (3, 12, 2, 1e-6, 1.0),
    (1001, 4, 10, 1e-6, 1.0),
    (513, 8, 10, 1e-6, 1.0),
]


def _select(op: str, shapes) -> str:
    from tileaot import _lib

    native = _lib.native()
    flat = tuple(d for s in shapes for d in s)
    return native.select(native.lookup(op, "fp32"), 0, flat)


def _sinkhorn64(x, repeat, eps):
    """TileKernels' sequence, written out here (run in float64 by the callers)."""
    p = torch.softmax(x, dim=-1) + eps
    p = p / (p.sum(dim=-2, keepdim=True) + eps)
    for _ in range(repeat - 1):
        p = p / (p.sum(dim=-1, keepdim=True) + eps)
        p = p / (p.sum(dim=-2, keepdim=True) + eps)
    return p


@pytest.mark.parametrize(("t", "n", "repeat", "eps", "scale"), CASES)
def test_forward(t, n, repeat, eps, scale):
    import tileaot

    logits = torch.randn(t, n, n, device="cuda") * scale
    out = torch.full_like(logits, float("nan"))
    name = _select("sinkhorn_normalize", [(t, n, n)] * 2)
    SEEN.add(name)
    got = tileaot.sinkhorn_normalize(logits, repeat, eps, out=out)
    torch.cuda.synchronize()
    assert got is out
    want = _sinkhorn64(logits.double(), repeat, eps)
    err = (out.double() - want).abs()
    bad = ~(err <= 2e-6 + 1e-5 * want.abs())  # NaN fails
    assert not bad.any(), f"{name}: {int(bad.sum())} elements off, max error {err.max().item()}"


@pytest.mark.parametrize(("t", "n", "repeat", "eps", "scale"), CASES)
def test_backward(t, n, repeat, eps, scale):
    import tileaot

    logits = torch.randn(t, n, n, device="cuda") * scale
    grad_out = torch.randn_like(logits)
    out = torch.full_like(logits, float("nan"))
    name = _select("sinkhorn_normalize_backward", [(t, n, n)] * 3)
    SEEN.add(name)
    got = tileaot.sinkhorn_normalize_backward(grad_out, logits, repeat, eps, out=out)
    torch.cuda.synchronize()
    assert got is out
    x = logits.double().requires_grad_(True)
    (want,) = torch.autograd.grad(_sinkhorn64(x, repeat, eps), x, grad_out.double())
    err = (out.double() - want).abs().max().item()
    bound = 1e-5 * want.abs().max().item()
    assert err <= bound, f"{name}: max error {err:.3e} > {bound:.3e}"  # NaN fails too


@pytest.mark.parametrize("n", [4, 8, 6])
def test_autograd_end_to_end_with_batch_dims(n):
    import tileaot

    logits = torch.randn(4, 33, n, n, device="cuda", requires_grad=True)
    p = tileaot.sinkhorn_normalize(logits, 20, 1e-6)
    weights = torch.randn_like(p)
    (p * weights).sum().backward()
    x = logits.detach().double().requires_grad_(True)
    ref = _sinkhorn64(x, 20, 1e-6)
    (ref * weights.double()).sum().backward()
    torch.testing.assert_close(p.double(), ref, rtol=1e-5, atol=2e-6)
    err = (logits.grad.double() - x.grad).abs().max().item()
    assert err <= 1e-5 * x.grad.abs().max().item()


def test_columns_sum_to_one():
    import tileaot

    p = tileaot.sinkhorn_normalize(torch.randn(4096, 4, 4, device="cuda"), 50, 0.0)
    ones = torch.ones(4096, 4, device="cuda")
    torch.testing.assert_close(p.sum(-2), ones, rtol=0, atol=1e-6)
    torch.testing.assert_close(p.sum(-1), ones, rtol=0, atol=1e-3)


@pytest.mark.parametrize("repeat", [1, 10, 20])
@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("lead", [(1, 1), (2, 1023), (1, 4096)])
def test_matches_tile_kernels_reference_forward_and_backward(repeat, n, lead):
    import tileaot
    from _tile_kernels import tk

    ref_fn = tk("mhc").sinkhorn_normalize_ref
    logits = torch.randn(*lead, n, n, device="cuda")
    grad_out = torch.randn_like(logits)
    x = logits.clone().requires_grad_(True)
    p = tileaot.sinkhorn_normalize(x, repeat, 1e-6)
    p.backward(grad_out)
    xr = logits.clone().requires_grad_(True)
    want = ref_fn(xr, repeat, 1e-6)
    want.backward(grad_out)
    torch.testing.assert_close(p, want)  # TileKernels' test: assert_close defaults
    torch.testing.assert_close(x.grad, xr.grad)


@pytest.mark.parametrize("op", ["sinkhorn_normalize", "sinkhorn_normalize_backward"])
def test_every_variant_for_this_gpu_was_exercised(op):
    assert_every_variant_exercised((op,), SEEN)
