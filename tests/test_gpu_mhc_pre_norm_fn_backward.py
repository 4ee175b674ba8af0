"""GPU tests of mhc_pre_norm_fn_backward and of mhc_pre_norm_fn's autograd.

Against float64 with ``mhc_fn`` rounded to TF32 first (the kernels' tensor-core operand,
TileKernels' round_to_tf32, exact in the reference), outputs poisoned with NaN before each
call, with ``mag`` the same sums taken over absolute values and ``gmag = |gd| @ |mhc_fn|``:
``residual_grad`` within one bf16 rounding (``2**-8 |want|``) plus ``2e-5 mag`` (float32 sums
of N and of K terms in another order) plus ``2**-11 gmag`` (gd rounded to TF32 in the kernel,
half a TF32 unit per term); ``mhc_fn_grad`` within ``(1e-4 + 2**-11) mag`` (float32 sums over
every token in 64-token tiles, gd rounded to TF32). All tighter than TileKernels' own test
(bf16 ``assert_close`` defaults and ``atol = 3e-2`` against a TF32 reference). Sizes: the
forward's (R in {1, 2, 3, 4, 8}, the 16-byte and element paths), N = 24 (the static variant)
and other N, token counts around the 64-token tiles and many tiles deep. Then: two calls give
the same bits (every sum in a fixed order), autograd through tileaot.mhc_pre_norm_fn (with a
norm weight) against autograd through TileKernels' reference, the caller's stream, and every
variant built for this GPU exercised.
"""

from __future__ import annotations

import math

import pytest
from _gpu_helpers import (
    MHC_CASES,
    assert_every_variant_exercised,
    assert_ordered_on_callers_stream,
    selected,
    skip_big_under_sanitizer,
    tf32,
)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

BF16, F32, F64 = torch.bfloat16, torch.float32, torch.float64
SEEN: set[str] = set()
FN_GRAD_BOUND = 1e-4 + 2**-11  # float32 sums over the tokens, gd rounded to TF32
CASES = [(t, r, h, n) for t, r, h in MHC_CASES for n in (24, 1, 7, 32)]
CASES += [(t, 4, 1280, 24) for t in (1023, 1024, 1025, 2049)] + [(4103, 2, 1001, 5)]
# 64-token tiles of grad_mul: either side of one and two; 128-column blocks with a partial last
# one (H = 130) and fewer column steps than mul's 16 slices; 20000 tokens deep in one block.
CASES += [(t, 4, 256, 24) for t in (63, 64, 65, 127, 129)] + [(17, 3, 130, 9), (20000, 1, 128, 24)]


def _inputs(t: int, r: int, h: int, n: int):
    residual = torch.randn(t, r, h, device="cuda").to(BF16)
    fn = torch.randn(n, r * h, device="cuda") * (r * h) ** -0.5
    return torch.randn(t, n, device="cuda"), residual, fn


def _float64(g, residual, fn, eps):
    """(residual_grad, its magnitude, mhc_fn_grad, its magnitude, |gd| @ |fn|) in float64 by
    the documented formulas with `fn` rounded to TF32 (the magnitudes: the same sums of
    absolute values)."""
    x, f, g = residual.double().flatten(1), tf32(fn).double(), g.double()
    k = x.shape[1]
    s = x.square().sum(-1, keepdim=True)
    rms = (s / k + eps).rsqrt()
    d, d_mag = x @ f.t(), x.abs() @ f.abs().t()
    gd = g * rms
    scale = rms / (s + eps * k) / 2
    gs, gs_mag = -(g * d).sum(-1, keepdim=True) * scale, (g.abs() * d_mag).sum(-1, True) * scale
    x_grad = gd @ f + 2 * x * gs
    x_mag = gd.abs() @ f.abs() + 2 * x.abs() * gs_mag
    return x_grad, x_mag, gd.t() @ x, gd.abs().t() @ x.abs(), gd.abs() @ f.abs()


def _within(got, want, bound, name):
    err = (got.double() - want).abs()
    bad = ~(err <= bound)  # NaN fails
    assert not bad.any(), f"{name}: {int(bad.sum())} elements off, max error {err.max()}"


@pytest.mark.parametrize(("t", "r", "h", "n"), CASES)
def test_backward(t, r, h, n):
    import tileaot

    skip_big_under_sanitizer(t * r * h)
    g, residual, fn = _inputs(t, r, h, n)
    out = (
        torch.full((t, r, h), math.nan, device="cuda").to(BF16),
        torch.full((n, r * h), math.nan, device="cuda"),
    )
    shapes = [(t, n), (t, r, h), (n, r, h), (t, r, h), (n, r, h), (t, n + 1), (16, t, 33)]
    name = selected("mhc_pre_norm_fn_backward", "bf16", shapes)
    SEEN.add(name)
    got = tileaot.mhc_pre_norm_fn_backward(g, residual, fn, 1e-6, out=out)
    torch.cuda.synchronize()
    assert got[0] is out[0] and got[1] is out[1]
    x_grad, x_mag, fn_grad, fn_mag, g_mag = _float64(g, residual, fn, 1e-6)
    x_bound = 2**-8 * x_grad.abs() + 2e-5 * x_mag + 2**-11 * g_mag + 1e-30
    _within(got[0].flatten(1), x_grad, x_bound, name)
    _within(got[1], fn_grad, FN_GRAD_BOUND * fn_mag + 1e-30, name)
    again = tileaot.mhc_pre_norm_fn_backward(g, residual, fn, 1e-6)
    assert again[1].shape == fn.shape  # [N, R * H] in, [N, R * H] out
    for a, b in zip(again, got, strict=True):  # the same bits: sums in a fixed order
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name


