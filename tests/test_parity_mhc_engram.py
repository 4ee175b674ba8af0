"""CPU parity of our mHC and Engram references with TileKernels' (`tile-kernels` 1.0.0).

TileKernels is the spec (DESIGN.md "Must hold" 5): for every op both families share, our
reference (`kernels_py/<family>/<op>.py`, what the GPU tests hold the kernels to) must compute
what ``tile_kernels.torch`` computes, forward and backward (autograd of TileKernels' reference,
as its own backward tests use), within the bounds of TileKernels' tests:

* sinkhorn: ``torch.testing.assert_close`` defaults (float32; ``tests/mhc/test_sinkhorn.py``
  of TileKernels' ports compares kernel and reference, forward and gradient, that way). The
  two algorithms are also compared in float64, where they must agree to rounding (1e-12).

Small odd token counts keep the CPU time short; the sizes are the issue's matrix.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _tile_kernels import tk  # noqa: E402

from kernels_py.mhc import sinkhorn_normalize as sk_fwd  # noqa: E402
from kernels_py.mhc import sinkhorn_normalize_backward as sk_bwd  # noqa: E402

REPEATS = (1, 10, 20)
MHC_N = (4, 8)
TOKENS = (1, 7, 33)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --------------------------------------------------------------------------- mHC sinkhorn


@pytest.mark.parametrize("tokens", TOKENS)
@pytest.mark.parametrize("n", MHC_N)
@pytest.mark.parametrize("repeat", REPEATS)
def test_sinkhorn_forward_and_backward_match_tile_kernels(repeat, n, tokens):
    ref_fn = tk("mhc").sinkhorn_normalize_ref
    logits = torch.randn(2, tokens, n, n)
    grad_out = torch.randn_like(logits)

    # TileKernels' reference in float32, its gradient by autograd (its test's setting).
    x = logits.clone().requires_grad_(True)
    want = ref_fn(x, repeat, 1e-6)
    want.backward(grad_out)
    got = sk_fwd.reference(logits, repeat, 1e-6)
    grad = sk_bwd.reference(grad_out, logits, repeat, 1e-6)
    assert got.dtype == grad.dtype == torch.float32
    torch.testing.assert_close(got, want.detach())
    torch.testing.assert_close(grad, x.grad)

    # The same algorithm: in float64 both agree to rounding, forward and backward.
    x64 = logits.double().requires_grad_(True)
    want64 = ref_fn(x64, repeat, 1e-6)
    (want_grad64,) = torch.autograd.grad(want64, x64, grad_out.double())
    y64 = logits.double().requires_grad_(True)
    got64 = sk_fwd.sinkhorn(y64, repeat, 1e-6)
    (got_grad64,) = torch.autograd.grad(got64, y64, grad_out.double())
    torch.testing.assert_close(got64, want64, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_grad64, want_grad64, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("eps", [0.0, 1e-3, 0.1])
def test_sinkhorn_eps_enters_like_tile_kernels(eps):
    ref_fn = tk("mhc").sinkhorn_normalize_ref
    logits = torch.randn(5, 4, 4, dtype=torch.float64) * 3
    torch.testing.assert_close(
        sk_fwd.sinkhorn(logits, 3, eps), ref_fn(logits, 3, eps), rtol=1e-12, atol=1e-12
    )
