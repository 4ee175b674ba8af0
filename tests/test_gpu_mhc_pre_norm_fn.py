"""GPU tests of mhc_pre_norm_fn.

Against float64 with ``mhc_fn`` rounded to TF32 first, as the kernel's tensor-core products
take it (TileKernels' round_to_tf32; bf16 x is exact in TF32, so each product is exact):
``|got - want| <= 1e-5 (sum_k |x[k] fn[n, k]|) rsqrt(mean(x**2) + eps) + 1e-5 |want|`` (only
float32 sums of K terms in another order), outputs poisoned with NaN before each call. A
kernel that skipped the rounding or truncated instead (2**-11 relative per term) fails it.
Sizes cover the 16-byte path (H % 8 == 0) and the element path, R in {1, 2, 3, 4, 8}, token
counts around the 32-token blocks and past 65535 blocks, fewer column steps than the 16 slices,
N = 24 (the static variant) and other N for the generic one, odd token counts; each call twice
gives the same bits (the slices summed in a fixed order). Then TileKernels' reference on its
test's data and bound (``atol = rtol = 1e-3``, with and without a norm weight), and a check
that every variant built for this GPU was exercised.
"""

from __future__ import annotations

import pytest
from _gpu_helpers import (
    MHC_CASES,
    assert_every_variant_exercised,
    selected,
    skip_big_under_sanitizer,
    tf32,
)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

BF16, F32 = torch.bfloat16, torch.float32
SEEN: set[str] = set()
CASES = [(t, r, h, n) for t, r, h in MHC_CASES for n in (24, 1, 7, 32)]
# Many tokens with the element path (H % 8 != 0), a partial last block, several chunks per
# stream, and either side of 4096 tokens (a many-token path tried on 2026-12-03 switched there).
CASES += [(4103, 2, 1001, n) for n in (24, 5)] + [(4095, 4, 264, 24), (4096, 1, 8, 24)]
# Blocks of 32 tokens: either side of one and two; 16 column slices of 128-column steps: fewer
# steps than slices (R * ceil(H / 128) = 3), a partial last slice (R = 3, H = 1280: 30 steps);
# 2**21 + 1 tokens of one 16-column stream: past 65535 blocks of the one-dimensional grids.
CASES += [(t, 4, 256, 24) for t in (31, 32, 33, 63, 65)] + [(17, 3, 1280, 24), (17, 3, 130, 9)]
CASES += [(2**21 + 1, 1, 16, 24)]


@pytest.mark.parametrize(("t", "r", "h", "n"), CASES)
def test_forward(t, r, h, n):
    import tileaot

    skip_big_under_sanitizer(t * r * h)
    residual = torch.randn(t, r, h, device="cuda").to(BF16)
    fn = torch.randn(n, r * h, device="cuda") * (r * h) ** -0.5
    out = torch.full((t, n), float("nan"), device="cuda")
    name = selected("mhc_pre_norm_fn", "bf16", [(t, r, h), (n, r, h), (t, n), (16, t, 33)])
    SEEN.add(name)
    assert tileaot.mhc_pre_norm_fn(residual, fn, None, 1e-6, out=out) is out
    torch.cuda.synchronize()
    x64, f64 = residual.double().flatten(1), tf32(fn).double()
    rms = (x64.square().mean(-1, keepdim=True) + 1e-6).rsqrt()
    want = (x64 @ f64.t()) * rms
    bound = 1e-5 * (x64.abs() @ f64.abs().t()) * rms + 1e-5 * want.abs() + 1e-30
    err = (out.double() - want).abs()
    bad = ~(err <= bound)  # NaN fails
    assert not bad.any(), f"{name}: {int(bad.sum())} elements off, max error {err.max()}"
    again = tileaot.mhc_pre_norm_fn(residual, fn, None, 1e-6)
    assert torch.equal(again.view(torch.int32), out.view(torch.int32)), name  # the same bits


@pytest.mark.parametrize("normw", [False, True])
@pytest.mark.parametrize("tokens", [13, 4096])
@pytest.mark.parametrize("hidden", [1280, 2560, 7168])
def test_matches_tile_kernels_reference(hidden, tokens, normw):
    """TileKernels' tests/mhc/test_norm_fn.py: its data (per-stream scales, fn ~ 1e-4, a norm
    weight ~ 1 + 0.1 randn) and its bound on the output."""
    import tileaot
    from _tile_kernels import tk

    r = 4
    streams = 1 + 0.01 * torch.arange(r, device="cuda")
    residual = (torch.randn(1, tokens, r, hidden, device="cuda") * streams.view(-1, 1)).to(BF16)
    fn = torch.randn(r * (r + 2), r, hidden, device="cuda") * 1e-4 * streams.view(-1, 1)
    fn = fn.flatten(1)
    w = torch.randn(r * hidden, device="cuda") * 0.1 + 1.0 if normw else None
    got = tileaot.mhc_pre_norm_fn(residual, fn, w, 1e-6)
    want = tk("mhc").mhc_pre_norm_fn_ref(residual, fn, w, 1e-6)
    torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)


def test_every_variant_for_this_gpu_was_exercised():
    assert_every_variant_exercised(("mhc_pre_norm_fn",), SEEN)
