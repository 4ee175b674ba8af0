"""GPU tests of mhc_post and mhc_post_backward.

Against float64 (outputs poisoned with NaN before each call): the bf16 results (the output,
``grad_x``, ``grad_residual``) within ``2**-8 |want| + 1e-5 sum |terms|`` (one bf16 rounding of
a float32 sum), the float32 mix gradients within ``1e-5 sum_h |terms|``. Sizes cover the
16-byte path (H % 8 == 0) and the element path, R in {1, 2, 3, 4, 8}, odd token counts. The
last tests compare with TileKernels' reference through autograd on its test's data and bounds
(``assert_close`` defaults for bf16, ``atol = rtol = 1e-4`` for the mix gradients), and check
that every variant built for this GPU was exercised.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import MHC_CASES, assert_every_variant_exercised, selected

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

BF16, F32 = torch.bfloat16, torch.float32
SEEN: set[str] = set()
CASES = MHC_CASES


def _inputs(t: int, r: int, h: int):
    x = torch.randn(t, h, device="cuda").to(BF16)
    residual = torch.randn(t, r, h, device="cuda").to(BF16)
    return x, residual, torch.randn(t, r, 1, device="cuda"), torch.randn(t, r, r, device="cuda")


def _check(name: str, got: torch.Tensor, terms: torch.Tensor, dim: int, rounded: bool) -> None:
    """`got` against ``terms.sum(dim)`` (float64), with the bound of the module docstring."""
    want = terms.sum(dim)
    err = (got.double() - want).abs()
    bound = 1e-5 * terms.abs().sum(dim) + (2**-8 * want.abs() if rounded else 0) + 1e-30
    bad = ~(err <= bound)  # NaN fails
    assert not bad.any(), f"{name}: {int(bad.sum())} elements off, max error {err.max()}"


@pytest.mark.parametrize(("t", "r", "h"), CASES)
def test_forward(t, r, h):
    import tileaot

    x, residual, post, comb = _inputs(t, r, h)
    out = torch.full((t, r, h), float("nan"), dtype=BF16, device="cuda")
    name = selected("mhc_post", "bf16", [(t, h), (t, r, h), (t, r, 1), (t, r, r), (t, r, h)])
    SEEN.add(name)
    assert tileaot.mhc_post(x, residual, post, comb, out=out) is out
    torch.cuda.synchronize()
    x64, r64, p64, c64 = (v.double() for v in (x, residual, post, comb))
    # terms [t, n, 1 + R, h]: post[n] * x, then comb[m, n] * residual[m]
    terms = torch.cat(
        [
            (p64 * x64.unsqueeze(-2)).unsqueeze(-2),
            c64.transpose(-1, -2).unsqueeze(-1) * r64[:, None],
        ],
        dim=-2,
    )
    _check(name, out, terms, -2, rounded=True)


@pytest.mark.parametrize(("t", "r", "h"), CASES)
def test_backward(t, r, h):
    import tileaot

    x, residual, post, comb = _inputs(t, r, h)
    g = torch.randn(t, r, h, device="cuda").to(BF16)
    like = (x, residual, post, comb)
    out = tuple(torch.full_like(v, float("nan")) for v in like)
    shapes = [(t, r, h), (t, h), (t, r, h), (t, r, 1), (t, r, r)]
    name = selected("mhc_post_backward", "bf16", shapes + shapes[1:])
    SEEN.add(name)
    grads = tileaot.mhc_post_backward(g, x, residual, post, comb, out=out)
    torch.cuda.synchronize()
    assert all(a is b for a, b in zip(grads, out, strict=True))
    g64, x64, r64, p64, c64 = (v.double() for v in (g, x, residual, post, comb))
    _check(name + " grad_x", grads[0], p64 * g64, -2, rounded=True)
    _check(name + " grad_residual", grads[1], c64.unsqueeze(-1) * g64[:, None], -2, rounded=True)
    _check(name + " grad_post", grads[2], (x64[:, None] * g64).unsqueeze(-2), -1, rounded=False)
    _check(name + " grad_comb", grads[3], r64[:, :, None] * g64[:, None], -1, rounded=False)


@pytest.mark.parametrize("n", [4, 8])
@pytest.mark.parametrize("hidden", [2048, 4096, 7168])
def test_autograd_matches_tile_kernels_reference(n, hidden):
    import tileaot
    from _tile_kernels import tk

    ref_fn = tk("mhc").mhc_post_ref
    inputs = (
        torch.randn(2, 1023, hidden, device="cuda").to(BF16),
        torch.randn(2, 1023, n, hidden, device="cuda").to(BF16),
        torch.randn(2, 1023, n, 1, device="cuda"),
        torch.randn(2, 1023, n, n, device="cuda"),
    )
    grad_out = torch.randn(2, 1023, n, hidden, device="cuda").to(BF16)
    results = []
    for fn in (tileaot.mhc_post, ref_fn):
        leaves = [v.clone().requires_grad_(True) for v in inputs]
        y = fn(*leaves)
        y.backward(grad_out)
        results.append((y.detach(), *(v.grad for v in leaves)))
    for got, want in zip(*results, strict=True):
        tol = {} if got.dtype == BF16 else {"atol": 1e-4, "rtol": 1e-4}  # TileKernels' test
        torch.testing.assert_close(got, want, **tol)


@pytest.mark.parametrize("op", ["mhc_post", "mhc_post_backward"])
def test_every_variant_for_this_gpu_was_exercised(op):
    assert_every_variant_exercised((op,), SEEN)