def test_zero_rows_and_eps_zero():
    """A zero row: ``(g * rsqrt(eps)) @ mhc_fn`` and nothing added to mhc_fn_grad; eps = 0
    on the other rows."""
    import tileaot

    g, residual, fn = _inputs(5, 4, 256, 24)
    residual[2] = 0
    x_grad, fn_grad = tileaot.mhc_pre_norm_fn_backward(g, residual, fn, 1e-6)
    gd = g[2].double() / math.sqrt(1e-6)
    want = gd @ tf32(fn).double()
    # gd is rounded to TF32 (as TileKernels' kernel rounds it) before the tensor-core product:
    # half a TF32 unit of each term, which cancellation can make large against the sum (the
    # H200, 2026-12-04b call 3: 0.52 off at a term magnitude of this bound's order)
    mag = gd.abs() @ tf32(fn).double().abs()
    _within(x_grad[2].flatten().double(), want, 2**-8 * want.abs() + 2**-10 * mag, "zero row")
    _, rest = tileaot.mhc_pre_norm_fn_backward(g[[0, 1, 3, 4]], residual[[0, 1, 3, 4]], fn)
    torch.testing.assert_close(fn_grad, rest, rtol=1e-5, atol=1e-6)
    got = tileaot.mhc_pre_norm_fn_backward(g[:2], residual[:2], fn, 0.0)
    x64, x_mag, fn64, fn_mag, g_mag = _float64(g[:2], residual[:2], fn, 0.0)
    _within(got[0].flatten(1), x64, 2**-8 * x64.abs() + 2e-5 * x_mag + 2**-11 * g_mag, "eps 0")
    _within(got[1], fn64, FN_GRAD_BOUND * fn_mag, "eps 0")


@pytest.mark.parametrize("normw", [False, True])
@pytest.mark.parametrize("tokens", [13, 4096])
@pytest.mark.parametrize("hidden", [1280, 7168])
def test_autograd_matches_tile_kernels_reference(hidden, tokens, normw):
    """TileKernels' test data (per-stream scales, fn ~ 1e-4, a norm weight ~ 1 + 0.1 randn):
    the gradients of residual, mhc_fn and the weight against autograd through
    ``mhc_pre_norm_fn_ref`` (float32 math)."""
    skip_big_under_sanitizer(tokens * 4 * hidden)
    import tileaot
    from _tile_kernels import tk

    r = 4
    streams = 1 + 0.01 * torch.arange(r, device="cuda")
    residual = (torch.randn(1, tokens, r, hidden, device="cuda") * streams.view(-1, 1)).to(BF16)
    fn = torch.randn(r * (r + 2), r, hidden, device="cuda") * 1e-4 * streams.view(-1, 1)
    fn = fn.flatten(1)
    w = torch.randn(r * hidden, device="cuda") * 0.1 + 1.0
    g = torch.randn(1, tokens, r * (r + 2), device="cuda")
    inputs = (residual, fn, w) if normw else (residual, fn)
    results = []
    for op in (tileaot.mhc_pre_norm_fn, tk("mhc").mhc_pre_norm_fn_ref):
        leaves = [v.clone().requires_grad_() for v in inputs]
        op(*leaves[:2], (leaves + [None])[2], 1e-6).backward(g)
        results.append([leaf.grad for leaf in leaves])
    got, want = results
    torch.testing.assert_close(got[0].float(), want[0].float(), rtol=2**-7, atol=1e-5)
    for a, b in zip(got[1:], want[1:], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3 * float(b.abs().max()))


def test_stream_order():
    """Launched on the caller's stream: the gradient written there is the one read (the
    result, deterministic, equals an earlier call's bit for bit)."""
    import tileaot

    g, residual, fn = _inputs(4096, 4, 1280, 24)
    want = tileaot.mhc_pre_norm_fn_backward(g, residual, fn)
    assert_ordered_on_callers_stream(
        lambda grad: tileaot.mhc_pre_norm_fn_backward(grad, residual, fn),
        lambda got: all(torch.equal(a, b) for a, b in zip(got, want, strict=True)),
        g,
    )


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised(("mhc_pre_norm_fn_backward",), SEEN)
